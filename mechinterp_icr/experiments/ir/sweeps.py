"""Sweeps of the IR reproduction.

- IR-3: the within-pair gap of the converged step-1 row against n (:func:`gap_row`, one n).
- IR-5 (sample complexity on random embeddings) lives in :mod:`.ir5`; its functions are
  re-exported here.
- IR-6 / IR-7 investigation (:func:`gap_sweep`, used by ``analyses/ir_gap_sweep.py``; the
  table is in docs/history.md): does a method choice close the within-pair gap? Within-pair
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
from mechinterp_icr.experiments.ir.config import (
    QUICK,
    IRConfig,
    main_pgd,
    model_spec,
    task_config,
)
from mechinterp_icr.experiments.ir.ir5 import (  # noqa: F401 (re-exported)
    sample_complexity_per_seed,
    sample_complexity_row,
    sample_complexity_table,
    step1_expected,
)
from mechinterp_icr.experiments.ir.stages import (
    k3_records,
    pretrained_pgd,
    pretrained_records,
    pretrained_setting,
    stopped_run,
)
from mechinterp_icr.experiments.ir.train import final_record, tagged_rng
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.models.ir import memory_retrieval
from mechinterp_icr.training.pgd import PGDConfig

__all__ = [
    "GAP_SWEEP_KNOBS",
    "check_gap_settings",
    "gap_fit",
    "gap_sweep",
    "gap_row",
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
    evn = tk.sample(tagged_rng(seed, "eval", n), cfg.sample_complexity.eval)
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
    n = s.get("n", cfg.pretrained.n)
    pre_steps = s.get("pre_steps", cfg.pretrained.steps)
    jit = s.get("pretrain_pair_jitter", cfg.pretrained.jitter)
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
            task_config(cfg, s.get("n", cfg.three_pairs.n), K=3)
            _pgd_knobs(main_pgd(cfg), s)
        else:
            task_config(cfg, s.get("n", cfg.pretrained.n))
            _pgd_knobs(pretrained_pgd(cfg), s)
            model_spec(cfg, memory="pretrained",
                       pretrain_steps=s.get("pre_steps", cfg.pretrained.steps),
                        pretrain_pair_jitter=s.get("pretrain_pair_jitter", cfg.pretrained.jitter))
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
