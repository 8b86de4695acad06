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
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")


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
    from mechinterp_icr.interp.patch_bench import benchmark_patching

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
