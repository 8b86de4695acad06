"""How close a training step is to the machine: model FLOPs per step over time, against the
single-thread matrix-product peak measured in the same run.

    python benchmarks/model_flops.py [--steps 50] [--ir-n 512] [--ir-batch 256]

For the CR main model and the CR-5/CR-7 mechanism model (their registered PT batches, seed 0,
the training loop's math: masked loss, backward, clipping, AdamW) and the exact float64 IR fast
path (one full-batch gradient step of the CoT loss, ``training.pgd.fast_loss``; with one-hot
embeddings it has no matrix product at all, only gathers, and is timed only; with IR-5's random
embeddings the copy is an einsum), with one torch thread as a reproduction worker runs them:

- FLOPs per step: the matrix products of one forward and backward, counted by
  ``torch.utils.flop_counter.FlopCounterMode`` (element-wise work, softmax and the optimizer
  are not counted: they are not what a peak measures);
- ms per step (best of 3) and the achieved GFLOP/s;
- the peak: the best GFLOP/s of square matrix products (float32 for the CR models, float64
  for the IR path) of the sizes 128-1024, measured in this run on this thread;
- the ratio achieved / peak (the share of the machine a step uses).

Timings on these machines are noisy: read the ratio, not the seconds. Small models are far from
the peak by construction (d_model 64: each product is too small to fill the vector units, and
the step is dominated by the work that is not a product; benchmarks/train_step_ops.py).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def matmul_peak(dtype: torch.dtype, sizes=(128, 256, 512, 1024), reps: int = 5) -> float:
    """Best GFLOP/s of an ``n x n @ n x n`` product over ``sizes`` (2 n^3 FLOPs each)."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm
        k = max(1, int(2e8 // (2 * n ** 3)))
        for _ in range(reps):
            t = time.perf_counter()
            for _ in range(k):
                a @ b
            dt = (time.perf_counter() - t) / k
            best = max(best, 2 * n ** 3 / dt / 1e9)
    return best


def step_flops(step) -> int:
    """Matrix-product FLOPs of one call of ``step`` (a forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return int(counter.get_total_flops())


def best_ms(step, steps: int, rounds: int = 3) -> float:
    step()  # warm
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t) / steps * 1e3)
    return min(out)


def cr_steps():
    """(label, step with optimizer, forward-backward only) of the two registered CR models."""
    from train_step_ops import models

    from mechinterp_icr.tasks.base import IGNORE
    from mechinterp_icr.training.loop import batch_rng

    out = []
    for label, build, sample, tc in models():
        model = build()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=tc.lr)
        batches = [sample(batch_rng(0, "bench", s), tc.batch_size) for s in range(16)]
        state = {"i": 0}

        def fwd_bwd(model=model, batches=batches, state=state):
            b = batches[state["i"] % len(batches)]
            state["i"] += 1
            keep = b.targets != IGNORE
            loss = F.cross_entropy(model(b.tokens)[keep], b.targets[keep])
            model.zero_grad(set_to_none=True)
            loss.backward()

        def full(fwd_bwd=fwd_bwd, params=params, opt=opt):
            fwd_bwd()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()

        out.append((label, full, fwd_bwd, torch.float32))
    return out


def ir_steps(n: int, batch: int, d_embed: int):
    """(label, step, step, float64) of the exact IR fast path at ``n`` subjects, with one-hot
    embeddings (IR-1..IR-4: gathers, no matrix product) and random embeddings of width
    ``d_embed`` (IR-5's arm: the copy is an einsum)."""
    import numpy as np

    from mechinterp_icr.models.ir import FastIR, IRModelSpec
    from mechinterp_icr.tasks.ir import IRTaskConfig
    from mechinterp_icr.training.pgd import fast_loss

    task = IRTaskConfig(n_subjects=n).build(0)
    b = task.sample(np.random.default_rng(0), batch)
    out = []
    for label, spec in (("one-hot", IRModelSpec()),
                        (f"random d = {d_embed}", IRModelSpec(embedding="random",
                                                              d_embed=d_embed))):
        fast = FastIR(task, spec)

        def step(fast=fast):
            fast.B.grad = None
            fast_loss(fast, b).backward()

        out.append((f"IR fast path ({label}, n = {n}, batch {batch})", step, step,
                    torch.float64))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--ir-n", type=int, default=512)
    ap.add_argument("--ir-batch", type=int, default=256)
    ap.add_argument("--ir-d", type=int, default=128, help="random-embedding width")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    peaks = {dt: matmul_peak(dt) for dt in (torch.float32, torch.float64)}
    for dt, p in peaks.items():
        print(f"single-thread matmul peak ({str(dt).split('.')[-1]}): {p:.1f} GFLOP/s")
    for label, full, fwd_bwd, dt in [*cr_steps(), *ir_steps(a.ir_n, a.ir_batch, a.ir_d)]:
        flops = step_flops(fwd_bwd)
        ms = best_ms(full, a.steps)
        if flops == 0:
            print(f"{label}: no matrix product (gathers and scatters), {ms:.2f} ms/step")
            continue
        rate = flops / (ms / 1e3) / 1e9
        print(f"{label}: {flops / 1e6:.1f} MFLOP/step (matrix products, forward + backward), "
              f"{ms:.2f} ms/step, {rate:.2f} GFLOP/s = {rate / peaks[dt]:.1%} of the "
              f"{str(dt).split('.')[-1]} peak")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
