"""Sweeps of the IR reproduction.

- IR-3: the within-pair gap of the converged step-1 row against n (:func:`gap_row`, one n).
- IR-5: sample complexity on random embeddings (d = n // sweep_d_div): N read from a fitted
  curve of reaching 0.99 x the ideal-row expected-accuracy ceiling against N, over n, with
  fits against log n, (log n)^2 and n.
- IR-6 / IR-7 investigation (:func:`gap_sweep`, used by ``analyses/ir_gap_sweep.py``; the
  table is in docs/ir.md): does a method choice close the within-pair gap? Within-pair
  equality is a flat direction of the loss (SPEC 2), so the converged gap is what the large
  step and the perturbation leave; this sweeps the PGD knobs (``big_lr``, ``sigma``, number
  and size of the small steps) and ``n`` over seeds, with the same data and evaluation draws
  as the reproduction.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check, check_choice, check_range
from mechinterp_icr.experiments.ir.config import (
    QUICK,
    IRConfig,
    main_pgd,
    model_spec,
    task_config,
)
from mechinterp_icr.experiments.ir.stages import (
    k3_records,
    pretrained_pgd,
    pretrained_records,
    pretrained_setting,
    stopped_run,
)
from mechinterp_icr.experiments.ir.train import ceiling, final_record, tagged_rng
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.models.ir import FastIR, memory_retrieval, token_embeddings
from mechinterp_icr.tasks.ir import SUBJ
from mechinterp_icr.training.pgd import PGDConfig, perturbation, pgd_fast

__all__ = [
    "GAP_SWEEP_KNOBS",
    "check_gap_settings",
    "gap_fit",
    "gap_sweep",
    "gap_row",
    "growth_fits",
    "logistic_crossing",
    "polylog_bound",
    "sample_complexity_per_seed",
    "sample_complexity_row",
    "sample_complexity_table",
    "settings_grid",
    "step1_expected",
]


# --------------------------------------------------------------------------------------------
# IR-3 gap against n
# --------------------------------------------------------------------------------------------
def gap_row(cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """The row of one n of ``gap_n``: the step-1 row at IR-3's stopping rule (gap, a, mass on
    s_q, accuracy, small steps run)."""
    spec_ = model_spec(cfg)
    tk = task_config(cfg, n).build(seed)
    evn = tk.sample(tagged_rng(seed, "eval", n), cfg.sweep_eval)
    train = tk.sample(tagged_rng(seed, "train", n, "raw"), cfg.N)
    _, recs = stopped_run(cfg, tk, spec_, train, evn, seed)
    f = final_record(recs)
    return {"seed": seed, "n": n, "within_pair_gap": f["within_pair_gap"],
            "a": f["a"], "mass_sq": f["mass_sq"], "step1_acc": f["step1_acc"],
            "small_steps": f["step"] - 1,
            "gap_after_large_step": row_stats(recs[1]["row1"], 2)["within_pair_gap"]}


def gap_fit(rows: list[dict]) -> dict[str, Any]:
    """Least-squares fit of log(gap) against log(n) over every (seed, n) row: gap ~ C n^slope."""
    ns = np.log([r["n"] for r in rows])
    gs = np.log(np.maximum([r["within_pair_gap"] for r in rows], 1e-12))
    if len(set(ns.tolist())) < 2:
        return {"slope": None, "intercept": None, "r2": None}
    A = np.stack([np.ones_like(ns), ns], 1)
    coef, *_ = np.linalg.lstsq(A, gs, rcond=None)
    ss = float(((gs - gs.mean()) ** 2).sum())
    r2 = 1 - float(((gs - A @ coef) ** 2).sum()) / ss if ss > 0 else None
    return {"model": "log gap = intercept + slope * log n", "slope": float(coef[1]),
            "intercept": float(coef[0]), "r2": r2}


# --------------------------------------------------------------------------------------------
# IR-5 sample complexity on random embeddings
# --------------------------------------------------------------------------------------------
def logistic_crossing(Ns: list[int], reached: list[float]) -> float | None:
    """N at which a logistic fit of ``reached`` (0/1 per run) against log2 N crosses 1/2
    (ridge-regularised Newton, so a perfectly separated sweep still gives a finite crossing).
    None when no run reached the target; the smallest N when every run did."""
    x = np.log2(np.asarray(Ns, float))
    y = np.asarray(reached, float)
    if y.max() == 0:
        return None
    if y.min() == 1:
        return float(min(Ns))
    w = np.zeros(2)
    X = np.stack([np.ones_like(x), x], 1)
    lam = 1e-2
    for _ in range(100):
        p = 1 / (1 + np.exp(-(X @ w)))
        g = X.T @ (p - y) + lam * w
        H = X.T @ (X * (p * (1 - p))[:, None]) + lam * np.eye(2)
        w = w - np.linalg.solve(H, g)
    if w[1] <= 0:  # reaching the target does not become likelier with N
        return float(2 ** x[y > 0].min())
    return float(2 ** float(np.clip(-w[0] / w[1], x.min() - 1, x.max() + 1)))


def step1_expected(fast: FastIR, batch) -> float:
    """Expected step-1 accuracy (P(r*) at the decoding temperature) of a random-embedding
    FastIR with the constructed memory: the step-1 half of :meth:`FastIR.cot_logits`, exactly
    (a test pins it), at half the cost (the step-2 units are not evaluated)."""
    sp, task = fast.spec, fast.task
    q1 = task.step1_pos
    A = fast.attention([q1])
    copy = torch.einsum("pt,btd->bpd", A, fast.E[batch.tokens])[:, 0]
    gate = sp.gate * (fast.ttype[batch.tokens[:, q1]] != SUBJ).to(A.dtype)[:, None]
    act = torch.relu(fast.rel_input(copy) - sp.theta_rel - gate).pow(2)
    logits = torch.zeros(len(batch), fast.V, dtype=A.dtype).index_add(1, fast.r_tok, act)
    logits = logits * (sp.lam2 / task.cfg.temperature)
    t1 = batch.targets[:, q1]
    return float(torch.softmax(logits, -1).gather(-1, t1[:, None]).mean())


def sample_complexity_row(cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """IR-5 at one n of ``sweep_n``: random embeddings of width ``d = n // sweep_d_div``; the
    memory's retrieval (a seeded sample of 1024 triples), the ideal-row expected-accuracy
    ceiling and target (``sweep_target_frac`` x ceiling), the zero-data state, then
    ``sweep_runs`` PGD runs per
    N of ``sweep_Ns`` (each on its own training draw, ``sweep_steps`` small steps, stopped at
    the target) and N read from the logistic fit of reaching the target against log2 N."""
    d = n // cfg.sweep_d_div
    rspec = model_spec(cfg, embedding="random", d_embed=d)
    tk = task_config(cfg, n).build(seed)
    E = token_embeddings(tk, rspec, seed)
    ev = tk.sample(tagged_rng(seed, "sweep-eval", n), cfg.sweep_eval)
    mem = memory_retrieval(tk, rspec, None, E, max_triples=1024)
    ceil = ceiling(tk, rspec, ev, seed, E=E, key="step1_prob", grid=9)["step1_prob"]
    target = cfg.sweep_target_frac * ceil
    fast = FastIR(tk, rspec, seed=seed, E=E)
    with torch.no_grad():
        fast.B.copy_(perturbation(fast.T, cfg.sigma, seed))
        zero = step1_expected(fast, ev)
    pgd = PGDConfig(big_lr=cfg.big_lr, sigma=cfg.sigma, lr=cfg.lr, steps=cfg.sweep_steps)
    checks = {t for t in cfg.sweep_checks if t <= pgd.steps} | {pgd.steps + 1}
    runs = []
    for N in cfg.sweep_Ns:
        for r in range(cfg.sweep_runs):
            with torch.no_grad():
                fast.B.zero_()
            train = tk.sample(tagged_rng(seed, "sweep-train", n, N, r), N)
            last = [0.0]

            def ev_fn(f, t, last=last):
                if t not in checks:
                    return {}
                last[0] = step1_expected(f, ev)
                return {"p": last[0]}

            pgd_fast(fast, train, pgd, seed * 1000 + r, eval_fn=ev_fn, record_rows=False,
                     stop_fn=lambda rec: rec.get("p", 0.0) >= target)
            runs.append({"N": N, "run": r, "expected_acc": last[0],
                         "reached": float(last[0] >= target)})
    Nstar = logistic_crossing([x["N"] for x in runs], [x["reached"] for x in runs])
    return {"seed": seed, "n": n, "d_embed": d, "retrieval": min(mem.values()), **mem,
            "ceiling_expected": ceil, "target": target, "zero_data_expected_acc": zero,
            "zero_data_reaches": float(zero >= target), "N": Nstar, "runs": runs}


def growth_fits(ns: list[int], Ns: list[float]) -> dict[str, Any]:
    """Least-squares fits of N against log2 n, (log2 n)^2 and n (intercept, slope, R^2)."""
    x = np.asarray(ns, float)
    y = np.asarray(Ns, float)
    out = {}
    for name, feat in (("log_n", np.log2(x)), ("log_n_sq", np.log2(x) ** 2), ("n", x)):
        A = np.stack([np.ones_like(feat), feat], 1)
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        ss = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float(((y - A @ coef) ** 2).sum()) / ss if ss > 0 else None
        out[name] = {"intercept": float(coef[0]), "slope": float(coef[1]), "r2": r2}
    return out


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def sample_complexity_per_seed(cfg: IRConfig, rows: list[dict], seeds: list[int]
                               ) -> dict[str, dict[str, Any]]:
    """IR-5 per-seed metrics from the sweep rows: N at the smallest and largest n, the fits
    (over the n whose N was measured) and the rule's quantities. An N never reached within
    ``sweep_Ns`` is censored, i.e. not measured (None, listed in ``censored_n``); with N
    censored at n_min or n_max the rule's quantities are None and the claim is not
    measurable (:func:`..claims.ir5_not_measurable`)."""
    n_lo, n_hi = min(cfg.sweep_n), max(cfg.sweep_n)
    bound = polylog_bound(cfg.sweep_n)
    per = {}
    for seed in seeds:
        rr = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["n"])
        by = {r["n"]: r["N"] for r in rr}
        censored = [n for n in by if not _finite(by[n])]
        ns = [n for n in by if _finite(by[n])]
        N_lo, N_hi = by.get(n_lo), by.get(n_hi)
        ends = _finite(N_lo) and _finite(N_hi)
        fit = growth_fits(ns, [float(by[n]) for n in ns]) if len(ns) >= 3 else None
        r2 = {k: fit[k]["r2"] for k in fit} if fit else {"log_n": None, "log_n_sq": None,
                                                         "n": None}
        poly = max((v for k, v in r2.items() if k != "n" and _finite(v)), default=None)
        lin = r2["n"] if _finite(r2["n"]) else None
        retr = [r["retrieval"] for r in rr]
        per[str(seed)] = {
            "N_by_n": {str(n): by[n] for n in by}, "censored_n": censored,
            "N_smallest_n": N_lo, "N_largest_n": N_hi,
            "N_grows": float(N_hi > N_lo) if ends else None,
            "polylog_r2": poly,
            "polylog_beats_linear": (float(poly > lin) if ends and poly is not None and
                                     lin is not None else None),
            "growth_over_bound": (N_hi / N_lo) / bound if ends else None,
            "retrieval_min": (None if not retr or any(not _finite(v) for v in retr)
                              else min(retr)),
            "zero_data_reaches": max(r["zero_data_reaches"] for r in rr),
            "r2": r2, "fit": fit}
    return per


def polylog_bound(sweep_n) -> float:
    """IR-5 bound on N(n_max) / N(n_min): (log n_max / log n_min)^2."""
    n_lo, n_hi = min(sweep_n), max(sweep_n)
    return (math.log2(n_hi) / math.log2(n_lo)) ** 2


def sample_complexity_table(cfg: IRConfig, rows: list[dict]) -> dict[str, Any]:
    """The IR-5 summary table: every sweep row and the fits of the mean N over seeds."""
    by: dict[int, list] = {}
    for r in rows:
        by.setdefault(r["n"], [])
        if _finite(r["N"]):
            by[r["n"]].append(r["N"])
    ns = sorted(n for n in by if by[n])
    return {
        "rows": rows,
        "fit_mean": (growth_fits(ns, [float(np.mean(by[n])) for n in ns]) if len(ns) >= 3
                     else None),
        "censored": {str(n): sum(1 for r in rows if r["n"] == n and not _finite(r["N"]))
                     for n in sorted(by)},
        "note": "random embeddings of width d = n // {}; N = crossing at 1/2 of a logistic "
                "fit of 'run reached {} x the ideal-row expected-accuracy ceiling' against "
                "log2 N over {} runs per N of {} (None = never reached: censored, not "
                "measured; fit_mean over the measured N only)".format(
                    cfg.sweep_d_div, cfg.sweep_target_frac, cfg.sweep_runs,
                    list(cfg.sweep_Ns))}


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
            model_spec(cfg, memory="pretrained",
                       pretrain_steps=s.get("pre_steps", cfg.pre_steps),
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
