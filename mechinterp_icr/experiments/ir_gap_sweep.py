"""IR-6 / IR-7 investigation: does a method choice close the within-pair gap?

Within-pair equality is a flat direction of the loss (SPEC 2), so the converged gap is what
the large step and the perturbation leave. This sweeps the PGD knobs (large step ``big_lr``,
perturbation ``sigma``, number and size of the small steps) and ``n`` for the two claims that
do not hold at the defaults, over seeds, with the same data/eval draws as the reproduction
(``experiments.ir``). Used by ``analyses/ir_gap_sweep.py``; the table is in docs/ir.md.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from mechinterp_icr.experiments.ir import (
    _final,
    _rng,
    _run_fast,
    _task_cfg,
    resolve_profile,
)
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.models.ir import (
    IRModelSpec,
    memory_retrieval,
    pretrain_memory,
    token_embeddings,
)
from mechinterp_icr.training.pgd import PGDConfig

__all__ = ["gap_sweep"]


def _k3(p, seed, s):
    """IR-7 setting (K = 3) with the knobs in ``s`` (keys of the profile + PGD fields)."""
    n = s.get("n", p["k3_n"])
    tk = _task_cfg(p, n, K=3).build(seed)
    ev = tk.sample(_rng(seed, "eval3", n), p["sweep_eval"])
    train = tk.sample(_rng(seed, "train3", n), s.get("N", p["N"]))
    pgd = PGDConfig(big_lr=s.get("big_lr", p["big_lr"]), sigma=s.get("sigma", p["sigma"]),
                    lr=s.get("lr", p["lr"]), steps=s.get("steps", p["steps"]))
    _, recs = _run_fast(tk, IRModelSpec(lam2=p["lam2"]), train, ev, pgd, seed)
    return recs, 3, {}


_MEM: dict = {}


def _pre(p, seed, s):
    """IR-6 setting (pretrained memory), memory cached per (seed, n)."""
    n = s.get("n", p["pre_n"])
    tk = _task_cfg(p, n).build(seed)
    pre_steps = s.get("pre_steps", p["pre_steps"])
    jit = s.get("pretrain_pair_jitter", 0.0)
    pspec = IRModelSpec(memory="pretrained", lam2=p["lam2"], pretrain_steps=pre_steps,
                        pretrain_pair_jitter=jit)
    key = (seed, n, pre_steps, jit)
    if key not in _MEM:
        E6 = token_embeddings(tk, pspec, seed)
        _MEM[key] = (E6, pretrain_memory(tk, pspec, E6, seed))
    E6, memory = _MEM[key]
    ev = tk.sample(_rng(seed, "eval6", n), p["sweep_eval"])
    train = tk.sample(_rng(seed, "train6", n), s.get("N", p["pre_N"]))
    pgd = PGDConfig(big_lr=s.get("big_lr", p["big_lr"]), sigma=s.get("sigma", p["sigma"]),
                    lr=s.get("lr", p["pre_ft_lr"]), steps=s.get("steps", p["pre_ft_steps"]))
    _, recs = _run_fast(tk, pspec, train, ev, pgd, seed, memory=memory, E=E6)
    return recs, 2, {"memory": memory_retrieval(tk, pspec, memory, E6)}


def gap_sweep(claim: str, seeds: list[int], settings: list[dict[str, Any]],
              profile: str = "quick", log=None) -> list[dict[str, Any]]:
    """One row per (setting, seed): final within-pair gap, mass on s_q, accuracies, and the
    gap right after the large step + perturbation (step 1) and at the end."""
    torch.set_num_threads(1)
    p = resolve_profile(profile, [])
    fn = {"IR-7": _k3, "IR-6": _pre}[claim]
    rows = []
    for s in settings:
        for seed in seeds:
            t = time.perf_counter()
            recs, K, extra = fn(p, seed, s)
            f = _final(recs)
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
    base: list[dict[str, Any]] = [{}]
    base += [{"sigma": s} for s in (0.0, 0.001, 0.03, 0.1)]
    base += [{"big_lr": b} for b in (0.5, 1.0, 2.0, 20.0)]
    if claim == "IR-7":
        base += [{"steps": 1000}, {"steps": 1000, "big_lr": 1.0}, {"n": 1024}, {"N": 1024}]
    else:
        base += [{"steps": 3000}, {"steps": 3000, "big_lr": 1.0}, {"n": 64}, {"N": 1024}]
    return base
