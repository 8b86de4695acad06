"""The task registry: task config classes register under a ``kind``, so a RunConfig can
hold any task's config and round-trip through JSON."""

from __future__ import annotations

from typing import Callable

from mechinterp_icr.config.errors import ConfigError, show

_TASKS: dict[str, type] = {}


def register_task(kind: str) -> Callable[[type], type]:
    """Class decorator: make a task config class loadable from JSON by its ``kind``."""

    def deco(cls: type) -> type:
        _TASKS[kind] = cls
        cls.kind = kind  # type: ignore[attr-defined]
        return cls

    return deco


def task_config_class(kind: str) -> type:
    """The config class registered for ``kind``. Task modules register themselves when they
    are imported (``import mechinterp_icr.tasks`` registers every built-in kind); this module
    never imports them, so config stays the lowest layer."""
    if not isinstance(kind, str) or kind not in _TASKS:
        raise ConfigError(f"task.kind = {show(kind)} is not allowed; expected one of "
                          f"{sorted(_TASKS)}")
    return _TASKS[kind]
