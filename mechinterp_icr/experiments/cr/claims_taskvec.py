"""The task-vector claims CR-4, CR-8 and CR-9 from the per-seed results of
``taskvec.analyse_seed`` (SPEC section 1): pure functions, nothing trains or draws.

- **CR-4** the low-dimensional code at ``blocks.{L-1}.hook_resid_mid``: the top-(L-1)-PC
  probe, its transfer and the additive patch; controls: PT-only probe and patch, label
  shuffle, a norm-matched random vector. The necessity test (the type subspace mean-replaced,
  beside random subspaces) is reported: it cannot fail for a linearly read code.
- **CR-8** more demonstrations: the paired partial eta^2 of type (the finetuned model minus
  the mixed-type finetune, per K; computed by the spec's ``derive``, claims.derive) and
  held-out exact accuracy against K; a seed whose output-type accuracy at K = 1 already
  reaches the registered headroom bound cannot be read; control: the PT-only model paired
  against the same mixed-type finetune.
- **CR-9** more grammar separation: eta^2 against lam from lam_s (the first lam where the
  task works) to the largest, its seed mean rising by >= 0.1 (interval above 0) and never
  dropping by more than the registered tolerance; control: the mixed-type finetune's eta^2
  over the same lam runs.

The shared-token variant (``task.attr_share > 0``) is decided by the same functions under the
ids ``CR-1 (shared tokens)`` etc. (``claims.protocol.variant_id``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mechinterp_icr.claims import Claim, ci95, spec
from mechinterp_icr.claims.cr_registry import CR8_HEADROOM, CR8_MIN_K, CR9_LAM_SD, CR9_MIN_LAM
from mechinterp_icr.claims.derive import max_drop, spearman, trend
from mechinterp_icr.claims.protocol import spec_controls, variant_id
from mechinterp_icr.claims.registry import metric_range
from mechinterp_icr.experiments.cr.config import TaskvecConfig

__all__ = ["PHASE_FT", "PHASE_FT_GRM", "PHASE_FT_MIXED", "PHASE_PT",
           "cr4_claim_from_metrics", "cr8_claim_from_metrics",
           "cr9_claim_from_metrics", "per_seed_metrics", "spearman", "taskvec_claims",
           "taskvec_not_measured", "taskvec_tables"]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"
PHASE_FT_MIXED = "ft-icl-mixed"


def _n_valid(values) -> int:
    """How many of ``values`` are numbers (not None, not NaN): the points a trend uses."""
    return sum(1 for v in values if v is not None and not math.isnan(float(v)))


def _mean(vals) -> float:
    v = [float(x) for x in vals if isinstance(x, (int, float)) and not math.isnan(float(x))]
    return float(np.mean(v)) if v else float("nan")


# ------------------------------------------------------------------------------------------
# Per-seed metrics
# ------------------------------------------------------------------------------------------
_PHASE_KEYS = ("acc_pc", "acc_full", "transfer_acc_pc", "output_type_acc", "final_acc_pc",
               "eta2", "hook_lens_type_acc", "hook_lens_attr_type_acc", "pre_attn_acc_pc",
               "pre_attn_eta2", "patch_gain", "patch_success", "patch_unpatched_hit",
               "random_patch_gain", "random_patch_success", "final_patch_gain",
               "final_patch_success", "acc_shuffle_pc", "shuffle_gap", "acc_random_dir",
               "pc_minus_random", "acc_pc_by_subject", "necessity_type_acc",
               "necessity_drop", "necessity_dim", "necessity_attr_share",
               "necessity_variance_share", "random_subspace_type_acc", "random_subspace_drop",
               "random_subspace_attr_share")
_RENAME = {"final_acc_pc": "final_resid_acc_pc", "acc_shuffle_pc": "shuffle_pc",
           "acc_random_dir": "random_dir"}


def _k_metrics(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The K trend of one phase (rows of ``taskvec.separation_vs_k``) as ``<key>_*``."""
    ks = [r["K"] for r in rows]
    eta = [r["type_variance_fraction"] for r in rows]
    part = [r.get("partial_type_variance_fraction") for r in rows]
    m: dict[str, Any] = {f"{key}_n_k": _n_valid(eta)}
    m[f"{key}_rho_k"], m[f"{key}_rise_k"] = trend(ks, eta)
    m[f"{key}_partial_eta2_rho_k"], m[f"{key}_partial_eta2_rise_k"] = trend(ks, part)
    m[f"{key}_exact_rise_k"] = trend(ks, [r.get("icl_exact") for r in rows])[1]
    m[f"{key}_eta2_by_k"] = {str(r["K"]): r["type_variance_fraction"] for r in rows}
    m[f"{key}_partial_eta2_by_k"] = {str(r["K"]): r.get("partial_type_variance_fraction")
                                     for r in rows}
    m[f"{key}_exact_by_k"] = {str(r["K"]): r.get("icl_exact") for r in rows}
    m[f"{key}_output_type_by_k"] = {str(r["K"]): r.get("output_type_acc") for r in rows}
    k1 = [r for r in rows if r["K"] == min(ks)] if ks else []
    m[f"{key}_output_type_acc_k1"] = k1[0].get("output_type_acc") if k1 else float("nan")
    m[f"{key}_k_min"] = min(ks) if ks else None
    return m


def per_seed_metrics(res: dict[str, Any]) -> dict[str, Any]:
    """One seed's CR-4, CR-8 and CR-9 metrics (every condition's and control's, and what is
    reported beside them) from its ``taskvec.analyse_seed`` result."""
    pt, ft = res["phases"][PHASE_PT], res["phases"][PHASE_FT]
    grm = res["phases"].get(PHASE_FT_GRM)
    m: dict[str, Any] = {"hook": ft["hook"], "chance": ft.get("chance")}
    for key, v in (("ft", ft), ("pt", pt)):
        for k in _PHASE_KEYS:
            m[f"{key}_{_RENAME.get(k, k)}"] = v.get(k)
        m[f"{key}_icl_exact_heldout"] = v.get("icl_exact")
    if grm is not None:
        m.update({"grm_acc_pc": grm["acc_pc"], "grm_transfer_acc_pc": grm["transfer_acc_pc"],
                  "grm_patch_success": grm["patch_success"],
                  "grm_patch_gain": grm.get("patch_gain")})
    for ph, key in ((PHASE_FT, "ft"), (PHASE_PT, "pt"), (PHASE_FT_GRM, "grm"),
                    (PHASE_FT_MIXED, "mixed")):
        if ph in res["k_sweep"] or key in ("ft", "pt"):
            m.update(_k_metrics(res["k_sweep"].get(ph, []), key))
    ks = [r for r in res["k_sweep"].get(PHASE_FT, []) if "query_subject_share" in r]
    m["ft_query_subject_share"] = _mean(r["query_subject_share"] for r in ks)
    m["ft_write_eta2_by_k"] = {str(r["K"]): r["write_type_variance_fraction"] for r in ks}
    m["ft_write_rise_k"] = trend([r["K"] for r in ks],
                                  [r["write_type_variance_fraction"] for r in ks])[1]
    lam_rows = res.get("lam_sweep", [])
    if lam_rows:
        lams = [r["lam"] for r in lam_rows]
        for key in ("ft", "pt", "mixed"):
            vals = [r.get(f"{key}_eta2") for r in lam_rows]
            m[f"{key}_rho_lam"], m[f"{key}_rise_lam"] = trend(lams, vals)
            m[f"{key}_eta2_by_lam"] = {f"{x:g}": v for x, v in zip(lams, vals)}
        m["ft_max_drop_lam"] = max_drop(lams, [r["ft_eta2"] for r in lam_rows])
        m["n_lam"] = _n_valid(r["ft_eta2"] for r in lam_rows)
        m["ft_icl_exact_by_lam"] = {f"{r['lam']:g}": r.get("ft_icl_exact") for r in lam_rows}
        m["grammar_tv_by_lam"] = {f"{r['lam']:g}": r.get("grammar_tv") for r in lam_rows}
    return m


# ------------------------------------------------------------------------------------------
# CR-4
# ------------------------------------------------------------------------------------------
def _finish(claim: Claim, claim_id: str, variant: str, keys) -> Claim:
    """Set the variant id and add the mean and 95% CI over seeds of ``keys``."""
    claim.id = variant_id(claim_id, variant)
    summ = {}
    for k in keys:
        vals = [m[k] for m in claim.per_seed.values()
                if isinstance(m.get(k), (int, float)) and not math.isnan(float(m[k]))]
        if vals:
            summ[k] = {"mean": float(np.mean(vals)), "ci95": list(ci95(vals, metric_range(k)))}
    claim.details = {**claim.details, "mean_and_ci95_over_seeds": summ}
    return claim


def cr4_claim_from_metrics(per_seed: dict[str, dict[str, Any]], tvc: TaskvecConfig,
                           notes: str = "", figure: str | None = "figures/cr4_overview.html",
                           details: dict | None = None, variant: str = "") -> Claim:
    """CR-4 from per-seed metrics (those of :func:`per_seed_metrics`): the registered rule and
    controls (``claims.cr_registry``)."""
    hook = next(iter(per_seed.values()), {}).get("hook", "?")
    out_t = _mean([m.get("ft_output_type_acc") for m in per_seed.values()])
    lens = _mean([m.get("ft_hook_lens_type_acc") for m in per_seed.values()])
    pre = _mean([m.get("ft_pre_attn_acc_pc") for m in per_seed.values()])
    nec = _mean([m.get("ft_necessity_type_acc") for m in per_seed.values()])
    rnd = _mean([m.get("ft_random_subspace_type_acc") for m in per_seed.values()])
    rdir = _mean([m.get("ft_random_dir") for m in per_seed.values()])
    nat = _mean([m.get("ft_necessity_attr_share") for m in per_seed.values()])
    rat = _mean([m.get("ft_random_subspace_attr_share") for m in per_seed.values()])
    claim = Claim.from_spec(
        spec("CR-4"), per_seed, controls=spec_controls(spec("CR-4"), per_seed),
        notes=(f"Read at {hook} (query position; never the final residual stream). The "
               f"model's own output-type accuracy on the same held-out test prompts: "
               f"{out_t:.3f} (mean; ft_output_type_acc). Necessity (reported, a sanity check "
               f"that cannot fail for a linearly read code): with the component in U "
               f"(span of the {tvc.n_pc} type-mean differences of the training prompts) "
               f"replaced by the training mean's, output-type accuracy is {nec:.3f} (mean; "
               f"ft_necessity_type_acc); with {tvc.n_random_subspaces} random subspaces of the "
               f"same dimension mean-replaced the same way it is {rnd:.3f} (mean; its drop "
               f"is ft_random_subspace_drop; they lie outside U and are drawn with the "
               f"activations' covariance). Answers that are still attribute "
               f"tokens after the replacement: {nat:.3f} (U), {rat:.3f} (random; "
               f"ft_necessity_attr_share, ft_random_subspace_attr_share). Read through the "
               f"unembedding (logit lens) the hook gives the right type on {lens:.3f} "
               f"(mean; ft_hook_lens_type_acc): the code there is already most of the "
               f"prediction; before the last attention layer (blocks.(L-1).hook_resid_pre) "
               f"the top-PC probe reads {pre:.3f} (mean). Reported only: a probe on "
               f"{tvc.n_pc} random directions reads {rdir:.3f} (mean; ft_random_dir) - a strong "
               f"4-class code is decodable from almost any 3 directions, so it says nothing "
               f"about the code's dimension. Patch success is "
               f"chance-corrected (_patch_gain: hit rate minus the unpatched model's hit "
               f"rate on the same targets). Label shuffle: every prompt relabelled at random, "
               f"the same in train and test. Held-out-subject ICL prompts, all types, "
               f"by-prompt split fixed before fitting. " + notes).strip(),
        figure=figure, details=dict(details or {}))
    return _finish(claim, "CR-4", variant, (
        "ft_acc_pc", "ft_transfer_acc_pc", "ft_patch_gain", "ft_necessity_type_acc",
        "ft_necessity_drop", "ft_random_subspace_drop", "ft_output_type_acc",
        "ft_final_resid_acc_pc", "ft_acc_pc_by_subject", "ft_patch_success",
        "ft_random_patch_gain", "ft_final_patch_gain", "ft_hook_lens_type_acc",
        "ft_pre_attn_acc_pc", "pt_acc_pc", "pt_patch_gain", "ft_shuffle_gap",
        "ft_random_dir", "ft_eta2", "pt_eta2", "grm_acc_pc", "grm_transfer_acc_pc"))


# ------------------------------------------------------------------------------------------
# CR-8
# ------------------------------------------------------------------------------------------
def cr8_claim_from_metrics(per_seed: dict[str, dict[str, Any]], notes: str = "",
                           figure: str | None = None, details: dict | None = None,
                           variant: str = "") -> Claim:
    """CR-8 from per-seed metrics (:func:`per_seed_metrics`): partial eta^2 and exact accuracy
    against K at the CR-4 hook. A seed whose held-out output-type accuracy at K = 1 is
    >= ``CR8_HEADROOM`` has no headroom: the claim is ``inconclusive`` (not measurable)."""
    no_room = {s: m.get("ft_output_type_acc_k1") for s, m in per_seed.items()
               if m.get("ft_output_type_acc_k1") is not None
               and not math.isnan(float(m["ft_output_type_acc_k1"]))
               and float(m["ft_output_type_acc_k1"]) >= CR8_HEADROOM}
    k1 = {s: m.get("ft_k_min") for s, m in per_seed.items()}
    not_meas = ""
    if no_room:
        not_meas = (f"output-type accuracy at K = 1 is already >= {CR8_HEADROOM:g} on seeds "
                    + ", ".join(f"{s} ({v:.3f})" for s, v in sorted(no_room.items()))
                    + ": one demo fixes the type, so the K trend has no headroom")
    bad_k1 = sorted(s for s, m in per_seed.items() if k1[s] != 1
                    or m.get("ft_output_type_acc_k1") is None
                    or math.isnan(float(m["ft_output_type_acc_k1"])))
    if bad_k1 and not not_meas:
        not_meas = (f"output-type accuracy at K = 1 not measured on seeds {bad_k1}: headroom "
                    f"unknown")
    n_k = min((m.get("ft_n_k", 0) for m in per_seed.values()), default=0)
    checks = {f"measured over >= {CR8_MIN_K} values of K on every seed (fewest {n_k})":
              n_k >= CR8_MIN_K}
    k1m = _mean([m.get("ft_output_type_acc_k1") for m in per_seed.values()])
    claim = Claim.from_spec(
        spec("CR-8"), per_seed, controls=spec_controls(spec("CR-8"), per_seed),
        extra_checks=checks, not_measurable=not_meas,
        notes=(f"Partial eta^2 = SS_type / (SS_type + SS_residual) in the additive type + "
               f"query-subject decomposition of the held-out task vectors at the CR-4 hook, "
               f"per K; exact accuracy on the same prompts. Decided on the paired curve: the "
               f"ICL-finetuned model's partial eta^2 minus the mixed-type ICL finetune's (no "
               f"shared type in a prompt; same pretraining and prompts) per K, because partial "
               f"eta^2 alone rises with K in models that infer nothing (averaging shrinks the "
               f"residual); the unpaired curves are reported (ft_/mixed_/pt_partial_eta2_by_k). "
               f"Headroom: output-type accuracy at K = 1 is {k1m:.3f} (mean; "
               f"ft_output_type_acc_k1); on a seed at >= {CR8_HEADROOM:g} the trend cannot be "
               f"read. Control: the PT-only model paired against the same mixed-type finetune. "
               + notes).strip(),
        figure=figure, details=dict(details or {}))
    return _finish(claim, "CR-8", variant, (
        "ft_partial_eta2_rho_k", "ft_partial_eta2_rise_k", "ft_exact_rise_k",
        "ft_output_type_acc_k1", "mixed_partial_eta2_rise_k", "ft_rho_k", "ft_rise_k"))


# ------------------------------------------------------------------------------------------
# CR-9
# ------------------------------------------------------------------------------------------
def cr9_claim_from_metrics(per_seed: dict[str, dict[str, Any]], notes: str = "",
                           figure: str | None = None, details: dict | None = None) -> Claim:
    """CR-9 from per-seed metrics (:func:`per_seed_metrics`, with their per-lam curves): the
    registered spec derives lam_s, the rises from it and the seed-mean curve's drop
    (``claims.derive.cr9_derive``) and decides; every registered lam must be measured on
    every seed (an extra check)."""
    n_lam = min((m.get("n_lam", 0) for m in per_seed.values()), default=0)
    checks = {f"measured over >= {CR9_MIN_LAM} values of lam on every seed (fewest {n_lam})":
              n_lam >= CR9_MIN_LAM}
    sp = spec("CR-9")
    _, pooled = sp.derive(sp.id, per_seed)
    claim = Claim.from_spec(
        sp, per_seed, controls=spec_controls(sp, per_seed), extra_checks=checks,
        notes=(f"eta^2 at the CR-4 hook of a full PT + ICL finetune per lam (the main run's "
               f"config with only task.lam changed); lam_s = {pooled['cr9_lam_s']:g}, the "
               f"drop tolerance {pooled['cr9_drop_tolerance']:.4f} = 2 x sqrt(2) x SD / "
               f"sqrt(n_seeds) with SD = {CR9_LAM_SD:g} (eta^2 over retrainings at the "
               f"default lam on seeds outside the decision seeds; docs/registry.md). Held-out "
               f"ICL exact accuracy per lam is in ft_icl_exact_by_lam; the rise from the "
               f"smallest lam (ft_rise_from_lam0) is reported, not deciding. " + notes).strip(),
        figure=figure, details=dict(details or {}))
    return _finish(claim, "CR-9", "", ("ft_rise_lam", "ft_max_drop_lam", "mixed_rise_lam",
                                       "ft_rho_lam"))


# ------------------------------------------------------------------------------------------
# All three from the per-seed results
# ------------------------------------------------------------------------------------------
def taskvec_claims(results: list[dict[str, Any]], tvc: TaskvecConfig, skipped: list,
                   errors: dict, figures: dict[str, Any], variant: str = "",
                   per_seed: dict[str, dict[str, Any]] | None = None) -> list[Claim]:
    """CR-4, CR-8 and (default task only) CR-9 from the per-seed results of
    ``taskvec.analyse_seed`` (with their lam sweeps); ``skipped`` seeds had no complete run,
    ``errors`` maps a seed (or step) to its error. ``per_seed``: the results'
    :func:`per_seed_metrics` when the caller already has them (computed here otherwise)."""
    if per_seed is None:
        per_seed = {str(r["seed"]): per_seed_metrics(r) for r in results}
    fig = figures or {}
    claims = [cr4_claim_from_metrics(per_seed, tvc, figure=fig.get("overview"), variant=variant),
              cr8_claim_from_metrics(per_seed, figure=fig.get("cr8"), variant=variant)]
    if not variant:
        claims.append(cr9_claim_from_metrics(per_seed, figure=fig.get("cr9")))
    seed_errors = {k: v for k, v in errors.items() if not str(k).startswith("lam sweep")}
    lam_errors = {k: v for k, v in errors.items() if str(k).startswith("lam sweep")}
    for claim in claims:
        if skipped:
            claim.notes += f" Seeds without a complete CR run, skipped: {skipped}."
        if errors:
            claim.notes += f" Errors: {errors}."
            claim.details["errors"] = {str(k): v for k, v in errors.items()}
        # a measurement that failed is not evidence either way: inconclusive, not "does not
        # hold" (the missing seeds would otherwise fail the rule)
        failed = {**seed_errors, **(lam_errors if claim.id.startswith("CR-9") else {})}
        if failed and not claim.not_measurable:
            claim.not_measurable = "the measurement failed on " + "; ".join(
                f"{k}: {v}" for k, v in failed.items())
    claims[0].details.update({
        "figures": figures, "params": {k: getattr(tvc, k) for k in tvc.__dataclass_fields__},
        "seconds": {str(r["seed"]): {ph: v["seconds"] for ph, v in r["phases"].items()}
                    for r in results}})
    return claims


def taskvec_not_measured(seeds: list[int], errors: dict, variant: str = "") -> list[Claim]:
    """CR-4, CR-8 (and CR-9) when no seed had a CR run that could be analysed (they do not
    hold)."""
    why = (f"not measured: no CR run directory with pretrain and ft-icl checkpoints could be "
           f"analysed (seeds {seeds}); errors: {errors}")
    ids = ("CR-4", "CR-8") if variant else ("CR-4", "CR-8", "CR-9")
    out = []
    for cid in ids:
        c = Claim.from_spec(spec(cid), {}, notes=why)
        c.id = variant_id(cid, variant)
        out.append(c)
    return out


def taskvec_tables(results: list[dict[str, Any]], variant: str = "") -> dict[str, Any]:
    """Per-boundary probes, separation vs K and lam, the patch, the necessity test and the
    probe curve (table names carry the variant)."""
    sfx = variant_id("", variant)  # " (shared tokens)" or nothing
    return {
        f"cr4_layers{sfx}": [
            {"seed": r["seed"], "phase": ph,
             **{k: row[k] for k in ("label", "hook", "acc_pc", "acc_full",
                                    "type_variance_fraction")}}
            for r in results for ph, v in r["phases"].items() for row in v["layers"]],
        f"cr4_k_sweep{sfx}": [{"seed": r["seed"], "phase": ph, **row}
                              for r in results for ph, rows in r["k_sweep"].items()
                              for row in rows],
        f"cr4_lam_sweep{sfx}": [row for r in results for row in r.get("lam_sweep", [])],
        f"cr4_patch{sfx}": [
            {"seed": r["seed"], "phase": ph, "hook": v["hook"],
             **{k: v.get(k) for k in ("patch_gain", "patch_success", "patch_unpatched_hit",
                                      "random_patch_gain", "random_patch_success",
                                      "final_patch_gain", "final_patch_success",
                                      "patch_kept_original", "output_type_acc",
                                      "necessity_type_acc", "random_subspace_type_acc",
                                      "hook_lens_type_acc", "acc_pc", "pre_attn_acc_pc")}}
            for r in results for ph, v in r["phases"].items()],
        f"cr4_curve{sfx}": [{"seed": r["seed"], **row} for r in results for row in r["curve"]],
    }
