"""Sweeps of the IR reproduction.

- IR-3: the within-pair gap of the converged step-1 row against n (:func:`gap_row`, one n).
- IR-5: sample complexity, the smallest number of finetuning sequences N whose PGD run
  reaches the target step-1 accuracy, over n (one-hot and random embeddings), with fits.
- IR-6 / IR-7 investigation (:func:`gap_sweep`, used by ``analyses/ir_gap_sweep.py``; the
  table is in docs/ir.md): does a method choice close the within-pair gap? Within-pair
  equality is a flat direction of the loss (SPEC 2), so the converged gap is what the large
  step and the perturbation leave; this sweeps the PGD knobs (``big_lr``, ``sigma``, number
  and size of the small steps) and ``n`` over seeds, with the same data and evaluation draws
  as the reproduction.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check, check_choice, check_range
from mechinterp_icr.experiments.ir.config import QUICK, IRConfig, main_pgd, task_config
from mechinterp_icr.experiments.ir.stages import (
    k3_records,
    pretrained_pgd,
    pretrained_records,
    pretrained_setting,
)
from mechinterp_icr.experiments.ir.train import (
    ceiling,
    eval_steps,
    final_record,
    run_fast,
    tagged_rng,
)
from mechinterp_icr.interp.ir_attention import ir_accuracy, row_stats
from mechinterp_icr.models.ir import FastIR, IRModelSpec, memory_retrieval, token_embeddings
from mechinterp_icr.training.pgd import PGDConfig, pgd_fast

__all__ = [
    "GAP_SWEEP_KNOBS",
    "check_gap_settings",
    "gap_sweep",
    "gap_row",
    "growth_fits",
    "mean_by_n",
    "random_embedding_row",
    "sample_complexity_per_seed",
    "sample_complexity_row",
    "sample_complexity_table",
    "settings_grid",
    "smallest_N",
]


# --------------------------------------------------------------------------------------------
# IR-3 gap against n
# --------------------------------------------------------------------------------------------
def gap_row(cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """The row of one n of ``gap_n``: the converged step-1 row's gap, a, mass on s_q,
    accuracy."""
    spec = IRModelSpec(lam2=cfg.lam2)
    tk = task_config(cfg, n).build(seed)
    evn = tk.sample(tagged_rng(seed, "eval", n), cfg.sweep_eval)
    train = tk.sample(tagged_rng(seed, "train", n, "raw"), cfg.N)
    _, recs = run_fast(tk, spec, train, evn, main_pgd(cfg), seed)
    f = final_record(recs)
    return {"seed": seed, "n": n, "within_pair_gap": f["within_pair_gap"],
            "a": f["a"], "mass_sq": f["mass_sq"], "step1_acc": f["step1_acc"]}


# --------------------------------------------------------------------------------------------
# IR-5 sample complexity
# --------------------------------------------------------------------------------------------
def smallest_N(task, spec: IRModelSpec, seed: int, cfg: IRConfig, E=None, ev=None,
               target: float | None = None) -> dict[str, Any]:
    """Smallest N (doubling then bisection) whose PGD run reaches step-1 acc >= target
    (default ``sweep_target`` = 0.99)."""
    target = cfg.sweep_target if target is None else target
    fast = FastIR(task, spec, seed=seed, E=E)
    pgd = PGDConfig(big_lr=cfg.big_lr, sigma=cfg.sigma, lr=cfg.lr, steps=cfg.sweep_steps)
    ev = ev if ev is not None else task.sample(
        tagged_rng(seed, "sweep-eval", task.cfg.n_subjects), cfg.sweep_eval)
    checks = {t for t in eval_steps(pgd.steps) if t >= 1} | {pgd.steps + 1}
    tried: dict[int, float] = {}

    def ok(N: int) -> bool:
        if N in tried:
            return tried[N] >= target
        with torch.no_grad():
            fast.B.zero_()
        train = task.sample(tagged_rng(seed, "sweep-train", task.cfg.n_subjects, N), N)
        best = [0.0]

        def ev_fn(f, t):
            acc = ir_accuracy(f.cot_logits(ev.tokens), ev)["step1_acc"]
            best[0] = acc
            return {"step1_acc": acc}

        pgd_fast(fast, train, pgd, seed, eval_fn=ev_fn, eval_steps=checks, record_rows=False,
                 stop_fn=lambda r: r.get("step1_acc", 0) >= target)
        tried[N] = best[0]
        return best[0] >= target

    N, hi = 1, None
    while N <= cfg.sweep_Nmax:
        if ok(N):
            hi = N
            break
        N *= 2
    if hi is None:
        return {"N": None, "target": target, "tried": tried}
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return {"N": hi, "target": target,
            "tried": {int(k): v for k, v in sorted(tried.items())}}


def sample_complexity_row(cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """:func:`smallest_N` at one n of ``sweep_n`` (one-hot embeddings)."""
    spec = IRModelSpec(lam2=cfg.lam2)
    tk = task_config(cfg, n).build(seed)
    r = smallest_N(tk, spec, seed, cfg)
    return {"seed": seed, "n": n, "embedding": "onehot", **r}


def random_embedding_row(cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """:func:`smallest_N` at one n of ``sweep_random_n`` with random embeddings of width
    ``sweep_random_d``. They interfere: the ideal-attention ceiling sits below 0.99, so the
    criterion is relative: 0.99 x ceiling."""
    rspec = IRModelSpec(lam2=cfg.lam2, embedding="random", d_embed=cfg.sweep_random_d)
    tk = task_config(cfg, n).build(seed)
    Er = token_embeddings(tk, rspec, seed)
    evr = tk.sample(tagged_rng(seed, "sweep-eval", n), cfg.sweep_eval)
    ceil_r = ceiling(tk, rspec, evr, seed)["step1_acc"]
    r = smallest_N(tk, rspec, seed, cfg, E=Er, ev=evr,
                   target=min(cfg.sweep_target, 0.99 * ceil_r))
    r["ceiling"] = ceil_r
    return {"seed": seed, "n": n, "embedding": "random", "d_embed": cfg.sweep_random_d,
            "memory": memory_retrieval(tk, rspec, None, Er), **r}


def growth_fits(ns: list[int], Ns: list[float]) -> dict[str, Any]:
    """Least-squares fits of N against log2 n and n (intercept, slope, r2) and the exponent of
    a power law in n."""
    x = np.asarray(ns, float)
    y = np.asarray(Ns, float)
    out = {}
    for name, feat in (("log_n", np.log2(x)), ("n", x)):
        A = np.stack([np.ones_like(feat), feat], 1)
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        pred = A @ coef
        ss = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else float("nan")
        out[name] = {"intercept": float(coef[0]), "slope": float(coef[1]), "r2": r2}
    lx, ly = np.log(x), np.log(np.maximum(y, 1e-9))
    A = np.stack([np.ones_like(lx), lx], 1)
    coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
    out["power_exponent"] = float(coef[1])
    return out


def mean_by_n(rows: list[dict]) -> tuple[list[int], list[float]]:
    """The n values of sweep rows and the mean N over seeds at each (NaN where none reached)."""
    by: dict[int, list] = {}
    for r in rows:
        by.setdefault(r["n"], []).append(r["N"] if r["N"] is not None else float("nan"))
    ns = sorted(by)
    return ns, [float(np.nanmean(by[n])) if not all(np.isnan(by[n])) else float("nan")
                for n in ns]


def sample_complexity_per_seed(cfg: IRConfig, rows: list[dict], seeds: list[int]
                               ) -> dict[str, dict[str, Any]]:
    """IR-5 per-seed metrics from the one-hot sweep rows (N not reached counts as
    2 x ``sweep_Nmax``): N at the smallest and largest n, their ratio, the fits."""
    Nmax = cfg.sweep_Nmax
    n_lo, n_hi = min(cfg.sweep_n), max(cfg.sweep_n)
    per = {}
    for seed in seeds:
        rr = [r for r in rows if r["seed"] == seed]
        Ns = [r["N"] if r["N"] is not None else 2 * Nmax for r in rr]
        ns = [r["n"] for r in rr]
        fit = growth_fits(ns, Ns)
        N_lo = Ns[ns.index(n_lo)]
        N_hi = Ns[ns.index(n_hi)]
        per[str(seed)] = {"N_by_n": dict(zip(map(str, ns), Ns)), "N_smallest_n": N_lo,
                          "N_largest_n": N_hi, "growth_ratio": N_hi / N_lo, "fit": fit}
    return per


def sample_complexity_table(cfg: IRConfig, rows: list[dict], rand_rows: list[dict]
                            ) -> dict[str, Any]:
    """The IR-5 summary table: every sweep row and the fits of the means over seeds."""
    Nmax = cfg.sweep_Nmax
    return {
        "rows": rows, "rows_random_embeddings": rand_rows,
        "fit_mean_onehot": growth_fits(*mean_by_n(rows)) if rows else None,
        "fit_mean_random": growth_fits(*mean_by_n(rand_rows)) if rand_rows else None,
        "note": "N = smallest number of finetuning sequences whose PGD run reaches step-1 "
                "accuracy >= 0.99 on fresh sequences (doubling then bisection); "
                f"None/{2 * Nmax} = not reached by N = {Nmax}"}


# --------------------------------------------------------------------------------------------
# IR-6 / IR-7 gap sweep
# --------------------------------------------------------------------------------------------
_PGD_KNOBS = ("big_lr", "sigma", "lr", "steps")
GAP_SWEEP_KNOBS = {"IR-7": ("n", "N") + _PGD_KNOBS,
                   "IR-6": ("n", "N", "pre_steps", "pretrain_pair_jitter") + _PGD_KNOBS}


def _pgd_knobs(base: PGDConfig, s: dict[str, Any]) -> PGDConfig:
    return replace(base, **{k: s[k] for k in _PGD_KNOBS if k in s})


def _k3(cfg: IRConfig, seed: int, s: dict[str, Any], cache: dict):
    """IR-7 setting (K = 3) with the knobs in ``s``."""
    recs = k3_records(cfg, seed, n=s.get("n"), N=s.get("N"), pgd=_pgd_knobs(main_pgd(cfg), s))
    return recs, 3, {}


def _pre(cfg: IRConfig, seed: int, s: dict[str, Any], cache: dict):
    """IR-6 setting (pretrained memory), memory cached per (seed, n, pre_steps, jitter)."""
    n = s.get("n", cfg.pre_n)
    pre_steps = s.get("pre_steps", cfg.pre_steps)
    jit = s.get("pretrain_pair_jitter", 0.0)
    key = (seed, n, pre_steps, jit)
    if key not in cache:
        cache[key] = pretrained_setting(cfg, seed, n=n, pre_steps=pre_steps, jitter=jit)
    pre = cache[key]
    recs = pretrained_records(cfg, seed, pre, N=s.get("N"),
                              pgd=_pgd_knobs(pretrained_pgd(cfg), s))
    return recs, 2, {"memory": memory_retrieval(pre.task, pre.spec, pre.memory, pre.E)}


def check_gap_settings(claim: str, settings: list[dict[str, Any]],
                       cfg: IRConfig = QUICK) -> None:
    """Raise ConfigError unless ``claim`` is IR-6 or IR-7 and every setting uses only its
    knobs (:data:`GAP_SWEEP_KNOBS`) with values the task and PGD configs accept."""
    check_choice("claim", claim, sorted(GAP_SWEEP_KNOBS))
    for s in settings:
        check(isinstance(s, dict), "setting", s, "a mapping of knob -> value")
        bad = sorted(set(s) - set(GAP_SWEEP_KNOBS[claim]))
        if bad:
            raise ConfigError(f"setting {s!r} is not allowed for {claim}: unknown knob(s) "
                              f"{bad}; expected keys among {list(GAP_SWEEP_KNOBS[claim])}")
        if claim == "IR-7":
            task_config(cfg, s.get("n", cfg.k3_n), K=3)
            _pgd_knobs(main_pgd(cfg), s)
        else:
            task_config(cfg, s.get("n", cfg.pre_n))
            _pgd_knobs(pretrained_pgd(cfg), s)
            IRModelSpec(memory="pretrained", pretrain_steps=s.get("pre_steps", cfg.pre_steps),
                        pretrain_pair_jitter=s.get("pretrain_pair_jitter", 0.0))
        for k in ("n", "N"):
            if k in s:
                check_range(f"setting {k}", s[k], 1, None, integer=True)


def gap_sweep(claim: str, seeds: list[int], settings: list[dict[str, Any]],
              cfg: IRConfig = QUICK, log: Callable[[dict], None] | None = None
              ) -> list[dict[str, Any]]:
    """One row per (setting, seed): final within-pair gap, mass on s_q, accuracies, and the
    gap right after the large step + perturbation (step 1) and at the end. A setting maps
    knobs of :data:`GAP_SWEEP_KNOBS` ``[claim]`` to values; the rest come from ``cfg``."""
    check_gap_settings(claim, settings, cfg)
    torch.set_num_threads(1)
    fn = {"IR-7": _k3, "IR-6": _pre}[claim]
    cache: dict = {}
    rows = []
    for s in settings:
        for seed in seeds:
            t = time.perf_counter()
            recs, K, extra = fn(cfg, seed, s, cache)
            f = final_record(recs)
            r1 = next(r for r in recs if r["step"] == 1)
            st1 = row_stats(r1["row1"], K)
            row = {"claim": claim, **s, "seed": seed, **extra,
                   "gap": f["within_pair_gap"], "gap_after_big": st1["within_pair_gap"],
                   "mass_sq": f["mass_sq"], "step1_acc": f["step1_acc"],
                   "step2_acc": f["step2_acc"], "row1": [round(x, 4) for x in f["row1"]],
                   "seconds": round(time.perf_counter() - t, 1)}
            rows.append(row)
            if log:
                log(row)
    return rows


def settings_grid(claim: str) -> list[dict[str, Any]]:
    """The default grid of :func:`gap_sweep` settings for ``claim`` (IR-6 or IR-7)."""
    check_choice("claim", claim, sorted(GAP_SWEEP_KNOBS))
    base: list[dict[str, Any]] = [{}]
    base += [{"sigma": s} for s in (0.0, 0.001, 0.03, 0.1)]
    base += [{"big_lr": b} for b in (0.5, 1.0, 2.0, 20.0)]
    if claim == "IR-7":
        base += [{"steps": 1000}, {"steps": 1000, "big_lr": 1.0}, {"n": 1024}, {"N": 1024}]
    else:
        base += [{"steps": 3000}, {"steps": 3000, "big_lr": 1.0}, {"n": 64}, {"N": 1024}]
    return base
