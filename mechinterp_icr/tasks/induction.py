"""Repeated random tokens: the classic induction-head task.

A sequence is ``[BOS] x_1 .. x_h x_1 .. x_h`` with x drawn uniformly from ``n_tokens`` ids;
the loss is on the second half, where each next token can only be predicted by finding the
previous occurrence of the current token and copying what followed it (an induction head).
Used as the induction-head control model of IR-8 and as a small task for loop tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mechinterp_icr.config import check_range, register_task
from mechinterp_icr.tasks.base import IGNORE, Batch, Vocab


@register_task("induction")
@dataclass(frozen=True)
class InductionTaskConfig:
    n_tokens: int = 32
    half_len: int = 12

    def __post_init__(self) -> None:
        check_range("task.n_tokens", self.n_tokens, 2, 100_000, integer=True)
        check_range("task.half_len", self.half_len, 1, 10_000, integer=True)

    def build(self, seed: int = 0) -> "InductionTask":
        return InductionTask(self)


class InductionTask:
    def __init__(self, cfg: InductionTaskConfig):
        self.cfg = cfg
        self.vocab = Vocab(["[BOS]"] + [f"T{i}" for i in range(cfg.n_tokens)])
        self.n_ctx = 2 * cfg.half_len + 1

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    def sample(self, rng: np.random.Generator, batch_size: int, split: str = "train") -> Batch:
        h = self.cfg.half_len
        x = rng.integers(1, self.cfg.n_tokens + 1, size=(batch_size, h))
        toks = np.concatenate([np.zeros((batch_size, 1), np.int64), x, x], axis=1)
        tgt = np.full_like(toks, IGNORE)
        # position t predicts toks[t+1]; the second half is predictable from position h+1 on
        tgt[:, h + 1: 2 * h] = toks[:, h + 2: 2 * h + 1]
        return Batch(torch.from_numpy(toks), torch.from_numpy(tgt))
