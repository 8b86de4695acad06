"""The CR reproduction's configuration: one frozen, validated dataclass tree and its profiles.

:class:`CRConfig` holds every setting of every stage: the task, the model and the two training
phases of CR-1..3 with the evaluation sizes and the CR-3 sweep, then the sections ``taskvec``
(CR-4), ``mechanism`` (CR-5) and ``cascade`` (CR-7). Every field is reachable by a dotted key
(``--set taskvec.n_pc=4``, ``--set cascade.ft_lr=0.003``) and the tree round-trips through
``config.to_dict`` / ``config.from_dict``. The profiles ``quick`` and ``paper`` are instances
(:func:`profile`); a value that is not allowed raises ``ConfigError`` naming field, value and
what is allowed, before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mechinterp_icr.config import (
    ConfigError,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    check,
    check_choice,
    check_range,
    parse_overrides,
)
from mechinterp_icr.tasks.cr import CRTaskConfig

__all__ = [
    "PROFILES",
    "PT_FIELDS",
    "CRConfig",
    "CascadeConfig",
    "MechanismConfig",
    "TaskvecConfig",
    "paper",
    "parse_sweep_setting",
    "profile",
    "quick",
    "sweep_config",
]

PROFILES = ("quick", "paper")

# task fields that change the pretraining data (a sweep setting touching one pretrains anew)
PT_FIELDS = {"n_subjects", "n_grammar", "n_types", "n_values", "lam", "dirichlet_alpha",
             "shared_alpha", "grammar_len_min", "grammar_len_max", "order", "n_tuples"}


def _check_bool(name: str, value: Any) -> None:
    check(isinstance(value, bool), name, value, "true or false")


def _check_count(name: str, value: Any, lo: int = 1, hi: int = 1_000_000) -> None:
    check_range(name, value, lo, hi, integer=True)


@dataclass(frozen=True)
class TaskvecConfig:
    """CR-4: sizes of the task-vector and probe measurement (per seed) and its verdict."""

    n_heldout: int = 1200  # held-out-subject prompts (by-prompt split train/dev/test)
    n_finetune: int = 800  # finetune-subject prompts (transfer training set)
    n_subject_split: int = 600  # prompts per side of the by-subject split
    test_fraction: float = 0.25
    dev_fraction: float = 0.25
    n_pc: int = 3
    n_shuffles: int = 64  # label permutations of the top-PC shuffle control (full: 1/4)
    ks: tuple = (1, 2, 3, 4, 6, 8)
    n_per_k: int = 600
    lams: tuple = (0.0, 0.5, 0.9)
    lam_seeds: int = 1  # the lam sweep runs on the first this-many seeds
    lam_d_model: int = 32
    lam_d_mlp: int = 128
    lam_pt_steps: int = 500
    lam_pt_lr: float = 3e-3
    lam_ft_steps: int = 80
    curve_max_checkpoints: int = 8  # probe accuracy across finetuning checkpoints
    transplant_scale: float = 1.0
    pass_threshold: float = 0.95
    far_lower_margin: float = 0.2  # "far lower after PT": at least this much below
    control_margin: float = 0.1  # controls within this of chance

    def __post_init__(self) -> None:
        for name in ("n_heldout", "n_finetune", "n_subject_split", "n_per_k"):
            _check_count(f"taskvec.{name}", getattr(self, name), 4)
        check_range("taskvec.test_fraction", self.test_fraction, 0, 1, lo_open=True,
                    hi_open=True)
        check_range("taskvec.dev_fraction", self.dev_fraction, 0, 1, hi_open=True)
        check(self.test_fraction + self.dev_fraction < 1, "taskvec.dev_fraction",
              self.dev_fraction, f"less than 1 - taskvec.test_fraction = "
              f"{1 - self.test_fraction:g} (something must be left to train on)")
        _check_count("taskvec.n_pc", self.n_pc, 1, 4096)
        _check_count("taskvec.n_shuffles", self.n_shuffles, 1, 10_000)
        ks = tuple(self.ks)
        object.__setattr__(self, "ks", ks)
        check(len(ks) > 0 and all(isinstance(k, int) and not isinstance(k, bool) and k >= 1
                                  for k in ks), "taskvec.ks", list(ks),
              "a non-empty list of integers >= 1 (numbers of demos)")
        lams = tuple(self.lams)
        check(all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1
                  for x in lams), "taskvec.lams", list(lams),
              "a list of numbers in [0, 1] (empty: no lam sweep)")
        object.__setattr__(self, "lams", tuple(float(x) for x in lams))
        _check_count("taskvec.lam_seeds", self.lam_seeds, 0, 1000)
        _check_count("taskvec.lam_d_model", self.lam_d_model, 1, 8192)
        _check_count("taskvec.lam_d_mlp", self.lam_d_mlp, 1, 65536)
        _check_count("taskvec.lam_pt_steps", self.lam_pt_steps, 0, 10_000_000)
        check_range("taskvec.lam_pt_lr", self.lam_pt_lr, 0, 1e4, lo_open=True)
        _check_count("taskvec.lam_ft_steps", self.lam_ft_steps, 0, 10_000_000)
        _check_count("taskvec.curve_max_checkpoints", self.curve_max_checkpoints, 1, 100_000)
        check_range("taskvec.transplant_scale", self.transplant_scale, 0, 1e3)
        check_range("taskvec.pass_threshold", self.pass_threshold, 0, 1)
        check_range("taskvec.far_lower_margin", self.far_lower_margin, 0, 1)
        check_range("taskvec.control_margin", self.control_margin, 0, 1)


@dataclass(frozen=True)
class MechanismConfig:
    """CR-5: sizes of the head-role verdicts (patching pairs, checkpoints of the trajectory)."""

    n_pairs: int = 64  # prompt pairs per head-role patching verdict
    role_checkpoints: int = 4  # ft-icl checkpoints on the head-role trajectory (last included)

    def __post_init__(self) -> None:
        _check_count("mechanism.n_pairs", self.n_pairs, 1, 1_000_000)
        _check_count("mechanism.role_checkpoints", self.role_checkpoints, 1, 100_000)


@dataclass(frozen=True)
class CascadeConfig:
    """CR-7: the 1-layer 2-head attention-only mechanism model, its PT and ICL finetuning, and
    the spacing of the checkpoints at which its OV and KQ probes are logged."""

    d_model: int = 64
    d_head: int = 32
    pt_steps: int = 1500
    pt_batch: int = 64
    pt_lr: float = 3e-3
    ft_steps: int = 300
    ft_batch: int = 128
    ft_lr: float = 1e-3
    ft_trainable: str = "attention"
    dense_until: int = 40
    checkpoint_every: int = 20
    probe_batch: int = 128

    def __post_init__(self) -> None:
        _check_count("cascade.d_model", self.d_model, 1, 8192)
        _check_count("cascade.d_head", self.d_head, 1, 8192)
        _check_count("cascade.pt_steps", self.pt_steps, 0, 10_000_000)
        _check_count("cascade.pt_batch", self.pt_batch, 1, 1_000_000)
        check_range("cascade.pt_lr", self.pt_lr, 0, 1e4, lo_open=True)
        _check_count("cascade.ft_steps", self.ft_steps, 1, 10_000_000)
        _check_count("cascade.ft_batch", self.ft_batch, 1, 1_000_000)
        check_range("cascade.ft_lr", self.ft_lr, 0, 1e4, lo_open=True)
        check(isinstance(self.ft_trainable, str) and self.ft_trainable.strip() != "",
              "cascade.ft_trainable", self.ft_trainable,
              "a trainable preset (all, attention, ...) or parameter-name patterns")
        _check_count("cascade.dense_until", self.dense_until, 0, 10_000_000)
        _check_count("cascade.checkpoint_every", self.checkpoint_every, 1, 10_000_000)
        _check_count("cascade.probe_batch", self.probe_batch, 1, 1_000_000)


@dataclass(frozen=True)
class CRConfig:
    """Everything the CR reproduction runs (CR-1..7); ``--set key=value`` edits it (validated).

    The top-level fields are the CR-1..3 pipeline's (``task.*``, ``model.*``, ``pretrain.*``,
    ``finetune.*``, evaluation sizes, the CR-3 ``sweep``); ``taskvec``, ``mechanism`` and
    ``cascade`` are the sections of the CR-4, CR-5 and CR-7 stages.
    """

    task: CRTaskConfig = field(default_factory=CRTaskConfig)
    model: ModelConfig = field(default_factory=lambda: CRTaskConfig().default_model())
    pretrain: TrainConfig = field(default_factory=TrainConfig)
    finetune: TrainConfig = field(default_factory=lambda: TrainConfig(trainable="attention"))
    allweights_arm: bool = True  # also run the all-weights arm of the ICL branch (CR-2)
    allweights_iclgrm: bool = True  # ... and of the ICL+Grm branch (CR-3)
    allweights_trainable: str = "all"
    eval_n: int = 512  # sequences per evaluation cell at the end of each phase
    eval_ks: tuple = (1, 2, 4, 8)  # numbers of demos evaluated at the end
    ckpt_eval_n: int = 256  # sequences per evaluation at each checkpoint
    sweep: tuple = ()  # CR-3 sweep settings: "label|task.k=v,finetune.k=v"
    sweep_seeds: int = 3  # the sweep runs on the first this-many seeds
    taskvec: TaskvecConfig = field(default_factory=TaskvecConfig)
    mechanism: MechanismConfig = field(default_factory=MechanismConfig)
    cascade: CascadeConfig = field(default_factory=CascadeConfig)

    def __post_init__(self) -> None:
        _check_bool("allweights_arm", self.allweights_arm)
        _check_bool("allweights_iclgrm", self.allweights_iclgrm)
        check(isinstance(self.allweights_trainable, str) and self.allweights_trainable != "",
              "allweights_trainable", self.allweights_trainable, "a trainable preset")
        _check_count("eval_n", self.eval_n)
        _check_count("ckpt_eval_n", self.ckpt_eval_n)
        ks = tuple(self.eval_ks)
        object.__setattr__(self, "eval_ks", ks)
        check(len(ks) > 0 and all(isinstance(k, int) and not isinstance(k, bool) and
                                  1 <= k <= self.task.max_demos for k in ks),
              "eval_ks", list(ks), f"integers in [1, task.max_demos = {self.task.max_demos}]")
        object.__setattr__(self, "sweep", tuple(self.sweep))
        check(all(isinstance(s, str) for s in self.sweep), "sweep", list(self.sweep),
              "a list of strings 'label|task.key=value,finetune.key=value'")
        _check_count("sweep_seeds", self.sweep_seeds, 0, 1000)
        for name, cls in (("taskvec", TaskvecConfig), ("mechanism", MechanismConfig),
                          ("cascade", CascadeConfig)):
            check(isinstance(getattr(self, name), cls), name, getattr(self, name),
                  f"a {cls.__name__} section")
        _check_fits(self)
        specs = {("pretrain.trainable", self.pretrain.trainable),
                 ("finetune.trainable", self.finetune.trainable),
                 ("allweights_trainable", self.allweights_trainable)}
        for s in self.sweep:
            _, scfg, _ = sweep_config(self, s)  # every sweep setting is valid before any work
            specs.add((f"sweep setting {s!r}: finetune.trainable", scfg.finetune.trainable))
        _check_trainable(self, sorted(specs))


def _check_fits(cfg: CRConfig) -> None:
    task = cfg.task.build(0)
    m = cfg.model
    if m.n_ctx and m.n_ctx < task.n_ctx:
        raise ConfigError(f"model.n_ctx = {m.n_ctx} is not allowed; the task's longest sequence "
                          f"is {task.n_ctx} tokens (PT {task.pt_len}, ICL+Grm with "
                          f"task.max_demos = {cfg.task.max_demos} demos "
                          f"{task.icl_len[True]}); expected >= {task.n_ctx}")
    if m.d_vocab and m.d_vocab != task.d_vocab:
        raise ConfigError(f"model.d_vocab = {m.d_vocab} is not allowed; the task's vocabulary "
                          f"has {task.d_vocab} tokens (use 0 to take it from the task)")


def _check_trainable(cfg: CRConfig, specs) -> None:
    """Trainable patterns must match parameters of the model (checked on a CPU instance; the
    weights come from a private generator, so no global RNG state changes)."""
    from mechinterp_icr.models.factory import build_model
    from mechinterp_icr.training.loop import resolve_trainable

    task = cfg.task.build(0)
    model = build_model(replace(cfg.model, d_vocab=task.d_vocab,
                                n_ctx=cfg.model.n_ctx or task.n_ctx), seed=0, device="cpu")
    for name, spec in specs:
        try:
            resolve_trainable(model, spec)
        except ConfigError as e:
            raise ConfigError(f"{name}: {e}") from None


def parse_sweep_setting(setting: str) -> tuple[str, dict[str, Any]]:
    """'label|task.a=1,finetune.b=x' -> (label, {'task.a': 1, 'finetune.b': 'x'})."""
    label, sep, rest = setting.partition("|")
    if not sep:
        label, rest = setting, setting
    items = [p.strip() for p in rest.split(",") if p.strip()]
    ov = parse_overrides(items)
    for k in ov:
        check(k.split(".")[0] in ("task", "finetune") and k.count(".") == 1, "sweep", setting,
              "settings whose keys are task.<field> or finetune.<field>")
    return label.strip() or "default", ov


def sweep_config(cfg: CRConfig, setting: str) -> tuple[str, CRConfig, bool]:
    """(label, config of the sweep setting, does it need its own pretraining).

    The setting's overrides are applied to ``cfg`` without its sweep (a setting has none)."""
    label, ov = parse_sweep_setting(setting)
    try:
        scfg = apply_overrides(replace(cfg, sweep=()), ov)
    except ConfigError as e:
        raise ConfigError(f"sweep setting {setting!r}: {e}") from None
    own_pt = any(k.startswith("task.") and k.split(".")[1] in PT_FIELDS and
                 getattr(scfg.task, k.split(".")[1]) != getattr(cfg.task, k.split(".")[1])
                 for k in ov)
    t_main, t_new = cfg.task.build(0), scfg.task.build(0)
    n_ctx = cfg.model.n_ctx or t_main.n_ctx
    if t_new.n_ctx > n_ctx and not (own_pt and scfg.model.n_ctx == 0):
        raise ConfigError(f"sweep setting {setting!r} is not allowed: its sequences are up to "
                          f"{t_new.n_ctx} tokens but model.n_ctx = {n_ctx}; raise model.n_ctx")
    return label, scfg, own_pt


# ------------------------------------------------------------------------------------------------
# Profiles
# ------------------------------------------------------------------------------------------------
QUICK_SWEEP = (
    "default (gsa, shared chain, len 1-2)|",
    "type-chain grammar|task.iclgrm_chain=type",
    "len 0-2|task.iclgrm_len_min=0",
    "sga order, type chain|task.order=sga,task.iclgrm_chain=type",
)
PAPER_SWEEP = QUICK_SWEEP[:3] + (
    "no query grammar|task.iclgrm_query_grammar=false",
    "uniform grammar|task.iclgrm_chain=uniform",
    "type chain, len 0-2|task.iclgrm_chain=type,task.iclgrm_len_min=0",
    "all weights|finetune.trainable=all",
    "loss on all demo attributes|task.icl_loss=all",
    "short finetune (100 steps)|finetune.steps=100",
    "sga order, type chain|task.order=sga,task.iclgrm_chain=type",
    "sga order, shared chain|task.order=sga",
    ("sga order, type chain, no query grammar|task.order=sga,task.iclgrm_chain=type,"
     "task.iclgrm_query_grammar=false"),
    "sga order, type chain, len 0-2|task.order=sga,task.iclgrm_chain=type,task.iclgrm_len_min=0",
    "lam 0.1|task.lam=0.1",
    "lam 0.5|task.lam=0.5",
)


def _base(ft_steps: int, pt_steps: int, pt_lr: float, **kw) -> CRConfig:
    task = CRTaskConfig()
    model = replace(task.default_model(), n_ctx=64)  # headroom for longer sweep formats
    pretrain = TrainConfig(steps=pt_steps, batch_size=64, lr=pt_lr, optimizer="adamw",
                           eval_every=0, checkpoint_schedule="linear",
                           checkpoint_every=max(1, pt_steps // 4), progress=False)
    finetune = TrainConfig(steps=ft_steps, batch_size=128, lr=1e-3, trainable="attention",
                           eval_every=0, checkpoint_schedule="log", checkpoint_dense_until=10,
                           checkpoint_every=max(1, ft_steps // 4), progress=False)
    # torch threads are not a CR setting: the task engine sets them per worker (1 by default;
    # for models this small intra-op threading costs more CPU than it saves)
    return CRConfig(task=task, model=model, pretrain=pretrain, finetune=finetune, **kw)


def quick() -> CRConfig:
    """Three seeds in minutes on two CPU cores."""
    return _base(ft_steps=200, pt_steps=500, pt_lr=2e-3, sweep=QUICK_SWEEP, eval_n=512,
                 ckpt_eval_n=128, sweep_seeds=3, allweights_iclgrm=False,
                 taskvec=TaskvecConfig(), mechanism=MechanismConfig(n_pairs=64,
                                                                    role_checkpoints=4),
                 cascade=CascadeConfig(pt_steps=600, pt_batch=64, pt_lr=3e-3, ft_steps=200,
                                       ft_batch=128, ft_lr=6e-3, ft_trainable="all",
                                       dense_until=0, checkpoint_every=1, probe_batch=128))


def paper() -> CRConfig:
    """The prototype's sizes and a larger sweep."""
    return _base(ft_steps=300, pt_steps=3000, pt_lr=1e-3, sweep=PAPER_SWEEP, eval_n=1024,
                 sweep_seeds=3,
                 taskvec=TaskvecConfig(n_heldout=2400, n_finetune=1600, n_subject_split=1200,
                                       n_per_k=1200, lams=(0.0, 0.25, 0.5, 0.75, 0.9, 1.0),
                                       lam_seeds=3, lam_d_model=64, lam_d_mlp=256,
                                       lam_pt_steps=1500, lam_pt_lr=2e-3, lam_ft_steps=200,
                                       curve_max_checkpoints=16),
                 mechanism=MechanismConfig(n_pairs=256, role_checkpoints=12),
                 cascade=CascadeConfig(pt_steps=1500, pt_batch=64, pt_lr=3e-3, ft_steps=400,
                                       ft_batch=128, ft_lr=3e-3, ft_trainable="all",
                                       dense_until=0, checkpoint_every=2, probe_batch=256))


def profile(name: str) -> CRConfig:
    """The config of profile ``name`` (one of :data:`PROFILES`)."""
    check_choice("profile", name, PROFILES)
    return quick() if name == "quick" else paper()
