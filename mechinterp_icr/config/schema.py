"""The run configuration: model shape, training, resources and the run that holds them
(frozen dataclasses validated in ``__post_init__``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mechinterp_icr.config.errors import check, check_choice, check_range

# choice fields: one Literal type each, also what __post_init__ checks against
Normalization = Literal["none", "LN", "LNPre"]
ActFn = Literal["relu", "gelu", "silu", "relu2"]
PositionalEmbedding = Literal["standard", "none"]
Optimizer = Literal["adamw", "sgd"]
Decay = Literal["constant", "cosine", "linear"]
CheckpointSchedule = Literal["log", "linear", "none"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a HookedTransformer. ``d_vocab`` and ``n_ctx`` are normally set by the task."""

    n_layers: int = 2
    n_heads: int = 1
    d_model: int = 64
    d_head: int = 64
    d_mlp: int = 256
    attn_only: bool = False
    normalization: Normalization = "none"
    act_fn: ActFn = "relu"  # relu2: relu(x)**2, convex
    positional_embedding: PositionalEmbedding = "standard"
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
        check_choice("model.normalization", self.normalization, Normalization)
        check_choice("model.act_fn", self.act_fn, ActFn)
        check_choice("model.positional_embedding", self.positional_embedding,
                     PositionalEmbedding)
        check_range("model.init_range", self.init_range, 0, 10)
        check_range("model.d_vocab", self.d_vocab, 0, 10_000_000, integer=True)
        check_range("model.n_ctx", self.n_ctx, 0, 100_000, integer=True)


@dataclass(frozen=True)
class TrainConfig:
    """One training phase (pretraining or a finetuning branch)."""

    steps: int = 1000
    batch_size: int = 64
    optimizer: Optimizer = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple = (0.9, 0.999)
    momentum: float = 0.0
    grad_clip: float = 1.0  # 0 disables clipping
    warmup_steps: int = 0
    decay: Decay = "constant"
    min_lr_ratio: float = 0.1
    trainable: str = "all"  # preset name or comma-separated parameter-name patterns
    eval_every: int = 100
    eval_batch_size: int = 512
    checkpoint_schedule: CheckpointSchedule = "log"
    checkpoint_every: int = 100  # linear schedule spacing / late spacing of the log schedule
    checkpoint_dense_until: int = 0  # log schedule: every step <= this is a checkpoint
    progress: bool = True

    def __post_init__(self) -> None:
        check_range("train.steps", self.steps, 0, 10_000_000, integer=True)
        check_range("train.batch_size", self.batch_size, 1, 1_000_000, integer=True)
        check_choice("train.optimizer", self.optimizer, Optimizer)
        check_range("train.lr", self.lr, 0, 1e4, lo_open=True)
        check_range("train.weight_decay", self.weight_decay, 0, 10)
        betas = tuple(self.betas)
        check(len(betas) == 2 and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas),
              "train.betas", self.betas, "two numbers in [0, 1)")
        object.__setattr__(self, "betas", tuple(float(b) for b in betas))
        check_range("train.momentum", self.momentum, 0, 1, hi_open=True)
        check_range("train.grad_clip", self.grad_clip, 0, 1e6)
        check_range("train.warmup_steps", self.warmup_steps, 0, 10_000_000, integer=True)
        check_choice("train.decay", self.decay, Decay)
        check_range("train.min_lr_ratio", self.min_lr_ratio, 0, 1)
        check(isinstance(self.trainable, str) and self.trainable.strip() != "",
              "train.trainable", self.trainable,
              "a preset (all, attention, attention_only, no_embed, qk, wkq_pos) "
              "or comma-separated parameter-name patterns")
        check_range("train.eval_every", self.eval_every, 0, 10_000_000, integer=True)
        check_range("train.eval_batch_size", self.eval_batch_size, 1, 10_000_000, integer=True)
        check_choice("train.checkpoint_schedule", self.checkpoint_schedule,
                     CheckpointSchedule)
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
