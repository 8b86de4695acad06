"""Errors and checks: ConfigError names the field, the value and what is allowed."""

from __future__ import annotations

import reprlib
import typing
from typing import Any


class ConfigError(ValueError):
    """A configuration value is not allowed. The message names field, value and what is allowed."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 6


def show(value: Any) -> str:
    """A short repr of a value for an error message: long strings, huge integers and deep or
    long containers are cut, so a hostile value gives a one-line message of bounded size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        return repr(value)
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):
        return f"<a {type(value).__name__}>"


def check(ok: bool, name: str, value: Any, allowed: str) -> None:
    """Raise ConfigError('<name> = <value!r> is not allowed; expected <allowed>') unless ok."""
    if not ok:
        raise ConfigError(f"{name} = {show(value)} is not allowed; expected {allowed}")


def check_range(name: str, value: Any, lo=None, hi=None, *, integer: bool = False,
                lo_open: bool = False, hi_open: bool = False) -> None:
    """Check a number lies in [lo, hi] (open ends with lo_open/hi_open)."""
    kind = "an integer" if integer else "a number"
    lo_s = "(" if lo_open else "["
    hi_s = ")" if hi_open else "]"
    rng = f"{lo_s}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{hi_s}"
    is_num = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not is_num:
        raise ConfigError(f"{name} = {show(value)} is not allowed; expected {kind} in {rng}")
    ok = True
    if lo is not None:
        ok &= value > lo if lo_open else value >= lo
    if hi is not None:
        ok &= value < hi if hi_open else value <= hi
    check(ok, name, value, f"{kind} in {rng}")


def check_choice(name: str, value: Any, choices) -> None:
    """``value`` one of ``choices``: a sequence, or a ``typing.Literal`` type (its values, in
    order), so a field annotated with a Literal is checked against the same values."""
    if typing.get_origin(choices) is typing.Literal:
        choices = typing.get_args(choices)
    check(value in tuple(choices), name, value, f"one of {list(choices)}")
