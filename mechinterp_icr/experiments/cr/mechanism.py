"""CR-5, CR-6, CR-7: the mechanism stage of the CR reproduction.

- **CR-5** on the 1-layer, 2-head, attention-only mechanism model
  (``experiments.cr.mechanism_model``) finetuned at ``cascade.ft_lr``: :func:`mechanism_roles`
  (role scores and margins by the chance-corrected moved share,
  ``interp.roles.role_margins``), with its controls (the PT
  state's Relation role, the Subject head patched from a same-query prompt, the role code on
  the ICL construction). The 2-layer main model's head roles (:func:`head_roles`, at the end
  of ``ft-icl``, across its checkpoints and at the end of ``ft-iclgrm`` and ``pretrain``)
  are reported beside it.
- **CR-6** the construction (``models.construction``) on each seed's task: PT variant in the
  PT-relation format, ICL variant on held-out-subject ICL, the PT construction on ICL, and the
  control: the ICL construction with its Relation head's OV zeroed.
- **CR-7** the cascade on each seed's task: one PT and one finetune per learning rate in
  ``cascade.ft_lrs`` into ``<out>/runs/cr-mech/seed<N>/``; ``ov_first`` per lr from the
  continuous probes' onsets (also at ``cascade.onset_fractions_reported``); with
  ``cascade.causal_arms`` the OV-preset and OV-frozen finetunes per lr
  (``experiments.cr.mechanism_model.causal_arms``); the placebo (``interp.ovkq.placebo_orders``).

Sizes come from the ``mechanism`` and ``cascade`` sections of the CR config; thresholds from
the registry. In the reproduction each seed has two jobs: ``seed<N>/mechanism``
(:func:`mechanism_seed`: CR-6 and the 2-layer roles, after ``seed<N>/train``) and
``seed<N>/cascade`` (:func:`cascade_seed`: CR-7 and CR-5 on the mechanism
model; it needs only the seed's task, so it runs from the start). :func:`add_mechanism` turns
their records into the claims; :func:`add_mechanism_claims` runs both in this process first.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims import Summary
from mechinterp_icr.experiments.cr.claims import cr5_claim, cr5_table, cr6_claim, cr7_claim
from mechinterp_icr.experiments.cr.config import CascadeConfig, MechanismConfig
from mechinterp_icr.experiments.cr.evaluate import to_record
from mechinterp_icr.experiments.cr.mechanism_model import probe_batch_for, run_cascade
from mechinterp_icr.experiments.cr.records import CascadeRecord, MechanismRecord, PlaceboRecord
from mechinterp_icr.interp.ovkq import placebo_orders
from mechinterp_icr.interp.roles import role_margins, role_verdict, subject_same_query_control
from mechinterp_icr.models.construction import (
    RELATION_HEAD,
    build_construction,
    evaluate_icl_ties,
    evaluate_pt_relation,
    zero_head_ov,
)
from mechinterp_icr.pipeline import load_run_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.viz.cr_figures import write_cr5_figure, write_cr6_figure, write_cr7_figure

__all__ = ["add_mechanism", "add_mechanism_claims", "cascade_seed", "construction_numbers",
           "head_roles", "mechanism_roles", "mechanism_seed", "seed_of"]


def seed_of(path: Path) -> int:
    """The seed of a run directory named ``seed<N>`` (0 for any other name)."""
    name = Path(path).name
    return int(name[4:]) if name.startswith("seed") and name[4:].isdigit() else 0


def head_roles(run_dir: Path, seed: int, n: int, n_ckpts: int) -> dict:
    """CR-5 verdicts of one CR run: at the end of ``ft-icl`` and ``ft-iclgrm``, at the end of
    ``pretrain``, and on ``n_ckpts`` ft-icl checkpoints (``trajectory``); ``n`` prompt pairs
    per verdict."""
    rd = RunDir(run_dir)
    _, task, build = load_run_model(rd)
    out: dict = {}
    for phase in ("ft-icl", "ft-iclgrm"):
        cks = [c for c in rd.checkpoints() if c.phase == phase]
        if not cks:
            continue
        ((_, model),) = list(rd.iter_models(cks[-1].name, build))
        out[phase] = role_verdict(model, task, seed, n)
        if phase == "ft-icl":
            pick = sorted({round(i) for i in np.linspace(0, len(cks) - 1, n_ckpts)})
            pick = pick[:-1]  # the last one is the verdict above
            traj = [{"checkpoint": cks[-1].name, "step": cks[-1].step,
                     **{k: out[phase][k] for k in ("relation_head", "subject_head",
                                                   "relation_recovery", "subject_recovery")}}]
            for i in pick:
                ((ck, m),) = list(rd.iter_models(cks[i].name, build))
                v = role_verdict(m, task, seed, n)
                traj.append({"checkpoint": ck.name, "step": ck.step,
                             "relation_head": v["relation_head"],
                             "subject_head": v["subject_head"],
                             "relation_recovery": v["relation_recovery"],
                             "subject_recovery": v["subject_recovery"]})
            out["trajectory"] = sorted(traj, key=lambda r: r["step"])
    pt = [c for c in rd.checkpoints() if c.phase == "pretrain"]
    if pt:
        ((_, model),) = list(rd.iter_models(pt[-1].name, build))
        out["pretrain"] = role_verdict(model, task, seed, n)
    return out


def construction_numbers(task, seed: int) -> dict:
    """CR-6 on one task: exact accuracy of the PT and ICL constructions in both formats
    (held-out and finetune subjects for ICL; ICL with ties at the top logit shared, the
    plain argmax, attribute-restricted accuracy and the tie count beside the two that tie),
    and ``own_format_min``."""
    pt = build_construction(task, "pt")
    icl = build_construction(task, "icl")
    ho = task.heldout_subjects
    # ICL numbers with ties shared (models.construction.tie_aware_scores): a zeroed head
    # leaves many tokens tied at the top, and a plain argmax would pick [PAD] there
    pt_icl = evaluate_icl_ties(pt, task, seed + 1, ho)
    zeroed = evaluate_icl_ties(zero_head_ov(build_construction(task, "icl"), RELATION_HEAD),
                               task, seed + 2, ho)
    r = {
        "pt_construction_pt_exact": evaluate_pt_relation(pt, task, seed)["exact"],
        "pt_construction_icl_heldout_exact": pt_icl["exact"],
        "icl_construction_icl_heldout_exact": evaluate_icl_ties(icl, task, seed + 2,
                                                                ho)["exact"],
        "icl_construction_icl_finetune_exact": evaluate_icl_ties(
            icl, task, seed + 3, task.finetune_subjects)["exact"],
        "icl_construction_pt_exact": evaluate_pt_relation(icl, task, seed)["exact"],
        # the negative control: the ICL construction without its Relation head's OV
        "zeroed_relation_ov_icl_exact": zeroed["exact"],
    }
    for key, v in (("pt_construction_icl", pt_icl), ("zeroed_relation_ov_icl", zeroed)):
        r.update({f"{key}_exact_argmax": v["exact_argmax"],
                  f"{key}_restricted": v["restricted"], f"{key}_n_top": v["n_top"],
                  f"{key}_tied": v["tied"]})
    r["own_format_min"] = min(r["pt_construction_pt_exact"],
                              r["icl_construction_icl_heldout_exact"])
    return r


def mechanism_seed(run_path: Path, seed: int, mech: MechanismConfig) -> dict[str, Any]:
    """Job ``seed<N>/mechanism``: CR-6 (:func:`construction_numbers` on the run's task) and
    CR-5 (:func:`head_roles` of the run). Record ``{cr6, cr5, timings}``."""
    rd = RunDir(run_path)
    rc = rd.read_config()
    task = rc.task.build(rc.seed)
    t = time.perf_counter()
    cr6 = construction_numbers(task, seed)
    t6 = time.perf_counter() - t
    t = time.perf_counter()
    cr5 = head_roles(run_path, seed, mech.n_pairs, mech.role_checkpoints)
    return to_record({"cr6": cr6, "cr5": cr5,
                      "timings": {"CR-6 construction": t6,
                                  "CR-5 head roles": time.perf_counter() - t}})


def mechanism_roles(model, pt_model, task, seed: int, n: int, score: str = "moved_gain",
                    floor: float = 0.05) -> dict[str, Any]:
    """CR-5 on the 1-layer 2-head mechanism model: role verdicts (scores and margins by the
    chance-corrected moved share, ``interp.roles.role_margins``; the normalised recovery
    beside) of the finetuned ``model`` and of its PT state, the Subject-head same-query
    control, and the role code on the ICL construction (the positive control)."""
    out: dict[str, Any] = {}
    for key, m in (("ft", model), ("pt", pt_model),
                   ("construction", build_construction(task, "icl"))):
        v = role_verdict(m, task, seed, n)
        out[key] = {"verdict": v, **role_margins(v, score, floor),
                    "recovery": role_margins(v, "recovery", floor)}
    sub = int(out["ft"]["subject_head"].split("H")[1])
    # a share near the 0.05 bound needs more than n pairs to be read: 4n
    out["subject_same_query_changed"] = subject_same_query_control(model, task, sub, seed,
                                                                   4 * n)
    return out


def cascade_seed(task_cfg, seed: int, ccfg: CascadeConfig, run_path: Path, n_pairs: int
                 ) -> dict[str, Any]:
    """Job ``seed<N>/cascade``: CR-7 (:func:`.mechanism_model.run_cascade`, trained afresh into
    ``run_path``: one PT, one finetune per learning rate and, with ``ccfg.causal_arms``, the
    OV-preset and OV-frozen finetunes per lr of ``ccfg.ft_lrs``) on the task of ``task_cfg``
    and ``seed``, and CR-5 on the mechanism model finetuned at ``ccfg.ft_lr``
    (:func:`mechanism_roles`). Record ``{cr7, cr5_mech, timings}``; ``timings`` splits CR-7
    into the normal finetunes ("CR-7 cascade", with the PT) and the arms ("CR-7 causal arms",
    0 without them). The placebo is its own job (:func:`placebo_seed`)."""
    task = task_cfg.build(seed)
    t = time.perf_counter()
    cr7 = run_cascade(task, seed, ccfg, run_path, task_cfg)
    pt_model, models = cr7.pop("pt_model"), cr7.pop("models")
    cr7.pop("probe_batch")
    cr7.pop("arm_models")
    t7 = time.perf_counter() - t
    t_arms = float(sum(a["seconds"] for v in cr7["by_lr"].values()
                       for a in (v.get("arms") or {}).values()))
    t = time.perf_counter()
    roles = mechanism_roles(models[f"{ccfg.ft_lr:g}"], pt_model, task, seed, n_pairs,
                            ccfg.role_score, ccfg.margin_floor)
    roles["icl_heldout_exact"] = cr7["by_lr"][f"{ccfg.ft_lr:g}"]["icl_heldout_exact"]
    return to_record({"cr7": cr7, "cr5_mech": roles,
                      "timings": {"CR-7 cascade": t7 - t_arms, "CR-7 causal arms": t_arms,
                                  "CR-5 head roles": time.perf_counter() - t}})


def placebo_seed(task_cfg, seed: int, ccfg: CascadeConfig) -> dict[str, Any]:
    """Job ``seed<N>/placebo``: CR-7's synthetic-schedule placebo
    (``interp.ovkq.placebo_orders``) on the task of ``task_cfg`` and ``seed``, read on the
    cascade's own probe batch (``mechanism_model.probe_batch_for``). Nothing is trained. Record
    ``{placebo, timings}``."""
    task = task_cfg.build(seed)
    t = time.perf_counter()
    placebo = placebo_orders(task, probe_batch_for(task, seed, ccfg), ccfg.placebo_points,
                             ccfg.onset_fraction, ccfg.plateau_tail,
                             ccfg.onset_fractions_reported)
    return to_record({"placebo": placebo,
                      "timings": {"CR-7 placebo": time.perf_counter() - t}})


def add_mechanism(summary: Summary, out_dir: Path, seeds: list[int], mech_records: dict,
                  cascade_records: dict, ccfg: CascadeConfig, placebo_records: dict) -> None:
    """Add CR-5, CR-6 and CR-7 (per-seed numbers, figures, tables) to ``summary`` from the
    records of :func:`mechanism_seed`, :func:`cascade_seed` and :func:`placebo_seed` (each
    keyed by seed)."""
    out_dir = Path(out_dir)
    cr6 = {s: mech_records[s].cr6 for s in seeds}
    two_layer = {s: mech_records[s].cr5 for s in seeds}
    mech5 = {s: cascade_records[s].cr5_mech for s in seeds}
    cr7 = {s: cascade_records[s].cr7 for s in seeds}
    placebo = {s: placebo_records[s].placebo for s in seeds}
    claim5 = cr5_claim(mech5, two_layer, None)
    claim5.figure = write_cr5_figure(claim5.per_seed, out_dir)
    summary.add(claim5)
    summary.tables["CR-5 2-layer head roles across ft-icl checkpoints"] = cr5_table(two_layer)
    summary.add(cr6_claim(cr6, write_cr6_figure(cr6, out_dir)))
    summary.add(cr7_claim(cr7, placebo, ccfg, write_cr7_figure(cr7, out_dir, placebo)))


def add_mechanism_claims(summary: Summary, out_dir, run_dirs: list[Path], seeds: list[int],
                         mech: MechanismConfig, ccfg: CascadeConfig) -> None:
    """Add CR-5, CR-6 and CR-7 for the CR runs ``run_dirs`` (matched to ``seeds`` by name),
    running :func:`mechanism_seed`, :func:`cascade_seed` and :func:`placebo_seed` of every
    seed in this process."""
    out_dir = Path(out_dir)
    runs = {seed_of(p): Path(p) for p in run_dirs}
    seed_list = [s for s in seeds if s in runs] or sorted(runs)
    mech_records, cascade_records, placebo_records = {}, {}, {}
    for seed in seed_list:
        task_cfg = RunDir(runs[seed]).read_config().task
        mech_records[seed] = MechanismRecord.read(mechanism_seed(runs[seed], seed, mech))
        cascade_records[seed] = CascadeRecord.read(cascade_seed(
            task_cfg, seed, ccfg, out_dir / "runs" / "cr-mech" / f"seed{seed}", mech.n_pairs))
        placebo_records[seed] = PlaceboRecord.read(placebo_seed(task_cfg, seed, ccfg))
        for rec in (mech_records[seed], cascade_records[seed], placebo_records[seed]):
            for stage, secs in rec.timings.items():
                summary.timings[stage] = summary.timings.get(stage, 0.0) + secs
    add_mechanism(summary, out_dir, seed_list, mech_records, cascade_records, ccfg,
                  placebo_records)
