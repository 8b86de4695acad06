"""The one configuration of the IR reproduction: a frozen, validated dataclass tree and its
profiles.

:class:`IRConfig` holds every setting of every IR stage. Its top-level fields are the task,
the memory and the main PGD run of IR-1..IR-4 (with IR-3's gap-vs-n sizes ``gap_n`` and the
causal row overwrite's ``overwrite_n``); the sections are the other stages:
``sample_complexity`` (IR-5), ``three_pairs`` (IR-7, K = 3), ``pretrained`` (IR-6),
``hooked`` (the checkpointed HookedTransformer runs), ``token_model`` (IR-8's token-dependent
model) and ``induction`` (IR-8's induction-head control), as ``CRConfig`` has ``taskvec``,
``mechanism`` and ``cascade``. Every field is reachable by a dotted key (``--set n=1024``,
``--set sample_complexity.n=[64,128,256]``) through
:func:`mechinterp_icr.config.apply_overrides`. ``QUICK`` (the field defaults) and ``PAPER``
are the two profiles; :func:`profile` returns one by name. A bad value is a
:class:`~mechinterp_icr.config.ConfigError` naming the dotted field, the value and what is
allowed, raised before any work starts (including the task, PGD and model configs the values
produce).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mechinterp_icr.config import ConfigError, check, check_choice, check_range
from mechinterp_icr.models.ir import IRModelSpec
from mechinterp_icr.tasks.ir import IRTaskConfig
from mechinterp_icr.training.pgd import PGDConfig

__all__ = ["FLAT_KEYS", "PAPER", "PROFILES", "QUICK", "HookedConfig", "IRConfig",
           "InductionConfig", "PretrainedConfig", "SampleComplexityConfig", "ThreePairsConfig",
           "TokenModelConfig", "main_pgd", "model_spec", "profile", "sweep_width",
           "task_config"]


def _check_fields(obj, prefix: str, derived: tuple[str, ...] = (),
                  tuple_min: dict[str, tuple[int, int]] | None = None) -> None:
    """The generic checks of a config section's fields, named ``prefix + field``: a float
    > 0, an integer >= 1, a list of integers (``tuple_min``: field -> (least length, least
    value); else (1, 4)). ``derived`` fields (0 or -1 meaning "derived") only need to be
    numbers here; the task or model config they build checks them."""
    for f in dataclasses.fields(obj):
        name, value = prefix + f.name, getattr(obj, f.name)
        if f.type not in ("int", "float", "tuple[int, ...]"):  # a section: checks itself
            continue
        if f.name in derived:
            check(isinstance(value, (int, float)) and not isinstance(value, bool),
                  name, value, "a number")
            if f.type == "float":
                object.__setattr__(obj, f.name, float(value))
        elif f.type == "float":
            check_range(name, value, 0, None, lo_open=True)
            object.__setattr__(obj, f.name, float(value))
        elif f.type == "int":
            check_range(name, value, 1, None, integer=True)
        else:
            least, lo = (tuple_min or {}).get(f.name, (1, 4))
            ok = (isinstance(value, (list, tuple)) and len(value) >= least and
                  all(isinstance(v, int) and not isinstance(v, bool) and v >= lo
                      for v in value))
            check(ok, name, value, f"a list of at least {least} integer(s) >= {lo}, "
                  "e.g. [64,128,256]")
            object.__setattr__(obj, f.name, tuple(value))


@dataclass(frozen=True)
class SampleComplexityConfig:
    """IR-5: sample complexity on random embeddings of width d(n) = ``d[i]`` at n = ``d_n[i]``
    (the registered table, chosen from retrieval alone: ``experiments/ir/ir5_dn.py``; an n
    outside it, e.g. a test's tiny sizes, gets n // 2). The memory arm runs every N of ``Ns``
    (``runs`` PGD runs each, ``plateau_runs`` at its two largest N, the plateau); the learned
    arm (the positive control) the powers of two from 1 to ``learned_N_max``, ``learned_runs``
    each, its grid ended at the first N where every run reaches its stopping target. Every
    run takes ``steps`` small steps (no early stop); the learned arm's position block trains
    on the first ``learned_fit_max`` of its N sequences (its memory writes all N). The rule
    (``claims/ir5_rule.py``): target = z + ``q`` x (P - z); ``conventions`` reported; an n is
    measurable when the plateau's two means are within ``plateau_flat`` and P >=
    ``plateau_min`` x the ideal-row ceiling."""

    n: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)  # subject counts n
    d_n: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
    d: tuple[int, ...] = (96, 80, 80, 80, 64, 80)
    retrieval_triples: int = 4096  # retrieval on a seeded sample of this many triples
    # (every triple when fewer)
    # the memory arm's N grid: it reaches its plateau by N = 128 at every n (docs/ir.md)
    Ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    runs: int = 8  # memory-arm PGD runs per (n, N, seed) up to the plateau points
    plateau_runs: int = 16  # memory-arm runs at the two largest N of Ns (docs/ir.md)
    learned_runs: int = 4  # learned-arm runs per (n, N, seed)
    learned_N_max: int = 8192  # the learned arm's grid: powers of two up to this (2 x n_max)
    learned_fit_max: int = 1024  # the learned arm's position block trains on this many of N
    steps: int = 50
    eval: int = 300  # held-out evaluation sequences (also IR-3's gap-vs-n rows)
    retrieval_min: float = 0.99  # IR-5 is measurable only when retrieval >= this at every n
    q: float = 0.5  # the target's fraction of the gain from zero data to the plateau
    conventions: tuple[float, ...] = (0.3, 0.7, 0.9)  # other fractions, reported
    plateau_flat: float = 0.02  # the plateau's two means differ by at most this
    plateau_min: float = 0.95  # P(n) >= this x the ideal-row ceiling C(n)

    def __post_init__(self) -> None:
        _check_fields(self, "sample_complexity.",
                      tuple_min={"n": (2, 4), "Ns": (2, 1)})
        for name in ("retrieval_min", "q", "plateau_flat", "plateau_min"):
            check_range(f"sample_complexity.{name}", getattr(self, name), 0, 1, lo_open=True)
        conv = self.conventions
        check(isinstance(conv, (list, tuple)) and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and 0 < c < 1
            for c in conv), "sample_complexity.conventions", conv,
            "a list of fractions in (0, 1), e.g. [0.3,0.7,0.9]")
        object.__setattr__(self, "conventions", tuple(float(c) for c in conv))
        check(len(self.d) == len(self.d_n), "sample_complexity.d", list(self.d),
              f"one width per sample_complexity.d_n ({len(self.d_n)} values)")
        check(all(d < n for n, d in zip(self.d_n, self.d)), "sample_complexity.d",
              list(self.d), "widths d < n at every sample_complexity.d_n (IR-5 needs d(n) < n)")


@dataclass(frozen=True)
class ThreePairsConfig:
    """IR-7: the K = 3 setting (n subjects, N finetuning sequences)."""

    n: int = 512
    N: int = 1024

    def __post_init__(self) -> None:
        _check_fields(self, "three_pairs.")


@dataclass(frozen=True)
class PretrainedConfig:
    """IR-6: the memory pretrained on triple completion at n subjects (cosine-decayed step
    size, float32), then PGD of the position block on top of it. n = 256 is the smallest of
    32 x 2^k where the matched constructed comparator meets IR-3 (rows and IR-2's accuracies)
    on every seed (docs/registry.md)."""

    n: int = 256
    steps: int = 600  # memory pretraining steps
    N: int = 256  # finetuning sequences
    ft_steps: int = 1000
    ft_lr: float = 0.25
    lr: float = 3e-3  # memory pretraining (triple completion): step size and batch
    batch: int = 512
    hidden: int = 0  # pretrained memory width (0 = 2 n R, one unit per triple, twice)
    jitter: float = 0.0  # pretraining (s, a) -> r inputs with unequal pair masses (0: equal)

    def __post_init__(self) -> None:
        _check_fields(self, "pretrained.", derived=("hidden", "jitter"))
        check(self.hidden >= 0 and isinstance(self.hidden, int), "pretrained.hidden",
              self.hidden, "0 (= 2 n R) or an integer")


@dataclass(frozen=True)
class HookedConfig:
    """The HookedTransformer runs with checkpoints (first seed): n subjects, ``steps`` small
    steps, a checkpoint at every step up to ``dense``, N training and ``eval`` evaluation
    sequences; the attention step sizes (``attn_*``) are also IR-8's token-dependent
    model's."""

    n: int = 32
    steps: int = 120
    dense: int = 10
    attn_big_lr: float = 1.0
    attn_lr: float = 0.05
    attn_clip: float = 1.0
    N: int = 128
    eval: int = 256

    def __post_init__(self) -> None:
        _check_fields(self, "hooked.")


@dataclass(frozen=True)
class TokenModelConfig:
    """IR-8 is decided on the token-dependent model (all of W_Q, W_K trainable, n =
    ``hooked.n``, the attention step sizes ``hooked.attn_*``): N finetuning sequences, PGD for
    the whole budget of ``steps`` small steps (no early stop; its step-1 argmax on ``eval``
    validation sequences is logged every ``check_every`` small steps and never stops it);
    "solved" (``claims.ir_registry.IR8_SOLVED``) is then read on ``eval`` other fresh
    sequences."""

    N: int = 256
    steps: int = 300
    check_every: int = 100
    eval: int = 10000

    def __post_init__(self) -> None:
        _check_fields(self, "token_model.")


@dataclass(frozen=True)
class InductionConfig:
    """IR-8's induction-head control: a model trained on repeats of varying period
    (``min_period`` .. ``max_period``) and offset, sequences of ``length`` over ``tokens``."""

    min_period: int = 2
    steps: int = 600
    tokens: int = 32
    length: int = 16
    probes: int = 256
    max_period: int = 6
    d_model: int = 64
    lr: float = 3e-3
    batch: int = 64

    def __post_init__(self) -> None:
        _check_fields(self, "induction.")
        check(self.max_period >= 3, "induction.max_period", self.max_period, "an integer >= 3")
        check(2 <= self.min_period <= self.max_period, "induction.min_period", self.min_period,
              f"an integer in [2, induction.max_period = {self.max_period}]")
        check(self.length >= 2 * self.max_period, "induction.length", self.length,
              f"an integer >= {2 * self.max_period} (two repeats of the longest period, "
              "induction.max_period)")
        check(self.tokens >= 6, "induction.tokens", self.tokens, "an integer >= 6")
        check(self.d_model >= 2, "induction.d_model", self.d_model, "an integer >= 2")


@dataclass(frozen=True)
class IRConfig:
    """Settings of every IR stage (defaults = the quick profile): the task, the memory and
    the main PGD run of IR-1..IR-4 at the top, one section per other stage."""

    # -- task and the main PGD run (IR-1..IR-4)
    n: int = 512  # subjects
    R: int = 6  # relations
    N: int = 256  # finetuning sequences
    steps: int = 200  # small PGD steps before the IR-3 stopping rule is first checked
    big_lr: float = 1.0  # the large first step
    sigma: float = 0.01  # perturbation scale
    lr: float = 0.05  # small-step learning rate
    p_single: float = 0.25
    p_swap: float = 0.25
    temperature: float = 0.02
    lam2: float = 10.0
    theta_ans: float = 1.1  # memory: threshold of the answer units (s, r -> a)
    gate: float = 10.0  # memory: how far the relation units are pushed below threshold at
    # non-subject query positions
    theta_rel: float = 0.0  # memory: threshold of the relation units (s, a -> r); 0 = derived,
    # 2 / (3K) (models.ir.resolve_theta, pinned by tests/unit/test_claims_ir.py)
    # knowledge base: planted single-pair collisions (-1 = as many as Assumption 1 allows,
    # R(R-1)/2), the fraction of subjects in a planted re-pairing, answers (0 = n)
    kb_single: int = -1
    kb_swap_frac: float = 0.5
    n_answers: int = 0
    # evaluation sizes: the same in every profile (SPEC 0; the 0.999 argmax bar is <= 1 error
    # in eval_size = 1000)
    eval_size: int = 1000
    # IR-2's accuracies of a run's final state (and IR-6's and IR-7's, which reuse them) are
    # read on this many fresh sequences of the evaluation mix: argmax >= 0.999 then allows 10
    # errors, where eval_size allowed 1, below the binomial noise of the error rates measured
    # (0.0002-0.0006; docs/registry.md)
    final_eval: int = 10000
    # IR-3 stopping rule: after `steps` small steps, every `stop_every` steps, stop once the
    # within-pair gap moved by less than `stop_tol` (either way) over the last `stop_every`
    # steps (or at `stop_max` small steps)
    stop_every: int = 100
    stop_tol: float = 0.0005
    stop_max: int = 1000
    escape_spread: float = 0.05  # pair-mass spread drawn in the IR-4 figure (reported only)
    escape_eval: int = 300  # IR-2/IR-4: swap-confusing sequences (escape: P(r*) >= escape_at)
    escape_at: float = 0.9  # IR-4: escape = expected step-1 accuracy on swap sequences >= this
    gd_sym_steps: int = 400  # IR-4: plain GD budget (symmetric and eps-asymmetric data)
    eps_asym: float = 0.02  # IR-4: fraction of the pair-reversed copies replaced by fresh draws
    gap_n: tuple[int, ...] = (64, 128, 256, 512, 1024)  # IR-3: the gap against n
    overwrite_n: int = 64  # IR-3 / IR-4 causal row overwrite: sequences of each kind
    # -- the other stages
    sample_complexity: SampleComplexityConfig = field(default_factory=SampleComplexityConfig)
    three_pairs: ThreePairsConfig = field(default_factory=ThreePairsConfig)
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)
    hooked: HookedConfig = field(default_factory=HookedConfig)
    token_model: TokenModelConfig = field(default_factory=TokenModelConfig)
    induction: InductionConfig = field(default_factory=InductionConfig)

    def __post_init__(self) -> None:
        _check_fields(self, "", derived=("theta_rel", "kb_single", "n_answers"))
        check_range("eps_asym", self.eps_asym, 0, 1, lo_open=True)
        check(self.kb_single >= -1 and isinstance(self.kb_single, int), "kb_single",
              self.kb_single, "-1 (as many as Assumption 1 allows) or an integer >= 0")
        check(self.n_answers >= 0 and isinstance(self.n_answers, int), "n_answers",
              self.n_answers, "0 (= n) or an integer")
        check_range("escape_at", self.escape_at, 0, 1, lo_open=True)
        check(self.stop_max >= self.steps, "stop_max", self.stop_max,
              f"an integer >= steps ({self.steps})")
        sc = self.sample_complexity
        check(all(2 <= sweep_width(self, n) < n for n in sc.n), "sample_complexity.n",
              list(sc.n), "sizes whose width d(n) (sample_complexity.d, else n // 2) is in "
              "[2, n)")
        self._check_derived()

    def _check_derived(self) -> None:
        """The task, PGD and model configs these values produce (their errors name the
        field)."""
        sizes = {"n": [self.n], "three_pairs.n": [self.three_pairs.n],
                 "pretrained.n": [self.pretrained.n], "hooked.n": [self.hooked.n],
                 "sample_complexity.n": self.sample_complexity.n, "gap_n": self.gap_n}
        for name, ns in sizes.items():
            for n in ns:
                _checked(name, n, lambda n=n: task_config(self, n))
        _checked("three_pairs.n", self.three_pairs.n,
                 lambda: task_config(self, self.three_pairs.n, K=3))
        _checked("steps", self.steps, lambda: main_pgd(self))
        _checked("sample_complexity.d", list(self.sample_complexity.d),
                 lambda: [model_spec(self, embedding="random", d_embed=sweep_width(self, n))
                          for n in self.sample_complexity.n])
        _checked("theta_ans", self.theta_ans, lambda: model_spec(self))
        _checked("theta_rel", self.theta_rel, lambda: model_spec(self))
        _checked("pretrained.jitter", self.pretrained.jitter,
                 lambda: model_spec(self, memory="pretrained"))
        _checked("pretrained.lr", self.pretrained.lr,
                 lambda: model_spec(self, memory="pretrained"))


def _checked(name: str, value, build) -> None:
    """Build a derived config; name the IR field whose value it failed on."""
    try:
        build()
    except ConfigError as e:
        raise ConfigError(f"{name} = {value!r} gives an invalid derived config: {e}") from None


def sweep_width(cfg: IRConfig, n: int) -> int:
    """IR-5's embedding width d(n): the registered table (``sample_complexity.d_n`` ->
    ``sample_complexity.d``), or ``n // 2`` for an n outside it (not a registered setting)."""
    table = dict(zip(cfg.sample_complexity.d_n, cfg.sample_complexity.d))
    return table.get(n, n // 2)


def task_config(cfg: IRConfig, n: int, K: int = 2, sym: bool = False) -> IRTaskConfig:
    """The IR task config with ``n`` subjects and ``K`` in-context pairs (``sym``: each batch
    holds every sequence and its pair-reversed copy)."""
    return IRTaskConfig(n_subjects=n, n_relations=cfg.R, n_answers=cfg.n_answers, n_pairs=K,
                        kb_single=cfg.kb_single, kb_swap_frac=cfg.kb_swap_frac,
                        p_single=cfg.p_single, p_swap=cfg.p_swap, pair_symmetric=sym,
                        temperature=cfg.temperature)


def model_spec(cfg: IRConfig, **kw) -> IRModelSpec:
    """The IR model spec of ``cfg`` (memory constants and pretraining settings), with the
    changes ``kw`` (e.g. ``embedding="random"``, ``memory="pretrained"``)."""
    pre = cfg.pretrained
    base = dict(lam2=cfg.lam2, theta_ans=cfg.theta_ans, theta_rel=cfg.theta_rel, gate=cfg.gate,
                pretrain_steps=pre.steps, pretrain_lr=pre.lr, pretrain_batch=pre.batch,
                pretrain_hidden=pre.hidden, pretrain_pair_jitter=pre.jitter)
    return IRModelSpec(**{**base, **kw})


def main_pgd(cfg: IRConfig) -> PGDConfig:
    """PGD of the main run (also the gap, K = 3 and pretrained-memory runs, with changes)."""
    return PGDConfig(big_lr=cfg.big_lr, sigma=cfg.sigma, lr=cfg.lr, steps=cfg.steps)


# The flat keys of earlier versions -> their dotted keys now (an override or a stored summary
# with an old key is read through this, as `icr compare` reads an older summary).
FLAT_KEYS: dict[str, str] = {
    **{f"sweep_{k}": f"sample_complexity.{k}"
       for k in ("n", "d_n", "d", "retrieval_triples", "Ns", "runs", "steps", "eval",
                 "checks", "retrieval_min", "target_frac")},
    "k3_n": "three_pairs.n", "k3_N": "three_pairs.N",
    **{f"pre_{k}": f"pretrained.{k}"
       for k in ("n", "steps", "N", "ft_steps", "ft_lr", "lr", "batch", "hidden", "jitter")},
    **{f"ht_{k}": f"hooked.{k}"
       for k in ("n", "steps", "dense", "attn_big_lr", "attn_lr", "attn_clip", "N", "eval")},
    **{f"tok_{k}": f"token_model.{k}" for k in ("N", "steps", "check_every", "eval")},
    **{f"ind_{k}": f"induction.{k}"
       for k in ("min_period", "steps", "tokens", "probes", "max_period", "d_model", "lr",
                 "batch")},
    "ind_len": "induction.length", "ow_n": "overwrite_n",
}


QUICK = IRConfig()
# The paper profile differs only in what no verdict depends on (the HookedTransformer runs'
# length and checkpoints, the overwrite batches); every value the IR verdicts depend on,
# evaluation sizes included, is registered in mechinterp_icr/claims/ir_registry.py and
# identical here.
PAPER = dataclasses.replace(
    QUICK, hooked=HookedConfig(steps=600, dense=100, N=256, eval=512), overwrite_n=512)
PROFILES = ("quick", "paper")
_BY_NAME = {"quick": QUICK, "paper": PAPER}


def profile(name: str) -> IRConfig:
    """The IR config of profile ``name`` (one of :data:`PROFILES`)."""
    check_choice("profile", name, PROFILES)
    return _BY_NAME[name]
