"""CR-1..3 training: the pretraining phase and the finetuning branches of one seed.

Per seed, in ``<out>/runs/cr/seed<N>/``:

1. ``pretrain`` (phase order 0): the 2-layer, 1-head model on PT over all subjects.
2. From the same PT weights, finetuning branches on the **finetune subjects only**:
   ``ft-icl`` (1) on ICL and ``ft-iclgrm`` (2) on ICL+Grm with the default trainable set
   (attention only), and the all-weights arms ``ft-icl-allw`` (3) / ``ft-iclgrm-allw`` (4);
   the negative controls ``ft-icl-mixed`` (5) / ``ft-iclgrm-mixed`` (6): the same finetuning
   on mixed-type demos (every demo and the query its own type, so no shared type to infer).
   Every finetuning batch draws its K from ``task.finetune_ks`` (``CRTask.sample_finetune``).

Every checkpoint logs a small held-out evaluation (``evaluate.checkpoint_eval``).

:func:`train_seed` is the job ``seed<N>/train`` of the reproduction: all of the above for one
seed, each phase's final model evaluated (``evaluate.full_eval``); it returns the seed's
result record. Rerun after being killed, it resumes every phase from its checkpoints.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from mechinterp_icr.config import ModelConfig, RunConfig, TrainConfig, check
from mechinterp_icr.experiments.cr.config import CRConfig
from mechinterp_icr.experiments.cr.evaluate import (
    checkpoint_eval,
    curve_points,
    full_eval,
    to_record,
)
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import CRTask
from mechinterp_icr.training.loop import train_phase

__all__ = [
    "BRANCHES",
    "branch_meta",
    "branch_phases",
    "branch_train_config",
    "check_run_dirs",
    "copy_state",
    "finetune_branch",
    "finetune_run",
    "finetune_sampler",
    "last_state",
    "model_config",
    "open_seed_run",
    "pretrain",
    "pretrain_run",
    "require_cr_run",
    "run_config_for",
    "seed_run_path",
    "train_seed",
]

# phase name -> (phase order, ICL+Grm format?, all weights?, mixed-type demos?)
BRANCHES = {
    "ft-icl": (1, False, False, False),
    "ft-iclgrm": (2, True, False, False),
    "ft-icl-allw": (3, False, True, False),
    "ft-iclgrm-allw": (4, True, True, False),
    "ft-icl-mixed": (5, False, False, True),
    "ft-iclgrm-mixed": (6, True, False, True),
}


def model_config(cfg: CRConfig, task: CRTask) -> ModelConfig:
    """The model of ``cfg`` with the task's vocabulary (and context unless set)."""
    m = cfg.model
    return replace(m, d_vocab=task.d_vocab, n_ctx=m.n_ctx or task.n_ctx)


def run_config_for(cfg: CRConfig, seed: int, name: str) -> tuple[RunConfig, CRTask]:
    """The run config written to a CR run directory, and the task of ``seed``."""
    task = cfg.task.build(seed)
    rc = RunConfig(name=name, seed=seed, task=cfg.task, model=model_config(cfg, task),
                   train=cfg.pretrain)
    return rc, task


def seed_run_path(out_dir: Path, seed: int) -> Path:
    """The run directory of ``seed``'s main CR run: ``<out>/runs/cr/seed<N>``."""
    return Path(out_dir) / "runs" / "cr" / f"seed{seed}"


def require_cr_run(path: str | Path) -> RunConfig:
    """The run config of ``path``; ``ConfigError`` (one line) unless it is a CR run (task kind
    ``cr``), ``RunError`` when it is not a run directory. The analysis scripts call it first."""
    rc = RunDir(path).read_config()
    kind = getattr(type(rc.task), "kind", None)
    check(kind == "cr", "run", str(path),
          f"a CR run directory (task kind 'cr'); its task kind is {kind!r}")
    return rc


def check_run_dirs(cfg: CRConfig, out_dir: Path, seeds: list[int]) -> None:
    """Refuse run directories written under another config, before any training."""
    for seed in seeds:
        rc, _ = run_config_for(cfg, seed, f"seed{seed}")
        p = seed_run_path(out_dir, seed)
        if p.is_dir():
            RunDir(p).check_config(rc)


def open_seed_run(cfg: CRConfig, out_dir: Path, seed: int) -> tuple[RunDir, RunConfig, CRTask]:
    """The run directory of ``seed`` (created, or resumed when its config matches)."""
    rc, task = run_config_for(cfg, seed, f"seed{seed}")
    run = RunDir.open_for(seed_run_path(out_dir, seed), rc)
    return run, rc, task


def branch_phases(cfg: CRConfig) -> list[str]:
    """The finetuning branches ``cfg`` runs, in order (the all-weights arms when enabled)."""
    out = []
    for phase, (_, grammar, allw, mixed) in BRANCHES.items():
        if allw and not (cfg.allweights_iclgrm if grammar else cfg.allweights_arm):
            continue
        if mixed and not cfg.mixed_controls:
            continue
        out.append(phase)
    return out


def copy_state(model) -> dict:
    """A detached copy of the model's weights (the PT state every branch starts from)."""
    return {k: v.clone() for k, v in model.state_dict().items()}


def last_state(run_path: Path, phase: str = "pretrain") -> dict:
    """The weights of the last checkpoint of ``phase`` in a finished run directory (the same
    tensors the phase ended with: checkpoints hold the exact weights). Reads only."""
    from mechinterp_icr.pipeline import load_run_model

    run = RunDir(run_path)
    _, _, build = load_run_model(run)
    ((_, model),) = list(run.iter_models(f"phase:{phase}:last", build))
    return copy_state(model)


def finetune_sampler(task: CRTask, grammar: bool, mixed_types: bool = False):
    """The finetuning data of a branch: ICL or ICL+Grm over the finetune subjects only, K
    drawn per batch from ``task.cfg.finetune_ks`` (mixed-type demos for the controls)."""
    subs = task.finetune_subjects

    def sample(rng, bs):
        return task.sample_finetune(rng, bs, subjects=subs, grammar=grammar,
                                    mixed_types=mixed_types)

    return sample


def pretrain_run(cfg: CRConfig, task: CRTask, rc: RunConfig, run: RunDir | None, seed: int,
                 on_log=None):
    """Phase ``pretrain`` (PT over all subjects): (trained model, ``PhaseResult``).
    ``icr train --task cr --phase pretrain`` and the reproduction both train it here."""
    model = build_model(rc.model, seed=seed)
    res = train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), cfg.pretrain, run,
                      "pretrain", seed, run_config=rc,
                      eval_fn=checkpoint_eval(task, seed, cfg.ckpt_eval_n), phase_order=0,
                      on_log=on_log)
    return model, res


def pretrain(cfg: CRConfig, task: CRTask, rc: RunConfig, run: RunDir, seed: int):
    """Phase ``pretrain`` (PT over all subjects); returns the trained model."""
    return pretrain_run(cfg, task, rc, run, seed)[0]


def branch_train_config(cfg: CRConfig, phase: str, ft_cfg: TrainConfig | None = None
                        ) -> TrainConfig:
    """The training settings of finetuning branch ``phase`` (see :data:`BRANCHES`):
    ``cfg.finetune`` (or ``ft_cfg``) with the branch's trainable set; without ``ft_cfg`` an
    all-weights arm or a control keeps only its start and end checkpoints."""
    _, _, allw, mixed = BRANCHES[phase]
    trainable = cfg.allweights_trainable if allw else cfg.finetune.trainable
    ft = replace(ft_cfg or cfg.finetune, trainable=trainable)
    if ft_cfg is None and (allw or mixed):
        ft = replace(ft, checkpoint_schedule="none")  # comparison arms: start and end only
    return ft


def branch_meta(task: CRTask, phase: str) -> dict[str, Any]:
    """What a branch's checkpoint sidecars record about its data."""
    _, grammar, _, mixed = BRANCHES[phase]
    return {"finetune_format": "iclgrm" if grammar else "icl",
            "finetune_ks": list(task.cfg.finetune_ks), "mixed_types": mixed,
            "finetune_subjects": task.finetune_subjects.tolist()}


def finetune_run(cfg: CRConfig, task: CRTask, rc: RunConfig, run: RunDir | None,
                 pt_state: dict, phase: str, seed: int, ft_cfg: TrainConfig | None = None,
                 extra_meta: dict[str, Any] | None = None, on_log=None):
    """Finetune branch ``phase`` (see :data:`BRANCHES`) from ``pt_state``: (model,
    ``PhaseResult``). ``icr train --task cr --phase <branch>`` and the reproduction both
    train it here; ``extra_meta`` adds to the sidecars (the CLI's ``init_from``)."""
    order, grammar, _, mixed = BRANCHES[phase]
    ft = branch_train_config(cfg, phase, ft_cfg)
    model = build_model(rc.model, seed=seed)
    model.load_state_dict(pt_state)
    res = train_phase(model, finetune_sampler(task, grammar, mixed), ft, run, phase, seed,
                      run_config=replace(rc, train=ft),
                      eval_fn=checkpoint_eval(task, seed, cfg.ckpt_eval_n), phase_order=order,
                      extra_meta={**branch_meta(task, phase), **(extra_meta or {})},
                      on_log=on_log)
    return model, res


def finetune_branch(cfg: CRConfig, task: CRTask, rc: RunConfig, run: RunDir, pt_state: dict,
                    phase: str, seed: int, ft_cfg: TrainConfig | None = None):
    """Finetune branch ``phase`` (see :data:`BRANCHES`) from ``pt_state``; returns the model.

    ``ft_cfg`` replaces ``cfg.finetune`` (the sweep finetunes without checkpoints); without
    it an all-weights arm or a control keeps only its start and end checkpoints."""
    return finetune_run(cfg, task, rc, run, pt_state, phase, seed, ft_cfg)[0]


def train_seed(cfg: CRConfig, out_dir: Path, seed: int) -> dict[str, Any]:
    """Job ``seed<N>/train``: pretrain, evaluate, then every finetuning branch from the PT
    weights, each evaluated; into ``<out>/runs/cr/seed<N>/``. Returns the seed's record:
    ``{seed, task, phases: {phase: evaluation rows}, seconds, curves, timings}`` (``curves``:
    the ft-icl / ft-iclgrm checkpoint evaluations, ``evaluate.curve_points``)."""
    timings = {"pretrain": 0.0, "evaluate": 0.0, "finetune": 0.0}
    run, rc, task = open_seed_run(cfg, out_dir, seed)
    result: dict[str, Any] = {"seed": seed, "task": task.describe(), "phases": {},
                              "seconds": {}}
    t = time.perf_counter()
    model = pretrain(cfg, task, rc, run, seed)
    result["seconds"]["pretrain"] = timings["pretrain"] = time.perf_counter() - t
    pt_state = copy_state(model)
    t = time.perf_counter()
    result["phases"]["pretrain"] = full_eval(model, task, seed, cfg.eval_ks, cfg.eval_n,
                                             cfg.eval_n_by_k)
    timings["evaluate"] += time.perf_counter() - t
    for phase in branch_phases(cfg):
        t = time.perf_counter()
        model = finetune_branch(cfg, task, rc, run, pt_state, phase, seed)
        result["seconds"][phase] = time.perf_counter() - t
        timings["finetune"] += result["seconds"][phase]
        t = time.perf_counter()
        result["phases"][phase] = full_eval(model, task, seed, cfg.eval_ks, cfg.eval_n,
                                            cfg.eval_n_by_k)
        timings["evaluate"] += time.perf_counter() - t
    result["curves"] = curve_points(run.path)
    result["timings"] = timings
    return to_record(result)
