"""Dict / JSON round trip of the config dataclasses."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from mechinterp_icr.config.errors import ConfigError, check, show
from mechinterp_icr.config.schema import RunConfig
from mechinterp_icr.config.task_registry import task_config_class


def to_dict(cfg: Any) -> Any:
    """Dataclass -> plain JSON-able dict (task configs carry their ``kind``)."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        out = {}
        if hasattr(type(cfg), "kind"):
            out["kind"] = type(cfg).kind
        for f in dataclasses.fields(cfg):
            out[f.name] = to_dict(getattr(cfg, f.name))
        return out
    if isinstance(cfg, (list, tuple)):
        return [to_dict(x) for x in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def _coerce(tp: Any, value: Any, name: str) -> Any:
    """Best-effort type coercion from JSON / command-line values to a field's type."""
    origin = typing.get_origin(tp)
    if tp in (Any, None) or isinstance(tp, str):
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        check(isinstance(value, dict), name, value, "a mapping")
        return from_dict(tp, value, prefix=name)
    if tp is tuple or origin is tuple:
        check(isinstance(value, (list, tuple)), name, value, "a list")
        return tuple(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{name} = {show(value)} is not allowed; expected a number "
                              "that fits a float") from None
    return value


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build a config dataclass from a dict, rejecting unknown keys by name."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or cls.__name__} = {show(data)} is not allowed; "
                          "expected a mapping")
    data = dict(data)
    if cls is RunConfig and isinstance(data.get("task"), dict):
        tdata = dict(data["task"])
        kind = tdata.pop("kind", None)
        tcls = task_config_class(kind)
        data["task"] = from_dict(tcls, tdata, prefix="task")
    if hasattr(cls, "kind"):
        kind = data.pop("kind", cls.kind)
        check(kind == cls.kind, f"{prefix}.kind" if prefix else "kind", kind, repr(cls.kind))
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        full = f"{prefix}.{k}" if prefix else k
        check(k in names, full, data[k], f"a known field of {cls.__name__}: {sorted(names)}")
    kwargs = {}
    for k, v in data.items():
        full = f"{prefix}.{k}" if prefix else k
        kwargs[k] = _coerce(hints.get(k, Any), v, full)
    return cls(**kwargs)
