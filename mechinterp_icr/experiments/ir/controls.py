"""Controls of the IR reproduction.

- IR-8: the learned step-1 row replaced by induction-style rows (causal), and the
  baseline-subtracted prefix-matching score of the learned IR head and of an induction-head
  control (a 2-layer attention-only model trained on repeats of varying period and offset),
  by the project's code and by TransformerLens's ``head_detector``.
- IR-3 / IR-4 causal test: the step-1 attention row overwritten with fixed rows (per seed)
  and across the checkpoints of the first seed's HookedTransformer runs, and the summary
  table of both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechinterp_icr.claims import ci95
from mechinterp_icr.claims.protocol import UNIT
from mechinterp_icr.config import ModelConfig, TrainConfig
from mechinterp_icr.experiments.ir.config import IRConfig, model_spec, task_config
from mechinterp_icr.experiments.ir.train import tagged_rng
from mechinterp_icr.interp.ir_attention import (
    confusion_batches,
    ir_accuracy,
    overwrite_row_table,
    overwrite_rows_across_checkpoints,
)
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.models.ir import build_ir_hooked
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.induction import InductionTaskConfig
from mechinterp_icr.training.loop import train_phase

__all__ = [
    "OW_DELTAS",
    "OW_RUNS",
    "OW_STEPS",
    "PROBE_SHAPES",
    "causal_table",
    "induction_control",
    "induction_probes",
    "induction_row_test",
    "induction_targets",
    "ir_head_scores",
    "prefix_matching_score",
    "tl_induction_score",
    "overwrite_fixed_rows",
    "overwrite_label",
    "overwrite_run_rows",
    "overwrite_selection",
]

OW_DELTAS = (0.02, 0.1)  # half within-pair gaps of the "unequal" rows
OW_STEPS = (0, 3, 10, 34)  # small-phase checkpoints read (plus init, big step and last);
# these exist with the quick (dense 10) and paper (dense 100) grids
OW_RUNS = ("ht_sym_pgd", "ht_sym_gd", "ht_raw_pgd", "ht_raw_gd", "ht_raw_qk_pgd")


# --------------------------------------------------------------------------------------------
# IR-8: induction-style row replacement, prefix-matching scores, the induction-head control
# --------------------------------------------------------------------------------------------
TL_SCORE_PROBES = 64  # probes TransformerLens's head_detector scores (its loop is per probe)
PROBE_SHAPES = ((0, 3), (0, 4), (1, 3))  # (offset, period) of the probes after the first token


def induction_probes(L: int, n_tokens: int, count: int, seed: int) -> torch.Tensor:
    """(count, L) probes of the same length for every scored head: token 0 first (the BOS of
    the induction model), then ``o`` random tokens and a block of ``p`` distinct random
    tokens repeated (``(o, p)`` cycling through :data:`PROBE_SHAPES`; period >= 3, so a
    previous-token head does not count as an induction head), ids in ``1..n_tokens``."""
    rng = tagged_rng(seed, "ir8-probes", L)
    out = np.zeros((count, L), np.int64)
    for i in range(count):
        o, p = PROBE_SHAPES[i % len(PROBE_SHAPES)]
        ids = rng.permutation(n_tokens)[: o + p] + 1
        out[i, 1:] = np.concatenate([ids[p:], np.resize(ids[:p], L - 1 - o)])
    return torch.from_numpy(out)


def induction_targets(tokens: torch.Tensor) -> torch.Tensor:
    """(P, L, L) 0/1: source j of destination t is an induction target when the token before
    j equals the token at t (an earlier occurrence, j - 1 < t)."""
    P, L = tokens.shape
    prev = torch.zeros_like(tokens) - 1
    prev[:, 1:] = tokens[:, :-1]
    m = (prev[:, None, :] == tokens[:, :, None]).double()  # [p, t, j]
    return m * torch.tril(torch.ones(L, L, dtype=torch.float64), -1)


def prefix_matching_score(pattern: torch.Tensor, tokens: torch.Tensor) -> dict[str, float]:
    """The project's baseline-subtracted prefix-matching score of one head's attention
    ``pattern`` (P, L, L) on ``tokens``: over destinations with an induction target, the mass
    on the targets minus what uniform causal attention puts there."""
    M = induction_targets(tokens)
    L = tokens.shape[1]
    rows = M.sum(-1) > 0
    uni = torch.tril(torch.ones(L, L, dtype=torch.float64))
    uni = uni / uni.sum(-1, keepdim=True)
    head = (pattern.double() * M).sum(-1)[rows]
    base = (uni[None] * M).sum(-1)[rows]
    return {"score": float(head.mean()), "baseline": float(base.mean()),
            "score_minus_baseline": float((head - base).mean())}


def tl_induction_score(model, tokens: torch.Tensor, layer: int, head: int) -> dict[str, float]:
    """TransformerLens's ``head_detector.detect_head(..., "induction_head")`` of head
    ``(layer, head)`` on each probe, minus the same function's score of uniform causal
    attention (the baseline). Its "mul" score divides by every row of the probe, including
    rows with no possible target, so both are rescaled by L / (rows with a target): the mean
    mass per scored destination, the project score's unit. Averaged over probes."""
    from transformer_lens.head_detector import (
        compute_head_attention_similarity_score,
        detect_head,
        get_induction_head_detection_pattern,
    )

    L = tokens.shape[1]
    uni = torch.tril(torch.ones(L, L))
    uni = uni / uni.sum(-1, keepdim=True)
    had = "to_tokens" in model.__dict__
    heads, bases = [], []
    try:
        for tok in tokens:
            model.to_tokens = lambda *a, _t=tok, **k: _t[None]
            det = get_induction_head_detection_pattern(tok[None])
            scale = L / max(1.0, float((det.sum(-1) > 0).sum()))
            h = float(detect_head(model, "probe", "induction_head",
                                  heads=[(layer, head)])[layer, head])
            b = compute_head_attention_similarity_score(
                uni.clone(), det, exclude_bos=False, exclude_current_token=False,
                error_measure="mul")
            heads.append(h * scale)
            bases.append(b * scale)
    finally:
        if not had:
            del model.to_tokens
    return {"score": float(np.mean(heads)), "baseline": float(np.mean(bases)),
            "score_minus_baseline": float(np.mean(heads) - np.mean(bases))}


@torch.no_grad()
def head_patterns(model, tokens: torch.Tensor) -> dict[int, torch.Tensor]:
    """Head 0's attention pattern (P, L, L) in every layer of ``model`` on ``tokens``."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    return {layer: cache["pattern", layer][:, 0] for layer in range(model.cfg.n_layers)}


def induction_control(cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-8's positive control: a 2-layer attention-only model trained on repeats of varying
    period and offset (:class:`~mechinterp_icr.tasks.induction.InductionTaskConfig`), scored
    on the probes of the IR head's length (the IR context minus one) by the project's code and
    by TransformerLens's head detector; the better layer counts."""
    task = InductionTaskConfig(n_tokens=cfg.induction.tokens, max_period=cfg.induction.max_period,
                               min_period=cfg.induction.min_period,
                               max_offset=cfg.induction.length - 2 * cfg.induction.max_period,
                               seq_len=cfg.induction.length).build(seed)
    model = build_model(ModelConfig(n_layers=2, n_heads=1, d_model=cfg.induction.d_model,
                                    d_head=cfg.induction.d_model // 2, attn_only=True,
                                    d_vocab=task.d_vocab, n_ctx=task.n_ctx),
                        seed=seed, device="cpu")
    res = train_phase(model, lambda rng, bs: task.sample(rng, bs),
                      TrainConfig(steps=cfg.induction.steps, batch_size=cfg.induction.batch,
                                  lr=cfg.induction.lr, eval_every=0,
                                  checkpoint_schedule="none", progress=False),
                      None, "induction", seed)
    model.eval()
    L = 2 * 2 + 3 - 1  # the IR context (K = 2) minus one: TransformerLens needs L < n_ctx
    toks = induction_probes(L, cfg.induction.tokens, cfg.induction.probes, seed)
    pats = head_patterns(model, toks)
    proj = {lay: prefix_matching_score(p, toks) for lay, p in pats.items()}
    best = max(proj, key=lambda lay: proj[lay]["score_minus_baseline"])
    tl = tl_induction_score(model, toks[:TL_SCORE_PROBES], best, 0)
    idx = torch.arange(0, len(toks), len(PROBE_SHAPES))  # probes of PROBE_SHAPES[0]
    mean_pat = np.round(pats[best][idx].double().mean(0).numpy(), 5).tolist()
    return {"train_acc": res.final_metrics.get("train_acc"), "layer": best,
            "project": proj[best], "transformer_lens": tl,
            "probe_shape": list(PROBE_SHAPES[0]), "mean_probe_pattern": mean_pat,
            "per_layer_project": {str(k): v["score_minus_baseline"] for k, v in proj.items()}}


@torch.no_grad()
def ir_head_scores(fast, cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-8 (b): the learned IR head (position-only: its step-1 and step-2 rows, uniform
    elsewhere) written into the IR HookedTransformer at n = ``hooked.n``, scored on the same
    probes as the control by the project's code and by TransformerLens."""
    task = task_config(cfg, cfg.hooked.n).build(seed)
    model = build_ir_hooked(task, model_spec(cfg), seed=seed,
                            B=fast.B.detach().clone())
    L = task.n_ctx - 1
    toks = induction_probes(L, min(cfg.induction.tokens, task.d_vocab - 1),
                            cfg.induction.probes, seed)
    proj = prefix_matching_score(head_patterns(model, toks)[0], toks)
    tl = tl_induction_score(model, toks[:TL_SCORE_PROBES], 0, 0)
    return {"project": proj, "transformer_lens": tl}


@torch.no_grad()
def induction_row_test(fast, ev) -> dict[str, float]:
    """IR-8 (a): step-1 accuracy (argmax) with the learned step-1 row, and with it replaced
    by induction-style rows: all attention on a fixed earlier offset, the previous token
    (t-1, a copying / previous-token head) or two back (t-2). (The query ``s3`` has no
    earlier occurrence in an IR sequence, so an induction head has only the offset to use.)"""
    q = fast.task.step1_pos
    B0 = fast.B.detach().clone()
    out = {"learned_row_step1_acc": ir_accuracy(fast.cot_logits(ev.tokens), ev)["step1_acc"]}
    for off in (1, 2):
        row = torch.full((fast.T,), -60.0, dtype=B0.dtype)
        row[q - off] = 0.0
        fast.B[q] = row
        out[f"offset_{off}_step1_acc"] = ir_accuracy(fast.cot_logits(ev.tokens), ev)[
            "step1_acc"]
        fast.B.copy_(B0)
    out["induction_row_step1_acc"] = max(out["offset_1_step1_acc"], out["offset_2_step1_acc"])
    return out


# --------------------------------------------------------------------------------------------
# IR-3 / IR-4 causal: overwrite the step-1 attention row
# --------------------------------------------------------------------------------------------
def overwrite_selection(run: RunDir, steps=OW_STEPS) -> str:
    """init, after the large step, then the small-step phase at ``steps`` and its last."""
    cks = run.checkpoints()
    names = [c.name for c in cks if c.phase == "big"]
    small = [c for c in cks if c.phase != "big"]
    names += [c.name for c in small if c.step in steps]
    if small and small[-1].name not in names:
        names.append(small[-1].name)
    return ",".join(names)


def overwrite_label(ck_phase: str, step: int) -> str:
    """Readable name of a checkpoint in the overwrite table."""
    if ck_phase == "big":
        return "init" if step == 0 else "big step"
    return "perturbed" if (step == 0 and ck_phase == "pgd") else f"{ck_phase} {step}"


def overwrite_run_rows(path: Path, n_each: int, seed: int) -> list[dict[str, Any]] | None:
    """The row-overwrite table over the checkpoints of one of the first seed's
    HookedTransformer runs (one of :data:`OW_RUNS`; None when ``path`` holds no run)."""
    if not (path / "config.json").exists():
        return None
    # the experiment-setting run (qk) only at its start, perturbation and end
    sel = overwrite_selection(RunDir(path), (0,) if "_qk_" in path.name else OW_STEPS)
    rows = overwrite_rows_across_checkpoints(path, sel, n_each, OW_DELTAS, seed)
    for r in rows:
        r["label"] = overwrite_label(r["phase"], r["step"])
    return rows


def overwrite_fixed_rows(cfg: IRConfig, seed: int, a: float) -> dict[str, Any]:
    """Per seed: fixed rows (learned ``a`` of this seed's IR-3 run) written into the head of
    an n = hooked.n model. The step-1 output depends on the step-1 row only (frozen memory and
    OV), so this equals the overwrite on any checkpoint of that seed's knowledge base."""
    task = task_config(cfg, cfg.hooked.n).build(seed)
    model = build_ir_hooked(task, model_spec(cfg), seed=seed)
    t = overwrite_row_table(model, confusion_batches(task, cfg.overwrite_n, seed), a, OW_DELTAS)
    t["acc"].pop("model", None)
    t["prob"].pop("model", None)
    t["acc"].pop("own_paired", None)
    t["prob"].pop("own_paired", None)
    return t


def causal_table(ow_seed: dict, ow_runs: dict, cfg: IRConfig) -> dict[str, Any]:
    """Summary of the row-overwrite test: per seed (fixed rows) mean/CI, and per run the
    checkpoints' step-1 accuracy and P(r*) on clean / single / swap sequences."""
    agg: dict[str, Any] = {}
    if ow_seed:
        any_t = next(iter(ow_seed.values()))
        for row in any_t["acc"]:
            for kind in any_t["acc"][row]:
                v = [t["acc"][row][kind] for t in ow_seed.values()]
                agg.setdefault(row, {})[kind] = {"mean": float(np.mean(v)),
                                                 "ci95": list(ci95(v, UNIT))}  # accuracies
        v = [t["critical_gap"] for t in ow_seed.values()]  # a gap of attention masses
        agg["critical_gap"] = {"mean": float(np.mean(v)), "ci95": list(ci95(v, UNIT))}

    def compact(r):
        return {"checkpoint": r["checkpoint"], "label": r["label"], "a": r["a"],
                "acc": r["acc"], "prob_swap": {k: v["swap"] for k, v in r["prob"].items()},
                "critical_gap": r.get("critical_gap")}

    return {
        "note": "step-1 accuracy (argmax, ties counted 1/k) with the head's step-1 row "
                "(query s3) overwritten through blocks.0.attn.hook_pattern; rows: pairwise = "
                "(a,a,1/2-a,1/2-a,0) at the learned a, one_pair = (1/2,1/2,0,0,0), "
                "unequal_d = (a+d,a-d,1/2-a-d,1/2-a+d,0) (within-pair gap 2d, tilted toward "
                "the re-paired relation), uniform = 1/5 each, induction = all on a2 (the "
                "position before the query), own_paired = the model's own row with each "
                "pair's mass split equally; critical_gap = smallest within-pair gap 2d at "
                "which swap accuracy drops below 1/2. Sequences: clean (not confusing), "
                "single (single-pair confusing), swap (re-pairing confusing), "
                f"{cfg.overwrite_n} each, n = {cfg.hooked.n}.",
        "per_seed_fixed_rows": {k: {"a": t["a"], "acc": t["acc"],
                                    "critical_gap": t["critical_gap"]}
                                for k, t in ow_seed.items()},
        "fixed_rows_mean": agg,
        "checkpoints": {name: [compact(r) for r in rows] for name, rows in ow_runs.items()},
    }
