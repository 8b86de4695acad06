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

__all__ = ["IGNORE", "Batch", "Task", "Vocab", "logits_at"]


def logits_at(model: torch.nn.Module, tokens: torch.Tensor, rows: torch.Tensor,
              cols: torch.Tensor) -> torch.Tensor:
    """The model's logits at positions ``(rows[i], cols[i])`` of ``tokens``: ``(N, V)``, the
    same numbers as ``model(tokens)[rows, cols]``. For a HookedTransformer with a final norm
    (``ln_final``) the norm and the unembedding run on those positions alone (the residual
    stream and every hook before them as in a full forward). Any other module, including a
    HookedTransformer built with ``normalization_type=None`` (TransformerLens gives it no
    ``ln_final``; every model of the CR and IR reproductions is one), is run whole and
    indexed, so for those models this saves nothing."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not all(hasattr(model, a) for a in ("blocks", "unembed", "ln_final")):
        return model(tokens)[rows, cols]
    resid = model(tokens, stop_at_layer=cfg.n_layers)[rows, cols]  # before ln_final
    if getattr(cfg, "normalization_type", None) is not None:
        resid = model.ln_final(resid[None])[0]
    logits = model.unembed(resid[None])[0]
    cap = getattr(cfg, "output_logits_soft_cap", -1.0) or -1.0
    return cap * torch.tanh(logits / cap) if cap > 0 else logits


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
