"""CR-5, CR-6, CR-7: the mechanism stage of the CR reproduction.

:func:`add_mechanism_claims` runs after the CR-1..3 stages wrote ``<out>/runs/cr/seed<N>/``
(phases ``pretrain``, ``ft-icl``, ``ft-iclgrm``):

- **CR-5** on every seed's 2-layer model at the end of ``ft-icl`` (and across its
  checkpoints, and at the end of ``ft-iclgrm``): ``interp.roles.role_verdict``. Metric
  ``min_recovery`` = the smaller of the Relation head's normalised recovery on type pairs and
  the Subject head's on subject pairs, 0 when one head takes both roles. Holds at >= 0.5.
- **CR-6** the construction (``models.construction``) on each seed's task: PT variant in the
  PT-relation format, ICL variant on held-out-subject ICL; metric the smaller of the two,
  >= 0.99; extra check: the PT construction on ICL <= 0.10 exact.
- **CR-7** the cascade (``experiments.cr.cascade``) on each seed's task: a 1-layer 2-head
  attention-only model trained into ``<out>/runs/cr-mech/seed<N>/``; metric ``ov_first`` (1
  when the OV probe reaches half its final gain strictly before the KQ probe), every seed.

Sizes come from the ``mechanism`` and ``cascade`` sections of the CR config.

In the reproduction each seed has two tasks: ``seed<N>/mechanism`` (:func:`mechanism_seed`:
CR-6 and CR-5 on the seed's run, after ``seed<N>/train``) and ``seed<N>/cascade``
(:func:`cascade_seed`: CR-7 and the CR-5 verdict on the mechanism model; it needs only the
seed's task, so it runs from the start). :func:`add_mechanism` turns their records into the
claims; :func:`add_mechanism_claims` runs both in this process first.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims import Summary
from mechinterp_icr.experiments.cr.cascade import run_cascade
from mechinterp_icr.experiments.cr.claims import cr5_claim, cr5_table, cr6_claim, cr7_claim
from mechinterp_icr.experiments.cr.config import CascadeConfig, MechanismConfig
from mechinterp_icr.experiments.cr.evaluate import to_record
from mechinterp_icr.interp.roles import role_verdict
from mechinterp_icr.models.construction import build_construction, evaluate_pt_relation
from mechinterp_icr.pipeline import load_run_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import evaluate_icl
from mechinterp_icr.viz.cr_figures import write_cr5_figure, write_cr6_figure, write_cr7_figure

__all__ = ["add_mechanism", "add_mechanism_claims", "cascade_seed", "construction_numbers",
           "head_roles", "mechanism_seed", "seed_of"]


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
    (held-out and finetune subjects for ICL), and ``own_format_min``."""
    pt = build_construction(task, "pt")
    icl = build_construction(task, "icl")
    r = {
        "pt_construction_pt_exact": evaluate_pt_relation(pt, task, seed)["exact"],
        "pt_construction_icl_heldout_exact": evaluate_icl(
            pt, task, seed + 1, subjects=task.heldout_subjects, n=512)["exact"],
        "icl_construction_icl_heldout_exact": evaluate_icl(
            icl, task, seed + 2, subjects=task.heldout_subjects, n=512)["exact"],
        "icl_construction_icl_finetune_exact": evaluate_icl(
            icl, task, seed + 3, subjects=task.finetune_subjects, n=512)["exact"],
        "icl_construction_pt_exact": evaluate_pt_relation(icl, task, seed)["exact"],
    }
    r["own_format_min"] = min(r["pt_construction_pt_exact"],
                              r["icl_construction_icl_heldout_exact"])
    return r


def mechanism_seed(run_path: Path, seed: int, mech: MechanismConfig) -> dict[str, Any]:
    """Task ``seed<N>/mechanism``: CR-6 (:func:`construction_numbers` on the run's task) and
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


def cascade_seed(task_cfg, seed: int, ccfg: CascadeConfig, run_path: Path, n_pairs: int
                 ) -> dict[str, Any]:
    """Task ``seed<N>/cascade``: CR-7 (:func:`cascade.run_cascade`, trained afresh into
    ``run_path``) on the task of ``task_cfg`` and ``seed``, then the CR-5 verdict on the
    1-layer 2-head mechanism model (attention-only: the query subject can only reach the
    output through a head). Record ``{cr7, mechanism_model, timings}``."""
    task = task_cfg.build(seed)
    t = time.perf_counter()
    cr7 = run_cascade(task, seed, ccfg, run_path, task_cfg)
    t7 = time.perf_counter() - t
    t = time.perf_counter()
    verdict = role_verdict(cr7.pop("model"), task, seed, n_pairs)
    return to_record({"cr7": cr7, "mechanism_model": verdict,
                      "timings": {"CR-7 cascade": t7,
                                  "CR-5 head roles": time.perf_counter() - t}})


def add_mechanism(summary: Summary, out_dir: Path, seeds: list[int], mech_records: dict,
                  cascade_records: dict, ccfg: CascadeConfig) -> None:
    """Add CR-5, CR-6 and CR-7 (per-seed numbers, figures, tables) to ``summary`` from the
    records of :func:`mechanism_seed` and :func:`cascade_seed` (each keyed by seed)."""
    out_dir = Path(out_dir)
    cr5, cr6, cr7 = {}, {}, {}
    for seed in seeds:
        cr6[seed] = mech_records[seed]["cr6"]
        cr5[seed] = dict(mech_records[seed]["cr5"])
        cr7[seed] = cascade_records[seed]["cr7"]
        cr5[seed]["mechanism_model"] = cascade_records[seed]["mechanism_model"]
    summary.add(cr5_claim(cr5, write_cr5_figure(cr5, out_dir)))
    summary.tables["CR-5 head roles across ft-icl checkpoints"] = cr5_table(cr5)
    summary.add(cr6_claim(cr6, write_cr6_figure(cr6, out_dir)))
    summary.add(cr7_claim(cr7, ccfg, write_cr7_figure(cr7, out_dir)))


def add_mechanism_claims(summary: Summary, out_dir, run_dirs: list[Path], seeds: list[int],
                         mech: MechanismConfig, ccfg: CascadeConfig) -> None:
    """Add CR-5, CR-6 and CR-7 for the CR runs ``run_dirs`` (matched to ``seeds`` by name),
    running :func:`mechanism_seed` and :func:`cascade_seed` of every seed in this process."""
    out_dir = Path(out_dir)
    runs = {seed_of(p): Path(p) for p in run_dirs}
    seed_list = [s for s in seeds if s in runs] or sorted(runs)
    mech_records, cascade_records = {}, {}
    for seed in seed_list:
        mech_records[seed] = mechanism_seed(runs[seed], seed, mech)
        cascade_records[seed] = cascade_seed(RunDir(runs[seed]).read_config().task, seed, ccfg,
                                             out_dir / "runs" / "cr-mech" / f"seed{seed}",
                                             mech.n_pairs)
        for rec in (mech_records[seed], cascade_records[seed]):
            for stage, secs in rec["timings"].items():
                summary.timings[stage] = summary.timings.get(stage, 0.0) + secs
    add_mechanism(summary, out_dir, seed_list, mech_records, cascade_records, ccfg)
