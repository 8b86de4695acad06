"""The CR claims: pure functions from result rows to :class:`~mechinterp_icr.claims.Claim`
objects (and the summary tables beside them), one group per stage.

- CR-1..3 from the per-seed evaluation rows of every phase and the aggregated CR-3 sweep;
- CR-4, CR-8, CR-9 from the per-seed task-vector results (``taskvec.analyse_seed``), in
  :mod:`.claims_taskvec`;
- CR-5, CR-6, CR-7 from the head-role verdicts, the construction numbers and the cascade.

Nothing here trains, reads a run directory or draws a figure: figure paths come in as
arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mechinterp_icr.claims import Claim, spec
from mechinterp_icr.claims.protocol import spec_controls, variant_id
from mechinterp_icr.experiments.cr.claims_mech import (  # CR-5..7, re-exported
    cr5_claim,
    cr5_table,
    cr6_claim,
    cr7_claim,
)
from mechinterp_icr.experiments.cr.claims_taskvec import (  # CR-4, CR-8, CR-9, re-exported
    PHASE_FT,
    PHASE_FT_GRM,
    PHASE_PT,
    cr4_claim_from_metrics,
    cr8_claim_from_metrics,
    cr9_claim_from_metrics,
    spearman,
    taskvec_claims,
    taskvec_not_measured,
    taskvec_tables,
)
from mechinterp_icr.experiments.cr.config import CRConfig
from mechinterp_icr.experiments.cr.evaluate import max_drop_over_k, pick
from mechinterp_icr.experiments.cr.records import TrainRecord
from mechinterp_icr.experiments.cr.uninformative import baseline_metrics

__all__ = [
    "cr123_claims",
    "cr123_from_metrics",
    "cr123_seed_metrics",
    "cr123_tables",
    "cr4_claim_from_metrics",
    "cr5_claim",
    "cr5_table",
    "cr6_claim",
    "cr7_claim",
    "cr8_claim_from_metrics",
    "cr9_claim_from_metrics",
    "spearman",
    "taskvec_claims",
    "taskvec_not_measured",
    "taskvec_tables",
]



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


def _ctrls(claim_id: str, per_seed: dict[str, dict[str, Any]], variant: str):
    """The registered controls of ``claim_id``, their derived metrics derived under the id the
    claim is reported under (the shared-token variant's type bounds are its own)."""
    return spec_controls(spec(claim_id), per_seed, claim_id=variant_id(claim_id, variant))


TYPE_BOUND_NOTE = (
    "Type bounds (claims.derive.type_bound_derive): *_heldout_icl_type_over_bound is the type "
    "of the best attribute guess on held-out ICL (*_heldout_icl_best_attr_type) minus its "
    "bound, 1/L + 0.05 in the default task; in the shared-token variant the same model's type "
    "accuracy on the same prompts with uninformative demos (*_uninf: every demo of another "
    "type than the query's) + 0.05, so the rule reads the contrast "
    "(*_heldout_icl_type_contrast, reported in both). ")


def cr123_from_metrics(c1: dict, c2: dict, c3: dict, details: dict | None = None,
                       variant: str = "") -> list[Claim]:
    """CR-1, CR-2, CR-3 (registered, with their controls) from per-seed metric dicts
    (:func:`cr123_seed_metrics`, keyed by str(seed)), under the ids of ``variant``
    (``'shared'``: ``CR-1 (shared tokens)`` ...). ``details`` per claim id are added."""
    details = details or {}
    L = next(iter(c1.values()), {}).get("type_chance")
    claim1 = Claim.from_spec(
        spec("CR-1"), c1, controls=_ctrls("CR-1", c1, variant),
        notes=f"Restricted recall (pt_restricted_recall) is bounded by the Bayes ceiling of "
              f"reading the type from the grammar (bayes_ceiling); exact recall and held-out "
              f"ICL exact are reported per seed. Type chance 1/L = {L}. " + TYPE_BOUND_NOTE,
        figure="figures/cr_icl_by_k.html", details=details.get("CR-1", {}))
    claim2 = Claim.from_spec(
        spec("CR-2"), c2, controls=_ctrls("CR-2", c2, variant),
        notes="max_drop_over_k: the largest drop of held-out ICL exact between consecutive "
              "evaluated K from 2 up (per seed); by K in heldout_icl_exact_by_K. The "
              "all-weights arm is reported per seed (allweights_heldout_icl_exact).",
        figure="figures/cr_icl_by_k.html", details=details.get("CR-2", {}))
    claim3 = Claim.from_spec(
        spec("CR-3"), c3, controls=_ctrls("CR-3", c3, variant),
        notes="ICL+Grm finetuning, evaluated on plain ICL on held-out subjects; the variants "
              "(type-chain grammar, grammar before the subject, the literal PT order) are in "
              "tables['CR-3 sweep'] and docs/cr.md, each with its own numbers. " + TYPE_BOUND_NOTE,
        figure="figures/cr3_sweep.html", details=details.get("CR-3", {}))
    for claim in (claim1, claim2, claim3):
        claim.id = variant_id(claim.id, variant)
    return [claim1, claim2, claim3]


def _add_baselines(c1: dict, c3: dict, baselines: dict | None) -> dict[str, list[str]]:
    """Add each seed's uninformative-demo metrics (``uninformative.baseline_metrics`` of its
    record in ``baselines``, seed -> record or None) to its CR-1 and CR-3 metrics; returns
    seed -> problems (none when ``baselines`` is None: not measured in this build)."""
    problems = {}
    for s in c1 if baselines is not None else ():
        add, bad = baseline_metrics(baselines.get(int(s)), {"CR-1": c1[s], "CR-3": c3[s]})
        c1[s].update(add.get("CR-1", {}))
        c3[s].update(add.get("CR-3", {}))
        if bad:
            problems[s] = bad
    return problems


def cr123_claims(cfg: CRConfig, results: list[TrainRecord], sweep: list[dict],
                 baselines: dict | None = None, variant: str = "") -> list[Claim]:
    """CR-1 (PT only), CR-2 (ICL finetuning), CR-3 (ICL+Grm finetuning, with the sweep), under
    the ids of ``variant``. ``baselines``: seed -> its ``uninf-demos`` job record (or None),
    the type accuracies with uninformative demos (the shared-token variant's type bounds)."""
    c1, c2, c3 = {}, {}, {}
    for r in results:
        m = cr123_seed_metrics(r.phases, r.task, cfg.task.n_demos, cfg.eval_ks,
                               cfg.task.n_types)
        s = str(r.seed)
        c1[s], c2[s], c3[s] = m["CR-1"], m.get("CR-2", {}), m.get("CR-3", {})
    problems = _add_baselines(c1, c3, baselines)
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
    claims = cr123_from_metrics(c1, c2, c3, details, variant)
    if problems:
        why = "; ".join(f"seed {s}: {', '.join(p)}" for s, p in problems.items())
        for claim in claims[0], claims[2]:
            claim.notes += f" Uninformative-demo baselines not read ({why})."
    return claims


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
        "CR eval": [{"seed": r.seed, "phase": ph, **row} for r in results
                    for ph, rows in r.phases.items() for row in rows],
        "CR task": [{"seed": r.seed, **r.task} for r in results],
        "CR phase seconds": [{"seed": r.seed, **r.seconds} for r in results],
    }
