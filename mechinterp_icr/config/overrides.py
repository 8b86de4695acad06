"""Dotted overrides (``--set model.d_model=64 --set task.lam=0.5``) and
``--init RUN[:CHECKPOINT]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mechinterp_icr.config.errors import ConfigError, check, show
from mechinterp_icr.config.serialize import from_dict, to_dict

MAX_OVERRIDE_DEPTH = 32  # nesting of lists/mappings in one --set value


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of lists/mappings in ``value``, stopping once past ``limit``."""
    if limit < 0 or not isinstance(value, (list, dict)):
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, limit - 1) for v in items), default=0)


def _parse_value(text: str) -> Any:
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConfigError(f"--set value {show(text)} is not allowed; expected at most "
                          f"{MAX_OVERRIDE_DEPTH} levels of nesting") from None
    except ValueError:  # not JSON (a bare word), or an integer too long to convert
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        digits = text.strip().lstrip("+-")
        if digits.isdigit() and len(digits) > 4300:
            raise ConfigError(f"--set value {show(text)} is not allowed; expected an integer "
                              "of at most 4300 digits") from None
        return text
    if _depth(value, MAX_OVERRIDE_DEPTH + 1) > MAX_OVERRIDE_DEPTH:
        raise ConfigError(f"--set value {show(text)} is not allowed; expected at most "
                          f"{MAX_OVERRIDE_DEPTH} levels of nesting")
    return value


def parse_overrides(items) -> dict[str, Any]:
    """['a.b=1', 'c=x'] -> {'a.b': 1, 'c': 'x'} with JSON-parsed values where possible."""
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"--set {show(item)} is not allowed; expected key=value, e.g. "
                              "model.d_model=64")
        key, _, val = item.partition("=")
        key = key.strip()
        check(key != "", "--set", item, "key=value with a non-empty key")
        out[key] = _parse_value(val.strip())
    return out


def parse_init(spec: str) -> tuple[Path, str]:
    """``RUN[:CHECKPOINT]`` (``--init``) -> (run directory, selection naming one checkpoint;
    ``last`` when omitted); here, beside the other argument parsing, so the CLI checks it
    before torch is imported. The run part is the longest prefix before a ``:`` that is a
    directory, so selections such as ``phase:pretrain:last`` pass through."""
    spec = str(spec)
    cands = [i for i, ch in enumerate(spec) if ch == ":"]
    for i in sorted(cands, reverse=True):
        if Path(spec[:i]).is_dir():
            if not spec[i + 1:].strip():  # "RUN:" is a typo, never silently "last"
                raise ConfigError(f"--init = {spec!r} is not allowed: the checkpoint after "
                                  f"':' is empty; give {spec[:i]} (its last checkpoint) or "
                                  f"{spec[:i]}:CHECKPOINT, e.g. {spec[:i]}:phase:pretrain:last")
            return Path(spec[:i]), spec[i + 1:]
    if Path(spec).is_dir():
        return Path(spec), "last"
    raise ConfigError(f"--init = {spec!r} is not allowed; expected RUN or RUN:CHECKPOINT with "
                      "RUN an existing run directory, e.g. runs/pt:phase:pretrain:last")


def apply_overrides(cfg: Any, overrides: dict[str, Any] | list[str]) -> Any:
    """Return a copy of the dataclass tree ``cfg`` with dotted keys replaced (validated)."""
    if isinstance(overrides, (list, tuple)):
        overrides = parse_overrides(overrides)
    data = to_dict(cfg)
    for key, value in overrides.items():
        node = data
        parts = key.split(".")
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node, dict) or p not in node:
                raise ConfigError(f"--set {key} is not allowed; "
                                  f"'{'.'.join(parts[:i + 1])}' is not a config section; "
                                  f"known: {sorted(node) if isinstance(node, dict) else []}")
            node = node[p]
        leaf = parts[-1]
        if not isinstance(node, dict) or leaf not in node:
            known = sorted(node) if isinstance(node, dict) else []
            raise ConfigError(f"--set {key} is not allowed; '{leaf}' is not a known field; "
                              f"known fields here: {known}")
        node[leaf] = value
    return from_dict(type(cfg), data)
