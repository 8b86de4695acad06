"""Pairwise-pattern measurements of an IR model's attention (IR-3, IR-4, IR-6, IR-7).

The step-1 row is the attention of the query at ``s_q`` (index 2K) over the in-context
positions ``(s_1, a_1, ..., s_K, a_K, s_q)``. Its paper form for K = 2 is
``(a, a, 1/2 - a, 1/2 - a, 0)``. Measured: the within-pair gap ``max_i |A(s_i) - A(a_i)|``,
the pair masses ``A(s_i) + A(a_i)``, ``a`` (half the first pair's mass, and ``a_min``, half
the lighter pair's mass), the mass on ``s_q`` and the pair-mass spread. The step-2 row
(query at ``r*``) should sit on ``s_q``.

These work on any attention row tensor, so they serve the fast path, a HookedTransformer
(through ``run_with_cache``) and other analyses that need pairwise-pattern statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "attention_row_table",
    "fast_rows",
    "hooked_rows",
    "ir_accuracy",
    "row_stats",
    "tie_aware_correct",
]


def row_stats(row, K: int) -> dict[str, Any]:
    """Statistics of one step-1 attention row over positions 0..2K (a 1-D array)."""
    r = np.asarray(row, dtype=np.float64)[: 2 * K + 1]
    s, a = r[0: 2 * K: 2], r[1: 2 * K: 2]
    pm = s + a
    return {
        "row": r.tolist(),
        "within_pair_gap": float(np.abs(s - a).max()),
        "pair_masses": pm.tolist(),
        "a": float(pm[0] / 2),
        "a_min": float(pm.min() / 2),
        "pair_mass_spread": float(pm.max() - pm.min()),
        "mass_sq": float(r[2 * K]),
    }


@torch.no_grad()
def hooked_rows(model, tokens: torch.Tensor, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean step-1 and step-2 attention rows of a HookedTransformer over ``tokens``."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    pat = cache["pattern", 0][:, 0].double()  # (B, T, T)
    return pat[:, 2 * K].mean(0).cpu().numpy(), pat[:, 2 * K + 1].mean(0).cpu().numpy()


@torch.no_grad()
def fast_rows(fast, K: int) -> tuple[np.ndarray, np.ndarray]:
    A = fast.attention([2 * K, 2 * K + 1])
    return A[0].cpu().numpy(), A[1].cpu().numpy()


def tie_aware_correct(logits: torch.Tensor, targets: torch.Tensor,
                      rtol: float = 1e-9) -> torch.Tensor:
    """Expected correctness of argmax with random tie-breaking: 1/k when the target is among
    k maxima (within ``rtol`` of the max's scale), else 0. logits (N, V), targets (N,)."""
    mx = logits.max(-1, keepdim=True).values
    tol = rtol * mx.abs().clamp(min=1.0)
    top = logits >= mx - tol
    k = top.sum(-1).to(torch.float64)
    hit = top.gather(-1, targets[:, None]).squeeze(-1).to(torch.float64)
    return hit / k


@torch.no_grad()
def ir_accuracy(logits2: torch.Tensor, batch, chained_logits2: torch.Tensor | None = None,
                rtol: float | None = None) -> dict[str, float]:
    """Step-1 / step-2 accuracies from logits at the two CoT positions (B, 2, V), overall and on
    confusing (single, swap) sequences. Step 2 is teacher-forced (the true r* is the input);
    ``chained_logits2`` (the step-2 logits with the model's own step-1 prediction as input) gives
    the end-to-end accuracy when given. Ties are judged within ``rtol`` (default 1e-9 for
    float64 logits, 1e-5 for float32 ones, whose rounding breaks exact ties at random)."""
    if rtol is None:
        rtol = 1e-9 if logits2.dtype == torch.float64 else 1e-5
    K = (batch.tokens.shape[1] - 3) // 2
    t1, t2 = batch.targets[:, 2 * K], batch.targets[:, 2 * K + 1]
    c1 = tie_aware_correct(logits2[:, 0].double(), t1, rtol)
    c2 = tie_aware_correct(logits2[:, 1].double(), t2, rtol)
    # probability of the right relation under the model's softmax (decoding temperature T):
    # 1/2 on swap-confusing sequences at the saddle even when a tiny asymmetry breaks the tie
    p1 = torch.softmax(logits2[:, 0].double(), -1).gather(-1, t1[:, None]).squeeze(-1)
    out = {"step1_acc": float(c1.mean()), "step2_acc": float(c2.mean()),
           "step1_prob": float(p1.mean())}
    for name in ("single", "swap", "confusing"):
        m = batch.meta.get(name)
        if m is not None and bool(m.any()):
            out[f"step1_acc_{name}"] = float(c1[m].mean())
            out[f"step2_acc_{name}"] = float(c2[m].mean())
            out[f"step1_prob_{name}"] = float(p1[m].mean())
    plain = ~batch.meta["confusing"] if "confusing" in batch.meta else None
    if plain is not None and bool(plain.any()):
        out["step1_acc_plain"] = float(c1[plain].mean())
    if chained_logits2 is not None:
        out["chained_acc"] = float((tie_aware_correct(chained_logits2.double(), t2,
                                                      rtol)).mean())
    return out


@torch.no_grad()
def attention_row_table(run_path, selection: str = "all", n_eval: int = 256,
                        seed: int = 0) -> list[dict[str, Any]]:
    """Per checkpoint of an IR run directory: step-1 / step-2 accuracies (overall and on
    confusing sequences) and the step-1 row statistics, from the HookedTransformer."""
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.runs import RunDir
    from mechinterp_icr.training.loop import batch_rng

    run = RunDir(run_path)
    _cfg, task, build = load_run_model(run)
    K = task.cfg.n_pairs
    ev = task.sample(batch_rng(seed, "ir-attention-rows", 0), n_eval, split="eval")
    rows = []
    for ck, model in run.iter_models(selection, lambda: build().to("cpu")):
        model = model.to("cpu")
        logits = model(ev.tokens)[:, 2 * K: 2 * K + 2]
        r1, r2 = hooked_rows(model, ev.tokens, K)
        st = row_stats(r1, K)
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step,
                     **ir_accuracy(logits, ev), **st, "step2_mass_sq": float(r2[2 * K])})
    return rows
