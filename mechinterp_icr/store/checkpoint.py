"""Checkpoints: safetensors weights + a JSON sidecar. No pickle is ever loaded.

``<stem>.safetensors`` holds the model weights under ``model.<name>`` and, when saved, the
optimizer state under ``optim.<param index>.<key>``. ``<stem>.json`` holds the step, phase,
metrics, the resolved run config, package versions, git revision, the optimizer's
hyper-parameters, the shapes of every tensor and the SHA-256 of the weights file.

Writes are atomic: each file goes to a temporary name first and is renamed into place, weights
before sidecar, so a checkpoint whose sidecar exists is complete. Loading checks the sidecar
parses, the weights file exists and its hash matches (truncation and corruption), that the
tensor names and shapes match the model it is loaded into (mismatch), and names the file and
the problem in the error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from mechinterp_icr.store.io import atomic_write_bytes

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "read_sidecar",
           "CheckpointData"]

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupted or does not match the model."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in sd["state"].items():
        for key, val in st.items():
            if torch.is_tensor(val):
                tensors[f"optim.{idx}.{key}"] = val.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = val
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def save_checkpoint(stem: str | Path, model: torch.nn.Module, meta: dict[str, Any],
                    optimizer: torch.optim.Optimizer | None = None) -> Path:
    """Write ``stem.safetensors`` and ``stem.json`` atomically; return the sidecar path."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()
               if torch.is_tensor(v)}
    optim_meta = None
    if optimizer is not None:
        otens, optim_meta = _optimizer_tensors(optimizer)
        tensors.update(otens)
    blob = st_save(tensors)
    side = dict(meta)
    side.update({
        "format_version": FORMAT_VERSION,
        "weights_file": stem.name + ".safetensors",
        "sha256": _sha256(blob),
        "n_bytes": len(blob),
        "shapes": {k: list(v.shape) for k, v in tensors.items() if k.startswith("model.")},
        "optimizer": optim_meta,
    })
    atomic_write_bytes(stem.with_suffix(".safetensors"), blob)
    atomic_write_bytes(stem.with_suffix(".json"),
                        json.dumps(side, indent=2, sort_keys=True, default=str).encode())
    return stem.with_suffix(".json")


def read_sidecar(stem: str | Path) -> dict[str, Any]:
    stem = Path(str(stem).removesuffix(".json").removesuffix(".safetensors"))
    side = stem.with_suffix(".json")
    if not side.exists():
        raise CheckpointError(f"checkpoint sidecar {side} does not exist")
    try:
        data = json.loads(side.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint sidecar {side} is not valid JSON "
                              f"(truncated or corrupted): {e}") from None
    if not isinstance(data, dict) or "sha256" not in data:
        raise CheckpointError(f"checkpoint sidecar {side} lacks the 'sha256' field; "
                              "it was not written by mechinterp_icr or is truncated")
    return data


@dataclass
class CheckpointData:
    meta: dict[str, Any]
    model_state: dict[str, torch.Tensor]
    optim_tensors: dict[str, torch.Tensor]


def _read(stem: Path) -> CheckpointData:
    meta = read_sidecar(stem)
    wpath = stem.with_suffix(".safetensors")
    if not wpath.exists():
        raise CheckpointError(f"checkpoint weights {wpath} do not exist (sidecar {stem}.json "
                              "names them)")
    blob = wpath.read_bytes()
    if len(blob) != meta.get("n_bytes", len(blob)):
        raise CheckpointError(f"checkpoint weights {wpath} are truncated: {len(blob)} bytes, "
                              f"expected {meta['n_bytes']}")
    if _sha256(blob) != meta["sha256"]:
        raise CheckpointError(f"checkpoint weights {wpath} are corrupted: SHA-256 does not match "
                              "the sidecar")
    try:
        tensors = st_load(blob)
    except (SafetensorError, Exception) as e:  # safetensors raises several types
        raise CheckpointError(
            f"checkpoint weights {wpath} cannot be read as safetensors: {e}") from None
    model_state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    optim = {k: v for k, v in tensors.items() if k.startswith("optim.")}
    return CheckpointData(meta, model_state, optim)


def load_checkpoint(stem: str | Path, model: torch.nn.Module | None = None,
                    optimizer: torch.optim.Optimizer | None = None) -> CheckpointData:
    """Verify and read a checkpoint; load it into ``model`` (and ``optimizer``) when given.

    Raises :class:`CheckpointError` naming the file and the problem for a missing, truncated,
    corrupted or mismatched checkpoint. Nothing is modified when a check fails.
    """
    stem = Path(str(stem).removesuffix(".json").removesuffix(".safetensors"))
    data = _read(stem)
    if model is not None:
        want = {k: tuple(v.shape) for k, v in model.state_dict().items() if torch.is_tensor(v)}
        have = {k: tuple(v.shape) for k, v in data.model_state.items()}
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
        if missing or extra or wrong:
            parts = []
            if missing:
                parts.append(f"missing tensors {missing[:5]}")
            if extra:
                parts.append(f"unexpected tensors {extra[:5]}")
            if wrong:
                k = wrong[0]
                parts.append(f"shape of {k} is {list(have[k])} in the checkpoint but "
                             f"{list(want[k])} in the model")
            raise CheckpointError(f"checkpoint {stem} does not match the requested model: "
                                  + "; ".join(parts))
        model.load_state_dict({k: v.to(model.state_dict()[k].device)
                               for k, v in data.model_state.items()}, strict=True)
    if optimizer is not None:
        om = data.meta.get("optimizer")
        if om is None:
            raise CheckpointError(f"checkpoint {stem} holds no optimizer state; cannot resume")
        state: dict[int, dict[str, Any]] = {}
        for key, val in data.optim_tensors.items():
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = val
        for idx, sc in om.get("scalars", {}).items():
            state.setdefault(int(idx), {}).update(sc)
        optimizer.load_state_dict({"state": state, "param_groups": om["param_groups"]})
    return data
