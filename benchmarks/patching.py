"""Exact activation patching: batched engine vs TransformerLens's per-cell loop, and
attribution patching vs exact, over a run's checkpoints, in one run.

    python benchmarks/patching.py RUN [--checkpoints all] [--n 16] [--K 8] [--out result.json]
                                      [--float64-check]

Without RUN a tiny induction model is trained into a temporary run directory first.
Prints per-checkpoint times, the speed-up ratios, the max abs difference between the two
exact sweeps, and the Spearman rank correlation of attribution scores with exact effects.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from mechinterp_icr.interp import patching as patching_api
from mechinterp_icr.interp.lens import patching_prompts

warnings.filterwarnings("ignore")


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
        ours, tb = _timed(patching_api.patch_head_out_by_pos, model, x, cache, metric,
                          max_batch=max_batch)
        pruned, tp = _timed(patching_api.patch_head_out_by_pos, model, x, cache, metric,
                            max_batch=max_batch, metric_positions=mpos)
        fast, tf = _timed(patching_api.patch_head_out_by_pos, model, x, cache, metric,
                          max_batch=max_batch, metric_positions=mpos, suffix=True)
        inc, ti = _timed(patching_api.patch_head_out_by_pos, model, x, cache, metric,
                         max_batch=max_batch, metric_positions=mpos, incremental=True)
        ref, tt = _timed(patching_api.tl_activation_patch, model, x, cache, metric,
                         patching_api.layer_pos_head_vector_patch_setter, "z")
        # every method gets the same clean cache (computed once, outside the timings)
        attr, ta = _timed(patching_api.attribution_patch, model, c, x, metric, "z", "pos_head",
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
            truth = patching_api.tl_activation_patch(
                m64, x, c64, metric, patching_api.layer_pos_head_vector_patch_setter, "z").double()
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



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=None)
    ap.add_argument("--checkpoints", default="all")
    ap.add_argument("--n", type=int, default=16, help="prompt pairs per checkpoint")
    ap.add_argument("--K", type=int, default=None, help="CR: demos per prompt (default "
                    "max_demos, the longest prompt)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    ap.add_argument("--float64-check", action="store_true", help="also compare every exact "
                    "result with TransformerLens's loop on a float64 copy (untimed)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    run = a.run
    if run is None:
        from mechinterp_icr.pipeline import resolve_run_config, train_single_phase

        run = str(Path(tempfile.mkdtemp()) / "induction")
        cfg = resolve_run_config("induction", 0, [
            "train.steps=200", "train.progress=false", "train.checkpoint_schedule=linear",
            "train.checkpoint_every=50", "train.eval_every=0", "model.attn_only=true",
            "model.n_heads=2", "model.d_head=16", "model.d_model=32", "task.half_len=6"])
        train_single_phase(cfg, Path(run))
    res = benchmark_patching(run, a.checkpoints, a.n, K=a.K, float64_check=a.float64_check)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
