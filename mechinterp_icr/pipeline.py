"""Generic single-phase training and evaluation of a run directory (``icr train`` / ``icr eval``).

Paper pipelines with several phases live in ``mechinterp_icr.experiments``.

Everything a command could refuse is checked before anything is written: the config (types,
ranges, a task, a model that fits the task, the resource estimate of
:func:`mechinterp_icr.config.check_resources` including the task's own tables), the phase name
and the trainable parameters. A start that fails anyway leaves the directory as it was.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import mechinterp_icr.tasks  # noqa: F401  (registers every task kind)
from mechinterp_icr.config import (
    GIB,
    ConfigError,
    ModelConfig,
    RunConfig,
    apply_overrides,
    check,
    check_range,
    check_resources,
    count_params,
    gib,
    task_config_class,
)
from mechinterp_icr.models.factory import build_model, default_device
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.store.rundir import RunDir, RunError, check_phase_name
from mechinterp_icr.training.loop import (
    PhaseResult,
    batch_rng,
    masked_accuracy,
    masked_loss,
    resolve_trainable,
    train_phase,
)

__all__ = ["resolve_run_config", "complete_model_config", "task_build_bytes", "model_for_task",
           "train_single_phase", "evaluate_run", "load_run_model", "MAX_EVAL_BATCHES"]

MAX_EVAL_BATCHES = 10_000


def task_build_bytes(task_cfg: Any) -> int:
    """Estimated bytes of the tables a task builds (before building it, so a huge task is
    refused instead of allocated). A task config may say so itself (``build_bytes()``);
    otherwise the built-in kinds' largest tables are counted here."""
    own = getattr(task_cfg, "build_bytes", None)
    if callable(own):
        return int(own())
    kind = getattr(type(task_cfg), "kind", None)
    f = task_cfg
    if kind == "cr":  # type chains (L, G, G) float64, a few temporaries; vocabulary strings
        return (4 * f.n_types * f.n_grammar**2 * 8
                + 100 * (f.n_subjects + f.n_grammar + f.n_types * f.n_values))
    if kind == "ir":  # (n, m) random keys + argsort, (n, R) tables and triples; vocabulary
        n, m, R = f.n_subjects, f.m, f.n_relations
        return 2 * n * m * 8 + 8 * n * R * 8 + 100 * (n + R + m)
    if kind == "induction":
        return 100 * f.n_tokens
    return 0


def resolve_run_config(task_kind: str, seed: int, overrides: list[str],
                       name: str = "run") -> RunConfig:
    """Default RunConfig for a task kind with dotted overrides applied and validated,
    including that a task is set, the model fits it and the resource estimate."""
    tcls = task_config_class(task_kind)
    base = RunConfig(name=name, seed=seed, task=tcls(),
                     model=getattr(tcls, "default_model", lambda self: ModelConfig())(tcls()))
    cfg = apply_overrides(base, overrides)
    return complete_model_config(cfg)


def _check_task_size(cfg: RunConfig) -> int:
    check(cfg.task is not None, "task", None,
          'a task config, e.g. --set task={"kind": "induction"}')
    nbytes = task_build_bytes(cfg.task)
    if nbytes > cfg.resources.max_gib * GIB:
        raise ConfigError(
            f"the task's tables need an estimated {gib(nbytes)} GiB of memory, more than "
            f"resources.max_gib = {cfg.resources.max_gib:g}; use a smaller task, or raise the "
            f"ceiling explicitly with --set resources.max_gib={int(nbytes / GIB) + 1}")
    return nbytes


def _complete(cfg: RunConfig):
    """(completed config, built task); see :func:`complete_model_config`."""
    nbytes = _check_task_size(cfg)
    task = cfg.task.build(cfg.seed)
    m = cfg.model
    if m.d_vocab == 0 or m.n_ctx == 0:
        m = replace(m, d_vocab=m.d_vocab or task.d_vocab, n_ctx=m.n_ctx or task.n_ctx)
    check(m.d_vocab >= task.d_vocab, "model.d_vocab", m.d_vocab,
          f"0 (take it from the task) or at least the task's vocabulary size {task.d_vocab}")
    check(m.n_ctx >= task.n_ctx, "model.n_ctx", m.n_ctx,
          f"0 (take it from the task) or at least the task's context length {task.n_ctx}")
    out = replace(cfg, model=m)
    check_resources(out, nbytes)
    return out, task


def complete_model_config(cfg: RunConfig) -> RunConfig:
    """Fill d_vocab / n_ctx of the model from the task when they are 0; refuse a missing task,
    a model smaller than the task, and a run over its resource ceilings (the task's tables are
    estimated before the task is built)."""
    return _complete(cfg)[0]


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


def _existing(path: Path) -> set[Path]:
    """The run directory's entries (recursively) before a start, to undo a failed one."""
    if not path.is_dir():
        return set()
    return {p for p in path.rglob("*")} | {path}


def _undo_start(out: Path, before: set[Path], existed: bool) -> None:
    """Remove what a failed start added to a run directory that has no checkpoint: the
    directory itself when it did not exist, else the entries that are new."""
    if not out.is_dir() or any((out / "checkpoints").glob("*.json")):
        return  # a checkpoint was written: keep it, the same command resumes from it
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for p in sorted(set(out.rglob("*")) - before, key=lambda q: -len(q.parts)):
        try:
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
        except OSError:
            pass


def train_single_phase(cfg: RunConfig, out: Path, phase: str = "train") -> PhaseResult:
    """Train (or resume) one phase of ``cfg`` into the run directory ``out``.

    Refused before anything is written: a bad phase name, a config over its resource ceilings
    (see :func:`complete_model_config`), a ``train.trainable`` matching no parameter, a
    directory holding another run or being trained by another process. A start that fails
    before the first checkpoint leaves the directory as it was. A new phase of an existing
    run gets the next phase order, so ``last`` follows the order the phases ran in.
    """
    out = Path(out)
    check_phase_name(phase)
    cfg, task = _complete(cfg)
    model = model_for_task(cfg)
    resolve_trainable(model, cfg.train.trainable)  # ConfigError when it matches nothing
    existed = out.exists()
    if existed:
        RunDir(out).check_config(cfg)  # another run's directory: refused before any write
    before = _existing(out)
    run = RunDir(out, create=True)
    try:
        with run.writer_lock():
            try:
                run = RunDir.open_for(out, cfg)
                return train_phase(model, lambda rng, bs: task.sample(rng, bs, "train"),
                                   cfg.train, run, phase, cfg.seed, run_config=cfg,
                                   phase_order=run.phase_order(phase),
                                   eval_fn=_heldout_eval(task, 2, cfg.train.eval_batch_size,
                                                         cfg.seed))
            except BaseException:
                _undo_start(out, before, existed)
                raise
    except (RunError, OSError):  # the lock was refused or could not be taken
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # only the empty directory made above
        raise


def _check_stored_config(cfg: RunConfig) -> None:
    """A stored config.json may have been edited: refuse a task or a model too big to build
    under its resource ceiling before building either."""
    nbytes = _check_task_size(cfg)
    m = cfg.model
    if m.d_vocab and m.n_ctx:
        wbytes = 4 * count_params(m)
        if nbytes + wbytes > cfg.resources.max_gib * GIB:
            raise ConfigError(
                f"the run's model needs an estimated {gib(nbytes + wbytes)} GiB, more "
                f"than resources.max_gib = {cfg.resources.max_gib:g}; raise the ceiling with "
                "--set resources.max_gib or check the run's config.json")


def load_run_model(run: RunDir):
    """(config, task, fresh model builder) for a run directory."""
    cfg = run.read_config()
    _check_stored_config(cfg)
    task = cfg.task.build(cfg.seed)
    return cfg, task, lambda: model_for_task(cfg)


@torch.no_grad()
def evaluate_run(path: Path, selection: str, n_batches: int = 4):
    """Evaluate the selected checkpoints of a run on ``n_batches`` held-out batches; writes
    ``analyses/eval.json`` only when every selected checkpoint was evaluated (a refused or
    failed evaluation leaves the previous result in place)."""
    check_range("--batches", n_batches, 1, MAX_EVAL_BATCHES, integer=True)
    run = RunDir(path)
    cfg, task, build = load_run_model(run)
    run.select(selection)  # refuse an empty, misspelt or unmatched selection first
    fn = _heldout_eval(task, n_batches, cfg.train.eval_batch_size, cfg.seed)
    rows = []
    for ck, model in run.iter_models(selection, build):
        rows.append({"checkpoint": ck.name, **fn(model)})
    if not rows:  # select() never returns nothing; kept so no result is replaced by []
        raise ConfigError(f"--checkpoints {selection!r} selects nothing")
    out = run.analyses_dir / "eval.json"
    atomic_write_text(out, json.dumps(rows, indent=2))
    return rows, out
