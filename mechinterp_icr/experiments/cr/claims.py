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

from mechinterp_icr.claims import Claim, ci95
from mechinterp_icr.experiments.cr.config import CascadeConfig, CRConfig, TaskvecConfig
from mechinterp_icr.experiments.cr.evaluate import pick

__all__ = [
    "cr123_claims",
    "cr123_tables",
    "cr4_claim",
    "cr4_not_measured",
    "cr4_tables",
    "cr5_claim",
    "cr5_table",
    "cr6_claim",
    "cr7_claim",
    "spearman",
]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"


# ------------------------------------------------------------------------------------------------
# CR-1..3
# ------------------------------------------------------------------------------------------------
def cr123_claims(cfg: CRConfig, results: list[dict[str, Any]], sweep: list[dict]
                 ) -> list[Claim]:
    """CR-1 (PT only), CR-2 (ICL finetuning), CR-3 (ICL+Grm finetuning, with the sweep)."""
    K = cfg.task.n_demos
    L = cfg.task.n_types
    c1, c2, c3 = {}, {}, {}
    for r in results:
        s = str(r["seed"])
        pt = r["phases"]["pretrain"]
        typed = float(np.mean([pick(pt, sp, "pt", key="typed") for sp in ("heldout",
                                                                             "finetune")]))
        restricted = float(np.mean([pick(pt, sp, "pt", key="restricted")
                                    for sp in ("heldout", "finetune")]))
        exact = float(np.mean([pick(pt, sp, "pt", key="exact") for sp in ("heldout",
                                                                           "finetune")]))
        c1[s] = {"pt_typed_recall": typed, "pt_restricted_recall": restricted,
                 "pt_exact_recall": exact, "bayes_ceiling": r["task"]["bayes_ceiling_pt"],
                 "separation_tv": r["task"]["tv_transition"],
                 "heldout_icl_exact": pick(pt, "heldout", "icl", K),
                 "heldout_icl_type": pick(pt, "heldout", "icl", K, "type"),
                 "heldout_icl_best_attr_type": pick(pt, "heldout", "icl", K,
                                                     "restricted_type"),
                 "type_chance": 1.0 / L}
        for phase, dst in (("ft-icl", c2), ("ft-iclgrm", c3)):
            rows = r["phases"][phase]
            d = {"heldout_icl_exact": pick(rows, "heldout", "icl", K),
                 "heldout_icl_type": pick(rows, "heldout", "icl", K, "type"),
                 "heldout_icl_restricted": pick(rows, "heldout", "icl", K, "restricted"),
                 "finetune_icl_exact": pick(rows, "finetune", "icl", K),
                 "heldout_iclgrm_exact": pick(rows, "heldout", "iclgrm", K),
                 "pt_typed_after": np.mean([pick(rows, sp, "pt", key="typed")
                                            for sp in ("heldout", "finetune")]),
                 "heldout_icl_exact_by_K": {str(k): pick(rows, "heldout", "icl", k)
                                            for k in cfg.eval_ks}}
            aw = phase + "-allw"
            if aw in r["phases"]:
                d["allweights_heldout_icl_exact"] = pick(r["phases"][aw], "heldout", "icl", K)
                d["allweights_pt_typed_after"] = float(np.mean(
                    [pick(r["phases"][aw], sp, "pt", key="typed")
                     for sp in ("heldout", "finetune")]))
            dst[s] = {k: float(v) if isinstance(v, (np.floating, float)) else v
                      for k, v in d.items()}
    icl_mean = float(np.mean([v["heldout_icl_exact"] for v in c1.values()]))
    type_mean = float(np.mean([v["heldout_icl_best_attr_type"] for v in c1.values()]))
    claim1 = Claim(
        "CR-1",
        "PT-only model: facts are stored (typed recall >= 0.95; restricted recall reported "
        "beside its Bayes ceiling) but contextual recall is absent (held-out ICL exact <= 0.10, "
        "type of the best attribute guess near chance)",
        metric="pt_typed_recall", op=">=", threshold=0.95, per_seed=c1,
        extra_checks={f"held-out ICL exact (K={K}) mean {icl_mean:.3f} <= 0.10":
                      icl_mean <= 0.10,
                      f"type of best attribute guess {type_mean:.3f} within 0.10 of chance "
                      f"{1.0 / L:.3f}": abs(type_mean - 1.0 / L) <= 0.10},
        details={"heldout_icl_exact_mean": icl_mean,
                 "order": cfg.task.order,
                 "pt_only_heldout_icl_exact_other_pretraining": {
                     r["setting"]: r["pt_only_heldout_icl_exact_mean"] for r in sweep
                     if r.get("pt_only_heldout_icl_exact_mean") is not None},
                 "best_attr_type_acc_mean": type_mean, "type_chance": 1.0 / L,
                 "best_attr_type_minus_chance": type_mean - 1.0 / L},
        notes=f"Restricted recall is bounded by the Bayes ceiling of reading the type from the "
              f"grammar; the type of the PT model's best attribute guess on ICL is "
              f"{type_mean:.3f} vs chance {1.0 / L:.3f}. In the gsa order a subject is always "
              f"followed by its attribute, so the PT model answers the query subject's "
              f"attribute of a guessed type (exact about the type-guess rate); in the sga "
              f"order it predicts grammar (exact 0): see "
              f"details.pt_only_heldout_icl_exact_other_pretraining and docs/cr.md.",
        figure="figures/cr_icl_by_k.html")
    aw2 = [v.get("allweights_heldout_icl_exact") for v in c2.values()]
    claim2 = Claim(
        "CR-2",
        "ICL finetuning on a subject subset (attention only) gives held-out ICL exact accuracy "
        ">= 0.90",
        metric="heldout_icl_exact", op=">=", threshold=0.90, per_seed=c2,
        details={"trainable": cfg.finetune.trainable,
                 "allweights_arm_mean": float(np.mean(aw2)) if None not in aw2 else None},
        notes="The all-weights arm is reported per seed (allweights_heldout_icl_exact).",
        figure="figures/cr_icl_by_k.html")
    claim3 = Claim(
        "CR-3",
        "ICL+Grm finetuning on a subject subset, evaluated on plain ICL on held-out subjects: "
        "exact accuracy >= 0.80 (transfer across formats)",
        metric="heldout_icl_exact", op=">=", threshold=0.80, per_seed=c3,
        details={"default_setting": {"order": cfg.task.order,
                                     "iclgrm_chain": cfg.task.iclgrm_chain,
                                     "iclgrm_len": [cfg.task.iclgrm_len_min,
                                                    cfg.task.iclgrm_len_max],
                                     "iclgrm_query_grammar": cfg.task.iclgrm_query_grammar,
                                     "lam": cfg.task.lam,
                                     "trainable": cfg.finetune.trainable,
                                     "finetune_steps": cfg.finetune.steps},
                 "sweep": sweep},
        notes="Transfer across the sweep is in tables['CR-3 sweep'] and docs/cr.md.",
        figure="figures/cr3_sweep.html")
    return [claim1, claim2, claim3]


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
             "own_pretraining": r["own_pretrain"],
             "pt_only_heldout_icl_acc": r["pt_only_heldout_icl_exact_mean"]} for r in sweep],
        "CR eval": [{"seed": r["seed"], "phase": ph, **row} for r in results
                    for ph, rows in r["phases"].items() for row in rows],
        "CR task": [{"seed": r["seed"], **r["task"]} for r in results],
        "CR phase seconds": [{"seed": r["seed"], **r["seconds"]} for r in results],
    }


# ------------------------------------------------------------------------------------------------
# CR-4
# ------------------------------------------------------------------------------------------------
def spearman(x, y) -> float:
    """Spearman rank correlation; nan for fewer than two points or a constant side."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(y == y[0]) or np.all(x == x[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)


def _per_seed_metrics(res: dict[str, Any]) -> dict[str, Any]:
    pt, ft = res["phases"][PHASE_PT], res["phases"][PHASE_FT]
    grm = res["phases"].get(PHASE_FT_GRM)
    m = {
        "ft_acc_pc": ft["acc_pc"], "ft_acc_full": ft["acc_full"],
        "ft_transfer_acc_pc": ft["transfer_acc_pc"],
        "ft_transfer_acc_full": ft["transfer_acc_full"],
        "ft_acc_pc_by_subject": ft.get("acc_pc_by_subject", float("nan")),
        "ft_boundary": ft["boundary_label"],
        "ft_icl_exact_heldout": ft["icl_exact"],
        "pt_acc_pc": pt["acc_pc"], "pt_acc_full": pt["acc_full"],
        "pt_full_boundary": pt["full_boundary_label"],
        "pt_transfer_acc_pc": pt["transfer_acc_pc"],
        "pt_boundary": pt["boundary_label"],
        "ft_shuffle_pc": ft["acc_shuffle_pc"], "ft_shuffle_full": ft["acc_shuffle_full"],
        "pt_shuffle_pc": pt["acc_shuffle_pc"],
        "ft_random_dir": ft["acc_random_dir"], "pt_random_dir": pt["acc_random_dir"],
        "chance": ft["chance"],
        "ft_type_variance_fraction": ft["geom_type_variance_fraction"],
        "pt_type_variance_fraction": pt["geom_type_variance_fraction"],
        "ft_silhouette": ft["geom_silhouette"], "pt_silhouette": pt["geom_silhouette"],
        "ft_cos_gap": ft["geom_cos_gap"], "pt_cos_gap": pt["geom_cos_gap"],
        "ft_participation_ratio": ft["geom_participation_ratio"],
        "ft_n_components_90": ft["geom_n_components_90"],
        "ft_transplant_success": ft["transplant_success"],
        "pt_transplant_success": pt["transplant_success"],
        "ft_transplant_boundary": ft["transplant"][ft["transplant_boundary"]]["label"],
    }
    if grm is not None:
        m.update({"grm_acc_pc": grm["acc_pc"], "grm_acc_full": grm["acc_full"],
                  "grm_transfer_acc_pc": grm["transfer_acc_pc"],
                  "grm_transplant_success": grm["transplant_success"]})
    for ph, key in ((PHASE_FT, "ft"), (PHASE_PT, "pt")):
        ks = res["k_sweep"].get(ph, [])
        m[f"{key}_rho_k"] = spearman([r["K"] for r in ks],
                                     [r["type_variance_fraction"] for r in ks])
        m[f"{key}_rho_k_full_probe"] = spearman([r["K"] for r in ks], [r["acc_full"] for r in ks])
    lam_rows = res.get("lam_sweep", [])
    if len(lam_rows) >= 2:
        m["ft_rho_lam"] = spearman([r["lam"] for r in lam_rows],
                                   [r["ft_type_variance_fraction"] for r in lam_rows])
        m["pt_rho_lam"] = spearman([r["lam"] for r in lam_rows],
                                   [r["pt_type_variance_fraction"] for r in lam_rows])
    return m


def _mean(vals) -> float:
    v = [float(x) for x in vals if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else float("nan")


def _build_claim(results: list[dict[str, Any]], P: TaskvecConfig) -> Claim:
    per_seed = {str(r["seed"]): _per_seed_metrics(r) for r in results}
    col = {k: [m.get(k) for m in per_seed.values()] for k in next(iter(per_seed.values()))}
    ft, ftt = _mean(col["ft_acc_pc"]), _mean(col["ft_transfer_acc_pc"])
    pt, ptt = _mean(col["pt_acc_pc"]), _mean(col["pt_transfer_acc_pc"])
    chance = _mean(col["chance"])
    shuf = max(abs(_mean(col["ft_shuffle_pc"]) - chance), abs(_mean(col["ft_shuffle_full"])
                                                             - chance))
    m = P.far_lower_margin
    checks = {
        f"transfer: probe fit on finetune-subject prompts scores >= {P.pass_threshold} on "
        f"held-out-subject prompts (mean {ftt:.3f})": ftt >= P.pass_threshold,
        f"PT only: top-PC probe at least {m} lower (PT {pt:.3f} vs finetuned {ft:.3f})":
            pt <= ft - m,
        f"PT only: transfer at least {m} lower (PT {ptt:.3f} vs finetuned {ftt:.3f})":
            ptt <= ftt - m,
        f"label-shuffle control within {P.control_margin} of chance {chance:.2f} "
        f"(largest gap {shuf:.3f})": shuf <= P.control_margin,
        f"random-direction control below the top-PC probe (random "
        f"{_mean(col['ft_random_dir']):.3f} vs top-PC {ft:.3f})":
            _mean(col["ft_random_dir"]) < ft,
        f"separation grows with K: Spearman rho(K, type variance share) > 0 after "
        f"finetuning (mean {_mean(col['ft_rho_k']):.2f})": _mean(col["ft_rho_k"]) > 0,
    }
    if "ft_rho_lam" in col:
        rl = _mean(col["ft_rho_lam"])
        checks[f"separation grows with lam: Spearman rho(lam, type variance share) > 0 "
               f"after finetuning (mean {rl:.2f}, small lam runs)"] = rl > 0
    claim = Claim(
        id="CR-4",
        statement=("After ICL finetuning the attribute type is encoded in a low-dimensional "
                   f"subspace at the query position: a probe on the top {P.n_pc} principal "
                   "components (fit on training prompts only) decodes it on held-out prompts "
                   f"with accuracy >= {P.pass_threshold}, a probe fit on finetune-subject "
                   "prompts transfers to held-out subjects, both are far lower after PT only, "
                   "the label-shuffle control is at chance, and separation grows with K and "
                   "with lam."),
        metric="ft_acc_pc", op=">=", threshold=P.pass_threshold, per_seed=per_seed,
        extra_checks=checks,
        notes=("Held-out-subject ICL prompts, all types; boundary (embed / after each block) "
               "chosen on a dev split, accuracy on a disjoint test split (no shared prompt). "
               "Separation = share of the task-vector variance explained by the type. "
               "lam trend from small PT+finetune runs (see docs/taskvec.md)."),
        figure="figures/cr4_overview.html",
    )
    return claim


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
    keys = ("ft_acc_pc", "ft_acc_full", "ft_transfer_acc_pc", "ft_acc_pc_by_subject",
            "pt_acc_pc", "pt_acc_full", "pt_transfer_acc_pc", "ft_shuffle_pc",
            "ft_shuffle_full", "ft_random_dir", "ft_type_variance_fraction",
            "pt_type_variance_fraction", "ft_transplant_success", "grm_acc_pc",
            "grm_transfer_acc_pc", "ft_rho_k")
    summ = {}
    for k in keys:
        vals = [m[k] for m in claim.per_seed.values() if isinstance(m.get(k), (int, float))]
        if vals:
            summ[k] = {"mean": float(np.mean(vals)), "ci95": list(ci95(vals))}
    claim.details = {**claim.details, "mean_and_ci95_over_seeds": summ,
                     "figures": figures, "params": {k: getattr(P, k) for k in
                                                    P.__dataclass_fields__},
                     "seconds": {str(r["seed"]): {
                         ph: v["seconds"] for ph, v in r["phases"].items()} for r in results}}
    return claim


def cr4_not_measured(seeds: list[int], errors: dict, P: TaskvecConfig) -> Claim:
    """CR-4 when no seed had a CR run that could be analysed (the claim does not hold)."""
    return Claim(id="CR-4", statement="Task vectors encode the type after finetuning "
                 "(not measured: no CR run directory with pretrain and ft-icl "
                 "checkpoints could be analysed)", metric="ft_acc_pc", op=">=",
                 threshold=P.pass_threshold,
                 notes=f"no usable runs for seeds {seeds}; errors: {errors}")


def cr4_tables(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-boundary probes, separation vs K and lam, transplant and the probe curve."""
    return {
        "cr4_layers": [
            {"seed": r["seed"], "phase": ph,
             **{k: row[k] for k in ("label", "acc_pc", "acc_full")}}
            for r in results for ph, v in r["phases"].items() for row in v["layers"]],
        "cr4_k_sweep": [
            {"seed": r["seed"], "phase": ph,
             **{k: v for k, v in row.items() if k != "type_variance_fraction_by_boundary"}}
            for r in results for ph, rows in r["k_sweep"].items() for row in rows],
        "cr4_lam_sweep": [row for r in results for row in r.get("lam_sweep", [])],
        "cr4_transplant": [{"seed": r["seed"], "phase": ph, **row}
                           for r in results for ph, v in r["phases"].items()
                           for row in v["transplant"]],
        "cr4_curve": [{"seed": r["seed"], **row} for r in results for row in r["curve"]],
    }


# ------------------------------------------------------------------------------------------------
# CR-5, CR-6, CR-7
# ------------------------------------------------------------------------------------------------


def cr5_claim(cr5: dict, figure: str | None) -> Claim:
    """CR-5 from the head-role verdicts per seed (``mechanism.head_roles``)."""
    per5 = {}
    for s, r in cr5.items():
        v = r.get("ft-icl")
        if v is None:
            continue
        mr = min(v["relation_recovery"], v["subject_recovery"]) if v["distinct"] else 0.0
        g = r.get("ft-iclgrm") or {}
        per5[str(s)] = {"min_recovery": mr, "relation_head": v["relation_head"],
                        "subject_head": v["subject_head"], "distinct": v["distinct"],
                        "relation_recovery": v["relation_recovery"],
                        "relation_moved": v["relation_moved"],
                        "subject_recovery": v["subject_recovery"],
                        "subject_moved": v["subject_moved"],
                        "iclgrm_relation_head": g.get("relation_head"),
                        "iclgrm_subject_head": g.get("subject_head"),
                        "iclgrm_relation_recovery": g.get("relation_recovery"),
                        "iclgrm_subject_recovery": g.get("subject_recovery"),
                        "subject_via_query_residual": v["components_subject"].get(
                            "resid_pre0@query"),
                        **_mech_numbers(r.get("mechanism_model"))}
    return Claim(
        id="CR-5",
        statement="In the trained 2-layer model (end of ICL finetuning) one head acts as a "
                  "Relation head (patching it from a prompt of another type moves the answer "
                  "to the query subject's attribute of that type) and another as a Subject head "
                  "(patching it from a prompt with another query subject moves the answer to "
                  "that subject's attribute).",
        metric="min_recovery", op=">=", threshold=0.5, per_seed=per5,
        extra_checks={"Relation and Subject heads are distinct on every seed":
                      bool(per5) and all(v["distinct"] for v in per5.values())},
        notes="Recovery = normalised logit-difference recovery (0 = base prompt, 1 = source "
              "prompt) when the head's output is patched at all positions; pairs share demo "
              "subjects and positions, held-out subjects. min_recovery is the smaller of the "
              "two heads' recoveries (0 if one head takes both roles).",
        figure=figure,
        details={str(s): {k: r.get(k) for k in ("ft-icl", "ft-iclgrm", "pretrain",
                                                 "trajectory", "mechanism_model")}
                 for s, r in cr5.items()})


def cr5_table(cr5: dict) -> list[dict[str, Any]]:
    """The head roles across the ft-icl checkpoints, one row per (seed, checkpoint)."""
    return [{"seed": s, **row} for s, r in cr5.items() for row in r.get("trajectory", [])]


def cr6_claim(cr6: dict, figure: str | None) -> Claim:
    """CR-6 from the construction numbers per seed (``mechanism.construction_numbers``)."""
    per6 = {str(s): r for s, r in cr6.items()}
    fails = [r["pt_construction_icl_heldout_exact"] for r in cr6.values()]
    return Claim(
        id="CR-6",
        statement="The attention-only Relation-head + Subject-head construction reaches >= 0.99 "
                  "in its own format (PT construction on the one-token-relation PT format, ICL "
                  "construction on ICL with held-out subjects); the PT construction fails on ICL.",
        metric="own_format_min", op=">=", threshold=0.99, per_seed=per6,
        extra_checks={"PT construction fails on ICL (held-out exact <= 0.10)":
                      bool(fails) and max(fails) <= 0.10},
        notes="Constructed weights loaded into a real 1-layer 2-head HookedTransformer "
              "(orthonormal one-hot embeddings, separate output block); see docs/interp.md.",
        figure=figure)


def cr7_claim(cr7: dict, ccfg: CascadeConfig, figure: str | None) -> Claim:
    """CR-7 from the cascade results per seed (``cascade.run_cascade``)."""
    per7 = {}
    for s, r in cr7.items():
        per7[str(s)] = {k: r[k] for k in ("ov_first", "t_half_ov", "t_half_kq", "lead_steps",
                                          "t_half_kq_mass", "t_half_ov_top1",
                                          "t_onset_ov", "t_onset_kq",
                                          "ov_start", "ov_end", "kq_start", "kq_end",
                                          "relation_head", "icl_heldout_exact", "pt_typed",
                                          "sim_relation_ov", "sim_subject_ov")}
    learned = [r["icl_heldout_exact"] for r in cr7.values()]
    return Claim(
        id="CR-7",
        statement="While the attention-only 1-layer 2-head model is finetuned on ICL from its PT "
                  "state, the Relation head's OV memory (attributes -> same-type attributes) "
                  "improves before its KQ (the query attends to the in-context attributes).",
        metric="ov_first", op=">=", threshold=1.0, rule="all_seeds", per_seed=per7,
        extra_checks={"the mechanism model learns ICL (held-out exact >= 0.5 on every seed)":
                      bool(learned) and min(learned) >= 0.5},
        notes=f"Probes logged at every checkpoint (every {ccfg.checkpoint_every} steps); t_half = "
              "first step at which probe - probe(0) >= half of the final gain. OV probe = "
              "ov_precision, KQ probe = kq_top_attr (docs/interp.md). Finetuning trains "
              f"'{ccfg.ft_trainable}' at lr {ccfg.ft_lr} for {ccfg.ft_steps} steps.",
        figure=figure,
        details={str(s): {"steps": r["steps"], "ov": r["ov"], "kq": r["kq"],
                          "kq_mass": r["kq_mass"], "icl": r["icl_curve"], "roles": r["roles"],
                          "similarity": r["similarity"]} for s, r in cr7.items()})


def _mech_numbers(v: dict | None) -> dict:
    if not v:
        return {}
    return {"mech_relation_head": v["relation_head"], "mech_subject_head": v["subject_head"],
            "mech_distinct": v["distinct"], "mech_relation_recovery": v["relation_recovery"],
            "mech_subject_recovery": v["subject_recovery"],
            "mech_min_recovery": (min(v["relation_recovery"], v["subject_recovery"])
                                  if v["distinct"] else 0.0)}
