"""Configuration: frozen dataclasses, validation in one place, JSON round-trip, dotted overrides.

Every config class is a frozen dataclass whose ``__post_init__`` calls :func:`check` for each
field; a bad value raises :class:`ConfigError` naming the field, the value and what is allowed,
before any work is done and before anything is written.

Task configs register themselves with :func:`register_task` under a ``kind`` string so that a
``RunConfig`` can hold the config of any task and still round-trip through JSON.

:func:`estimate_resources` and :func:`check_resources` estimate the memory and disk a run
needs (parameters, optimizer state, activations, batch tensors, checkpoints) and refuse one
above ``resources.max_gib`` / ``resources.max_disk_gib`` (raise them with ``--set``).
"""

from __future__ import annotations

from mechinterp_icr.config.errors import ConfigError, check, check_choice, check_range, show
from mechinterp_icr.config.overrides import apply_overrides, parse_init, parse_overrides
from mechinterp_icr.config.registry import register_task, task_config_class
from mechinterp_icr.config.resources import (
    GIB,
    ResourceEstimate,
    check_resources,
    count_params,
    estimate_resources,
    gib,
)
from mechinterp_icr.config.schema import ModelConfig, ResourceConfig, RunConfig, TrainConfig
from mechinterp_icr.config.serialize import from_dict, to_dict

__all__ = [
    "ConfigError",
    "show",
    "check",
    "check_choice",
    "check_range",
    "ModelConfig",
    "TrainConfig",
    "RunConfig",
    "ResourceConfig",
    "ResourceEstimate",
    "estimate_resources",
    "check_resources",
    "count_params",
    "gib",
    "GIB",
    "register_task",
    "task_config_class",
    "to_dict",
    "from_dict",
    "apply_overrides",
    "parse_overrides",
    "parse_init",
]
