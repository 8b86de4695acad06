"""Circuit tools at the answer position: logit lens, direct logit attribution (DLA), the head x
position patching table and the sender x receiver path-patching table.

Prompts (:func:`answer_prompts`) are :func:`patching_prompts`'s clean/corrupted pairs with,
per prompt, the position whose logits predict the answer and the two answers:

- CR: held-out ICL type pairs; position = the query subject (the last token, ``query_pos``);
  answer = the query subject's attribute of the type the clean demos show; the corrupted
  prompt (same subjects, demos of another type) answers the same subject's attribute of its
  own type.
- IR: position = the relation token ``r*`` (``2K + 1``, the step-2 prediction); answer = the
  clean prompt's ``a_q`` (its last token); the corrupted prompt is an independent draw.
- induction: position = the second-to-last token, answer = the last token.

The metric is patching_prompts's: mean over prompts of ``logit[answer] - logit[corrupted
answer]`` at that position. Every function here runs TransformerLens's own decompositions on a
full ``run_with_cache`` of the prompts (see ``docs/circuit_tools.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mechinterp_icr.interp import patching, uncertainty

__all__ = ["PATCHING_COLUMNS", "AnswerPrompts", "answer_prompts", "component_stack",
           "direct_logit_attribution", "dla_rows", "head_pos_patching", "head_pos_rows",
           "lens_label", "logit_lens", "path_patching_table", "position_labels"]


@dataclass
class AnswerPrompts:
    """Clean/corrupted prompt pairs with the answer position and both answers per prompt."""

    clean: Tensor  # (B, T) tokens, the run activations are copied from
    corrupted: Tensor  # (B, T) tokens, the run that is patched
    pos: Tensor  # (B,) position whose logits predict the answer
    answer: Tensor  # (B,) the clean prompt's answer token
    corrupted_answer: Tensor  # (B,) the corrupted prompt's answer token
    metric: Callable[[Tensor], Tensor]  # mean logit[answer] - logit[corrupted answer] at pos
    metric_positions: list[int]  # the distinct values of pos


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
        metric = patching.logit_diff_metric(qp, target, base.meta["answer"])
        return src.tokens, base.tokens, metric, sorted({int(q) for q in qp})
    a = task.sample(rng, n, "eval")
    b = task.sample(rng, n, "eval")
    pos = a.tokens.shape[1] - 2
    metric = patching.logit_diff_metric(pos, a.tokens[:, pos + 1], b.tokens[:, pos + 1])
    return a.tokens, b.tokens, metric, [pos]


def _icl_answer(task, tokens: Tensor, pos: Tensor) -> Tensor:
    """Answer of CR ICL prompts: the attribute of the query subject (the token at ``pos``) of
    the prompt's type, the one type all its demo attribute tokens belong to (one shared type
    per prompt; ``task.type_member``). In the shared-token variant a prompt whose demo tokens
    all belong to two types has no type the tokens can tell: ValueError."""
    toks = tokens.numpy()
    rows = np.arange(len(toks))
    member = task.type_member[toks]  # (B, T, L)
    is_attr = member.any(-1)  # (B, T) demo attribute positions
    assert is_attr.any(1).all(), "an ICL prompt without a demo attribute"
    cand = (member | ~is_attr[..., None]).all(1)  # (B, L) types every demo token belongs to
    n_cand = cand.sum(1)
    if not (n_cand == 1).all():
        b = int(np.flatnonzero(n_cand != 1)[0])
        raise ValueError(f"ICL prompt {b} of {len(toks)}: its demo attribute tokens belong to "
                         f"types {np.flatnonzero(cand[b]).tolist()}; expected exactly one "
                         "(the shared-token variant with too few demos leaves the type "
                         "ambiguous: use more demos)")
    ty = cand.argmax(1)
    subj = toks[rows, pos.numpy()] - task.subject_base
    return torch.as_tensor(task.answer_id(subj, ty))


def answer_prompts(task, n: int, seed: int = 0, K: int | None = None) -> AnswerPrompts:
    """``n`` prompt pairs of ``task`` (cr, ir, induction) with their answers (module doc)."""
    clean, corr, metric, mpos = patching_prompts(task, n, seed, K)
    if hasattr(task, "sample_icl"):
        from mechinterp_icr.tasks.cr import PAD

        pos = (clean != PAD).sum(1) - 1  # the query subject: the last token before padding
        ans, bad = _icl_answer(task, clean, pos), _icl_answer(task, corr, pos)
    else:
        pos = torch.full((clean.shape[0],), mpos[0])
        ans, bad = clean[:, mpos[0] + 1], corr[:, mpos[0] + 1]
    assert sorted({int(p) for p in pos}) == list(mpos), (pos, mpos)
    return AnswerPrompts(clean, corr, pos, ans, bad, metric, list(mpos))


def position_labels(task, tokens: Tensor) -> list[str]:
    """``"{position} {token name}"`` for every position of one prompt ``tokens`` (T,)."""
    return [f"{i} {name}" for i, name in enumerate(task.vocab.tokens(tokens))]


# ---------------------------------------------------------------------------------------------
# Logit lens
# ---------------------------------------------------------------------------------------------
def lens_label(tl_label: str, n_layers: int) -> str:
    """TransformerLens's ``accumulated_resid`` label as a layer name: ``0_pre`` -> ``embed``,
    ``{l}_mid`` -> ``L{l}_mid``, ``{l}_pre`` -> ``L{l-1}_out``, ``final_post`` ->
    ``L{n_layers-1}_out``."""
    if tl_label == "final_post":
        return f"L{n_layers - 1}_out"
    layer, kind = tl_label.split("_")
    if kind == "mid":
        return f"L{layer}_mid"
    return "embed" if layer == "0" else f"L{int(layer) - 1}_out"


@torch.no_grad()
def logit_lens(model, tokens: Tensor, pos: Tensor, answer: Tensor,
               incl_mid: bool = True) -> list[dict]:
    """Per residual-stream point (``resid_pre`` of every layer, with ``incl_mid`` also
    ``resid_mid``, which an attention-only model does not have, and the final
    ``resid_post``): the final norm (recomputed on that point, TransformerLens
    ``cache.accumulated_resid(apply_ln=True)``) and the unembedding (``W_U``, ``b_U``) at
    ``pos`` (B,); the answer's probability (softmax over the whole vocabulary), its rank (the
    number of tokens whose logit is at least the answer's: 1 = strictly the largest, ties
    count against the answer) and top-1 accuracy (rank 1), each the mean over prompts. The
    last point is the model's own prediction."""
    _, cache = model.run_with_cache(tokens)
    resid, labels = cache.accumulated_resid(incl_mid=incl_mid and not model.cfg.attn_only,
                                            apply_ln=True, return_labels=True)  # (C,B,T,d)
    rows = torch.arange(tokens.shape[0], device=resid.device)
    r = resid[:, rows, pos.to(resid.device)]  # (C, B, d_model)
    logits = r @ model.W_U + model.b_U  # (C, B, d_vocab)
    ans = answer.to(logits.device)
    a_logit = logits[:, rows, ans]  # (C, B)
    prob = logits.softmax(-1)[:, rows, ans]
    rank = (logits >= a_logit[..., None]).sum(-1)  # (C, B), the answer itself included
    top1 = rank == 1
    return [{"layer": lens_label(lab, model.cfg.n_layers), "layer_index": i,
             "answer_prob": float(prob[i].mean()), "answer_rank": float(rank[i].float().mean()),
             "top1_acc": float(top1[i].float().mean())} for i, lab in enumerate(labels)]


# ---------------------------------------------------------------------------------------------
# Direct logit attribution
# ---------------------------------------------------------------------------------------------
def component_stack(model, cache) -> tuple[Tensor, list[str]]:
    """The final residual stream as a sum of components ``(C, B, T, d_model)``, in layer order:
    ``embed``, ``pos_embed``, then per layer its heads ``L{l}H{h}`` (``cache.
    stack_head_results``: z @ W_O, without b_O), the attention output bias ``L{l}_attn_bias``
    (b_O, at every position) and the MLP output ``L{l}_mlp`` (``cache.decompose_resid``, its
    bias included). Their sum is ``blocks.{L-1}.hook_resid_post`` (tested)."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    heads = cache.stack_head_results(layer=-1)  # (L*H, B, T, d_model)
    rest, tl = cache.decompose_resid(layer=-1, mode="mlp", return_labels=True)
    by = dict(zip(tl, rest))
    parts = [by[k][None] for k in ("embed", "pos_embed") if k in by]
    labels = [k for k in ("embed", "pos_embed") if k in by]
    for l in range(L):
        parts += [heads[l * H:(l + 1) * H],
                  model.blocks[l].attn.b_O.expand_as(heads[0])[None]]
        labels += [f"L{l}H{h}" for h in range(H)] + [f"L{l}_attn_bias"]
        if f"{l}_mlp_out" in by:
            parts.append(by[f"{l}_mlp_out"][None])
            labels.append(f"L{l}_mlp")
    return torch.cat(parts), labels


@torch.no_grad()
def direct_logit_attribution(model, tokens: Tensor, pos: Tensor, answer: Tensor,
                             other: Tensor | None = None) -> tuple[Tensor, list[str]]:
    """Each component's direct contribution (C, B) to ``logit[answer]`` at ``pos`` (or, with
    ``other``, to ``logit[answer] - logit[other]``): ``cache.logit_attrs`` of
    :func:`component_stack` (final norm applied with its cached scale,
    ``apply_ln_to_stack``), plus the unembedding bias ``unembed_bias`` (``b_U[answer]``
    (- ``b_U[other]``)) as the last component. Without a final norm (every model of this
    project) the components sum to the model's logit (difference) exactly."""
    _, cache = model.run_with_cache(tokens)
    stack, labels = component_stack(model, cache)
    B, T = tokens.shape
    dev = stack.device
    good = answer.to(dev)[:, None].expand(B, T)
    bad = None if other is None else other.to(dev)[:, None].expand(B, T)
    attrs = cache.logit_attrs(stack, tokens=good, incorrect_tokens=bad)  # (C, B, T)
    attrs = attrs[:, torch.arange(B, device=dev), pos.to(dev)]  # (C, B)
    bias = model.b_U[answer.to(dev)] - (0 if other is None else model.b_U[other.to(dev)])
    return torch.cat([attrs, bias[None]]), labels + ["unembed_bias"]


def dla_rows(model, pr: AnswerPrompts) -> tuple[list[dict], dict]:
    """Rows ``{"component", "logit_attr", "diff_attr"}`` (means over the clean prompts of
    :func:`direct_logit_attribution` to the answer logit and to the logit difference answer -
    corrupted answer) and ``{"sum_logit", "model_logit", "sum_diff", "model_diff"}``: the
    components' sums beside the model's own values at the answer position."""
    tok, pos = pr.clean, pr.pos
    logit, labels = direct_logit_attribution(model, tok, pos, pr.answer)
    diff, _ = direct_logit_attribution(model, tok, pos, pr.answer, pr.corrupted_answer)
    with torch.no_grad():
        lg = model(tok)  # (B, T, d_vocab)
    idx = torch.arange(tok.shape[0], device=lg.device)
    lg = lg[idx, pos.to(lg.device)]  # (B, d_vocab)
    a = lg[idx, pr.answer.to(lg.device)]
    d = a - lg[idx, pr.corrupted_answer.to(lg.device)]
    check = {"sum_logit": float(logit.sum(0).mean()), "model_logit": float(a.mean()),
             "sum_diff": float(diff.sum(0).mean()), "model_diff": float(d.mean())}
    return [{"component": c, "logit_attr": float(logit[i].mean()),
             "diff_attr": float(diff[i].mean())} for i, c in enumerate(labels)], check


# ---------------------------------------------------------------------------------------------
# Patching tables
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def _clean_corrupted(model, pr: AnswerPrompts) -> tuple[float, float]:
    return float(pr.metric(model(pr.clean))), float(pr.metric(model(pr.corrupted)))


@torch.no_grad()
def head_pos_patching(model, pr: AnswerPrompts, n_resamples: int = uncertainty.N_RESAMPLES,
                      seed: int = uncertainty.SEED) -> dict:
    """Exact activation patching of every head's output ``z`` at every position
    (:func:`.patching.patch_head_out_by_pos`: the clean run's ``blocks.{l}.attn.hook_z[:, p,
    h]`` into the corrupted run, one cell at a time), per prompt (the engine's
    ``per_prompt``): ``{"value": (L, T, H) metric (the mean over prompts), "recovery": (L, T,
    H) normalised recovery, "lo", "hi": (L, T, H) its 95% bootstrap interval over prompt
    pairs (:func:`.uncertainty.recovery_interval`, ``n_resamples``, ``seed``), "p": (L, T, H)
    sign-flip p-value of the effect (:func:`.uncertainty.sign_flip_p`), "per_prompt": (L, T,
    H, B) metric per prompt, "clean", "corrupted", "gap"}`` (the clean and corrupted runs'
    metrics, their difference)."""
    uncertainty.check_bootstrap(n_resamples, seed)
    _, cache = model.run_with_cache(pr.clean, names_filter=lambda n: n.endswith("hook_z"))
    per = patching.logit_diff_metric(pr.pos, pr.answer, pr.corrupted_answer, per_prompt=True)
    c_pp, x_pp = per(model(pr.clean)), per(model(pr.corrupted))  # (B,) each
    c_val, x_val = float(c_pp.mean()), float(x_pp.mean())
    vals = patching.patch_head_out_by_pos(model, pr.corrupted, cache, per, per_prompt=True,
                                          metric_positions=pr.metric_positions)  # (L,T,H,B)
    value = vals.mean(-1)
    lo, hi = uncertainty.recovery_interval(vals, c_pp, x_pp, n_resamples, seed)
    p = uncertainty.sign_flip_p(vals - x_pp.to(vals), n_resamples, seed)
    return {"value": value, "recovery": patching.normalised_recovery(value, c_val, x_val),
            "lo": lo, "hi": hi, "p": p, "per_prompt": vals,
            "clean": c_val, "corrupted": x_val, "gap": c_val - x_val}


PATCHING_COLUMNS = {
    "checkpoint": "checkpoint", "step": "step", "layer": "layer", "head_name": "head",
    "pos": "position", "token": "token (first clean prompt)",
    "gap": "LD gap (clean LD - corrupted LD)", "recovery": "exact patching recovery",
    "lo": "lo (95% bootstrap)", "hi": "hi (95% bootstrap)", "p_sign": "p (sign-flip)",
}
"""The columns of the head x position patching tables (``analyses/patching_heatmap.py`` and
``patching_sweep.py``, which adds ``attribution_recovery`` last), in their order: row key ->
printed and CSV header (defined in docs/circuit_tools.md)."""


def head_pos_rows(model, pr: AnswerPrompts, labels: list[str],
                  n_resamples: int = uncertainty.N_RESAMPLES,
                  seed: int = uncertainty.SEED) -> tuple[list[dict], dict]:
    """:func:`head_pos_patching` as rows, one per cell, ordered layer, head, position, with
    the keys of :data:`PATCHING_COLUMNS` (but the checkpoint's) and ``head``, ``value`` (the
    patched LD); ``labels`` names the positions (:func:`position_labels`). Returns ``(rows,
    the head_pos_patching result)``."""
    res = head_pos_patching(model, pr, n_resamples, seed)
    L, T, H = res["recovery"].shape
    rows = [{"layer": l, "head": h, "head_name": f"L{l}H{h}", "pos": p,
             "token": labels[p].split(" ", 1)[1], "gap": res["gap"],
             "value": float(res["value"][l, p, h]), "recovery": float(res["recovery"][l, p, h]),
             "lo": float(res["lo"][l, p, h]), "hi": float(res["hi"][l, p, h]),
             "p_sign": float(res["p"][l, p, h])}
            for l in range(L) for h in range(H) for p in range(T)]
    return rows, res


def path_patching_table(model, pr: AnswerPrompts, freeze_mlps: bool = True) -> list[dict]:
    """:func:`.patching.path_patch` from every head (sender) to every head of a later layer
    (receiver) through its ``q``, ``k``, ``v`` alone and all three (``qkv``), and to the
    logits directly (receiver ``logits``, input ``direct``): rows ``{"sender", "receiver",
    "input", "value", "recovery", "clean", "corrupted", "gap"}`` (recovery normalised by the
    clean and corrupted runs' metrics)."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    c_val, x_val = _clean_corrupted(model, pr)
    rows = []
    for sl in range(L):
        for sh in range(H):
            targets = [(f"L{rl}H{rh}", kind, [(rl, rh, k) for k in kind])
                       for rl in range(sl + 1, L) for rh in range(H)
                       for kind in ("q", "k", "v", "qkv")]
            targets.append(("logits", "direct", [("logits",)]))
            for receiver, kind, recv in targets:
                v = float(patching.path_patch(model, pr.clean, pr.corrupted, pr.metric, (sl, sh),
                                       recv, freeze_mlps=freeze_mlps))
                rows.append({"sender": f"L{sl}H{sh}", "receiver": receiver, "input": kind,
                             "value": v, "recovery": patching.normalised_recovery(v, c_val, x_val),
                             "clean": c_val, "corrupted": x_val, "gap": c_val - x_val})
    return rows
