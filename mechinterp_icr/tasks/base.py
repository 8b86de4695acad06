"""What every task provides to the training loop, the evaluation and the analyses.

A task config is a frozen dataclass registered with :func:`mechinterp_icr.config.register_task`
and has ``build(seed) -> Task``. A :class:`Task` samples batches from an explicit
``numpy.random.Generator`` (so a batch is a pure function of the generator's seed: the training
loop derives it from ``(run seed, phase, step)``, which makes resume exact), knows its vocabulary
size and context length, and decodes token ids to readable strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import torch

IGNORE = -1  # target value at positions that carry no loss

__all__ = ["IGNORE", "Batch", "Task", "Vocab"]


@dataclass
class Batch:
    """``tokens[b, t]`` is the input; ``targets[b, t]`` the token to predict *at* position t
    (the next token), or ``IGNORE`` where no loss is taken."""

    tokens: torch.Tensor  # (B, T) int64
    targets: torch.Tensor  # (B, T) int64, IGNORE where masked
    meta: dict[str, Any] = field(default_factory=dict)

    def to(self, device) -> "Batch":
        return Batch(self.tokens.to(device), self.targets.to(device), self.meta)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


class Vocab:
    """Token id <-> readable string."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("vocabulary has duplicate token names")

    def __len__(self) -> int:
        return len(self.names)

    def decode(self, ids) -> str:
        ids = np.asarray(ids).reshape(-1)
        return " ".join(self.names[int(i)] if 0 <= int(i) < len(self.names) else f"<{int(i)}?>"
                        for i in ids)

    def tokens(self, ids) -> list[str]:
        return self.decode(ids).split(" ")

    def encode(self, text: str) -> list[int]:
        out = []
        for tok in text.split():
            if tok not in self.index:
                close = [n for n in self.names if n.startswith(tok[:2])][:8]
                raise ValueError(f"prompt token {tok!r} is not in the vocabulary; "
                                 f"tokens look like {close or self.names[:8]}")
            out.append(self.index[tok])
        return out


class Task(Protocol):
    vocab: Vocab
    n_ctx: int

    @property
    def d_vocab(self) -> int: ...

    def sample(self, rng: np.random.Generator, batch_size: int, split: str = "train") -> Batch:
        ...

    def decode(self, ids) -> str: ...
