"""What a claim's spec computes from the stored measurements before it decides (SPEC 0): the
statistics a rule reads that are functions of stored curves (a paired curve, the seed-mean
curve's largest drop, a type bound read against the model's own uninformative-demo baseline)
and the seeds whose value a registered rule makes unreadable (no headroom). They are the
``derive`` and ``unreadable`` hooks of a :class:`~mechinterp_icr.claims.protocol.ClaimSpec`,
so ``icr redecide`` recomputes them from a stored ``summary.json`` and the experiment code
only stores the curves.

Every function here is pure: per-seed metric dicts in, numbers out; a curve that is missing or
too short gives NaN (no number, no evidence), never a default.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from mechinterp_icr.claims.intervals import interval
from mechinterp_icr.claims.protocol import as_number as _num
from mechinterp_icr.claims.protocol import compare, split_variant

__all__ = ["CR9_ICL_WORKS", "cr2_derive", "cr7_mutual_derive", "cr8_derive",
           "cr8_unreadable",
           "cr9_derive", "cr9_tolerance", "cr9_unreadable", "curve",
           "ir8_unreadable", "max_drop", "spearman", "trend", "type_bound_derive",
           "type_bound_unreadable"]



def spearman(x, y) -> float:
    """Spearman rank correlation; nan for fewer than two points or a constant side. Rounded
    to 12 decimals: over a few points it is a ratio of small integers, and scipy's
    0.7999999999999999 for an exact 0.8 must not fail a ">= 0.8" rule."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(y == y[0]) or np.all(x == x[0]):
        return float("nan")
    return round(float(spearmanr(x, y).statistic), 12)


def _points(xs, ys) -> list[tuple[float, float]]:
    return sorted((float(x), float(y)) for x, y in zip(xs, ys)
                  if y is not None and not math.isnan(float(y)))


def trend(xs, ys) -> tuple[float, float]:
    """(Spearman rho, rise = value at the largest x minus value at the smallest x)."""
    pts = _points(xs, ys)
    if len(pts) < 2:
        return float("nan"), float("nan")
    return spearman([p[0] for p in pts], [p[1] for p in pts]), pts[-1][1] - pts[0][1]


def max_drop(xs, ys) -> float:
    """The largest drop between consecutive points (by x): max(y[i] - y[i+1]); negative when
    the curve rises everywhere; nan for fewer than two points."""
    pts = _points(xs, ys)
    if len(pts) < 2:
        return float("nan")
    return max(a[1] - b[1] for a, b in zip(pts, pts[1:]))


def curve(m: Any, key: str) -> dict[float, float]:
    """The stored curve ``m[key]`` ({x: value}, x as a string or number) as {float x: value},
    without the points that are not numbers; {} when it is not stored."""
    c = m.get(key) if isinstance(m, Mapping) else None
    if not isinstance(c, Mapping):
        return {}
    out = {}
    for x, v in c.items():
        fx, fv = _num(x), _num(v)
        if fx is not None and fv is not None:
            out[fx] = fv
    return out


# ------------------------------------------------------------------------------------------
# CR-2: the seed-mean curve over K never drops by more than the tolerance (revised 2026-12-05)
# ------------------------------------------------------------------------------------------
CR2_K_MIN = 2  # "between consecutive evaluated K from 2 to max_demos"


def covers(c: Mapping[float, float], ks) -> bool:
    """Whether the curve ``c`` has a number at every x of ``ks``."""
    return all(float(k) in c for k in ks)


def cr2_derive(claim_id: str, per_seed: Mapping[str, Any], ks) -> tuple[dict, dict]:
    """CR-2's pooled statistic: the largest drop between consecutive K (>= 2, of the registered
    evaluated ``ks``) of the seed-mean held-out ICL exact curve (``heldout_icl_exact_by_K``);
    NaN (cannot be read) unless every seed has a number at every such K, so a point missing on
    one seed cannot drop out of everyone's mean and hide a dip. A maximum over seven noisy
    differences per seed is a tail statistic the machine's rounding moves by more than the
    0.02 tolerance; the seed-mean curve's is not (SPEC 0, "robust to the machine")."""
    want = [float(k) for k in ks if float(k) >= CR2_K_MIN]
    curves = [curve(m, "heldout_icl_exact_by_K") for m in per_seed.values()]
    if not curves or len(want) < 2 or not all(covers(c, want) for c in curves):
        return {}, {"mean_curve_max_drop_over_k": float("nan")}
    mc = {k: float(np.mean([c[k] for c in curves])) for k in want}
    return {}, {"mean_curve_max_drop_over_k": max_drop(list(mc), list(mc.values()))}


def cr7_mutual_derive(claim_id: str, per_seed: Mapping[str, Any], rules) -> tuple[dict, dict]:
    """CR-7's mutual-coupling placebo as SPEC words it ("must fail (iv) or (v)"): per seed,
    ``placebo_mutual_meets_iv_and_v`` = 1 when the arm statistics on the synthetic mutual
    coupling's curves (``placebo_mutual_<arm>_speedup``) meet every KQ-arm rule of ``rules``
    (``CR7_ARM_RULES``: (arm, probe, op, threshold, text)), 0 when one fails; NaN when one is
    not stored. The negative control misbehaves where it is 1: both (iv) and (v) passed, so the
    arms could not tell mutual coupling from a one-way cascade."""
    kq = [(arm, op, thr) for arm, _probe, op, thr, _text in rules if arm.startswith("kq_")]
    out = {}
    for s, m in per_seed.items():
        m = m if isinstance(m, Mapping) else {}
        vals = [(_num(m.get(f"placebo_mutual_{arm}_speedup")), op, thr) for arm, op, thr in kq]
        if not kq or any(v is None or math.isnan(v) for v, _, _ in vals):
            out[str(s)] = {"placebo_mutual_meets_iv_and_v": float("nan")}
        else:
            met = all(compare(v, op, thr) for v, op, thr in vals)
            out[str(s)] = {"placebo_mutual_meets_iv_and_v": float(met)}
    return out, {}


# ------------------------------------------------------------------------------------------
# CR-8: the paired partial eta^2 curve (finetuned minus mixed-type finetune) over K
# ------------------------------------------------------------------------------------------
def _paired(m: Any, arm: str, ks) -> dict[float, float]:
    """The arm's partial eta^2 minus the mixed-type finetune's per K of ``ks``; {} unless both
    have a number at every registered K (a curve on fewer points would read a Spearman of 1
    from two points, or a rise from a K other than the first)."""
    a, base = curve(m, f"{arm}_partial_eta2_by_k"), curve(m, "mixed_partial_eta2_by_k")
    want = sorted(float(k) for k in ks)
    if not (covers(a, want) and covers(base, want)):
        return {}
    return {k: a[k] - base[k] for k in want}


def cr8_derive(claim_id: str, per_seed: Mapping[str, Any], ks) -> tuple[dict, dict]:
    """Per seed: the paired curve (the ICL-finetuned model's partial eta^2 of type minus that
    of the mixed-type ICL finetune, same pretraining and prompts, per K), its Spearman with K
    and its rise from the smallest to the largest K; and the PT-only model paired against the
    same mixed-type finetune (the negative control: neither infers a type). Partial eta^2
    alone rises with K in models that infer nothing (averaging more demos shrinks the
    residual; a demo-averager rises by 0.18-0.23), and pairing removes that shared rise. Both
    arms must be measured at every registered K (``ks``, taskvec.ks); otherwise the seed's
    statistics are NaN (cannot be read). The rise is from the smallest to the largest of
    ``ks``."""
    out = {}
    for s, m in per_seed.items():
        ft, pt = _paired(m, "ft", ks), _paired(m, "pt", ks)
        rho, rise = trend(list(ft), list(ft.values()))
        out[str(s)] = {"paired_partial_eta2_by_k": {f"{k:g}": v for k, v in ft.items()},
                       "paired_partial_eta2_rho_k": rho, "paired_partial_eta2_rise_k": rise,
                       "pt_paired_partial_eta2_rise_k": trend(list(pt), list(pt.values()))[1]}
    return out, {}


CR8_TREND_METRICS = ("paired_partial_eta2_rho_k", "paired_partial_eta2_rise_k",
                     "ft_exact_rise_k")


def cr8_unreadable(claim_id: str, per_seed: Mapping[str, Any], headroom: float
                   ) -> dict[str, dict[str, str]]:
    """CR-8's trend conditions cannot be read on a seed without headroom: its held-out
    output-type accuracy at K = 1 is already >= ``headroom`` (one demo fixes the type), or was
    not measured."""
    bad = {}
    for s, m in per_seed.items():
        k1 = _num(m.get("ft_output_type_acc_k1")) if isinstance(m, Mapping) else None
        if k1 is None:
            bad[str(s)] = "output-type accuracy at K = 1 not measured (headroom unknown)"
        elif k1 >= headroom - 1e-12:
            bad[str(s)] = (f"no headroom: output-type accuracy at K = 1 is already >= "
                           f"{headroom:g}")
    return {metric: dict(bad) for metric in CR8_TREND_METRICS} if bad else {}


# ------------------------------------------------------------------------------------------
# CR-9: eta^2 against lam, from the first lam where the task works (revised 2026-12-05)
# ------------------------------------------------------------------------------------------
CR9_ICL_WORKS = 0.80  # lam_s: the smallest lam whose seed-mean held-out ICL exact is >= this
CR9_POOLED = ("cr9_lam_s", "ft_rise_from_lam_s_lo95", "cr9_drop_tolerance",
              "mean_curve_drop_over_tol_lam")
CR9_PER_SEED = ("ft_rise_from_lam_s", "mixed_rise_from_lam_s", "ft_rise_from_lam0")


def cr9_tolerance(sd: float, n_seeds: int) -> float:
    """CR-9's drop tolerance for the seed-mean curve: 2 x sqrt(2) x ``sd`` / sqrt(n_seeds),
    twice the standard deviation of the difference of two seed-mean points when one
    retraining's eta^2 varies by ``sd`` (SPEC 1, CR-9); NaN without a registered sd."""
    if sd is None or not sd > 0 or n_seeds < 1:
        return float("nan")
    return 2.0 * math.sqrt(2.0) * float(sd) / math.sqrt(n_seeds)


def _cr9_curves(per_seed: Mapping[str, Any], key: str, want) -> dict[str, dict[float, float]]:
    """Every seed's stored curve ``key`` restricted to the registered lam values ``want``;
    {} unless every seed has a number at every one of them (a lam missing on one seed must
    not drop out of the seed mean)."""
    cs = {str(s): curve(m, key) for s, m in per_seed.items()}
    if not cs or not all(covers(c, want) for c in cs.values()):
        return {}
    return {s: {x: c[x] for x in want} for s, c in cs.items()}


def cr9_lam_s(per_seed: Mapping[str, Any], lams) -> float:
    """lam_s: the smallest registered lam below the largest whose seed-mean held-out ICL
    exact accuracy (``ft_icl_exact_by_lam``) is >= :data:`CR9_ICL_WORKS` (the task works
    there); NaN when there is none or a seed lacks a point."""
    want = sorted(float(x) for x in lams)
    icl = _cr9_curves(per_seed, "ft_icl_exact_by_lam", want)
    if len(want) < 2 or not icl:
        return float("nan")
    for x in want[:-1]:
        if float(np.mean([c[x] for c in icl.values()])) >= CR9_ICL_WORKS - 1e-12:
            return x
    return float("nan")


def cr9_derive(claim_id: str, per_seed: Mapping[str, Any], lams, sd: float,
               rise_range: tuple[float, float] | None = None) -> tuple[dict, dict]:
    """CR-9's statistics (SPEC 1, CR-9) from the stored per-lam curves of every seed, over
    the registered ``lams`` and retraining standard deviation ``sd``:

    - per seed: ``ft_rise_from_lam_s`` (eta^2 at the largest lam minus at lam_s, see
      :func:`cr9_lam_s`), the same for the mixed-type finetune (``mixed_rise_from_lam_s``,
      the negative control) and ``ft_rise_from_lam0`` (from the smallest lam, reported);
    - pooled: ``cr9_lam_s``; ``ft_rise_from_lam_s_lo95``, the lower end of the 95% Student-t
      interval of the seed-mean rise (clipped to the rise's declared ``rise_range``, as every
      interval shown); ``cr9_drop_tolerance`` (:func:`cr9_tolerance`); and
      ``mean_curve_drop_over_tol_lam``, the seed-mean eta^2 curve's largest drop between
      consecutive lam (over every registered lam, as SPEC words it), minus the tolerance.

    Below lam_s the task does not work (held-out ICL near chance), so a rise from there says
    that the task needs separation at all, not that more separation clears the code: the rise
    is read from lam_s. Everything is NaN (cannot be read) without lam_s or without a
    number at every registered lam on every seed."""
    want = sorted(float(x) for x in lams)
    nan = float("nan")
    pooled = dict.fromkeys(CR9_POOLED, nan)
    ft = _cr9_curves(per_seed, "ft_eta2_by_lam", want)
    mixed = _cr9_curves(per_seed, "mixed_eta2_by_lam", want)
    lam_s = cr9_lam_s(per_seed, want)
    per = {str(s): dict.fromkeys(CR9_PER_SEED, nan) for s in per_seed}
    if not ft:
        return per, pooled
    top = want[-1]
    for s, c in ft.items():
        per[s]["ft_rise_from_lam0"] = c[top] - c[want[0]]
    if math.isnan(lam_s):
        return per, pooled
    for s, c in ft.items():
        per[s]["ft_rise_from_lam_s"] = c[top] - c[lam_s]
        if mixed:
            per[s]["mixed_rise_from_lam_s"] = mixed[s][top] - mixed[s][lam_s]
    tol = cr9_tolerance(sd, len(ft))
    mean_curve = [float(np.mean([c[x] for c in ft.values()])) for x in want]
    pooled.update({"cr9_lam_s": lam_s, "cr9_drop_tolerance": tol,
                   "ft_rise_from_lam_s_lo95": interval(  # clipped as every interval shown
                       [per[s]["ft_rise_from_lam_s"] for s in ft], rise_range)[0],
                   "mean_curve_drop_over_tol_lam": max_drop(want, mean_curve) - tol})
    return per, pooled


def cr9_unreadable(claim_id: str, per_seed: Mapping[str, Any], lams
                   ) -> dict[str, dict[str, str]]:
    """CR-9 cannot be read when no lam below the largest has seed-mean held-out ICL exact
    accuracy >= :data:`CR9_ICL_WORKS` (SPEC: then CR-9 is not measurable): its rules would
    compare type codes of models that do not do the task."""
    want = sorted(float(x) for x in lams)
    if not _cr9_curves(per_seed, "ft_icl_exact_by_lam", want):
        return {}  # no curve: the missing numbers say so themselves
    if not math.isnan(cr9_lam_s(per_seed, want)):
        return {}
    why = (f"no lam below the largest has seed-mean held-out ICL exact >= "
           f"{CR9_ICL_WORKS:g} (the task does not work there)")
    return {m: {"*": why} for m in ("ft_rise_from_lam_s", "ft_rise_from_lam_s_lo95",
                                    "mean_curve_drop_over_tol_lam", "mixed_rise_from_lam_s")}


# ------------------------------------------------------------------------------------------
# CR-1 / CR-3: the type bounds, a formula in the default task, a within-model contrast in the
# shared-token variant (revised 2026-12-06)
# ------------------------------------------------------------------------------------------
def type_bound_derive(claim_id: str, per_seed: Mapping[str, Any], arms: tuple[str, ...],
                      chance_bound: float, contrast_bound: float) -> tuple[dict, dict]:
    """Per seed and arm (a metric prefix of ``arms``: ``""`` the PT-only model, ``ft_`` the
    ICL-finetuned model, ``mixed_`` the mixed-type ICL+Grm finetune), from the stored type of
    the best attribute guess on held-out ICL prompts with the real demos
    (``<arm>heldout_icl_best_attr_type``) and on the same prompts with uninformative demos
    (``<arm>heldout_icl_best_attr_type_uninf``: every demo of another type than the query's):

    - ``<arm>heldout_icl_type_contrast``: real minus uninformative (reported in both tasks,
      where both are stored);
    - ``<arm>heldout_icl_type_bound``: the bound the real number is read against,
      ``chance_bound`` (1/L + 0.05) in the default task, where an uninformed guess has the
      right type 1/L of the time (disjoint vocabularies); in the shared-token variant (a
      claim id ``CR-... (shared tokens)``, ``protocol.split_variant``), where chance is
      higher and not a formula, the model's own type accuracy with uninformative demos plus
      ``contrast_bound`` (SPEC 0, "chance from the model, not from a formula");
    - ``<arm>heldout_icl_type_over_bound``: real minus that bound (so the variant's is the
      contrast minus ``contrast_bound``): the number CR-1's condition and CR-1's and CR-3's
      controls compare with 0.

    A number that is not stored gives a NaN bound (no number, no evidence): in the variant the
    bound cannot be read without the uninformative-demo measurement."""
    shared = split_variant(str(claim_id))[1] == "shared"
    nan = float("nan")
    out = {}
    for s, m in per_seed.items():
        m = m if isinstance(m, Mapping) else {}
        d = {}
        for arm in arms:
            real = _num(m.get(f"{arm}heldout_icl_best_attr_type"))
            uninf = _num(m.get(f"{arm}heldout_icl_best_attr_type_uninf"))
            if real is not None and uninf is not None:
                d[f"{arm}heldout_icl_type_contrast"] = real - uninf
            if shared:
                bound = uninf + contrast_bound if uninf is not None else nan
            else:
                bound = float(chance_bound)
            d[f"{arm}heldout_icl_type_bound"] = bound
            d[f"{arm}heldout_icl_type_over_bound"] = (
                real - bound if real is not None and not math.isnan(bound) else nan)
        out[str(s)] = d
    return out, {}


def type_bound_unreadable(claim_id: str, per_seed: Mapping[str, Any], arms: tuple[str, ...]
                          ) -> dict[str, dict[str, str]]:
    """In the shared-token variant, ``<arm>heldout_icl_type_over_bound`` cannot be read on a
    seed without the type accuracy with uninformative demos (its bound, see
    :func:`type_bound_derive`), and the reason says which measurement is missing; the default
    task's bound is a formula and needs none."""
    if split_variant(str(claim_id))[1] != "shared":
        return {}
    why = ("no type accuracy with uninformative demos on the same prompts (the bound of the "
           "shared-token variant; job uninf-demos)")
    out = {}
    for arm in arms:
        bad = {str(s): why for s, m in per_seed.items()
               if _num((m if isinstance(m, Mapping) else {}).get(
                   f"{arm}heldout_icl_best_attr_type_uninf")) is None}
        if bad:
            out[f"{arm}heldout_icl_type_over_bound"] = bad
    return out


# ------------------------------------------------------------------------------------------
# IR-8: decided only on a token-dependent model that solves the task
# ------------------------------------------------------------------------------------------
IR8_METRICS = ("tok_induction_row_step1_acc", "tok_learned_row_step1_acc",
               "tok_head_score_minus_baseline")


def ir8_unreadable(claim_id: str, per_seed: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """IR-8's conditions cannot be read on a seed whose token-dependent model does not solve
    the task (``tok_solved`` not 1: SPEC 2, "if it is not solved, IR-8 is inconclusive") or
    whose evaluation sequences repeat the query's token earlier in the context
    (``tok_query_seen_before`` not 0: the rows at fixed offsets would not test the row to the
    token after that occurrence)."""
    bad = {}
    for s, m in per_seed.items():
        m = m if isinstance(m, Mapping) else {}
        if _num(m.get("tok_solved")) != 1.0:
            bad[str(s)] = "the token-dependent model does not solve the task"
        elif _num(m.get("tok_query_seen_before")) != 0.0:
            bad[str(s)] = "the query's token occurs earlier in the context"
    return {metric: dict(bad) for metric in IR8_METRICS} if bad else {}


# ------------------------------------------------------------------------------------------
# IR-9: a seed whose state already has a gap at least the start gap cannot be read
# ------------------------------------------------------------------------------------------
def ir9_unreadable(claim_id: str, per_seed: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """IR-9's condition cannot be read on a seed where no offset was imposed
    (``ir9_imposed`` not 1: the state right after the large step already has a within-pair gap
    at least the start gap, so there is no decay from the start to read)."""
    bad = {str(s): "the state after the large step already has a within-pair gap at least "
                   "the start gap (nothing imposed)"
           for s, m in per_seed.items()
           if _num((m if isinstance(m, Mapping) else {}).get("ir9_imposed")) != 1.0}
    return {"ir9_final_gap": bad} if bad else {}
