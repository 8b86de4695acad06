"""The patching benchmark (``benchmarks/patching.py``): ratios measured in one run.

Over every selected checkpoint of a run, on the same clean/corrupted prompts:

1. exact head x position sweep of the head outputs (``z``) with the batched engine
   (:func:`interp.patching.batched_activation_patch`) and with TransformerLens's per-cell
   ``generic_activation_patch`` (the reference): both times, the ratio, the max abs difference,
   for each exact mode (plain batched; + metric-position pruning; + suffix; incremental);
2. attribution patching of the same cells: time against each exact sweep and the Spearman
   rank correlation of its scores with the exact effects.

Prompts: CR runs use held-out type pairs (``interp.roles.make_pairs``); other tasks use two
independent batches of the task (clean and corrupted) with the logit difference of their
next tokens at the last position.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mechinterp_icr.interp import patching as P

__all__ = ["benchmark_patching", "patching_prompts"]


def patching_prompts(task, n: int, seed: int = 0, K: int | None = None):
    """(clean tokens, corrupted tokens, metric, metric positions); CR prompts have ``K`` demos
    (default: the task's ``max_demos``, the longest ICL prompt the model was built for)."""
    rng = np.random.default_rng([seed, 0xBE4C])
    if hasattr(task, "sample_icl"):
        from mechinterp_icr.interp.roles import make_pairs

        K = task.cfg.max_demos if K is None else K
        K = min(K, len(task.heldout_subjects) - 2)
        base, src, target = make_pairs(task, rng, n, "type", K=K)
        qp = base.meta["query_pos"]
        metric = P.logit_diff_metric(qp, target, base.meta["answer"])
        return src.tokens, base.tokens, metric, sorted({int(q) for q in qp})
    a = task.sample(rng, n, "eval")
    b = task.sample(rng, n, "eval")
    pos = a.tokens.shape[1] - 2
    metric = P.logit_diff_metric(pos, a.tokens[:, pos + 1], b.tokens[:, pos + 1])
    return a.tokens, b.tokens, metric, [pos]


def _timed(fn, *args, **kwargs):
    t = time.perf_counter()
    r = fn(*args, **kwargs)
    return r, time.perf_counter() - t


def benchmark_patching(run, selection: str = "all", n: int = 16, max_batch: int = 4096,
                       log=print, K: int | None = None, float64_check: bool = False) -> dict:
    """The benchmark over ``selection`` of ``run``. ``float64_check`` (untimed) also runs the
    TransformerLens loop on a float64 copy of each checkpoint and reports how far each float32
    exact result (TL's own, suffix, incremental) is from it: the float32 rounding scale that
    a max abs difference between two exact methods should be read against."""
    from scipy.stats import spearmanr

    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    torch.set_grad_enabled(True)
    rd = run if isinstance(run, RunDir) else RunDir(run)
    cfg, task, build = load_run_model(rd)
    clean, corr, metric, mpos = patching_prompts(task, n, cfg.seed, K)
    log(f"{rd.path}: {n} prompt pairs of {clean.shape[1]} tokens")
    rows = []
    t_b = t_tl = t_attr = t_p = t_f = t_i = 0.0
    for ck, model in rd.iter_models(selection, build):
        dev = next(model.parameters()).device
        c, x = clean.to(dev), corr.to(dev)
        with torch.no_grad():
            _, cache = model.run_with_cache(c, names_filter=lambda nm: nm.endswith("hook_z"))
            base = float(metric(model(x)))
        ours, tb = _timed(P.patch_head_out_by_pos, model, x, cache, metric,
                          max_batch=max_batch)
        pruned, tp = _timed(P.patch_head_out_by_pos, model, x, cache, metric,
                            max_batch=max_batch, metric_positions=mpos)
        fast, tf = _timed(P.patch_head_out_by_pos, model, x, cache, metric,
                          max_batch=max_batch, metric_positions=mpos, suffix=True)
        inc, ti = _timed(P.patch_head_out_by_pos, model, x, cache, metric,
                         max_batch=max_batch, metric_positions=mpos, incremental=True)
        ref, tt = _timed(P.tl_activation_patch, model, x, cache, metric, "layer_pos_head", "z")
        # every method gets the same clean cache (computed once, outside the timings)
        attr, ta = _timed(P.attribution_patch, model, c, x, metric, "z", "pos_head",
                          clean_cache=cache)
        diff = max(float((ours - ref).abs().max()), float((pruned - ref).abs().max()))
        diff_fast = float((fast - ref).abs().max())
        diff_inc = float((inc - ref).abs().max())
        err64 = {}
        if float64_check:
            import copy

            m64 = copy.deepcopy(model).double()
            m64.cfg.dtype = torch.float64
            with torch.no_grad():
                _, c64 = m64.run_with_cache(c, names_filter=lambda nm: nm.endswith("hook_z"))
            truth = P.tl_activation_patch(m64, x, c64, metric, "layer_pos_head", "z").double()
            err64 = {f"f64_err_{k}": float((v.double() - truth).abs().max())
                     for k, v in (("tl", ref), ("suffix", fast), ("incremental", inc))}
            del m64, c64
        exact = (ours - base).flatten().cpu().numpy()
        a = attr.flatten().cpu().numpy()
        rho = float(spearmanr(exact, a).statistic) if np.ptp(exact) > 0 else float("nan")
        rows.append({"checkpoint": ck.name, "cells": int(ours.numel()), "batched_s": tb,
                     "batched_pruned_s": tp, "batched_suffix_s": tf,
                     "max_abs_diff_suffix": diff_fast, "batched_incremental_s": ti,
                     "max_abs_diff_incremental": diff_inc, **err64,
                     "tl_s": tt, "attribution_s": ta, "max_abs_diff": diff, "spearman": rho})
        t_b, t_tl, t_attr, t_p, t_f = t_b + tb, t_tl + tt, t_attr + ta, t_p + tp, t_f + tf
        t_i += ti
        log(f"{ck.name:24s} cells {ours.numel():4d}  batched {tb:7.3f}s  +pruned {tp:7.3f}s  "
            f"+suffix {tf:7.3f}s  incremental {ti:7.3f}s  "
            f"TL {tt:7.3f}s  "
            f"attribution {ta:7.3f}s  max|diff| {diff:.2e} / {diff_inc:.2e}  "
            f"spearman {rho:.3f}")
    rhos = [r["spearman"] for r in rows if not np.isnan(r["spearman"])]
    res = {"run": str(rd.path), "n_checkpoints": len(rows), "n_prompts": n,
           "prompt_len": int(clean.shape[1]), "batched_s": t_b, "tl_s": t_tl,
           "attribution_s": t_attr, "batched_speedup_vs_tl": t_tl / t_b,
           "batched_pruned_s": t_p, "batched_pruned_speedup_vs_tl": t_tl / t_p,
           "metric_positions": mpos, "batched_suffix_s": t_f,
           "batched_suffix_speedup_vs_tl": t_tl / t_f,
           "max_abs_diff_suffix": max(r["max_abs_diff_suffix"] for r in rows),
           "batched_incremental_s": t_i, "batched_incremental_speedup_vs_tl": t_tl / t_i,
           "max_abs_diff_incremental": max(r["max_abs_diff_incremental"] for r in rows),
           "attribution_speedup_vs_suffix": t_f / t_attr,
           "attribution_speedup_vs_fastest_exact": min(t_f, t_i) / t_attr,
           "attribution_speedup_vs_tl": t_tl / t_attr,
           "attribution_speedup_vs_batched": t_b / t_attr,
           "max_abs_diff": max(r["max_abs_diff"] for r in rows),
           "spearman_mean": float(np.mean(rhos)) if rhos else float("nan"),
           "spearman_min": float(np.min(rhos)) if rhos else float("nan"), "rows": rows}
    log(f"\nbatched exact vs TransformerLens per-cell: {t_tl:.2f}s / {t_b:.2f}s = "
        f"{res['batched_speedup_vs_tl']:.1f}x faster; with metric-position pruning "
        f"{t_tl:.2f}s / {t_p:.2f}s = {res['batched_pruned_speedup_vs_tl']:.1f}x; max abs diff "
        f"{res['max_abs_diff']:.2e}")
    log(f"batched + pruning + suffix (prefix KV cache): {t_tl:.2f}s / {t_f:.2f}s = "
        f"{res['batched_suffix_speedup_vs_tl']:.1f}x faster; max abs diff "
        f"{res['max_abs_diff_suffix']:.2e} (float summation order)")
    log(f"batched incremental (only what each patch changes): {t_tl:.2f}s / {t_i:.2f}s = "
        f"{res['batched_incremental_speedup_vs_tl']:.1f}x faster; max abs diff "
        f"{res['max_abs_diff_incremental']:.2e} (float summation order)")
    if float64_check:
        for k in ("tl", "suffix", "incremental"):
            res[f"f64_err_{k}"] = max(r[f"f64_err_{k}"] for r in rows)
        log(f"distance to a float64 TransformerLens reference (max abs): TL float32 "
            f"{res['f64_err_tl']:.2e}, suffix {res['f64_err_suffix']:.2e}, incremental "
            f"{res['f64_err_incremental']:.2e}")
    log(f"attribution vs exact: {res['attribution_speedup_vs_tl']:.1f}x faster than the TL "
        f"loop, {res['attribution_speedup_vs_batched']:.1f}x faster than batched exact; "
        f"{res['attribution_speedup_vs_fastest_exact']:.1f}x faster than the fastest exact mode; "
        f"Spearman rank correlation mean {res['spearman_mean']:.3f} "
        f"(min {res['spearman_min']:.3f})")
    return res
