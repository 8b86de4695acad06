"""Configuration: frozen dataclasses, validation in one place, JSON round-trip, dotted overrides.

Every config class is a frozen dataclass whose ``__post_init__`` calls :func:`check` for each
field; a bad value raises :class:`ConfigError` naming the field, the value and what is allowed,
before any work is done and before anything is written.

Task configs register themselves with :func:`register_task` under a ``kind`` string so that a
``RunConfig`` can hold the config of any task and still round-trip through JSON.

:func:`estimate_resources` and :func:`check_resources` estimate the memory and disk a run
needs (parameters, optimizer state, activations, batch tensors, checkpoints) and refuse one
above ``resources.max_gib`` / ``resources.max_disk_gib`` (raise them with ``--set``);
:func:`check_task_size` and :func:`check_model_size` refuse a task or model too big to build
under ``resources.max_gib`` before it is built (also for a stored ``config.json``).
"""

from __future__ import annotations

from mechinterp_icr.config.errors import ConfigError, check, check_choice, check_range, show
from mechinterp_icr.config.overrides import apply_overrides, parse_init, parse_overrides
from mechinterp_icr.config.resources import (
    GIB,
    MAX_PROMPTS,
    ResourceEstimate,
    check_buildable,
    check_model_size,
    check_prompt_batch,
    check_resources,
    check_task_size,
    count_params,
    estimate_resources,
    gib,
    task_build_bytes,
)
from mechinterp_icr.config.schema import ModelConfig, ResourceConfig, RunConfig, TrainConfig
from mechinterp_icr.config.serialize import from_dict, to_dict
from mechinterp_icr.config.task_registry import register_task, task_config_class

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
    "check_task_size",
    "check_buildable",
    "check_prompt_batch",
    "MAX_PROMPTS",
    "check_model_size",
    "task_build_bytes",
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
