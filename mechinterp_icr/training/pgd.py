"""Perturbed gradient descent (paper IR, Algorithm 1) and the plain-GD control.

From the uniform-attention start (position block ``B = 0``):

1. one large full-batch gradient step, ``B <- B - big_lr * grad L(B)``;
2. a random perturbation of the position block, ``B <- B + sigma * Z`` (``Z`` standard
   Gaussian from the run seed); the control (``perturb=False``) skips only this step;
3. ``steps`` small full-batch gradient steps with ``lr``.

The loss is the mean cross-entropy over the two chain-of-thought predictions of the N
finetuning sequences (full batch). Two drivers share these semantics:

- :func:`pgd_fast` trains :class:`mechinterp_icr.models.ir.FastIR` (theory setting, only the
  position block) in float64 and records the attention rows at every step (sweeps);
- :func:`pgd_hooked` trains the IR HookedTransformer through
  :func:`mechinterp_icr.training.loop.train_phase` (phases ``big`` then ``pgd`` or ``gd``),
  either the position block only (``target="pos"``, via a gradient mask on ``W_K``) or the
  full attention (``target="attention"``), with checkpoints at every step of the dense early
  phase.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mechinterp_icr.config import TrainConfig, check, check_choice, check_range
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.base import Batch
from mechinterp_icr.training.loop import train_phase

__all__ = ["PGDConfig", "fast_loss", "perturbation", "pgd_fast", "pgd_hooked"]


PGDTarget = Literal["pos", "qk", "attention"]  # what PGD trains (PGDConfig.target)


@dataclass(frozen=True)
class PGDConfig:
    big_lr: float = 5.0
    sigma: float = 0.01
    lr: float = 0.05
    steps: int = 1000
    perturb: bool = True  # False: plain GD control (same big step and small steps)
    target: PGDTarget = "pos"  # "pos" (position block of W_KQ, theory) | "qk" (all of W_Q, W_K,
    # b_Q, b_K: token- and position-dependent scores) | "attention" (also W_V, W_O)
    clip: float = 0.0  # gradient-norm clipping (0 = none); full attention needs it (the
    # quadratic memory makes the OV gradients explode under plain SGD)

    def __post_init__(self) -> None:
        check_range("pgd.big_lr", self.big_lr, 0, 1e5)
        check_range("pgd.sigma", self.sigma, 0, 10)
        check_range("pgd.lr", self.lr, 0, 1e4, lo_open=True)
        check_range("pgd.steps", self.steps, 0, 10_000_000, integer=True)
        check(isinstance(self.perturb, bool), "pgd.perturb", self.perturb, "true or false")
        check_choice("pgd.target", self.target, PGDTarget)
        check_range("pgd.clip", self.clip, 0, 1e6)


def perturbation(T: int, sigma: float, seed: int) -> torch.Tensor:
    """The perturbation of the position block (T, T), a pure function of the seed."""
    gen = torch.Generator().manual_seed(int(seed) * 2654435761 % (2**31) + zlib.crc32(b"pgd"))
    return sigma * torch.randn(T, T, generator=gen, dtype=torch.float64)


def fast_loss(fast, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy over the two CoT targets (same as ``masked_loss`` on the model).

    With the constructed memory it is computed from :meth:`FastIR.cot_blocks` (the relation
    logits at step 1, the answer logits at step 2; every other logit is exactly 0): the
    log-partition adds ``(V - block) * exp(0)`` for the zeros instead of materialising
    (B, 2, V) logits, which equals ``F.cross_entropy`` on :meth:`FastIR.cot_logits` to float64
    rounding (tested) and makes a PGD step several times cheaper at n = 512."""
    K = fast.task.cfg.n_pairs
    tg = batch.targets[:, 2 * K: 2 * K + 2]
    if getattr(fast, "dense", True):
        logits = fast.cot_logits(batch.tokens)  # (B, 2, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1))
    n, R = fast.task.cfg.n_subjects, fast.task.cfg.n_relations
    b1, b2 = fast.cot_blocks(batch.tokens)
    return 0.5 * (_block_ce(b1, tg[:, 0] - n, fast.V) + _block_ce(b2, tg[:, 1] - n - R, fast.V))


def _block_ce(x: torch.Tensor, t: torch.Tensor, V: int) -> torch.Tensor:
    """Mean cross-entropy of rows whose logits are ``x`` (B, S) on a block of S tokens and 0
    on the other ``V - S``; ``t``: target index within the block (outside: a zero logit)."""
    S = x.shape[1]
    M = x.detach().max(1).values.clamp(min=0.0)  # the log-sum-exp shift (zeros included)
    z = torch.exp(x - M[:, None]).sum(1) + (V - S) * torch.exp(-M)
    inside = (t >= 0) & (t < S)
    hit = x.gather(1, t.clamp(0, S - 1)[:, None])[:, 0]
    return (M + torch.log(z) - torch.where(inside, hit, torch.zeros_like(hit))).mean()


def pgd_fast(fast, batch: Batch, cfg: PGDConfig, seed: int,
             eval_fn: Callable[[Any, int], dict[str, Any]] | None = None,
             eval_steps: set[int] | None = None, record_rows: bool = True,
             stop_fn: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """Run PGD (or GD) on ``fast.B`` from its current value (normally 0).

    Returns one record per step ``t`` (t = 0 start, t = 1 after the large step and the
    perturbation, t >= 2 after small steps) with the loss, the step-1 and step-2 attention rows
    (when ``record_rows``) and ``eval_fn(fast, t)`` at ``eval_steps`` (default: every step).
    ``stop_fn(record)`` may end the run early (used by the sample-complexity bisection).
    """
    if cfg.target != "pos" or cfg.clip > 0:
        raise ValueError("pgd_fast trains the position block only, without clipping; use "
                         "pgd_hooked for target='attention' or clip > 0")
    K = fast.task.cfg.n_pairs
    q = [2 * K, 2 * K + 1]
    recs: list[dict[str, Any]] = []

    def record(t: int, loss: float) -> bool:
        rec: dict[str, Any] = {"step": t, "loss": loss}
        if record_rows:
            with torch.no_grad():
                A = fast.attention(q)
            rec["row1"] = A[0, : 2 * K + 1].tolist()
            rec["row2"] = A[1, : 2 * K + 2].tolist()
        if eval_fn is not None and (eval_steps is None or t in eval_steps):
            with torch.no_grad():
                rec.update(eval_fn(fast, t))
        recs.append(rec)
        return bool(stop_fn and stop_fn(rec))

    def grad_step(lr: float) -> float:
        fast.B.grad = None
        loss = fast_loss(fast, batch)
        loss.backward()
        with torch.no_grad():
            fast.B -= lr * fast.B.grad
        return float(loss.detach())

    with torch.no_grad():
        loss0 = float(fast_loss(fast, batch))
    if record(0, loss0):
        return recs
    loss = grad_step(cfg.big_lr)
    if cfg.perturb and cfg.sigma > 0:
        with torch.no_grad():
            fast.B += perturbation(fast.T, cfg.sigma, seed)
    if record(1, loss):
        return recs
    for t in range(2, cfg.steps + 2):
        loss = grad_step(cfg.lr)
        if record(t, loss):
            break
    return recs


def pgd_hooked(model, batch: Batch, cfg: PGDConfig, run: RunDir | None, seed: int, *,
               eval_fn: Callable[[Any], dict[str, Any]] | None = None,
               dense_until: int = 100, checkpoint_every: int = 100,
               extra_meta: dict[str, Any] | None = None, first_order: int = 0,
               on_log: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """PGD / GD on the IR HookedTransformer through ``train_phase`` (full batch = ``batch``).
    ``first_order``: the phase order of ``big`` (the small steps get the next), so a run
    whose earlier phase made the model lists them after it. ``on_log``: called with every
    metrics record of both phases (``train_phase``'s).

    Phases: ``big`` (1 step, SGD ``big_lr``), then the perturbation of the position block
    (PGD only), then ``pgd`` or ``gd`` (``steps`` SGD steps of ``lr``) with a checkpoint at
    every step up to ``dense_until`` and log-spaced after.
    """
    from mechinterp_icr.models.ir import (
        add_pos_block_through_keys,
        get_pos_block,
        pos_block_mask,
        set_pos_block,
    )

    N = len(batch)
    masks = pos_block_mask(model) if cfg.target == "pos" else None
    trainable = {"pos": "blocks.0.attn.W_K", "qk": "qk", "attention": "attention"}[cfg.target]

    def sample(rng, bs):
        return batch

    meta = {"pgd": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, **(extra_meta or {})}
    big = TrainConfig(steps=1, batch_size=N, optimizer="sgd", lr=max(cfg.big_lr, 1e-12),
                      grad_clip=cfg.clip, trainable=trainable, eval_every=0,
                      checkpoint_schedule="linear", checkpoint_every=1, progress=False)
    r1 = train_phase(model, sample, big, run, "big", seed, eval_fn=eval_fn, grad_masks=masks,
                     phase_order=first_order, extra_meta=meta, on_log=on_log)
    if cfg.perturb and cfg.sigma > 0:
        B = get_pos_block(model) + perturbation(model.cfg.n_ctx, cfg.sigma, seed)
        if cfg.target == "pos":
            set_pos_block(model, B)
        else:  # full attention: W_Q is trainable too; add the noise through W_K's pos rows
            add_pos_block_through_keys(model, perturbation(model.cfg.n_ctx, cfg.sigma, seed))
    phase = "pgd" if cfg.perturb else "gd"
    small = TrainConfig(steps=cfg.steps, batch_size=N, optimizer="sgd", lr=cfg.lr,
                        grad_clip=cfg.clip, trainable=trainable, eval_every=0,
                        checkpoint_schedule="log", checkpoint_dense_until=dense_until,
                        checkpoint_every=checkpoint_every, progress=False)
    r2 = train_phase(model, sample, small, run, phase, seed, eval_fn=eval_fn, grad_masks=masks,
                     phase_order=first_order + 1, extra_meta=meta, on_log=on_log)
    return {"big": r1, phase: r2}
