"""Speed of the exact fast IR path against the IR HookedTransformer (ratio in one run).

One full-batch gradient step on the CoT loss (position block only) at n subjects, both
models holding the same weights; prints ms per step and the speed-up ratio.

    python benchmarks/ir_fast_vs_hooked.py --n 64 --batch 256
"""

from __future__ import annotations

import argparse
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from mechinterp_icr.models.ir import FastIR, IRModelSpec, build_ir_hooked
    from mechinterp_icr.tasks.ir import IRTaskConfig
    from mechinterp_icr.training.loop import masked_loss
    from mechinterp_icr.training.pgd import fast_loss

    torch.set_num_threads(1)
    task = IRTaskConfig(n_subjects=args.n).build(0)
    spec = IRModelSpec()
    batch = task.sample(np.random.default_rng(0), args.batch)
    ht = build_ir_hooked(task, spec, seed=0)
    fast = FastIR(task, spec)

    def step_ht():
        ht.zero_grad(set_to_none=True)
        masked_loss(ht(batch.tokens), batch.targets).backward()

    def step_fast():
        fast.B.grad = None
        fast_loss(fast, batch).backward()

    res = {}
    for name, fn in (("hooked", step_ht), ("fast", step_fast)):
        fn()
        t = time.perf_counter()
        for _ in range(args.reps):
            fn()
        res[name] = (time.perf_counter() - t) / args.reps * 1000
    print(f"n={args.n} batch={args.batch} d_model={ht.cfg.d_model} d_mlp={ht.cfg.d_mlp}")
    print(f"HookedTransformer (float32): {res['hooked']:.2f} ms/step")
    print(f"FastIR (float64, exact):     {res['fast']:.2f} ms/step")
    print(f"speed-up: {res['hooked'] / res['fast']:.1f}x")


if __name__ == "__main__":
    main()
