"""IR-9: is within-pair equality an attractor? (SPEC 2, new 2026-12-05; not a claim of the
paper, the test its "converges" would need.)

The main run's state right after the large step (the registered PGD: large step, then the
perturbation of the position block) has a step-1 row whose pairs are already equal (IR-3: gap
0.003-0.015), so IR-3 cannot tell an attractor from a start that never left equality. Here an
offset is imposed on the position block at the step-1 query's row, +d/2 on the first pair's
subject column and -d/2 on its attribute's, with d found by bisection so that the step-1
within-pair gap is :data:`START_GAP` (0.05, below the offset at which the row collapses onto
one pair); from there the registered small steps (``lr``) run the registered budget
(``stop_max``) on the main run's finetuning data, and the gap is read along the way.

- ``final_gap``: the within-pair gap after the budget (the rule: <= 0.02 on every seed);
- ``frozen_final_gap``: the same start and budget at learning rate 0 (negative control: it
  must keep the gap >= 0.04, i.e. the reading is not a drift of the measurement itself);
- the placebo: :func:`converged` (the code that reads convergence) on a synthetic trajectory
  decaying from the start gap to 0 (must read converged) and on one flat at the start gap
  (must not), on this run's own evaluation steps.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from mechinterp_icr.claims.registry import spec
from mechinterp_icr.experiments.ir.config import IRConfig, main_pgd
from mechinterp_icr.experiments.ir.stages import main_setting, raw_train
from mechinterp_icr.experiments.ir.train import eval_steps
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.models.ir import FastIR
from mechinterp_icr.training.pgd import fast_loss, pgd_fast

__all__ = ["START_GAP", "attractor_metrics", "converged", "converged_gap", "impose_gap",
           "per_seed_metrics"]

START_GAP = 0.05  # the within-pair gap imposed at the start (SPEC 2, IR-9; registered)


def converged_gap() -> float:
    """The gap IR-9's registered condition reads as converged (``claims.ir_registry``)."""
    return spec("IR-9").conditions[0].threshold


def _gap(fast: FastIR, K: int) -> float:
    with torch.no_grad():
        row = fast.attention([2 * K])[0, : 2 * K + 1]
    return row_stats(row.tolist(), K)["within_pair_gap"]


def impose_gap(fast: FastIR, K: int, target: float = START_GAP, iters: int = 60) -> float:
    """Add +d/2 and -d/2 to the first pair's two scores in the step-1 query's row of the
    position block, d found by bisection so that the within-pair gap is ``target``; returns d.
    The gap grows monotonically with d from the current state's (<= target)."""
    q = 2 * K
    with torch.no_grad():
        base = fast.B.detach().clone()

        def put(d: float) -> float:
            fast.B.copy_(base)
            fast.B[q, 0] += d / 2
            fast.B[q, 1] -= d / 2
            return _gap(fast, K)

        if put(0.0) >= target:
            raise ValueError(f"IR-9: the state's within-pair gap {put(0.0):.4f} is already "
                             f"at least the start gap {target}")
        lo, hi = 0.0, 1.0
        while put(hi) < target:
            lo, hi = hi, 2 * hi
            if hi > 1e3:
                raise ValueError("IR-9: no offset reaches the start gap")
        for _ in range(iters):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if put(mid) < target else (lo, mid)
        put(hi)
    return hi


def _small_steps(fast: FastIR, train, lr: float, steps: int, K: int) -> list[list[float]]:
    """``steps`` full-batch small steps at ``lr`` on the position block; the within-pair gap
    at step 0 and at the log-spaced evaluation steps (:func:`..train.eval_steps`)."""
    at = eval_steps(steps) | {steps}
    trace = [[0, _gap(fast, K)]]
    for t in range(1, steps + 1):
        fast.B.grad = None
        loss = fast_loss(fast, train)
        loss.backward()
        with torch.no_grad():
            fast.B -= lr * fast.B.grad
        if t in at:
            trace.append([t, _gap(fast, K)])
    return trace


def converged(trace: list[list[float]], threshold: float | None = None) -> bool:
    """What IR-9 reads from a gap trajectory ``[[step, gap], ...]``: converged when the gap
    at the end of the budget is at most ``threshold`` (default: the registered condition's; a
    gap that dips below and comes back is not converged)."""
    threshold = converged_gap() if threshold is None else threshold
    return bool(trace) and trace[-1][1] <= threshold


def _placebo(steps: list[int], start: float) -> dict[str, float]:
    """:func:`converged` on synthetic trajectories at ``steps``: one decaying from ``start``
    to 0 (exponentially, reaching 1% of ``start`` at the last step), one flat at ``start``."""
    last = max(steps) or 1
    decay = [[t, start * math.exp(math.log(0.01) * t / last)] for t in steps]
    flat = [[t, start] for t in steps]
    return {"placebo_decay_read": float(converged(decay)),
            "placebo_flat_read": float(converged(flat))}


def attractor_metrics(cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-9's per-seed numbers (module docstring): the large-step state's gap, the offset d,
    ``imposed`` (0 when that state's gap is already at least the start gap: nothing to impose,
    and the seed cannot be read; a small n does this),
    the gap trajectory at the registered learning rate and at 0 over ``stop_max`` small
    steps, the final gaps, the first step at which the gap reaches the registered converged gap
    (None: never), and the placebo readings."""
    main = main_setting(cfg, seed)
    train = raw_train(cfg, seed)
    K = main.task.cfg.n_pairs
    out: dict[str, Any] = {}
    traces = {}
    for arm, lr in (("learned", cfg.lr), ("frozen", 0.0)):
        fast = FastIR(main.task, main.spec, seed=seed)
        pgd_fast(fast, train, replace(main_pgd(cfg), steps=0), seed, record_rows=False)
        if arm == "learned":
            out["large_step_gap"] = _gap(fast, K)
            if out["large_step_gap"] >= START_GAP:  # nothing to impose: not readable
                return {**out, "imposed": 0.0, "start_gap": None, "final_gap": None,
                        "frozen_final_gap": None, "first_step_at_converged_gap": None,
                        "converged": None, "trace": [], "frozen_trace": [],
                        **_placebo(sorted(eval_steps(cfg.stop_max)), START_GAP)}
        d = impose_gap(fast, K)
        out[f"{arm}_offset"] = d
        traces[arm] = _small_steps(fast, train, lr, cfg.stop_max, K)
    first = next((t for t, g in traces["learned"] if g <= converged_gap()), None)
    return {**out, "imposed": 1.0, "start_gap": traces["learned"][0][1],
            "final_gap": traces["learned"][-1][1],
            "frozen_final_gap": traces["frozen"][-1][1],
            "first_step_at_converged_gap": first,
            "converged": float(converged(traces["learned"])),
            "trace": traces["learned"], "frozen_trace": traces["frozen"],
            **_placebo([t for t, _ in traces["learned"]], traces["learned"][0][1])}


def per_seed_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """IR-9's per-seed entry of ``summary.json`` from :func:`attractor_metrics`: every number
    prefixed ``ir9_`` (the registered metrics' names), the two trajectories left out (they
    go to the table 'IR-9 gap from the imposed offset')."""
    return {f"ir9_{k}": v for k, v in metrics.items() if k not in ("trace", "frozen_trace")}
