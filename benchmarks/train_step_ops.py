"""What one training step of the registered CR models is made of, and whether compiling it helps.

    python benchmarks/train_step_ops.py [--steps 100] [--compile]

For the CR main model (2 layers, d_model 64, PT batch 64) and the CR-5/CR-7 mechanism model
(1 layer, 2 heads, attention only, d_model 294, frozen embeddings), both on their registered
PT batches of seed 0 and with one torch thread as a reproduction worker runs them:

- the wall time per step of the project's loop (``training.loop.train_phase``);
- the share of the profiled time (torch.profiler, every event's self time) spent in matrix
  products (``mm``, ``addmm``, ``bmm``), in the optimizer's step (whole), and in everything
  else (element-wise work, copies, softmax, indexing, autograd and Python overhead);
- with ``--compile``: the same loop's math with the model's forward compiled by
  ``torch.compile`` (inductor, CPU) against eager, timed alternately, best of 3 each, after
  the compilation (whose seconds are printed).

Timings on these machines are noisy: read the shares and the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def models():
    """(label, model builder, PT sampler, PT train config) of the two registered models."""
    from mechinterp_icr.experiments.cr.config import quick
    from mechinterp_icr.experiments.cr.mechanism_model import (
        build_mechanism_model,
        mechanism_pt_config,
    )
    from mechinterp_icr.experiments.cr.train import run_config_for
    from mechinterp_icr.models.factory import build_model

    cfg = quick()
    rc, task = run_config_for(cfg, 0, "bench")

    def sample(rng, bs):
        return task.sample_pt(rng, bs)

    # on the CPU whatever the machine has: the batches are CPU tensors, and the question is
    # the CPU step
    return [("CR main model", lambda: build_model(rc.model, seed=0, device="cpu"), sample,
             cfg.pretrain),
            ("CR-5/CR-7 mechanism model", lambda: build_mechanism_model(task, 0, cfg.cascade),
             sample, mechanism_pt_config(cfg.cascade))]


def op_shares(build, sample, tc, steps: int) -> tuple[float, dict[str, float]]:
    """(ms per step, {matmul, optimizer, other: share of the profiled time}) over
    ``steps`` steps of ``train_phase``."""
    from torch.profiler import ProfilerActivity, profile

    from mechinterp_icr.training.loop import train_phase

    tc = replace(tc, steps=steps, checkpoint_schedule="none", eval_every=0, progress=False)
    train_phase(build(), sample, replace(tc, steps=5), None, "warm", 0)
    t = time.perf_counter()
    train_phase(build(), sample, tc, None, "bench", 0)
    ms = (time.perf_counter() - t) / steps * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_phase(build(), sample, tc, None, "bench", 0)
    ev = prof.key_averages()
    # every event's self time adds up to the profiled time once; the optimizer's step is
    # counted whole (its own operators and Python), none of the matrix products is in it
    total = sum(e.self_cpu_time_total for e in ev)
    mm = sum(e.self_cpu_time_total for e in ev if e.key in MATMULS)
    opt = sum(e.cpu_time_total for e in ev if e.key.startswith("Optimizer.step"))
    return ms, {"matmul": mm / total, "optimizer": opt / total,
                "other": (total - mm - opt) / total}


def loop_ms(model, fwd, batches, steps: int) -> float:
    """ms per step of the training loop's math (target positions, masked loss, AdamW,
    clipping) with ``fwd`` as the model's forward."""
    from mechinterp_icr.tasks.base import IGNORE

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    t = time.perf_counter()
    for i in range(steps):
        b = batches[i % len(batches)]
        keep = b.targets != IGNORE
        loss = F.cross_entropy(fwd(b.tokens)[keep], b.targets[keep])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
    return (time.perf_counter() - t) / steps * 1e3


def compiled_ratio(build, sample, tc, steps: int) -> tuple[float, float, float]:
    """(compile seconds, eager ms/step, compiled ms/step): best of 3 alternating runs."""
    from mechinterp_icr.training.loop import batch_rng

    batches = [sample(batch_rng(0, "bench", s), tc.batch_size) for s in range(32)]
    eager, comp = build(), build()
    t = time.perf_counter()
    fwd = torch.compile(comp)
    fwd(batches[0].tokens)
    loop_ms(comp, fwd, batches, 3)  # the backward graph compiles on its first use
    secs = time.perf_counter() - t
    e, c = [], []
    for _ in range(3):
        e.append(loop_ms(eager, eager, batches, steps))
        c.append(loop_ms(comp, fwd, batches, steps))
    return secs, min(e), min(c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    for label, build, sample, tc in models():
        ms, share = op_shares(build, sample, tc, a.steps)
        print(f"{label}: {ms:.1f} ms/step; profiled time: " + ", ".join(
            f"{k} {v:.0%}" for k, v in share.items()))
        if a.compile:
            secs, e, c = compiled_ratio(build, sample, tc, a.steps)
            print(f"  torch.compile: {secs:.0f} s to compile; eager {e:.1f} ms/step, "
                  f"compiled {c:.1f} ms/step, compiled/eager {c / e:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
