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

import dataclasses
import json
import math
import reprlib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    check(value in tuple(choices), name, value, f"one of {list(choices)}")


# --------------------------------------------------------------------------------------------
# Task registry
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# Model and training configs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelConfig:
    """Shape of a HookedTransformer. ``d_vocab`` and ``n_ctx`` are normally set by the task."""

    n_layers: int = 2
    n_heads: int = 1
    d_model: int = 64
    d_head: int = 64
    d_mlp: int = 256
    attn_only: bool = False
    normalization: str = "none"  # "none" | "LN" | "LNPre"
    act_fn: str = "relu"  # "relu" | "gelu" | "silu" | "relu2" (relu(x)**2, convex)
    positional_embedding: str = "standard"  # "standard" | "none"
    init_range: float = 0.0  # std of weight init; 0 = TransformerLens default 0.8/sqrt(d_model)
    d_vocab: int = 0  # 0 = take from the task
    n_ctx: int = 0  # 0 = take from the task

    def __post_init__(self) -> None:
        check_range("model.n_layers", self.n_layers, 1, 64, integer=True)
        check_range("model.n_heads", self.n_heads, 1, 64, integer=True)
        check_range("model.d_model", self.d_model, 1, 8192, integer=True)
        check_range("model.d_head", self.d_head, 1, 8192, integer=True)
        check_range("model.d_mlp", self.d_mlp, 1, 65536, integer=True)
        check(isinstance(self.attn_only, bool), "model.attn_only", self.attn_only, "true or false")
        check_choice("model.normalization", self.normalization, ["none", "LN", "LNPre"])
        check_choice("model.act_fn", self.act_fn, ["relu", "gelu", "silu", "relu2"])
        check_choice("model.positional_embedding", self.positional_embedding,
                     ["standard", "none"])
        check_range("model.init_range", self.init_range, 0, 10)
        check_range("model.d_vocab", self.d_vocab, 0, 10_000_000, integer=True)
        check_range("model.n_ctx", self.n_ctx, 0, 100_000, integer=True)


@dataclass(frozen=True)
class TrainConfig:
    """One training phase (pretraining or a finetuning branch)."""

    steps: int = 1000
    batch_size: int = 64
    optimizer: str = "adamw"  # "adamw" | "sgd"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    momentum: float = 0.0
    grad_clip: float = 1.0  # 0 disables clipping
    warmup_steps: int = 0
    decay: str = "constant"  # "constant" | "cosine" | "linear"
    min_lr_ratio: float = 0.1
    trainable: str = "all"  # preset name or comma-separated parameter-name patterns
    eval_every: int = 100
    eval_batch_size: int = 512
    checkpoint_schedule: str = "log"  # "log" | "linear" | "none"
    checkpoint_every: int = 100  # linear schedule spacing / late spacing of the log schedule
    checkpoint_dense_until: int = 0  # log schedule: every step <= this is a checkpoint
    progress: bool = True

    def __post_init__(self) -> None:
        check_range("train.steps", self.steps, 0, 10_000_000, integer=True)
        check_range("train.batch_size", self.batch_size, 1, 1_000_000, integer=True)
        check_choice("train.optimizer", self.optimizer, ["adamw", "sgd"])
        check_range("train.lr", self.lr, 0, 1e4, lo_open=True)
        check_range("train.weight_decay", self.weight_decay, 0, 10)
        betas = tuple(self.betas)
        check(len(betas) == 2 and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas),
              "train.betas", self.betas, "two numbers in [0, 1)")
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))
        check_range("train.momentum", self.momentum, 0, 1, hi_open=True)
        check_range("train.grad_clip", self.grad_clip, 0, 1e6)
        check_range("train.warmup_steps", self.warmup_steps, 0, 10_000_000, integer=True)
        check_choice("train.decay", self.decay, ["constant", "cosine", "linear"])
        check_range("train.min_lr_ratio", self.min_lr_ratio, 0, 1)
        check(isinstance(self.trainable, str) and self.trainable.strip() != "",
              "train.trainable", self.trainable,
              "a preset (all, attention, attention_only, no_embed, qk, wkq_pos) "
              "or comma-separated parameter-name patterns")
        check_range("train.eval_every", self.eval_every, 0, 10_000_000, integer=True)
        check_range("train.eval_batch_size", self.eval_batch_size, 1, 10_000_000, integer=True)
        check_choice("train.checkpoint_schedule", self.checkpoint_schedule,
                     ["log", "linear", "none"])
        check_range("train.checkpoint_every", self.checkpoint_every, 1, 10_000_000, integer=True)
        check_range("train.checkpoint_dense_until", self.checkpoint_dense_until, 0,
                    10_000_000, integer=True)
        check(isinstance(self.progress, bool), "train.progress", self.progress, "true or false")


@dataclass(frozen=True)
class ResourceConfig:
    """Ceilings on what one run may use, checked by :func:`check_resources` before anything is
    written: the estimated peak memory (``max_gib``) and the estimated size of all its
    checkpoints (``max_disk_gib``). Raise them explicitly, e.g. ``--set resources.max_gib=64``.
    They bound the run, they are not part of its identity: a run resumes under other ceilings.
    """

    max_gib: float = 8.0
    max_disk_gib: float = 20.0

    def __post_init__(self) -> None:
        check_range("resources.max_gib", self.max_gib, 0, 1e6, lo_open=True)
        check_range("resources.max_disk_gib", self.max_disk_gib, 0, 1e6, lo_open=True)


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs: the task (any registered kind), the model, training phases."""

    name: str = "run"
    seed: int = 0
    task: Any = None  # an instance of a registered task config class
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)

    def __post_init__(self) -> None:
        check(isinstance(self.name, str) and 0 < len(self.name) <= 255 and "/" not in self.name
              and "\0" not in self.name, "name", self.name,
              "a non-empty string of at most 255 characters without '/'")
        check_range("seed", self.seed, 0, 2**31 - 1, integer=True)
        if self.task is not None:
            check(hasattr(type(self.task), "kind"), "task", self.task,
                  "a registered task config")


# --------------------------------------------------------------------------------------------
# Resource estimate: refuse memory and disk bombs before anything is allocated or written
# --------------------------------------------------------------------------------------------
GIB = 1024**3
_F32 = 4  # bytes per float32 value


@dataclass(frozen=True)
class ResourceEstimate:
    """Estimated bytes of one training run (float32 everywhere; an upper-end estimate).

    ``peak_bytes`` = weights + gradients + optimizer state + one checkpoint being serialised
    + the larger of the training step's activations (kept for backward) and an evaluation
    batch's activations + batch tensors + the task's own tables. ``disk_bytes`` = checkpoints
    on the schedule x bytes per checkpoint.
    """

    n_params: int
    weights_bytes: int
    optimizer_bytes: int
    train_activation_bytes: int
    eval_activation_bytes: int
    batch_bytes: int
    task_bytes: int
    n_checkpoints: int
    checkpoint_bytes: int

    @property
    def peak_bytes(self) -> int:
        static = 2 * self.weights_bytes + self.optimizer_bytes + self.checkpoint_bytes
        return (static + max(self.train_activation_bytes, self.eval_activation_bytes)
                + self.batch_bytes + self.task_bytes)

    @property
    def disk_bytes(self) -> int:
        return self.n_checkpoints * self.checkpoint_bytes

    def parts(self) -> dict[str, int]:
        """The contributions to the peak, largest first (for the refusal message)."""
        parts = {"weights and gradients": 2 * self.weights_bytes,
                 "optimizer state": self.optimizer_bytes,
                 "checkpoint buffer": self.checkpoint_bytes,
                 "training activations": self.train_activation_bytes,
                 "evaluation activations": self.eval_activation_bytes,
                 "batch tensors": self.batch_bytes, "task tables": self.task_bytes}
        return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def count_params(m: ModelConfig) -> int:
    """Parameters of the HookedTransformer that ``m`` describes (``d_vocab``/``n_ctx`` set)."""
    d, H, dh = m.d_model, m.n_heads, m.d_head
    attn = 4 * H * d * dh + 3 * H * dh + d
    mlp = 0 if m.attn_only else 2 * d * m.d_mlp + m.d_mlp + d
    norm = 0 if m.normalization == "none" else 2 * 2 * d
    final_norm = 0 if m.normalization == "none" else 2 * d
    return (m.d_vocab * d + m.n_ctx * d + m.n_layers * (attn + mlp + norm) + final_norm
            + d * m.d_vocab + m.d_vocab)


def n_checkpoints_bound(t: TrainConfig) -> int:
    """An upper bound on the number of checkpoints of ``t``'s schedule (start and end incl.)."""
    if t.checkpoint_schedule == "none":
        return min(2, t.steps + 1)
    n = t.steps // t.checkpoint_every + 2
    if t.checkpoint_schedule == "log":
        n += min(t.checkpoint_dense_until, t.steps) + 1 + 8 * (len(str(t.steps)) + 1)
    return min(n, t.steps + 1)


def estimate_resources(model: ModelConfig, train: TrainConfig,
                       task_bytes: int = 0) -> ResourceEstimate:
    """Estimate the memory and disk of training ``model`` under ``train`` (pure arithmetic).

    ``model.d_vocab`` and ``model.n_ctx`` must be filled in (the task's sizes)."""
    m = model
    P = count_params(m)
    T, V, d, H, dh = m.n_ctx, m.d_vocab, m.d_model, m.n_heads, m.d_head
    mlp = 0 if m.attn_only else 3 * m.d_mlp
    # per token: residual stream copies, q/k/v/z, attention scores and pattern, MLP hidden
    per_layer = 7 * d + 4 * H * dh + 2 * H * T + mlp
    per_token_train = m.n_layers * per_layer + 4 * V + 2 * d  # logits, softmax, grad, float
    per_token_eval = per_layer + 3 * V + 2 * d  # no autograd: one layer's transients
    opt = 2 * P if train.optimizer == "adamw" else (P if train.momentum > 0 else 0)
    B, Be = train.batch_size, train.eval_batch_size
    return ResourceEstimate(
        n_params=P,
        weights_bytes=_F32 * P,
        optimizer_bytes=_F32 * opt,
        train_activation_bytes=2 * _F32 * B * T * per_token_train,  # forward kept + backward
        eval_activation_bytes=_F32 * Be * T * per_token_eval,
        batch_bytes=2 * 8 * max(B, Be) * T,  # int64 tokens and targets
        task_bytes=int(task_bytes),
        n_checkpoints=n_checkpoints_bound(train),
        checkpoint_bytes=_F32 * (P + opt),
    )


def gib(nbytes: float) -> str:
    """Bytes as a short GiB figure for messages: 5,708 / 12.3 / 0.0394."""
    x = nbytes / GIB
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def check_resources(cfg: RunConfig, task_bytes: int = 0) -> ResourceEstimate:
    """Refuse ``cfg`` when its estimated peak memory or checkpoint disk use exceeds its
    ``resources`` ceilings; the message names the estimate, its largest parts and the
    ``--set`` that raises the ceiling. Returns the estimate."""
    est = estimate_resources(cfg.model, cfg.train, task_bytes)
    r = cfg.resources
    if est.peak_bytes > r.max_gib * GIB:
        parts = ", ".join(f"{k} {gib(v)}" for k, v in list(est.parts().items())[:3])
        raise ConfigError(
            f"the run needs an estimated {gib(est.peak_bytes)} GiB of memory ({parts} GiB; "
            f"{est.n_params:,} parameters), more than resources.max_gib = {r.max_gib:g}; use "
            "a smaller model, batch or context, or raise the ceiling explicitly with --set "
            f"resources.max_gib={max(1, math.ceil(est.peak_bytes / GIB))}")
    if est.disk_bytes > r.max_disk_gib * GIB:
        raise ConfigError(
            f"the run's checkpoints need an estimated {gib(est.disk_bytes)} GiB of disk "
            f"(up to {est.n_checkpoints:,} checkpoints of {est.checkpoint_bytes / 1024**2:.3g} "
            f"MiB), more than resources.max_disk_gib = {r.max_disk_gib:g}; use a sparser "
            "train.checkpoint_schedule, or raise the ceiling explicitly with --set "
            f"resources.max_disk_gib={max(1, math.ceil(est.disk_bytes / GIB))}")
    return est


# --------------------------------------------------------------------------------------------
# Dict / JSON round trip
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# Dotted overrides: --set model.d_model=64 --set task.lam=0.5
# --------------------------------------------------------------------------------------------
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
            return Path(spec[:i]), spec[i + 1:] or "last"
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
