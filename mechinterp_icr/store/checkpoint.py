"""Checkpoints: safetensors weights + a JSON sidecar. No pickle is ever loaded.

``<stem>.safetensors`` holds the model weights under ``model.<name>`` and, when saved, the
optimizer state under ``optim.<param index>.<key>``. ``<stem>.json`` holds the step, phase,
metrics, the resolved run config, package versions, git revision, the optimizer's
hyper-parameters, the shapes of every tensor, the SHA-256 of the weights file and, for a
TransformerLens model, its ``HookedTransformerConfig`` as a dict
(``hooked_transformer_config``: ``dtype`` as a name such as ``"float32"``, ``device`` null),
so a checkpoint loads with TransformerLens and safetensors alone::

    cfg = json.load(open(stem + ".json"))["hooked_transformer_config"]
    cfg["dtype"] = getattr(torch, cfg["dtype"])
    model = HookedTransformer(HookedTransformerConfig.from_dict(cfg))
    weights = safetensors.torch.load_file(stem + ".safetensors")
    model.load_state_dict({k[6:]: v for k, v in weights.items() if k.startswith("model.")})

Checkpoints written before this field existed load as before (nothing reads it here).

Writes are atomic: each file goes to a temporary name first and is renamed into place, weights
before sidecar, so a checkpoint whose sidecar exists is complete. Loading checks the sidecar
parses and its known fields have the right types, that both files are regular files (a FIFO
or a symlink to a device is refused, never read), the weights' size before reading them and
their hash after (truncation and corruption), that the tensor names and shapes match the model
it is loaded into and the optimizer state the optimizer (mismatch), and names the file and the
problem in the error.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from mechinterp_icr.store.io import UnsafeFileError, atomic_write_bytes, read_regular_file

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "read_sidecar",
           "verify_checkpoint", "CheckpointData", "MAX_SIDECAR_BYTES", "hooked_config_dict",
           "sidecar_problem"]

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
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars,
                     "n_state": len(sd["state"])}


def hooked_config_dict(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's ``HookedTransformerConfig`` as JSON values (None for another model):
    ``dtype`` by name, ``device`` null (the loading machine chooses)."""
    cfg = getattr(model, "cfg", None)
    to_dict = getattr(cfg, "to_dict", None)
    if not callable(to_dict):
        return None
    out = {}
    for k, v in to_dict().items():
        if isinstance(v, torch.dtype):
            v = str(v).removeprefix("torch.")
        elif k == "device":
            v = None
        out[k] = v
    return json.loads(json.dumps(out, default=str))


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
    tl_cfg = hooked_config_dict(model)
    if tl_cfg is not None:
        side.setdefault("hooked_transformer_config", tl_cfg)
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


MAX_SIDECAR_BYTES = 16 * 1024**2

# sidecar fields whose type every reader relies on: name -> (check, what is allowed)
_SIDECAR_FIELDS: dict[str, tuple[Any, str]] = {
    "sha256": (lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
               "a 64-digit hexadecimal SHA-256"),
    "n_bytes": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "step": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "phase": (lambda v: isinstance(v, str), "a string"),
    "phase_order": (lambda v: _is_int(v) and 0 <= v <= 1_000_000, "an integer in [0, 1000000]"),
    "metrics": (lambda v: isinstance(v, dict), "a mapping"),
    "shapes": (lambda v: isinstance(v, dict), "a mapping"),
    "optimizer": (lambda v: v is None or isinstance(v, dict), "null or a mapping"),
    "weights_file": (lambda v: isinstance(v, str), "a string"),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _stem(stem: str | Path) -> Path:
    return Path(str(stem).removesuffix(".json").removesuffix(".safetensors"))


def read_sidecar(stem: str | Path) -> dict[str, Any]:
    """The checked sidecar of a checkpoint: a regular file of bounded size holding a JSON
    mapping whose known fields have the right types. Raises :class:`CheckpointError`."""
    side = _stem(stem).with_suffix(".json")
    if not os.path.lexists(side):
        raise CheckpointError(f"checkpoint sidecar {side} does not exist")
    try:
        text = read_regular_file(side, MAX_SIDECAR_BYTES).decode("utf-8")
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSON, UTF-8 (both ValueErrors), nesting
        raise CheckpointError(f"checkpoint sidecar {side} is not valid JSON "
                              f"(truncated or corrupted): {str(e)[:200]}") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint sidecar {side} cannot be read: "
                              f"{e.strerror or e}") from None
    if not isinstance(data, dict) or "sha256" not in data:
        raise CheckpointError(f"checkpoint sidecar {side} lacks the 'sha256' field; "
                              "it was not written by mechinterp_icr or is truncated")
    for key, (ok, allowed) in _SIDECAR_FIELDS.items():
        if key in data and not ok(data[key]):
            raise CheckpointError(f"checkpoint sidecar {side}: field {key!r} = "
                                  f"{_short(data[key])} is not allowed; expected {allowed} "
                                  "(the sidecar is damaged)")
    m = _NAME_RE.match(side.stem)  # <phase>-<step>: the name must say what the sidecar says
    if m and "step" in data and data["step"] != int(m["step"]):
        raise CheckpointError(f"checkpoint {side.stem}: its sidecar says step {data['step']}, "
                              f"its name step {int(m['step'])} (renamed or copied; the name "
                              "is not trusted)")
    if m and "phase" in data and data["phase"] != m["phase"]:
        raise CheckpointError(f"checkpoint {side.stem}: its sidecar says phase "
                              f"{_short(data['phase'])}, its name phase {m['phase']!r} "
                              "(renamed or copied; the name is not trusted)")
    return data


_NAME_RE = re.compile(r"^(?P<phase>.+)-(?P<step>\d+)$")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _max_weights_bytes() -> int:
    """Half of this machine's memory: a weights file larger than that is refused unread."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 64 * 1024**3


@dataclass
class CheckpointData:
    meta: dict[str, Any]
    model_state: dict[str, torch.Tensor]
    optim_tensors: dict[str, torch.Tensor]


def _read(stem: Path) -> CheckpointData:
    meta = read_sidecar(stem)
    wpath = stem.with_suffix(".safetensors")
    if not os.path.lexists(wpath):
        raise CheckpointError(f"checkpoint weights {wpath} do not exist (sidecar {stem}.json "
                              "names them)")
    want = meta.get("n_bytes")
    try:
        blob = read_regular_file(wpath, _max_weights_bytes(), want)
    except UnsafeFileError as e:
        raise CheckpointError(f"checkpoint weights: {e}") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint weights {wpath} cannot be read: "
                              f"{e.strerror or e}") from None
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
    problem = sidecar_problem(meta, model_state, optim)
    if problem:
        raise CheckpointError(f"checkpoint {stem} is damaged: {problem}")
    return CheckpointData(meta, model_state, optim)


# --------------------------------------------------------------------------------------------
# The sidecar validator: a sidecar is checked against its weights before it is trusted
# --------------------------------------------------------------------------------------------
def _num(v: Any, lo: float = 0.0, hi: float = float("inf")) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and lo <= v <= hi)


# optimizer hyperparameters (torch's AdamW and SGD): name -> (check, what is allowed)
_GROUP_FIELDS: dict[str, tuple[Any, str]] = {
    "lr": (_num, "a finite non-negative number"),
    "eps": (_num, "a finite non-negative number"),
    "weight_decay": (_num, "a finite non-negative number"),
    "momentum": (lambda v: _num(v, 0, 1), "a number in [0, 1]"),
    "dampening": (lambda v: _num(v, 0, 1), "a number in [0, 1]"),
    "initial_lr": (_num, "a finite non-negative number"),
    "betas": (lambda v: isinstance(v, list) and len(v) == 2 and all(_num(b, 0, 1) for b in v),
              "two numbers in [0, 1]"),
    **{k: (lambda v: isinstance(v, bool), "true or false")
       for k in ("amsgrad", "maximize", "nesterov", "capturable", "differentiable",
                 "decoupled_weight_decay")},
    **{k: (lambda v: v is None or isinstance(v, bool), "null, true or false")
       for k in ("foreach", "fused")},
}
_WEIGHT_DTYPES = (torch.float32, torch.bool)  # parameters float32; the attention masks bool


def sidecar_problem(meta: dict[str, Any], model_state: dict[str, torch.Tensor],
                    optim: dict[str, torch.Tensor]) -> str | None:
    """Why a checkpoint's sidecar does not match its weights (None: it does). Checked before
    a checkpoint is trusted for a resume or an analysis: the weights' dtypes (float32
    parameters), the recorded shapes, and the optimizer state: every hyperparameter of every
    group of the right type, the groups' ``params`` exactly the indices 0..N-1 of the N
    trained parameters (``trainable``), every optimizer tensor float32 and named by one of
    those indices, each per-parameter tensor of its parameter's shape, the same state for
    every parameter (``max_exp_avg_sq`` exactly when ``amsgrad``), and state present after
    step 0 (a trained optimizer without state would resume as a fresh one)."""
    bad = sorted(k for k, v in model_state.items() if v.dtype not in _WEIGHT_DTYPES)
    if bad:
        return (f"weight {bad[0]} has dtype {str(model_state[bad[0]].dtype)[6:]}, expected "
                "float32")
    shapes = meta.get("shapes") or {}
    wrong = sorted(k for k, v in model_state.items()
                   if f"model.{k}" in shapes and list(v.shape) != shapes[f"model.{k}"])
    if wrong or set(shapes) - {f"model.{k}" for k in model_state}:
        return "the weights' tensors or shapes differ from the shapes the sidecar records"
    om = meta.get("optimizer")
    if om is None:
        return None if not optim else "optimizer tensors without optimizer state in the sidecar"
    return _optimizer_problem(meta, om, model_state, optim)


def _optimizer_problem(meta, om, model_state, optim) -> str | None:
    groups = om.get("param_groups")
    if not (isinstance(groups, list) and groups and all(isinstance(g, dict) for g in groups)):
        return "optimizer param_groups is not a non-empty list of mappings"
    for i, g in enumerate(groups):
        for key, (ok, allowed) in _GROUP_FIELDS.items():
            if key in g and not ok(g[key]):
                return (f"optimizer param_groups[{i}].{key} = {_short(g[key])} is not allowed; "
                        f"expected {allowed}")
    params = [p for g in groups for p in (g.get("params") if isinstance(g.get("params"), list)
                                          else [None])]
    if params != list(range(len(params))):
        return (f"optimizer param_groups' params = {_short(params)} are not the parameter "
                f"indices 0..{len(params) - 1} in order")
    trainable = meta.get("trainable")
    if isinstance(trainable, list) and len(trainable) != len(params):
        return (f"optimizer state covers {len(params)} parameters, the phase trains "
                f"{len(trainable)}")
    group_of = {p: g for g in groups for p in g["params"]}
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, val in optim.items():
        parts = key.split(".", 2)
        if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) not in group_of:
            return f"optimizer tensor {key!r} names no parameter index"
        if val.dtype != torch.float32:
            return f"optimizer tensor {key} has dtype {str(val.dtype)[6:]}, expected float32"
        state.setdefault(int(parts[1]), {})[parts[2]] = val
    scalars = om.get("scalars", {})
    if not (isinstance(scalars, dict) and all(
            isinstance(v, dict) and k.isdigit() and int(k) in group_of
            for k, v in scalars.items())):
        return "optimizer scalars are not a mapping of parameter indices"
    for idx, st in state.items():
        name = trainable[idx] if isinstance(trainable, list) else None
        name = name if isinstance(name, str) else None
        want = list(model_state[name].shape) if name in model_state else None
        for k, v in st.items():
            if k == "step":
                if v.dim() != 0:
                    return f"optimizer tensor optim.{idx}.step is not a scalar"
            elif want is not None and list(v.shape) != want:
                return (f"optimizer tensor optim.{idx}.{k} has shape {list(v.shape)}, its "
                        f"parameter {name} {want}")
        amsgrad = group_of[idx].get("amsgrad")
        if amsgrad is not None and ("max_exp_avg_sq" in st) != amsgrad:
            return (f"optimizer amsgrad = {str(amsgrad).lower()} but parameter {idx} "
                    f"{'lacks' if amsgrad else 'has'} max_exp_avg_sq")
    for k, v in scalars.items():
        state.setdefault(int(k), {}).update(dict.fromkeys(v))
    keys = {frozenset(st) for st in state.values()}
    if len(keys) > 1 or ("n_state" in om and om["n_state"] != len(state)):
        return (f"optimizer state is incomplete: {len(state)} of {len(params)} parameters "
                "have state, not all of the same kind")
    # Adam keeps state for every parameter from its first step, SGD with momentum too
    stateful = any("betas" in g or g.get("momentum", 0) > 0 for g in groups)
    if (not state and stateful and meta.get("step", 0) > 0 and params
            and om.get("n_state", 1) > 0):
        return (f"optimizer tensors are missing at step {meta.get('step')} (a resume would "
                "start from a fresh optimizer)")
    return None


def verify_checkpoint(stem: str | Path, full: bool = True) -> dict[str, Any]:
    """Check a checkpoint without loading it anywhere and return its sidecar. ``full``: read
    the weights and check their SHA-256 and format; otherwise only the sidecar and that the
    weights are a regular file of the recorded size (no read). Raises CheckpointError."""
    stem = _stem(stem)
    if full:
        return _read(stem).meta
    meta = read_sidecar(stem)
    wpath = stem.with_suffix(".safetensors")
    try:
        st = os.stat(wpath)
    except OSError as e:
        raise CheckpointError(f"checkpoint weights {wpath} cannot be read: "
                              f"{e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"checkpoint weights {wpath} are not a regular file")
    if meta.get("n_bytes", st.st_size) != st.st_size:
        raise CheckpointError(f"checkpoint weights {wpath} are truncated or replaced: "
                              f"{st.st_size} bytes, expected {meta['n_bytes']}")
    return meta


def _check_model(stem: Path, data: CheckpointData, model: torch.nn.Module) -> None:
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


def _optimizer_state(stem: Path, data: CheckpointData,
                     optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state dict stored in ``data``, checked against ``optimizer``."""
    om = data.meta.get("optimizer")
    if om is None:
        raise CheckpointError(f"checkpoint {stem} holds no optimizer state; cannot resume")
    groups, scalars = om.get("param_groups"), om.get("scalars", {})
    ok = (isinstance(groups, list) and len(groups) == len(optimizer.param_groups)
          and all(isinstance(g, dict) and isinstance(g.get("params"), list)
                  and len(g["params"]) == len(mine["params"])
                  for g, mine in zip(groups, optimizer.param_groups))
          and isinstance(scalars, dict) and all(isinstance(v, dict) for v in scalars.values()))
    if not ok:
        raise CheckpointError(f"checkpoint {stem}: its optimizer state does not match the "
                              "optimizer being resumed (other trainable parameters?) or is "
                              "damaged")
    state: dict[int, dict[str, Any]] = {}
    try:
        for key, val in data.optim_tensors.items():
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = val
        for idx, sc in scalars.items():
            state.setdefault(int(idx), {}).update(sc)
    except ValueError:
        raise CheckpointError(f"checkpoint {stem}: optimizer tensor names are damaged") from None
    return {"state": state, "param_groups": groups}


def load_checkpoint(stem: str | Path, model: torch.nn.Module | None = None,
                    optimizer: torch.optim.Optimizer | None = None) -> CheckpointData:
    """Verify and read a checkpoint; load it into ``model`` (and ``optimizer``) when given.

    Raises :class:`CheckpointError` naming the file and the problem for a missing, truncated,
    corrupted, damaged or mismatched checkpoint. Every check runs before anything is loaded,
    so nothing is modified when one fails.
    """
    stem = _stem(stem)
    data = _read(stem)
    if model is not None:
        _check_model(stem, data, model)
    opt_state = _optimizer_state(stem, data, optimizer) if optimizer is not None else None
    if model is not None:
        model.load_state_dict({k: v.to(model.state_dict()[k].device)
                               for k, v in data.model_state.items()}, strict=True)
    if optimizer is not None:
        try:
            optimizer.load_state_dict(opt_state)
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"checkpoint {stem}: its optimizer state cannot be loaded: "
                                  f"{e}") from None
    return data
