"""The CR claims: pure functions from result rows to :class:`~mechinterp_icr.claims.Claim`
objects (and the summary tables beside them), one group per stage.

- CR-1..3 from the per-seed evaluation rows of every phase and the aggregated CR-3 sweep;
- CR-4 from the per-seed task-vector results (``taskvec.analyse_seed``);
- CR-5, CR-6, CR-7 from the head-role verdicts, the construction numbers and the cascade.

Nothing here trains, reads a run directory or draws a figure: figure paths come in as
arguments.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mechinterp_icr.claims import Claim, ci95, evaluate_control, spec
from mechinterp_icr.claims.registry import metric_range
from mechinterp_icr.experiments.cr.claims_mech import (  # CR-5..7, re-exported
    cr5_claim,
    cr5_table,
    cr6_claim,
    cr7_claim,
)
from mechinterp_icr.experiments.cr.config import CRConfig, TaskvecConfig
from mechinterp_icr.experiments.cr.evaluate import max_drop_over_k, pick

__all__ = [
    "cr123_claims",
    "cr123_from_metrics",
    "cr123_seed_metrics",
    "cr123_tables",
    "cr4_claim",
    "cr4_claim_from_metrics",
    "cr4_not_measured",
    "cr4_tables",
    "cr5_claim",
    "cr5_table",
    "cr6_claim",
    "cr7_claim",
    "spearman",
]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"
CR4_MIN_K, CR4_MIN_LAM = 6, 4  # SPEC: eta^2 over at least 6 values of K and 4 of lam


# ------------------------------------------------------------------------------------------------
# CR-1..3
# ------------------------------------------------------------------------------------------------
def _f(v):
    return float(v) if isinstance(v, (int, float, np.floating)) else v


def cr123_seed_metrics(phases: dict[str, list[dict]], task_desc: dict[str, Any], K: int,
                       ks, n_types: int) -> dict[str, dict[str, Any]]:
    """One seed's CR-1, CR-2 and CR-3 metrics (the registry's metric names) from the full
    evaluation rows of its phases (``pretrain``, ``ft-icl``, ``ft-iclgrm``, the all-weights
    arms and the ``-mixed`` controls when present). ``K`` is the default number of demos,
    ``ks`` the evaluated K. Returns ``{"CR-1": {...}, "CR-2": {...}, "CR-3": {...}}``."""
    pt = phases[PHASE_PT]
    both = ("heldout", "finetune")
    out: dict[str, dict[str, Any]] = {}
    c1 = {"pt_typed_recall": np.mean([pick(pt, sp, "pt", key="typed") for sp in both]),
          "pt_restricted_recall": np.mean([pick(pt, sp, "pt", key="restricted")
                                           for sp in both]),
          "pt_exact_recall": np.mean([pick(pt, sp, "pt", key="exact") for sp in both]),
          "bayes_ceiling": task_desc.get("bayes_ceiling_pt"),
          "separation_tv": task_desc.get("tv_transition"),
          "heldout_icl_exact": pick(pt, "heldout", "icl", K),
          "heldout_icl_type": pick(pt, "heldout", "icl", K, "type"),
          "heldout_icl_best_attr_type": pick(pt, "heldout", "icl", K, "restricted_type"),
          "type_chance": 1.0 / n_types}
    if PHASE_FT in phases:
        c1["ft_heldout_icl_best_attr_type"] = pick(phases[PHASE_FT], "heldout", "icl", K,
                                                   "restricted_type")
    out["CR-1"] = c1
    for phase, cid in ((PHASE_FT, "CR-2"), (PHASE_FT_GRM, "CR-3")):
        if phase not in phases:
            continue
        rows = phases[phase]
        by_k = {int(k): pick(rows, "heldout", "icl", k) for k in ks}
        d = {"heldout_icl_exact": pick(rows, "heldout", "icl", K),
             "heldout_icl_type": pick(rows, "heldout", "icl", K, "type"),
             "heldout_icl_best_attr_type": pick(rows, "heldout", "icl", K, "restricted_type"),
             "heldout_icl_restricted": pick(rows, "heldout", "icl", K, "restricted"),
             "finetune_icl_exact": pick(rows, "finetune", "icl", K),
             "heldout_iclgrm_exact": pick(rows, "heldout", "iclgrm", K),
             "pt_typed_after": np.mean([pick(rows, sp, "pt", key="typed") for sp in both]),
             "heldout_icl_exact_by_K": {str(k): _f(v) for k, v in by_k.items()},
             "max_drop_over_k": max_drop_over_k(by_k)}
        aw = phase + "-allw"
        if aw in phases:
            d["allweights_heldout_icl_exact"] = pick(phases[aw], "heldout", "icl", K)
            d["allweights_pt_typed_after"] = np.mean([pick(phases[aw], sp, "pt", key="typed")
                                                      for sp in both])
        mx = phases.get(phase + "-mixed")
        if mx is not None:
            d["mixed_heldout_icl_exact"] = pick(mx, "heldout", "icl", K)
            d["mixed_heldout_icl_type"] = pick(mx, "heldout", "icl", K, "type")
            d["mixed_heldout_icl_best_attr_type"] = pick(mx, "heldout", "icl", K,
                                                         "restricted_type")
        if cid == "CR-2":
            d["pt_heldout_icl_exact"] = c1["heldout_icl_exact"]
        out[cid] = d
    return {cid: {k: _f(v) for k, v in d.items()} for cid, d in out.items()}


def _ctrl(claim_id: str, name: str, per_seed: dict[str, dict[str, Any]], note: str = ""):
    s = spec(claim_id).control(name)
    return evaluate_control(s, {k: v.get(s.condition.metric) for k, v in per_seed.items()},
                            note)


def cr123_from_metrics(c1: dict, c2: dict, c3: dict, details: dict | None = None
                       ) -> list[Claim]:
    """CR-1, CR-2, CR-3 (registered, with their controls) from per-seed metric dicts
    (:func:`cr123_seed_metrics`, keyed by str(seed)). ``details`` per claim id are added."""
    details = details or {}
    L = next(iter(c1.values()), {}).get("type_chance")
    claim1 = Claim.from_spec(
        spec("CR-1"), c1,
        controls=[_ctrl("CR-1", "ICL-finetuned model", c1)],
        notes=f"Restricted recall (pt_restricted_recall) is bounded by the Bayes ceiling of "
              f"reading the type from the grammar (bayes_ceiling); exact recall and held-out "
              f"ICL exact are reported per seed. Type chance 1/L = {L}.",
        figure="figures/cr_icl_by_k.html", details=details.get("CR-1", {}))
    claim2 = Claim.from_spec(
        spec("CR-2"), c2,
        controls=[_ctrl("CR-2", "PT-only model", c2),
                  _ctrl("CR-2", "finetuned on mixed-type demos", c2)],
        notes="max_drop_over_k: the largest drop of held-out ICL exact between consecutive "
              "evaluated K from 2 up (per seed); by K in heldout_icl_exact_by_K. The "
              "all-weights arm is reported per seed (allweights_heldout_icl_exact).",
        figure="figures/cr_icl_by_k.html", details=details.get("CR-2", {}))
    claim3 = Claim.from_spec(
        spec("CR-3"), c3,
        controls=[_ctrl("CR-3", "ICL+Grm finetuned on mixed-type demos", c3)],
        notes="ICL+Grm finetuning, evaluated on plain ICL on held-out subjects; the variants "
              "(type-chain grammar, grammar before the subject, the literal PT order) are in "
              "tables['CR-3 sweep'] and docs/cr.md, each with its own numbers.",
        figure="figures/cr3_sweep.html", details=details.get("CR-3", {}))
    return [claim1, claim2, claim3]


def cr123_claims(cfg: CRConfig, results: list[dict[str, Any]], sweep: list[dict]
                 ) -> list[Claim]:
    """CR-1 (PT only), CR-2 (ICL finetuning), CR-3 (ICL+Grm finetuning, with the sweep)."""
    c1, c2, c3 = {}, {}, {}
    for r in results:
        m = cr123_seed_metrics(r["phases"], r["task"], cfg.task.n_demos, cfg.eval_ks,
                               cfg.task.n_types)
        s = str(r["seed"])
        c1[s], c2[s], c3[s] = m["CR-1"], m.get("CR-2", {}), m.get("CR-3", {})
    t = cfg.task
    aw2 = [v.get("allweights_heldout_icl_exact") for v in c2.values()]
    details = {
        "CR-1": {"order": t.order, "pt_only_heldout_icl_exact_other_pretraining": {
            r["setting"]: r["pt_only_heldout_icl_exact_mean"] for r in sweep
            if r.get("pt_only_heldout_icl_exact_mean") is not None},
            "pt_only_heldout_icl_best_attr_type_other_pretraining": {
            r["setting"]: r.get("pt_only_heldout_icl_best_attr_type_mean") for r in sweep
            if r.get("pt_only_heldout_icl_exact_mean") is not None}},
        "CR-2": {"trainable": cfg.finetune.trainable, "default_K": t.n_demos,
                 "finetune_ks": list(t.finetune_ks), "max_demos": t.max_demos,
                 "evaluated_ks": list(cfg.eval_ks),
                 "allweights_arm_mean": float(np.mean(aw2)) if aw2 and None not in aw2
                 else None},
        "CR-3": {"default_setting": {"order": t.order, "iclgrm_order": t.iclgrm_order,
                                     "iclgrm_chain": t.iclgrm_chain,
                                     "iclgrm_len": [t.iclgrm_len_min, t.iclgrm_len_max],
                                     "iclgrm_query_grammar": t.iclgrm_query_grammar,
                                     "lam": t.lam, "trainable": cfg.finetune.trainable,
                                     "finetune_steps": cfg.finetune.steps,
                                     "finetune_ks": list(t.finetune_ks)},
                 "sweep": sweep},
    }
    return cr123_from_metrics(c1, c2, c3, details)


def cr123_tables(results: list[dict[str, Any]], sweep: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    """The CR-3 sweep table and the per-seed evaluation, task and timing tables."""
    return {
        "CR-3 sweep": [
            {"setting": r["setting"], "spec": r["spec"], "seeds": r["seeds"],
             "heldout_plain_icl_acc": round(r["heldout_icl_exact_mean"], 4),
             "heldout_plain_icl_per_seed": [round(v, 4)
                                            for v in r["heldout_icl_exact_per_seed"]],
             "heldout_iclgrm_acc": round(r["heldout_iclgrm_exact_mean"], 4),
             "pt_typed_recall_after": round(r["pt_typed_after_mean"], 4),
             "heldout_plain_icl_best_attr_type": r.get("heldout_icl_best_attr_type_mean"),
             "own_pretraining": r["own_pretrain"],
             "pt_only_heldout_icl_acc": r["pt_only_heldout_icl_exact_mean"],
             "pt_only_heldout_icl_best_attr_type": r.get(
                 "pt_only_heldout_icl_best_attr_type_mean")} for r in sweep],
        "CR eval": [{"seed": r["seed"], "phase": ph, **row} for r in results
                    for ph, rows in r["phases"].items() for row in rows],
        "CR task": [{"seed": r["seed"], **r["task"]} for r in results],
        "CR phase seconds": [{"seed": r["seed"], **r["seconds"]} for r in results],
    }


# ------------------------------------------------------------------------------------------------
# CR-4
# ------------------------------------------------------------------------------------------------
def spearman(x, y) -> float:
    """Spearman rank correlation; nan for fewer than two points or a constant side. Rounded
    to 12 decimals: over a few points it is a ratio of small integers, and scipy's
    0.7999999999999999 for an exact 0.8 must not fail a ">= 0.8" rule."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(y == y[0]) or np.all(x == x[0]):
        return float("nan")
    return round(float(spearmanr(x, y).statistic), 12)


def _trend(xs, ys) -> tuple[float, float]:
    """(Spearman rho, rise = value at the largest x minus value at the smallest x)."""
    pts = sorted((float(x), float(y)) for x, y in zip(xs, ys)
                 if y is not None and not math.isnan(float(y)))
    if len(pts) < 2:
        return float("nan"), float("nan")
    return spearman([p[0] for p in pts], [p[1] for p in pts]), pts[-1][1] - pts[0][1]


def _n_valid(values) -> int:
    """How many of ``values`` are numbers (not None, not NaN): the points a trend uses."""
    return sum(1 for v in values if v is not None and not math.isnan(float(v)))


def _per_seed_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """One seed's CR-4 metrics (every condition's and control's, and what sits beside)."""
    pt, ft = res["phases"][PHASE_PT], res["phases"][PHASE_FT]
    grm = res["phases"].get(PHASE_FT_GRM)
    m: dict[str, Any] = {"hook": ft["hook"]}
    for key, v in (("ft", ft), ("pt", pt)):
        m.update({f"{key}_acc_pc": v["acc_pc"], f"{key}_acc_full": v["acc_full"],
                  f"{key}_transfer_acc_pc": v["transfer_acc_pc"],
                  f"{key}_output_type_acc": v["output_type_acc"],
                  f"{key}_icl_exact_heldout": v["icl_exact"],
                  f"{key}_final_resid_acc_pc": v["final_acc_pc"],
                  f"{key}_eta2": v["eta2"],
                  f"{key}_hook_lens_type_acc": v.get("hook_lens_type_acc"),
                  f"{key}_hook_lens_attr_type_acc": v.get("hook_lens_attr_type_acc"),
                  f"{key}_pre_attn_acc_pc": v.get("pre_attn_acc_pc"),
                  f"{key}_pre_attn_eta2": v.get("pre_attn_eta2"),
                  f"{key}_patch_gain": v.get("patch_gain"),
                  f"{key}_patch_success": v["patch_success"],
                  f"{key}_patch_unpatched_hit": v.get("patch_unpatched_hit"),
                  f"{key}_random_patch_gain": v.get("random_patch_gain"),
                  f"{key}_random_patch_success": v["random_patch_success"],
                  f"{key}_final_patch_gain": v.get("final_patch_gain"),
                  f"{key}_final_patch_success": v["final_patch_success"],
                  f"{key}_shuffle_pc": v["acc_shuffle_pc"],
                  f"{key}_shuffle_gap": v["shuffle_gap"],
                  f"{key}_random_dir": v["acc_random_dir"],
                  f"{key}_pc_minus_random": v["pc_minus_random"],
                  f"{key}_acc_pc_by_subject": v.get("acc_pc_by_subject", float("nan"))})
    m["chance"] = ft["chance"]
    if grm is not None:
        m.update({"grm_acc_pc": grm["acc_pc"], "grm_transfer_acc_pc": grm["transfer_acc_pc"],
                  "grm_patch_success": grm["patch_success"],
                  "grm_patch_gain": grm.get("patch_gain")})
    # the ICL+Grm-finetuned model's K trend is reported beside (CR-4 is the ICL-finetuned one)
    for ph, key in ((PHASE_FT, "ft"), (PHASE_PT, "pt"), (PHASE_FT_GRM, "grm")):
        if ph not in res["k_sweep"] and key == "grm":
            continue
        ks = res["k_sweep"].get(ph, [])
        m[f"{key}_n_k"] = _n_valid(r["type_variance_fraction"] for r in ks)
        m[f"{key}_rho_k"], m[f"{key}_rise_k"] = _trend(
            [r["K"] for r in ks], [r["type_variance_fraction"] for r in ks])
        m[f"{key}_eta2_by_k"] = {str(r["K"]): r["type_variance_fraction"] for r in ks}
    # beside the K trend (records before 2026-12-02 lack them): the query subject's share of
    # the variance at the hook, and eta^2 of the last attention layer's write alone
    ks = [r for r in res["k_sweep"].get(PHASE_FT, []) if "query_subject_share" in r]
    m["ft_query_subject_share"] = _mean(r["query_subject_share"] for r in ks)
    m["ft_write_eta2_by_k"] = {str(r["K"]): r["write_type_variance_fraction"] for r in ks}
    m["ft_write_rise_k"] = _trend([r["K"] for r in ks],
                                  [r["write_type_variance_fraction"] for r in ks])[1]
    lam_rows = res.get("lam_sweep", [])
    if lam_rows:
        for key in ("ft", "pt"):
            m[f"{key}_rho_lam"], m[f"{key}_rise_lam"] = _trend(
                [r["lam"] for r in lam_rows], [r[f"{key}_eta2"] for r in lam_rows])
        m["n_lam"] = _n_valid(r["ft_eta2"] for r in lam_rows)
        m["ft_eta2_by_lam"] = {f"{r['lam']:g}": r["ft_eta2"] for r in lam_rows}
    return m


def _mean(vals) -> float:
    v = [float(x) for x in vals if isinstance(x, (int, float)) and not math.isnan(float(x))]
    return float(np.mean(v)) if v else float("nan")


CR4_CONTROLS = {  # registered control name -> per-seed metric
    "PT-only probe": "pt_acc_pc",
    "PT-only eta^2 rise over K": "pt_rise_k",
    "PT-only patch": "pt_patch_gain",
    "label shuffle (distance from chance)": "ft_shuffle_gap",
    "norm-matched random vector patch": "ft_random_patch_gain",
    "3 random directions (top-PC probe minus random)": "ft_pc_minus_random",
}


def cr4_claim_from_metrics(per_seed: dict[str, dict[str, Any]], P: TaskvecConfig,
                           notes: str = "", figure: str | None = "figures/cr4_overview.html",
                           details: dict | None = None) -> Claim:
    """CR-4 from per-seed metrics (those of :func:`_per_seed_metrics`): the registered rule
    and controls (``claims.cr_registry``), at least 6 values of K and 4 of lam per seed."""
    sp = spec("CR-4")
    controls = [evaluate_control(sp.control(name), {s: m.get(metric)
                                                    for s, m in per_seed.items()})
                for name, metric in CR4_CONTROLS.items()]
    n_k = min((m.get("ft_n_k", 0) for m in per_seed.values()), default=0)
    n_lam = min((m.get("n_lam", 0) for m in per_seed.values()), default=0)
    checks = {f"eta^2 measured over >= {CR4_MIN_K} values of K on every seed (fewest {n_k})":
              n_k >= CR4_MIN_K,
              f"eta^2 measured over >= {CR4_MIN_LAM} values of lam on every seed (fewest "
              f"{n_lam})": n_lam >= CR4_MIN_LAM}
    hook = next(iter(per_seed.values()), {}).get("hook", "?")
    out_t = _mean([m.get("ft_output_type_acc") for m in per_seed.values()])
    lens = _mean([m.get("ft_hook_lens_type_acc") for m in per_seed.values()])
    pre = _mean([m.get("ft_pre_attn_acc_pc") for m in per_seed.values()])
    diag = [m for m in per_seed.values() if m.get("ft_write_eta2_by_k")]
    why_k = ""
    if diag:  # records before 2026-12-02 lack the diagnostics beside the K trend
        qs = _mean([m.get("ft_query_subject_share") for m in diag])
        w1 = _mean([m["ft_write_eta2_by_k"].get("1") for m in diag])
        wr = _mean([m.get("ft_write_rise_k") for m in diag])
        why_k = (f"Beside the K trend (means over the {len(diag)} seeds that have them): the "
                 f"query subject explains {qs:.3f} of the variance at the hook "
                 f"(ft_query_subject_share); the last attention layer's write alone "
                 f"(blocks.(L-1).hook_attn_out) has eta^2 {w1:.3f} at K = 1 and rises by "
                 f"{wr:.3f} to the largest K (ft_write_eta2_by_k, ft_write_rise_k). ")
    grm = [m for m in per_seed.values() if "grm_rho_k" in m]
    if grm:
        why_k += (f"ICL+Grm-finetuned model at the same hook (reported, not deciding; "
                  f"{len(grm)} seeds): eta^2 vs K Spearman "
                  f"{_mean([m['grm_rho_k'] for m in grm]):.2f}, rise "
                  f"{_mean([m['grm_rise_k'] for m in grm]):.3f} (means; grm_rho_k, "
                  f"grm_rise_k). ")
    return Claim.from_spec(
        sp, per_seed, controls=controls, extra_checks=checks,
        notes=(f"Read at {hook} (query position; never the final residual stream). The "
               f"model's own output-type accuracy on the same prompts: {out_t:.3f} (mean; "
               f"ft_output_type_acc per seed), beside the top-{P.n_pc}-PC probe. What the "
               f"hook holds: the code there is already most of the prediction - read "
               f"directly through the unembedding (logit lens) it gives the right type on "
               f"{lens:.3f} (mean; ft_hook_lens_type_acc), so the probe there shows that the "
               f"type is present once the last attention layer has written, not that it is "
               f"formed earlier; before that attention layer (ft_pre_attn_acc_pc, "
               f"blocks.(L-1).hook_resid_pre) the top-PC probe reads {pre:.3f} (mean). "
               "Patch success is chance-corrected (_patch_gain: hit rate minus the unpatched "
               "model's hit rate on the same targets; raw _patch_success beside it). Label "
               "shuffle: every prompt relabelled at random, the same in train and test. "
               "Held-out-subject ICL prompts, all types, by-prompt split fixed before "
               "fitting. "
               "eta^2 = share of variance explained by the type; rise = value at the "
               "largest K (lam) minus the smallest; trends over the valid (non-NaN) points "
               "only. " + why_k + "lam trend from the lam runs (docs/taskvec.md). "
               + notes).strip(),
        figure=figure, details=dict(details or {}))


def _build_claim(results: list[dict[str, Any]], P: TaskvecConfig) -> Claim:
    per_seed = {str(r["seed"]): _per_seed_metrics(r) for r in results}
    return cr4_claim_from_metrics(per_seed, P)


def cr4_claim(results: list[dict[str, Any]], P: TaskvecConfig, skipped: list,
              errors: dict, figures: dict[str, Any]) -> Claim:
    """CR-4 from the per-seed results of ``taskvec.analyse_seed`` (with their lam sweeps);
    ``skipped`` seeds had no complete run, ``errors`` maps a seed (or step) to its error."""
    claim = _build_claim(results, P)
    if skipped:
        claim.notes += f" Seeds without a complete CR run, skipped: {skipped}."
    if errors:
        claim.notes += f" Errors: {errors}."
        claim.details["errors"] = {str(k): v for k, v in errors.items()}
    keys = ("ft_acc_pc", "ft_output_type_acc", "ft_final_resid_acc_pc", "ft_transfer_acc_pc",
            "ft_acc_pc_by_subject", "ft_patch_gain", "ft_patch_success",
            "ft_random_patch_gain", "ft_final_patch_gain", "ft_rho_k", "ft_rise_k",
            "ft_rho_lam", "ft_rise_lam", "ft_hook_lens_type_acc", "ft_pre_attn_acc_pc",
            "pt_acc_pc", "pt_rise_k", "pt_patch_gain", "pt_patch_success",
            "pt_patch_unpatched_hit", "ft_shuffle_gap", "ft_random_dir",
            "ft_pc_minus_random", "ft_eta2", "pt_eta2", "grm_acc_pc", "grm_transfer_acc_pc",
            "ft_query_subject_share", "ft_write_rise_k", "grm_rho_k", "grm_rise_k")
    summ = {}
    for k in keys:
        vals = [m[k] for m in claim.per_seed.values()
                if isinstance(m.get(k), (int, float)) and not math.isnan(float(m[k]))]
        if vals:
            summ[k] = {"mean": float(np.mean(vals)), "ci95": list(ci95(vals, metric_range(k)))}
    claim.details = {**claim.details, "mean_and_ci95_over_seeds": summ,
                     "figures": figures, "params": {k: getattr(P, k) for k in
                                                    P.__dataclass_fields__},
                     "seconds": {str(r["seed"]): {
                         ph: v["seconds"] for ph, v in r["phases"].items()} for r in results}}
    return claim


def cr4_not_measured(seeds: list[int], errors: dict, P: TaskvecConfig) -> Claim:
    """CR-4 when no seed had a CR run that could be analysed (the claim does not hold)."""
    c = Claim.from_spec(spec("CR-4"), {}, notes=f"not measured: no CR run directory with "
                        f"pretrain and ft-icl checkpoints could be analysed (seeds {seeds}); "
                        f"errors: {errors}")
    return c


def cr4_tables(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-boundary probes, separation vs K and lam, the patch and the probe curve."""
    return {
        "cr4_layers": [
            {"seed": r["seed"], "phase": ph,
             **{k: row[k] for k in ("label", "hook", "acc_pc", "acc_full",
                                    "type_variance_fraction")}}
            for r in results for ph, v in r["phases"].items() for row in v["layers"]],
        "cr4_k_sweep": [{"seed": r["seed"], "phase": ph, **row}
                        for r in results for ph, rows in r["k_sweep"].items() for row in rows],
        "cr4_lam_sweep": [row for r in results for row in r.get("lam_sweep", [])],
        "cr4_patch": [{"seed": r["seed"], "phase": ph, "hook": v["hook"],
                       **{k: v.get(k) for k in ("patch_gain", "patch_success",
                                                "patch_unpatched_hit", "random_patch_gain",
                                                "random_patch_success", "final_patch_gain",
                                                "final_patch_success", "patch_kept_original",
                                                "output_type_acc", "hook_lens_type_acc",
                                                "acc_pc", "pre_attn_acc_pc")}}
                      for r in results for ph, v in r["phases"].items()],
        "cr4_curve": [{"seed": r["seed"], **row} for r in results for row in r["curve"]],
    }
