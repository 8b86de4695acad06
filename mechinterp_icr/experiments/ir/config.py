"""The one configuration of the IR reproduction: a frozen, validated dataclass and its profiles.

Every field is a flat key, so ``--set n=1024`` or ``--set sweep_n=[64,128,256]`` reaches it
through :func:`mechinterp_icr.config.apply_overrides`. ``QUICK`` (the field defaults) and
``PAPER`` are the two profiles; :func:`profile` returns one by name. A bad value is a
:class:`~mechinterp_icr.config.ConfigError` naming the field, the value and what is allowed,
raised before any work starts (including the task, PGD and model configs the values produce).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mechinterp_icr.config import ConfigError, check, check_choice, check_range
from mechinterp_icr.models.ir import IRModelSpec
from mechinterp_icr.tasks.ir import IRTaskConfig
from mechinterp_icr.training.pgd import PGDConfig

__all__ = ["IRConfig", "PAPER", "PROFILES", "QUICK", "main_pgd", "model_spec", "profile",
           "sweep_width", "task_config"]


@dataclass(frozen=True)
class IRConfig:
    """Settings of every IR stage (defaults = the quick profile)."""

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
    # (0.0002-0.0006; docs/registry.md, 2026-12-01)
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
    # -- IR-3 gap against n
    gap_n: tuple[int, ...] = (64, 128, 256, 512, 1024)
    # -- IR-5 sample complexity on random embeddings of width d(n) = sweep_d[i] at
    # n = sweep_d_n[i] (the registered table, chosen from retrieval alone:
    # experiments/ir/ir5_dn.py; an n outside it, e.g. a test's tiny sizes, gets n // 2)
    sweep_n: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
    sweep_d_n: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
    sweep_d: tuple[int, ...] = (96, 80, 80, 80, 64, 80)
    sweep_retrieval_triples: int = 4096  # IR-5's retrieval: a seeded sample of this many
    # triples (every triple when fewer)
    sweep_Ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 256, 1024)  # powers of 4 above 64:
    # the runs at large N dominate the cost (the positive control needs N ~ n R at n_min)
    sweep_runs: int = 2  # PGD runs per (n, N, seed), each on its own training draw
    sweep_steps: int = 50
    sweep_eval: int = 300
    sweep_checks: tuple[int, ...] = (1, 3, 10, 30)  # record steps a sweep run is evaluated at
    sweep_retrieval_min: float = 0.99  # IR-5 is measurable only when retrieval >= this at every n
    sweep_target_frac: float = 0.99  # IR-5 target = this x the ideal-row expected ceiling
    # -- IR-7 (K = 3) and IR-6 (pretrained memory)
    k3_n: int = 512
    k3_N: int = 1024
    # IR-6 at n = 256: the smallest n of 32 x 2^k where the matched constructed comparator
    # meets IR-3 (rows and IR-2's accuracies) on every seed (2026-12-01, session 6; was 32)
    pre_n: int = 256
    pre_steps: int = 600  # memory pretraining steps (cosine-decayed step size, float32)
    pre_N: int = 256
    pre_ft_steps: int = 1000
    pre_ft_lr: float = 0.25
    pre_lr: float = 3e-3  # memory pretraining (triple completion): step size and batch
    pre_batch: int = 512
    pre_hidden: int = 0  # pretrained memory width (0 = 2 n R, one unit per triple, twice)
    pre_jitter: float = 0.0  # pretraining (s, a) -> r inputs with unequal pair masses (0: equal)
    # -- HookedTransformer runs with checkpoints (first seed)
    ht_n: int = 32
    ht_steps: int = 120
    ht_dense: int = 10
    ht_attn_big_lr: float = 1.0
    ht_attn_lr: float = 0.05
    ht_attn_clip: float = 1.0
    ht_N: int = 128
    ht_eval: int = 256
    # -- IR-8 decided on the token-dependent model (all of W_Q, W_K trainable, n = ht_n, the
    # attention step sizes ht_attn_*): tok_N finetuning sequences, PGD until it solves the
    # task (step-1 argmax >= 0.99 on tok_eval validation sequences, checked every
    # tok_check_every small steps) within tok_steps small steps; "solved" is then read on
    # tok_eval other fresh sequences
    tok_N: int = 256
    tok_steps: int = 300
    tok_check_every: int = 100
    tok_eval: int = 2000
    # -- IR-8 induction-head control (repeats of varying period and offset)
    ind_min_period: int = 2
    ind_steps: int = 600
    ind_tokens: int = 32
    ind_len: int = 16
    ind_probes: int = 256
    ind_max_period: int = 6
    ind_d_model: int = 64
    ind_lr: float = 3e-3
    ind_batch: int = 64
    # -- IR-3 / IR-4 causal row overwrite: sequences of each kind
    ow_n: int = 64

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _OWN_CHECK:  # 0 or -1 mean "derived"; the task / model config checks
                check(isinstance(value, (int, float)) and not isinstance(value, bool),
                      f.name, value, "a number")
                if f.type == "float":
                    object.__setattr__(self, f.name, float(value))
            elif f.type == "float":
                check_range(f.name, value, 0, None, lo_open=True)
                object.__setattr__(self, f.name, float(value))
            elif f.type == "int":
                check_range(f.name, value, 1, None, integer=True)
            else:  # tuple[int, ...]
                lo = 1 if f.name in ("sweep_Ns", "sweep_checks") else 4
                least = 2 if f.name in ("sweep_n", "sweep_Ns") else 1
                ok = (isinstance(value, (list, tuple)) and len(value) >= least and
                      all(isinstance(v, int) and not isinstance(v, bool) and v >= lo
                          for v in value))
                check(ok, f.name, value, f"a list of at least {least} integer(s) >= {lo}, "
                      "e.g. [64,128,256]")
                object.__setattr__(self, f.name, tuple(value))
        check_range("eps_asym", self.eps_asym, 0, 1, lo_open=True)
        check(self.kb_single >= -1 and isinstance(self.kb_single, int), "kb_single",
              self.kb_single, "-1 (as many as Assumption 1 allows) or an integer >= 0")
        check(self.n_answers >= 0 and isinstance(self.n_answers, int), "n_answers",
              self.n_answers, "0 (= n) or an integer")
        check(self.pre_hidden >= 0 and isinstance(self.pre_hidden, int), "pre_hidden",
              self.pre_hidden, "0 (= 2 n R) or an integer")
        check(2 <= self.ind_min_period <= self.ind_max_period, "ind_min_period",
              self.ind_min_period, f"an integer in [2, ind_max_period = {self.ind_max_period}]")
        for name in ("escape_at", "sweep_retrieval_min", "sweep_target_frac"):
            check_range(name, getattr(self, name), 0, 1, lo_open=True)
        check(self.stop_max >= self.steps, "stop_max", self.stop_max,
              f"an integer >= steps ({self.steps})")
        check(len(self.sweep_d) == len(self.sweep_d_n), "sweep_d", list(self.sweep_d),
              f"one width per sweep_d_n ({len(self.sweep_d_n)} values)")
        check(all(d < n for n, d in zip(self.sweep_d_n, self.sweep_d)), "sweep_d",
              list(self.sweep_d), "widths d < n at every sweep_d_n (IR-5 needs d(n) < n)")
        check(all(2 <= sweep_width(self, n) < n for n in self.sweep_n), "sweep_n",
              list(self.sweep_n), "sizes whose width d(n) (sweep_d, else n // 2) is in [2, n)")
        check(self.ind_len >= 2 * self.ind_max_period, "ind_len", self.ind_len,
              f"an integer >= {2 * self.ind_max_period} (two repeats of the longest period, "
              "ind_max_period)")
        check(self.ind_max_period >= 3, "ind_max_period", self.ind_max_period,
              "an integer >= 3")
        check(self.ind_tokens >= 6, "ind_tokens", self.ind_tokens, "an integer >= 6")
        check(self.ind_d_model >= 2, "ind_d_model", self.ind_d_model, "an integer >= 2")
        # the task, PGD and model configs these values produce (their errors name the field)
        sizes = {"n": [self.n], "k3_n": [self.k3_n], "pre_n": [self.pre_n],
                 "ht_n": [self.ht_n], "sweep_n": self.sweep_n, "gap_n": self.gap_n}
        for name, ns in sizes.items():
            for n in ns:
                _checked(name, n, lambda n=n: task_config(self, n))
        _checked("k3_n", self.k3_n, lambda: task_config(self, self.k3_n, K=3))
        _checked("steps", self.steps, lambda: main_pgd(self))
        _checked("sweep_d", list(self.sweep_d),
                 lambda: [model_spec(self, embedding="random", d_embed=sweep_width(self, n))
                          for n in self.sweep_n])
        _checked("theta_ans", self.theta_ans, lambda: model_spec(self))
        _checked("theta_rel", self.theta_rel, lambda: model_spec(self))
        _checked("pre_jitter", self.pre_jitter, lambda: model_spec(self, memory="pretrained"))
        _checked("pre_lr", self.pre_lr, lambda: model_spec(self, memory="pretrained"))


# fields whose 0 (or -1) means "derived" (checked by the task or model config they build)
_OWN_CHECK = ("theta_rel", "kb_single", "n_answers", "pre_hidden", "pre_jitter")


def _checked(name: str, value, build) -> None:
    """Build a derived config; name the IR field whose value it failed on."""
    try:
        build()
    except ConfigError as e:
        raise ConfigError(f"{name} = {value!r} gives an invalid derived config: {e}") from None


def sweep_width(cfg: IRConfig, n: int) -> int:
    """IR-5's embedding width d(n): the registered table (``sweep_d_n`` -> ``sweep_d``), or
    ``n // 2`` for an n outside it (not a registered setting)."""
    table = dict(zip(cfg.sweep_d_n, cfg.sweep_d))
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
    base = dict(lam2=cfg.lam2, theta_ans=cfg.theta_ans, theta_rel=cfg.theta_rel, gate=cfg.gate,
                pretrain_steps=cfg.pre_steps, pretrain_lr=cfg.pre_lr,
                pretrain_batch=cfg.pre_batch, pretrain_hidden=cfg.pre_hidden,
                pretrain_pair_jitter=cfg.pre_jitter)
    return IRModelSpec(**{**base, **kw})


def main_pgd(cfg: IRConfig) -> PGDConfig:
    """PGD of the main run (also the gap, K = 3 and pretrained-memory runs, with changes)."""
    return PGDConfig(big_lr=cfg.big_lr, sigma=cfg.sigma, lr=cfg.lr, steps=cfg.steps)


QUICK = IRConfig()
# The paper profile differs only in what no verdict depends on (the HookedTransformer runs'
# length and checkpoints, the overwrite batches); every value the IR verdicts depend on,
# evaluation sizes included, is registered in mechinterp_icr/claims/ir_registry.py and
# identical here.
PAPER = IRConfig(
    ht_steps=600, ht_dense=100, ht_N=256, ht_eval=512,
    ow_n=512,
)
PROFILES = ("quick", "paper")
_BY_NAME = {"quick": QUICK, "paper": PAPER}


def profile(name: str) -> IRConfig:
    """The IR config of profile ``name`` (one of :data:`PROFILES`)."""
    check_choice("profile", name, PROFILES)
    return _BY_NAME[name]
