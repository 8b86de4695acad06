"""Activation caching over a dataset in batches, for one model or a run's checkpoints.

``names_filter`` is what ``HookedTransformer.run_with_cache`` takes: a hook name, a list of
names, or a predicate. Activations are moved to the CPU batch by batch and concatenated along
the batch axis; over checkpoints only one model is in memory at a time
(``RunDir.iter_models``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from mechinterp_icr.store.rundir import RunDir

__all__ = ["as_filter", "cache_activations", "iter_checkpoint_caches", "map_checkpoints"]


def as_filter(names_filter) -> Callable[[str], bool]:
    if names_filter is None:
        return lambda n: True
    if callable(names_filter):
        return names_filter
    if isinstance(names_filter, str):
        return lambda n: n == names_filter
    keep = set(names_filter)
    return lambda n: n in keep


@torch.no_grad()
def cache_activations(model, tokens: torch.Tensor, names_filter=None, batch_size: int = 256,
                      return_logits: bool = False) -> dict[str, torch.Tensor]:
    """``{hook name: activation (N, ...)}`` on the CPU for all ``tokens`` (N, T).

    With ``return_logits`` the logits are stored under the key ``"logits"``."""
    flt = as_filter(names_filter)
    dev = next(model.parameters()).device
    parts: dict[str, list[torch.Tensor]] = {}
    for i in range(0, tokens.shape[0], batch_size):
        logits, cache = model.run_with_cache(tokens[i:i + batch_size].to(dev), names_filter=flt)
        for k, v in cache.items():
            parts.setdefault(k, []).append(v.cpu())
        if return_logits:
            parts.setdefault("logits", []).append(logits.cpu())
    return {k: torch.cat(v, 0) for k, v in parts.items()}


def iter_checkpoint_caches(run: str | Path | RunDir, selection: str, tokens: torch.Tensor,
                           names_filter=None, batch_size: int = 256,
                           return_logits: bool = False) -> Iterator[tuple[Any, dict]]:
    """Yield ``(checkpoint, cache)`` for every selected checkpoint, one model at a time."""
    from mechinterp_icr.pipeline import load_run_model

    rd = run if isinstance(run, RunDir) else RunDir(run)
    _, _, build = load_run_model(rd)
    for ck, model in rd.iter_models(selection, build):
        yield ck, cache_activations(model, tokens, names_filter, batch_size, return_logits)
        del model


def map_checkpoints(run: str | Path | RunDir, selection: str,
                    fn: Callable[[Any, Any], dict]) -> list[dict]:
    """``[{"checkpoint", "phase", "step", **fn(ck, model)}]`` over a selection, one model at a
    time: the common shape of every per-checkpoint analysis table."""
    from mechinterp_icr.pipeline import load_run_model

    rd = run if isinstance(run, RunDir) else RunDir(run)
    _, _, build = load_run_model(rd)
    rows = []
    for ck, model in rd.iter_models(selection, build):
        with torch.no_grad():
            rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step,
                         **fn(ck, model)})
        del model
    return rows
