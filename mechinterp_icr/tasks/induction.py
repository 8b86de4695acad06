"""Repeated random tokens: the classic induction-head task.

A sequence is ``[BOS] x_1 .. x_h x_1 .. x_h`` with x drawn uniformly from ``n_tokens`` ids;
the loss is on the second half, where each next token can only be predicted by finding the
previous occurrence of the current token and copying what followed it (an induction head).
Used as a small task for loop tests. With ``max_period > 0`` a sequence is instead ``[BOS]``,
``o`` random tokens, then a block of ``p`` distinct random tokens repeated up to ``seq_len``
tokens, with the period ``p`` in ``[min_period, max_period]`` and the offset ``o`` in
``[0, max_offset]`` drawn per sequence; the loss is on every position whose next token
repeats an earlier one. A copying head trained on one fixed offset cannot solve this: only an
induction head (attend to the token after the previous occurrence of the current token) can.
This is the positive control model of IR-8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mechinterp_icr.config import check, check_range, register_task
from mechinterp_icr.tasks.base import IGNORE, Batch, Vocab


@register_task("induction")
@dataclass(frozen=True)
class InductionTaskConfig:
    n_tokens: int = 32
    half_len: int = 12
    max_period: int = 0  # > 0: repeats of varying period and offset (seq_len tokens)
    min_period: int = 2
    max_offset: int = 0
    seq_len: int = 16

    def __post_init__(self) -> None:
        check_range("task.n_tokens", self.n_tokens, 2, 100_000, integer=True)
        check_range("task.half_len", self.half_len, 1, 10_000, integer=True)
        check_range("task.max_period", self.max_period, 0, 10_000, integer=True)
        check_range("task.min_period", self.min_period, 1, 10_000, integer=True)
        check_range("task.max_offset", self.max_offset, 0, 10_000, integer=True)
        check_range("task.seq_len", self.seq_len, 2, 100_000, integer=True)
        if self.max_period:
            check(self.min_period <= self.max_period <= self.n_tokens, "task.max_period",
                  self.max_period, f"between task.min_period ({self.min_period}) and "
                  f"task.n_tokens ({self.n_tokens})")
            check(self.max_offset + 2 * self.max_period <= self.seq_len, "task.seq_len",
                  self.seq_len, "at least max_offset + 2 * max_period (two repeats)")

    def build_bytes(self) -> int:
        """An upper bound on the bytes :meth:`build` allocates (the vocabulary: about 200
        bytes a token), from the config alone."""
        return 200 * (self.n_tokens + 1) + (1 << 16)

    def build(self, seed: int = 0) -> "InductionTask":
        return InductionTask(self)


class InductionTask:
    def __init__(self, cfg: InductionTaskConfig):
        self.cfg = cfg
        self.vocab = Vocab(["[BOS]"] + [f"T{i}" for i in range(cfg.n_tokens)])
        self.n_ctx = cfg.seq_len + 1 if cfg.max_period else 2 * cfg.half_len + 1

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    def sample(self, rng: np.random.Generator, batch_size: int, split: str = "train") -> Batch:
        if self.cfg.max_period:
            return self._sample_varying(rng, batch_size)
        h = self.cfg.half_len
        x = rng.integers(1, self.cfg.n_tokens + 1, size=(batch_size, h))
        toks = np.concatenate([np.zeros((batch_size, 1), np.int64), x, x], axis=1)
        tgt = np.full_like(toks, IGNORE)
        # position t predicts toks[t+1]; the second half is predictable from position h+1 on
        tgt[:, h + 1: 2 * h] = toks[:, h + 2: 2 * h + 1]
        return Batch(torch.from_numpy(toks), torch.from_numpy(tgt))

    def _sample_varying(self, rng: np.random.Generator, batch_size: int) -> Batch:
        cfg = self.cfg
        L = cfg.seq_len
        toks = np.zeros((batch_size, L + 1), np.int64)
        tgt = np.full_like(toks, IGNORE)
        periods = rng.integers(cfg.min_period, cfg.max_period + 1, batch_size)
        offsets = rng.integers(0, cfg.max_offset + 1, batch_size)
        for b in range(batch_size):
            p, o = int(periods[b]), int(offsets[b])
            ids = rng.permutation(cfg.n_tokens)[: p + o] + 1  # distinct: one previous match
            block = ids[:p]
            seq = np.concatenate([ids[p:], np.resize(block, L - o)])
            toks[b, 1:] = seq
            # position t predicts toks[t+1]; predictable by induction once toks[t] repeats
            # (t >= 1 + o + p: the previous occurrence is followed by the answer)
            tgt[b, o + p + 1: L] = toks[b, o + p + 2: L + 1]
        return Batch(torch.from_numpy(toks), torch.from_numpy(tgt))
