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
    "ROW_KEYS",
    "ir_metric_record",
    "attention_row_table",
    "candidate_rows",
    "confusion_batches",
    "critical_within_pair_gap",
    "hooked_rows",
    "ir_accuracy",
    "overwrite_attention_row",
    "overwrite_candidates",
    "overwrite_row_table",
    "overwrite_rows_across_checkpoints",
    "overwrite_rows_sweep",
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


ROW_KEYS = ("within_pair_gap", "a", "a_min", "pair_mass_spread", "mass_sq")


def ir_metric_record(logits2: torch.Tensor, row1, row2, batch, K: int) -> dict[str, Any]:
    """The metric record of one IR model state on ``batch``: :func:`ir_accuracy` of the CoT
    logits ``(B, 2, V)``, the statistics of the mean step-1 row ``row1`` (within-pair gap, a,
    a_min, pair-mass spread, mass on s_q), the row itself as ``row1``, and the step-2 row's
    mass on s_q (``step2_mass_sq``)."""
    out = ir_accuracy(logits2, batch)
    st = row_stats(row1, K)
    out.update({k: st[k] for k in ROW_KEYS})
    out["row1"] = st["row"]
    out["step2_mass_sq"] = float(row2[2 * K])
    return out


@torch.no_grad()
def hooked_rows(model, tokens: torch.Tensor, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean step-1 and step-2 attention rows of a HookedTransformer over ``tokens``."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    pat = cache["pattern", 0][:, 0].double()  # (B, T, T)
    return pat[:, 2 * K].mean(0).cpu().numpy(), pat[:, 2 * K + 1].mean(0).cpu().numpy()


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
    p2 = torch.softmax(logits2[:, 1].double(), -1).gather(-1, t2[:, None]).squeeze(-1)
    out = {"step1_acc": float(c1.mean()), "step2_acc": float(c2.mean()),
           "step1_prob": float(p1.mean()), "step2_prob": float(p2.mean())}
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
    from mechinterp_icr.store.rundir import RunDir
    from mechinterp_icr.training.loop import batch_rng

    run = RunDir(run_path)
    _cfg, task, build = load_run_model(run)
    K = task.cfg.n_pairs
    ev = task.sample(batch_rng(seed, "ir-attention-rows", 0), n_eval, split="eval")
    rows = []
    for ck, model in run.iter_models(selection, lambda: build().to("cpu", print_details=False)):
        model = model.to("cpu", print_details=False)
        logits = model(ev.tokens)[:, 2 * K: 2 * K + 2]
        r1, r2 = hooked_rows(model, ev.tokens, K)
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step,
                     **ir_metric_record(logits, r1, r2, ev, K)})
    return rows


# --------------------------------------------------------------------------------------------
# Causal test of the pairwise pattern (IR-3 / IR-4): overwrite the step-1 attention row
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def overwrite_attention_row(model, tokens: torch.Tensor, layer: int, head: int, query_pos,
                            row: torch.Tensor | np.ndarray, answer_pos=None,
                            answers: torch.Tensor | None = None, renormalise: bool = False):
    """Run ``model`` with head ``(layer, head)``'s attention row at ``query_pos`` replaced.

    ``query_pos``: int or (B,) tensor. ``row``: (n_src,) or (B, n_src) weights over source
    positions 0..n_src-1 (the rest get 0); ``renormalise`` divides by its sum. Returns the
    logits, and with ``answers`` (B,) also the accuracy of argmax at ``answer_pos`` (default
    ``query_pos``) as a second value. The overwrite goes through the ``hook_pattern`` hook, so
    the head's value vectors and everything downstream are recomputed.
    """
    from transformer_lens.utilities import get_act_name

    B, T = tokens.shape
    row = torch.as_tensor(np.asarray(row), dtype=torch.float32, device=tokens.device)
    if row.dim() == 1:
        row = row.expand(B, -1)
    if renormalise:
        row = row / row.sum(-1, keepdim=True)
    full = torch.zeros(B, T, device=tokens.device)
    full[:, :row.shape[1]] = row
    qp = torch.as_tensor(query_pos, device=tokens.device).long()
    if qp.dim() == 0:
        qp = qp.expand(B)
    bidx = torch.arange(B, device=tokens.device)

    def hook(pattern, hook):  # (B, heads, dest, src)
        pattern = pattern.clone()
        pattern[bidx, head, qp, :] = full.to(pattern.dtype)
        return pattern

    logits = model.run_with_hooks(tokens, fwd_hooks=[(get_act_name("pattern", layer), hook)])
    if answers is None:
        return logits
    ap = qp if answer_pos is None else torch.as_tensor(answer_pos, device=tokens.device).long()
    if ap.dim() == 0:
        ap = ap.expand(B)
    pred = logits[bidx, ap].argmax(-1)
    return logits, float((pred == answers.to(pred.device)).float().mean())


def candidate_rows(n_src: int = 5, a: float = 0.2, delta: float = 0.1,
                   induction_src: int | None = None) -> dict[str, np.ndarray]:
    """Standard attention rows over ``(s1, a1, s2, a2, s3)`` (IR step-1 query at ``s3``):

    ``pairwise`` ``(a, a, 1/2-a, 1/2-a, 0)``; ``one_pair`` ``(1/2, 1/2, 0, 0, 0)``;
    ``unequal`` ``(a+delta, a-delta, 1/2-a-delta, 1/2-a+delta, 0)`` (unequal within each
    pair); ``uniform`` ``1/n_src`` everywhere; ``induction`` all mass on ``induction_src``
    (default: the position before the query, a previous-token/induction-style row)."""
    if n_src != 5:
        from mechinterp_icr.config import ConfigError

        raise ConfigError(f"n_src = {n_src} is not allowed; expected 5 (the IR step-1 row "
                          "(s1, a1, s2, a2, s3)); build other rows by hand and pass them to "
                          "overwrite_attention_row")
    ind = np.zeros(n_src)
    ind[n_src - 2 if induction_src is None else induction_src] = 1.0
    return {
        "pairwise": np.array([a, a, 0.5 - a, 0.5 - a, 0.0]),
        "one_pair": np.array([0.5, 0.5, 0.0, 0.0, 0.0]),
        "unequal": np.array([a + delta, a - delta, 0.5 - a - delta, 0.5 - a + delta, 0.0]),
        "uniform": np.full(n_src, 1.0 / n_src),
        "induction": ind,
    }


def overwrite_rows_sweep(model, tokens: torch.Tensor, layer: int, head: int, query_pos,
                         rows: dict[str, np.ndarray], answers: torch.Tensor,
                         answer_pos=None) -> dict[str, float]:
    """Accuracy at ``answer_pos`` (default ``query_pos``) with no overwrite (``"model"``) and
    with each named row written into head ``(layer, head)`` at ``query_pos``."""
    B = tokens.shape[0]
    with torch.no_grad():
        logits = model(tokens)
    ap = torch.as_tensor(query_pos if answer_pos is None else answer_pos).long()
    if ap.dim() == 0:
        ap = ap.expand(B)
    out = {"model": float((logits[torch.arange(B), ap].argmax(-1).cpu() ==
                           answers.cpu()).float().mean())}
    for name, row in rows.items():
        _, acc = overwrite_attention_row(model, tokens, layer, head, query_pos, row,
                                         answer_pos=answer_pos, answers=answers)
        out[name] = acc
    return out


def confusion_batches(task, n_each: int, seed: int = 0) -> dict[str, Any]:
    """Step-1 evaluation batches on the knowledge base of ``task`` (pair_symmetric off):
    ``clean`` (not confusing by the KB flags), ``single`` (single-pair confusing, not swap)
    and ``swap`` (re-pairing confusing). Drawn from tasks with ``p_single`` / ``p_swap`` set to
    0 or 1 on the same seed; the knowledge base is checked to be the same."""
    from dataclasses import replace

    import numpy as np

    from mechinterp_icr.training.loop import batch_rng

    out = {}
    for kind, ps, pw in (("clean", 0.0, 0.0), ("single", 1.0, 0.0), ("swap", 0.0, 1.0)):
        cfg = replace(task.cfg, p_single=ps, p_swap=pw, pair_symmetric=False)
        tk = type(task)(cfg, task.seed)
        if not np.array_equal(tk.kb.f, task.kb.f):  # pragma: no cover - make_kb ignores p_*
            raise RuntimeError("knowledge base changed with p_single / p_swap")
        b = tk.sample(batch_rng(seed, f"ir-overwrite-{kind}", 0), 2 * n_each, split="eval")
        keep = {"clean": ~b.meta["confusing"], "single": b.meta["single"] & ~b.meta["swap"],
                "swap": b.meta["swap"]}[kind]
        idx = torch.nonzero(keep).squeeze(-1)[:n_each]
        out[kind] = type(b)(b.tokens[idx], b.targets[idx],
                            {k: v[idx] for k, v in b.meta.items()})
    return out


def overwrite_candidates(a: float, deltas=(0.1,), own_row: torch.Tensor | None = None
                         ) -> dict[str, Any]:
    """Rows written into the step-1 query (K = 2): the learned pairwise form
    ``(a, a, 1/2-a, 1/2-a, 0)``, one pair only, unequal within each pair by ``delta`` (in
    the direction that favours the re-paired relation: ``(a+d, a-d, 1/2-a-d, 1/2-a+d, 0)``,
    ``d`` capped at ``min(a, 1/2-a)``), uniform over the five positions, the induction-style
    (previous-token) row, and with ``own_row`` (B, 5) the model's own rows with each pair's
    mass split equally (``own_paired``: the within-pair gap removed, nothing else changed)."""
    base = candidate_rows(5, a=a, delta=0.0)
    rows: dict[str, Any] = {"pairwise": base["pairwise"], "one_pair": base["one_pair"]}
    for d in deltas:
        dd = min(float(d), a, 0.5 - a)
        rows[f"unequal_{d:g}"] = candidate_rows(5, a=a, delta=dd)["unequal"]
    rows["uniform"] = base["uniform"]
    rows["induction"] = base["induction"]
    if own_row is not None:
        r = own_row.clone()
        for i in (0, 2):
            m = (r[:, i] + r[:, i + 1]) / 2
            r[:, i], r[:, i + 1] = m, m
        rows["own_paired"] = r
    return rows


@torch.no_grad()
def overwrite_row_table(model, batches: dict[str, Any], a: float | None = None,
                        deltas=(0.1,)) -> dict[str, Any]:
    """Step-1 accuracy (tie-aware) and probability of ``r*`` on each batch with the model's
    own step-1 row (``model``) and with each row of :func:`overwrite_candidates` written into
    the head's pattern at the ``s_q`` query (:func:`overwrite_attention_row`).
    ``a`` defaults to the model's learned value: half the first pair's share of the pair mass
    of its mean step-1 row on the clean batch. K = 2."""
    K = 2
    q = 2 * K
    if a is None:
        r1, _ = hooked_rows(model, batches["clean"].tokens, K)
        a = float((r1[0] + r1[1]) / (2 * (r1[:4].sum())))
    out: dict[str, Any] = {"a": a, "acc": {}, "prob": {}}
    # one forward per row over all kinds at once (the per-call overhead dominates at this size)
    kinds = list(batches)
    tokens = torch.cat([batches[k].tokens for k in kinds])
    cuts = np.cumsum([0] + [len(batches[k]) for k in kinds])
    logits, cache = model.run_with_cache(tokens,
                                         names_filter=lambda n: n.endswith("hook_pattern"))
    own = cache["pattern", 0][:, 0, q, : q + 1].double()
    res = {"model": logits}
    for name, row in overwrite_candidates(a, deltas, own).items():
        res[name] = overwrite_attention_row(model, tokens, 0, 0, q, torch.as_tensor(row))
    for name, lg in res.items():
        for i, kind in enumerate(kinds):
            m = ir_accuracy(lg[cuts[i]: cuts[i + 1], q: q + 2], batches[kind])
            out["acc"].setdefault(name, {})[kind] = m["step1_acc"]
            out["prob"].setdefault(name, {})[kind] = m["step1_prob"]
    if "swap" in batches:
        out["critical_gap"] = critical_within_pair_gap(model, batches["swap"], a)
    return out


@torch.no_grad()
def critical_within_pair_gap(model, swap_batch, a: float, iters: int = 6) -> float:
    """Smallest within-pair gap ``2 d`` of the row ``(a+d, a-d, 1/2-a-d, 1/2-a+d, 0)`` at
    which step-1 accuracy on swap-confusing sequences drops below 1/2 (the re-paired
    relation wins), by bisection on ``d`` in ``[0, min(a, 1/2-a)]``; the largest gap tried
    when even that keeps swaps resolved. This is how far from pairwise the step-1 row may be
    before the swap confusion is decided wrongly (compare IR-3's 0.02)."""
    q = 4
    dmax = min(a, 0.5 - a)

    def fails(d: float) -> bool:
        row = candidate_rows(5, a=a, delta=d)["unequal"]
        lg = overwrite_attention_row(model, swap_batch.tokens, 0, 0, q, torch.as_tensor(row))
        return ir_accuracy(lg[:, q: q + 2], swap_batch)["step1_acc"] < 0.5

    if not fails(dmax):
        return 2 * dmax
    lo, hi = 0.0, dmax
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fails(mid) else (mid, hi)
    return float(lo + hi)  # 2 * midpoint


def overwrite_rows_across_checkpoints(run_path, selection: str = "all", n_each: int = 128,
                                      deltas=(0.1,), seed: int = 0) -> list[dict[str, Any]]:
    """:func:`overwrite_row_table` for every selected checkpoint of an IR run directory
    (the learned ``a`` is re-read at each checkpoint)."""
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    run = RunDir(run_path)
    _cfg, task, build = load_run_model(run)
    if task.cfg.n_pairs != 2:
        from mechinterp_icr.config import ConfigError

        raise ConfigError(f"task.n_pairs = {task.cfg.n_pairs} is not allowed for the row "
                          "overwrite; expected 2 (rows over (s1, a1, s2, a2, s3))")
    batches = confusion_batches(task, n_each, seed)
    rows = []
    for ck, model in run.iter_models(selection, lambda: build().to("cpu", print_details=False)):
        model = model.to("cpu", print_details=False)
        t = overwrite_row_table(model, batches, None, deltas)
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step, **t})
    return rows
