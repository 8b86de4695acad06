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
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mechinterp_icr.claims import Summary
from mechinterp_icr.experiments.cr.cascade import run_cascade
from mechinterp_icr.experiments.cr.claims import cr5_claim, cr5_table, cr6_claim, cr7_claim
from mechinterp_icr.experiments.cr.config import CascadeConfig, MechanismConfig
from mechinterp_icr.interp.roles import role_verdict
from mechinterp_icr.models.construction import build_construction, evaluate_pt_relation
from mechinterp_icr.pipeline import load_run_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import evaluate_icl
from mechinterp_icr.viz.cr_figures import write_cr5_figure, write_cr6_figure, write_cr7_figure

__all__ = ["add_mechanism_claims", "construction_numbers", "head_roles", "seed_of"]


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


def add_mechanism_claims(summary: Summary, out_dir, run_dirs: list[Path], seeds: list[int],
                         mech: MechanismConfig, ccfg: CascadeConfig) -> None:
    """Add CR-5, CR-6 and CR-7 (per-seed numbers, figures, tables) to ``summary``."""
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out_dir = Path(out_dir)
    runs = {seed_of(p): Path(p) for p in run_dirs}
    seed_list = [s for s in seeds if s in runs] or sorted(runs)
    cr5, cr6, cr7 = {}, {}, {}
    for seed in seed_list:
        rd = RunDir(runs[seed])
        rc = rd.read_config()
        task = rc.task.build(rc.seed)
        with summary.stage("CR-6 construction"):
            cr6[seed] = construction_numbers(task, seed)
        with summary.stage("CR-5 head roles"):
            cr5[seed] = head_roles(runs[seed], seed, mech.n_pairs, mech.role_checkpoints)
        with summary.stage("CR-7 cascade"):
            cr7[seed] = run_cascade(task, seed, ccfg, out_dir / "runs" / "cr-mech" /
                                    f"seed{seed}", rc.task)
        with summary.stage("CR-5 head roles"):
            # the same verdict on the 1-layer 2-head mechanism model (attention-only: the
            # query subject can only reach the output through a head)
            cr5[seed]["mechanism_model"] = role_verdict(cr7[seed].pop("model"), task, seed,
                                                        mech.n_pairs)
    summary.add(cr5_claim(cr5, write_cr5_figure(cr5, out_dir)))
    summary.tables["CR-5 head roles across ft-icl checkpoints"] = cr5_table(cr5)
    summary.add(cr6_claim(cr6, write_cr6_figure(cr6, out_dir)))
    summary.add(cr7_claim(cr7, ccfg, write_cr7_figure(cr7, out_dir)))
