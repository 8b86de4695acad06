"""Our own training loop (not ``transformer_lens.train``).

- Loss only where the batch's ``targets`` are not ``IGNORE`` (answer-position masks).
- AdamW or SGD, gradient clipping, warmup then constant / cosine / linear decay; the learning
  rate is a pure function of the step, so nothing about the schedule needs saving.
- Freezing by parameter-name patterns (presets in :data:`TRAINABLE_PRESETS`) and gradient masks
  (a trainable sub-block of a weight: the gradient is multiplied by a 0/1 mask).
- The batch of step ``t`` is drawn from ``numpy.random.default_rng([seed, phase_id, t])``: a pure
  function of the seed, the phase and the step. Together with the saved optimizer state this
  makes resuming from any checkpoint end with the same weights as an uninterrupted run.
- Deterministic algorithms are switched on for the phase, so runs are bit-reproducible.
- Held-out evaluation every ``eval_every`` steps and at every checkpoint (``eval_fn(model)``),
  ``metrics.jsonl``, checkpoints on a linear or log-spaced schedule, and a progress bar.
- Resume survives damage: it starts from the latest checkpoint of the phase that verifies
  (skipped ones are named in :attr:`PhaseResult.skipped`), removes temporary files left by a
  killed writer, and drops the metric lines logged after that checkpoint, so each
  ``(phase, step)`` appears once in ``metrics.jsonl``. A finished phase is not trained again
  (:attr:`PhaseResult.finished`).
"""

from __future__ import annotations

import fnmatch
import math
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig, to_dict
from mechinterp_icr.store.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mechinterp_icr.store.rundir import RunDir, check_phase_name
from mechinterp_icr.tasks.base import IGNORE, Batch, logits_at

__all__ = ["TRAINABLE_PRESETS", "resolve_trainable", "masked_loss", "masked_accuracy",
           "target_logits",
           "checkpoint_steps", "lr_at", "train_phase", "PhaseResult", "batch_rng"]

TRAINABLE_PRESETS: dict[str, list[str]] = {
    "all": ["*"],
    "attention": ["blocks.*.attn.*"],
    "attention_only": ["blocks.*.attn.*"],
    "no_embed": ["blocks.*", "ln_final.*"],
    "mlp": ["blocks.*.mlp.*"],
    "qk": ["blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.b_Q", "blocks.*.attn.b_K"],
    "ov": ["blocks.*.attn.W_V", "blocks.*.attn.W_O", "blocks.*.attn.b_V", "blocks.*.attn.b_O"],
}


def resolve_trainable(model: torch.nn.Module, spec: str) -> list[str]:
    """Names of the parameters that ``spec`` (a preset or comma-separated globs) makes trainable.

    A ``!pattern`` entry excludes matches. Raises ConfigError when nothing matches.
    """
    names = [n for n, _ in model.named_parameters()]
    pats: list[str] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        pats.extend(TRAINABLE_PRESETS.get(part, [part]))
    incl = [p for p in pats if not p.startswith("!")]
    excl = [p[1:] for p in pats if p.startswith("!")]
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in incl)
              and not any(fnmatch.fnmatchcase(n, p) for p in excl)]
    if not chosen:
        raise ConfigError(f"train.trainable = {spec!r} is not allowed; it matches no parameter. "
                          f"Presets: {sorted(TRAINABLE_PRESETS)}; parameter names: {names}")
    return chosen


def masked_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over positions whose target is not IGNORE."""
    # logits (B, T, V), targets (B, T)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                           ignore_index=IGNORE)


def target_logits(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, targets)`` at the positions of ``batch`` that carry a target only, ``(N, V)``
    and ``(N,)`` (:func:`~mechinterp_icr.tasks.base.logits_at`: for a model with a final norm
    the unembedding runs on those positions alone)."""
    rows, cols = (batch.targets != IGNORE).nonzero(as_tuple=True)
    return logits_at(model, batch.tokens, rows, cols), batch.targets[rows, cols]


@torch.no_grad()
def masked_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    mask = targets != IGNORE
    if not mask.any():
        return float("nan")
    return float((logits.argmax(-1)[mask] == targets[mask]).float().mean())


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate used for update number ``step`` (0-based)."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.decay == "constant" or cfg.steps <= cfg.warmup_steps:
        return cfg.lr
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    lo = cfg.lr * cfg.min_lr_ratio
    if cfg.decay == "cosine":
        return lo + (cfg.lr - lo) * 0.5 * (1 + math.cos(math.pi * frac))
    return cfg.lr - (cfg.lr - lo) * frac


def checkpoint_steps(cfg: TrainConfig) -> list[int]:
    """Steps (number of updates done) at which a checkpoint is written; always 0 and the end.

    ``log``: every step up to ``checkpoint_dense_until``, then about 8 per decade, plus every
    multiple of ``checkpoint_every``. ``linear``: every multiple of ``checkpoint_every``.
    ``none``: only the start and the end (still needed to resume and to analyse).
    """
    steps = {0, cfg.steps}
    if cfg.checkpoint_schedule in ("log", "linear"):
        steps.update(range(0, cfg.steps + 1, cfg.checkpoint_every))
    if cfg.checkpoint_schedule == "log":
        steps.update(range(0, min(cfg.checkpoint_dense_until, cfg.steps) + 1))
        if cfg.steps > 0:
            for s in np.unique(np.round(np.logspace(0, math.log10(cfg.steps),
                                                    8 * max(1, int(math.log10(cfg.steps)) + 1)))):
                steps.add(int(s))
    return sorted(s for s in steps if 0 <= s <= cfg.steps)


def phase_id(phase: str) -> int:
    return zlib.crc32(phase.encode()) & 0x7FFFFFFF


def batch_rng(seed: int, phase: str, step: int) -> np.random.Generator:
    """The generator the batch of ``step`` in ``phase`` is drawn from."""
    return np.random.default_rng([int(seed), phase_id(phase), int(step)])


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, names: list[str]):
    params = dict(model.named_parameters())
    group = [params[n] for n in names]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(group, lr=cfg.lr, betas=cfg.betas,
                                 weight_decay=cfg.weight_decay)
    return torch.optim.SGD(group, lr=cfg.lr, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay)


@dataclass
class PhaseResult:
    phase: str
    steps: int
    final_loss: float
    final_metrics: dict[str, Any]
    checkpoints: list[str] = field(default_factory=list)
    resumed_from: int | None = None
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # "<checkpoint>: <why>", latest first
    finished: bool = False  # the phase was already complete: nothing was trained
    removed_temp_files: list[str] = field(default_factory=list)


def train_phase(
    model: torch.nn.Module,
    sample: Callable[[np.random.Generator, int], Batch],
    cfg: TrainConfig,
    run: RunDir | None,
    phase: str,
    seed: int,
    *,
    run_config: RunConfig | None = None,
    eval_fn: Callable[[torch.nn.Module], dict[str, Any]] | None = None,
    grad_masks: dict[str, torch.Tensor] | None = None,
    phase_order: int = 0,
    resume: bool = True,
    stop_after: int | None = None,
    extra_meta: dict[str, Any] | None = None,
    on_log: Callable[[dict[str, Any]], None] | None = None,
) -> PhaseResult:
    """Train ``model`` for ``cfg.steps`` updates of ``phase``; checkpoint into ``run``.

    ``sample(rng, batch_size)`` returns a Batch. With ``resume`` and an existing checkpoint of
    this phase in ``run``, training continues from the latest one. ``stop_after`` stops after
    that many total updates (to simulate an interruption in tests). ``on_log(record)`` is
    called with every record written to ``metrics.jsonl`` (``{"phase", "step", **metrics}``),
    e.g. to forward it to an experiment tracker.
    """
    t_start = time.perf_counter()
    check_phase_name(phase)
    # The embedding backward (index_put with accumulate) sums in a thread-dependent order on
    # CPU; deterministic algorithms make a run, and so a resumed run, bit-identical.
    prev_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    prev = {n: p.requires_grad for n, p in model.named_parameters()}
    names, masks = _trainable(model, cfg, grad_masks, prev)
    opt = make_optimizer(model, cfg, names)
    meta_base = {"phase": phase, "phase_order": phase_order, "seed": seed,
                 "trainable": names, "config": to_dict(run_config) if run_config else None,
                 "train": to_dict(cfg), **(extra_meta or {})}
    res = _Resumed(0, None, {}, [], [])
    if run is not None and resume:
        res, opt = _resume(model, opt, cfg, names, run, phase)
    io = _PhaseIO(model, opt, run, phase, eval_fn, on_log, meta_base)
    ck_steps = set(checkpoint_steps(cfg))
    if res.resumed_from is None and 0 in ck_steps:
        m0 = io.evaluate()  # (resumed from step 0: logged and saved)
        io.log({"phase": phase, "step": 0, **m0})
        io.save(0, m0)
    end = cfg.steps if stop_after is None else min(cfg.steps, stop_after)
    finished = res.resumed_from is not None and res.start >= cfg.steps
    loss_v, metrics = float("nan"), {}
    if finished:  # report the finished phase's last numbers, not nan
        metrics = res.metrics
        loss = metrics.get("train_loss")
        loss_v = float(loss) if isinstance(loss, (int, float)) else float("nan")
    if end > res.start:
        loss_v, metrics = _train_steps(model, sample, cfg, seed, io, names, masks, ck_steps,
                                       res.start, end)
    model.eval()
    for n, p in model.named_parameters():
        p.requires_grad_(prev[n])
    torch.use_deterministic_algorithms(prev_det, warn_only=True)
    return PhaseResult(phase, end, loss_v, metrics, io.saved, res.resumed_from,
                       time.perf_counter() - t_start, res.skipped, finished, res.removed)


def _trainable(model: torch.nn.Module, cfg: TrainConfig,
               grad_masks: dict[str, torch.Tensor] | None, prev: dict[str, bool]
               ) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The parameters the phase trains (``cfg.trainable``; a parameter frozen by
    construction, ``requires_grad`` False before the phase, stays frozen), set trainable, and
    the gradient masks on the model's device; a mask for another parameter is a ConfigError."""
    device = next(model.parameters()).device
    names = [n for n in resolve_trainable(model, cfg.trainable) if prev[n]]
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    masks = {}
    for n, m in (grad_masks or {}).items():
        if n not in names:
            raise ConfigError(f"gradient mask given for {n!r}, which is not trainable under "
                              f"train.trainable = {cfg.trainable!r}")
        masks[n] = m.to(device)
    return names, masks


@dataclass(frozen=True)
class _Resumed:
    """Where a phase starts: ``start`` step, the checkpoint step it resumed from (None:
    afresh), that checkpoint's metrics, the checkpoints skipped and temp files removed."""

    start: int
    resumed_from: int | None
    metrics: dict[str, Any]
    skipped: list[str]
    removed: list[str]


def _resume(model: torch.nn.Module, opt, cfg: TrainConfig, names: list[str], run: RunDir,
            phase: str):
    """(``_Resumed``, optimizer): the model and optimizer loaded from the latest checkpoint
    of ``phase`` that verifies, or left as built (a fresh optimizer) when none does; the
    metrics log truncated to match."""
    removed = [p.name for p in run.remove_stale_temp_files()]
    candidates = [c for c in run.checkpoints() if c.phase == phase]
    before = {k: v.detach().clone() for k, v in model.state_dict().items()} \
        if candidates else {}
    skipped: list[str] = []
    start, resumed_from, metrics = 0, None, {}
    for ck in reversed(candidates):  # the latest checkpoint that verifies
        try:
            data = load_checkpoint(ck.stem, model, opt)  # checks all before loading
        except CheckpointError as e:
            skipped.append(f"{ck.name}: {e}")
            continue
        start = resumed_from = ck.step
        metrics = dict(data.meta.get("metrics") or {})
        break
    if skipped and resumed_from is None:  # none verified: start afresh, as built
        model.load_state_dict(before)
        opt = make_optimizer(model, cfg, names)
    run.truncate_metrics(phase, start if resumed_from is not None else -1)
    return _Resumed(start, resumed_from, metrics, skipped, removed), opt


class _PhaseIO:
    """What a phase writes: evaluations (``eval_fn`` in eval mode, no grad), metric records
    (``run``'s metrics.jsonl and ``on_log``) and checkpoints (with provenance)."""

    def __init__(self, model, opt, run: RunDir | None, phase: str, eval_fn, on_log,
                 meta_base: dict[str, Any]):
        from mechinterp_icr.store.provenance import git_revision, package_versions

        self.model, self.opt, self.run, self.phase = model, opt, run, phase
        self.eval_fn, self.on_log, self.meta_base = eval_fn, on_log, meta_base
        self.versions, self.rev = package_versions(), git_revision()
        self.saved: list[str] = []

    def evaluate(self) -> dict[str, Any]:
        if self.eval_fn is None:
            return {}
        was = self.model.training
        self.model.eval()
        with torch.no_grad():
            out = self.eval_fn(self.model)
        self.model.train(was)
        return out

    def save(self, step: int, metrics: dict[str, Any]) -> None:
        if self.run is None:
            return
        stem = self.run.checkpoint_stem(self.phase, step)
        meta = {**self.meta_base, "step": step, "metrics": metrics, "versions": self.versions,
                "git_revision": self.rev}
        save_checkpoint(stem, self.model, meta, self.opt)
        self.saved.append(stem.name)

    def log(self, record: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log_metrics(record)
        if self.on_log is not None:
            self.on_log(record)


def _train_steps(model, sample, cfg: TrainConfig, seed: int, io: _PhaseIO, names: list[str],
                 masks: dict[str, torch.Tensor], ck_steps: set[int], start: int, end: int
                 ) -> tuple[float, dict[str, Any]]:
    """Updates ``start..end-1`` of the phase (the batch of step s drawn from
    ``batch_rng(seed, phase, s)``), logging, evaluating and checkpointing on the schedule;
    (the last loss, the last logged metrics)."""
    device = next(model.parameters()).device
    params = dict(model.named_parameters())
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=start, desc=io.phase, leave=False, mininterval=1.0)
    model.train()
    loss_v, acc_v, metrics = float("nan"), float("nan"), {}
    for step in range(start, end):
        batch = sample(batch_rng(seed, io.phase, step), cfg.batch_size).to(device)
        for g in io.opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        logits, targets = target_logits(model, batch)  # (N, V), (N,): target positions only
        loss = masked_loss(logits, targets)
        io.opt.zero_grad(set_to_none=True)
        loss.backward()
        for n, m in masks.items():
            if params[n].grad is not None:
                params[n].grad.mul_(m)
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_([params[n] for n in names], cfg.grad_clip)
        io.opt.step()
        done = step + 1
        loss_v = float(loss.detach())
        is_ck = done in ck_steps
        is_eval = cfg.eval_every > 0 and done % cfg.eval_every == 0
        show = bar is not None and done % 20 == 0
        if is_ck or is_eval or done == cfg.steps or show:  # accuracy only where it is used
            acc_v = masked_accuracy(logits.detach(), targets)
        if is_ck or is_eval or done == cfg.steps:
            metrics = {"train_loss": loss_v, "train_acc": acc_v, "lr": lr_at(cfg, step)}
            if is_eval or done == cfg.steps or (is_ck and io.eval_fn is not None):
                metrics.update(io.evaluate())
            io.log({"phase": io.phase, "step": done, **metrics})
            if is_ck:
                io.save(done, metrics)
        if bar is not None:
            bar.update(1)
            if show:
                bar.set_postfix(loss=f"{loss_v:.3f}", acc=f"{acc_v:.3f}")
    if bar is not None:
        bar.close()
    return loss_v, metrics
