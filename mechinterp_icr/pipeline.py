"""Generic single-phase training and evaluation of a run directory (``icr train`` / ``icr eval``).

Paper pipelines with several phases live in ``mechinterp_icr.experiments``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import mechinterp_icr.tasks  # noqa: F401  (registers every task kind)
from mechinterp_icr.config import ModelConfig, RunConfig, apply_overrides, task_config_class
from mechinterp_icr.models.factory import build_model, default_device
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.loop import (
    PhaseResult,
    batch_rng,
    masked_accuracy,
    masked_loss,
    train_phase,
)

__all__ = ["resolve_run_config", "model_for_task", "train_single_phase", "evaluate_run",
           "load_run_model"]


def resolve_run_config(task_kind: str, seed: int, overrides: list[str],
                       name: str = "run") -> RunConfig:
    """Default RunConfig for a task kind with dotted overrides applied and validated."""
    tcls = task_config_class(task_kind)
    base = RunConfig(name=name, seed=seed, task=tcls(),
                     model=getattr(tcls, "default_model", lambda self: ModelConfig())(tcls()))
    cfg = apply_overrides(base, overrides)
    return complete_model_config(cfg)


def complete_model_config(cfg: RunConfig) -> RunConfig:
    """Fill d_vocab / n_ctx of the model from the task when they are 0."""
    task = cfg.task.build(cfg.seed)
    m = cfg.model
    if m.d_vocab == 0 or m.n_ctx == 0:
        m = replace(m, d_vocab=m.d_vocab or task.d_vocab, n_ctx=m.n_ctx or task.n_ctx)
    return replace(cfg, model=m)


def model_for_task(cfg: RunConfig, device: str | None = None):
    return build_model(cfg.model, seed=cfg.seed, device=device or default_device())


def _heldout_eval(task, n_batches: int, batch_size: int, seed: int):
    def eval_fn(model) -> dict[str, Any]:
        if hasattr(task, "evaluate"):
            return task.evaluate(model)
        dev = next(model.parameters()).device
        losses, accs = [], []
        for i in range(n_batches):
            b = task.sample(batch_rng(seed, "heldout-eval", i), batch_size, split="eval").to(dev)
            logits = model(b.tokens)
            losses.append(float(masked_loss(logits, b.targets)))
            accs.append(masked_accuracy(logits, b.targets))
        return {"eval_loss": sum(losses) / len(losses), "eval_acc": sum(accs) / len(accs)}

    return eval_fn


def train_single_phase(cfg: RunConfig, out: Path, phase: str = "train") -> PhaseResult:
    run = RunDir.open_for(out, cfg)
    task = cfg.task.build(cfg.seed)
    model = model_for_task(cfg)
    return train_phase(model, lambda rng, bs: task.sample(rng, bs, "train"), cfg.train, run,
                       phase, cfg.seed, run_config=cfg,
                       eval_fn=_heldout_eval(task, 2, cfg.train.eval_batch_size, cfg.seed))


def load_run_model(run: RunDir):
    """(config, task, fresh model builder) for a run directory."""
    cfg = run.read_config()
    task = cfg.task.build(cfg.seed)
    return cfg, task, lambda: model_for_task(cfg)


@torch.no_grad()
def evaluate_run(path: Path, selection: str, n_batches: int = 4):
    run = RunDir(path)
    cfg, task, build = load_run_model(run)
    fn = _heldout_eval(task, n_batches, cfg.train.eval_batch_size, cfg.seed)
    rows = []
    for ck, model in run.iter_models(selection, build):
        rows.append({"checkpoint": ck.name, **fn(model)})
    out = run.analyses_dir / "eval.json"
    from mechinterp_icr.store.io import atomic_write_text

    atomic_write_text(out, json.dumps(rows, indent=2))
    return rows, out
