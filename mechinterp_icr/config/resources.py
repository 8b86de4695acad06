"""Resource estimate: refuse memory and disk bombs before anything is allocated or written."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from mechinterp_icr.config.errors import ConfigError
from mechinterp_icr.config.schema import ModelConfig, ResourceConfig, RunConfig, TrainConfig

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


def task_build_bytes(task_cfg) -> int:
    """An upper bound on the bytes building the task of ``task_cfg`` allocates, from the
    config alone: its ``build_bytes()``, which every task kind has (each counts every table
    its task builds, with their temporaries); 0 for a config without one."""
    own = getattr(task_cfg, "build_bytes", None)
    return int(own()) if callable(own) else 0


def check_task_size(task_cfg, resources: ResourceConfig, hint: str | None = None) -> int:
    """Refuse to build the task of ``task_cfg`` when its tables alone exceed
    ``resources.max_gib`` (before any of them exists); the message names the ceiling and the
    ``--set`` that raises it (or ``hint``, where the ceiling is fixed). Returns the estimated
    bytes."""
    nbytes = task_build_bytes(task_cfg)
    if nbytes > resources.max_gib * GIB:
        hint = hint or ("raise the ceiling explicitly with --set resources.max_gib="
                        f"{math.ceil(nbytes / GIB)}")
        raise ConfigError(
            f"the task's tables need an estimated {gib(nbytes)} GiB of memory, more than "
            f"resources.max_gib = {resources.max_gib:g}; use a smaller task, or {hint}")
    return nbytes


def check_model_size(model: ModelConfig, resources: ResourceConfig,
                     task_bytes: int = 0) -> int:
    """Refuse to build ``model`` (``d_vocab`` and ``n_ctx`` filled in) when its weights and
    the task's tables exceed ``resources.max_gib``; returns the estimated bytes."""
    nbytes = task_bytes + _F32 * count_params(model)
    if nbytes > resources.max_gib * GIB:
        raise ConfigError(
            f"the run's model and task need an estimated {gib(nbytes)} GiB of memory, more "
            f"than resources.max_gib = {resources.max_gib:g}; use a smaller model or task, or "
            f"raise the ceiling explicitly with --set resources.max_gib="
            f"{math.ceil(nbytes / GIB)}")
    return nbytes


def check_buildable(cfg: RunConfig) -> int:
    """Refuse a run config whose task or model is too big to build under its own
    ``resources.max_gib``, from arithmetic alone (:func:`check_task_size`, then
    :func:`check_model_size` with the model's sizes taken from the task config where they
    are 0). What every stored ``config.json`` is checked with when it is read, so an edited
    config cannot make a reader allocate. Returns the task's estimated bytes."""
    if cfg.task is None:
        return 0
    nbytes = check_task_size(cfg.task, cfg.resources)
    m = cfg.model
    vocab, ctx = getattr(cfg.task, "vocab_size", None), getattr(cfg.task, "context_len", None)
    if callable(vocab) and callable(ctx):
        m = replace(m, d_vocab=m.d_vocab or vocab(), n_ctx=m.n_ctx or ctx())
    if m.d_vocab and m.n_ctx:
        check_model_size(m, cfg.resources, nbytes)
    return nbytes


MAX_PROMPTS = 1_000_000  # the most prompts an analysis takes per checkpoint (--n and kin)


def check_prompt_batch(model: ModelConfig, n: int, resources: ResourceConfig,
                       flag: str = "--n") -> int:
    """Refuse ``n`` prompts (``flag``) of an analysis on ``model`` (``d_vocab`` and ``n_ctx``
    filled in) when a cached forward pass over all of them at once (every layer's
    activations and the logits, float32, twice: cache and working copies) exceeds
    ``resources.max_gib``, before anything is allocated. Returns the estimated bytes."""
    m = model
    mlp = 0 if m.attn_only else 3 * m.d_mlp
    per_layer = 7 * m.d_model + 4 * m.n_heads * m.d_head + 2 * m.n_heads * m.n_ctx + mlp
    per_token = m.n_layers * per_layer + 4 * m.d_vocab + 2 * m.d_model
    nbytes = 2 * _F32 * int(n) * m.n_ctx * per_token + 8 * int(n) * m.n_ctx
    if nbytes > resources.max_gib * GIB:
        fit = max(1, int(n * resources.max_gib * GIB / nbytes))
        raise ConfigError(
            f"{flag} = {n} is not allowed: {n:,} prompts need an estimated {gib(nbytes)} GiB "
            f"of memory, more than the run's resources.max_gib = {resources.max_gib:g}; use "
            f"{flag} {fit} or fewer")
    return nbytes
