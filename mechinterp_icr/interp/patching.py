"""Activation patching: one generic engine, thin specialisations, batched exact cells.

Conventions (see ``docs/interp.md``):

- ``clean`` is the run whose activations are copied *in*; ``corrupted`` is the run that is
  patched. A cell is an index tuple whose first entry is the layer, exactly as in
  TransformerLens ``transformer_lens.patching`` (``(layer, pos, head)`` for head vectors,
  ``(layer, head)`` for all positions, ``(layer, pos)`` for the residual stream, ...).
- ``metric(logits) -> scalar tensor`` is evaluated on the logits of one patched copy of the
  corrupted batch, so a cell's value is exactly what TransformerLens's per-cell loop returns.
- **Batched exact patching**: the corrupted batch is repeated ``C`` times along the batch axis,
  copy ``c`` gets cell ``c``'s patch, and ``C`` cells cost one forward pass. Results equal the
  per-cell loop (up to float summation order, < 1e-5; tested).
- **Incremental exact patching** (``incremental=True``, by-position setters): only what a
  patch can change is computed from the cached corrupted run (the patched row of layer l, the
  changed key/value rows after it, the last layer at the metric positions), all cells of a
  layer vectorised; equal to the per-cell loop up to float summation order (tested).
- **Attribution patching** (fast mode): ``(a_clean - a_corrupted) . d metric / d a`` at the
  corrupted run, summed over the patched slice: one forward + one backward for every cell.
- **Path patching** (:func:`path_patch`): the effect of a sender head's clean output that
  reaches the receivers' q/k/v (or the logits directly) only, with every other head frozen at
  its corrupted value.
- Metrics: :func:`logit_diff_metric` and :func:`normalised_recovery` (0 = corrupted, 1 = clean).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import Tensor

from mechinterp_icr.config import ConfigError, check

__all__ = [
    "ACT_AXES",
    "SETTERS",
    "PatchResult",
    "answer_logit_metric",
    "attribution_patch",
    "batched_activation_patch",
    "candidate_rows",
    "cells_for",
    "incremental_supported",
    "logit_diff_metric",
    "normalised_recovery",
    "overwrite_attention_row",
    "overwrite_rows_sweep",
    "patch_attn_out",
    "patch_head_out_all_pos",
    "patch_head_out_by_pos",
    "patch_k_all_pos",
    "patch_k_by_pos",
    "patch_pattern_all_pos",
    "patch_pattern_by_pos",
    "patch_q_all_pos",
    "patch_q_by_pos",
    "patch_resid_mid",
    "patch_resid_pre",
    "patch_v_all_pos",
    "patch_v_by_pos",
    "path_patch",
    "tl_activation_patch",
    "unreachable",
]


# ---------------------------------------------------------------------------------------------
# Setters: act and clean are one copy's tensors (batch leading), index = cell tuple.
# They mirror transformer_lens.patching's setters exactly.
# ---------------------------------------------------------------------------------------------
def _set_layer_pos(act: Tensor, index, clean: Tensor) -> None:
    _, pos = index
    act[:, pos, ...] = clean[:, pos, ...]


def _set_layer_pos_head(act: Tensor, index, clean: Tensor) -> None:
    _, pos, head = index
    act[:, pos, head] = clean[:, pos, head]


def _set_layer_head(act: Tensor, index, clean: Tensor) -> None:
    _, head = index
    act[:, :, head] = clean[:, :, head]


def _set_pattern_layer_head(act: Tensor, index, clean: Tensor) -> None:
    _, head = index
    act[:, head, :, :] = clean[:, head, :, :]


def _set_pattern_layer_head_dest(act: Tensor, index, clean: Tensor) -> None:
    _, head, dest = index
    act[:, head, dest, :] = clean[:, head, dest, :]


SETTERS: dict[str, Callable] = {
    "layer_pos": _set_layer_pos,
    "layer_pos_head": _set_layer_pos_head,
    "layer_head": _set_layer_head,
    "pattern_layer_head": _set_pattern_layer_head,
    "pattern_layer_head_dest": _set_pattern_layer_head_dest,
}

# axis names of each setter's cell (first axis is always the layer)
ACT_AXES: dict[str, tuple[str, ...]] = {
    "layer_pos": ("layer", "pos"),
    "layer_pos_head": ("layer", "pos", "head"),
    "layer_head": ("layer", "head"),
    "pattern_layer_head": ("layer", "head"),
    "pattern_layer_head_dest": ("layer", "head", "dest_pos"),
}


def cells_for(model, n_pos: int, axes: Sequence[str]) -> list[tuple[int, ...]]:
    """All cells over ``axes`` in TransformerLens's order (row-major, layer first)."""
    rng = {"layer": model.cfg.n_layers, "pos": n_pos, "dest_pos": n_pos, "src_pos": n_pos,
           "head": model.cfg.n_heads}
    return list(itertools.product(*[range(rng[a]) for a in axes]))


def _act_name(act: str, layer: int) -> str:
    from transformer_lens.utilities import get_act_name

    return get_act_name(act, layer)


@dataclass
class PatchResult:
    """Metric per cell: ``values`` shaped by the axes (or flat when cells were given)."""

    values: Tensor
    cells: list[tuple[int, ...]]
    axes: tuple[str, ...]
    seconds: float


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------
def _group_cells(todo, sort_key, group_key, per: int) -> list[list[int]]:
    """Cell indices sorted by ``sort_key`` and cut into runs of equal ``group_key`` holding at
    most ``per`` cells each (one batched forward per run)."""
    groups: list[list[int]] = []
    for i in sorted(todo, key=sort_key):
        if groups and group_key(groups[-1][0]) == group_key(i) and len(groups[-1]) < per:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@torch.no_grad()
def batched_activation_patch(
    model,
    corrupted_tokens: Tensor,
    clean_cache,
    metric: Callable[[Tensor], Tensor],
    setter: str,
    act: str,
    cells: Sequence[tuple[int, ...]] | None = None,
    max_batch: int = 4096,
    skip_layers: bool = True,
    metric_positions: Sequence[int] | None = None,
    suffix: bool = False,
    incremental: bool = False,
) -> Tensor:
    """Exact activation patching of many cells per forward pass.

    ``clean_cache`` maps hook names to clean activations (an ``ActivationCache`` or a dict).
    ``setter`` is a key of :data:`SETTERS`; ``act`` a TransformerLens activation short name
    (``z``, ``q``, ``k``, ``v``, ``pattern``, ``resid_pre``, ``resid_mid``, ``attn_out``, ...).
    Without ``cells`` every cell over the setter's axes is patched and the result has one
    dimension per axis (like TransformerLens); with ``cells`` the result is flat.
    ``max_batch`` bounds the rows of one forward (copies x batch). With ``skip_layers`` a
    group of cells in layer l starts its forward at layer l from the cached corrupted
    residual stream. ``metric_positions`` (optional) declares the only positions whose logits
    ``metric`` reads; cells that provably cannot reach them (see :func:`unreachable`) get the
    corrupted run's metric without a forward pass (exact: their patched logits at those
    positions are the corrupted logits). ``suffix`` (by-position setters only): a patch at
    position p leaves positions < p unchanged, so each group of cells runs only the positions
    from its smallest p on, with the corrupted prefix's keys and values in a frozen
    TransformerLens key/value cache. Mathematically exact; the float summation order differs
    from a full forward, so it is off by default. ``incremental`` (by-position setters, see
    :func:`incremental_supported`; otherwise ignored): compute only what each patch can
    change, from the cached corrupted run: layer l at the patched row only for position-local
    activations, the changed key/value rows of later layers, and the last layer and the
    unembedding only at ``metric_positions`` (all positions when not given); all cells of a
    layer in one vectorised pass (:func:`_incremental_patch`). Mathematically exact; float
    summation order differs from a full forward (tested <= 1e-5), so it is off by default.
    """
    B, T = corrupted_tokens.shape
    if metric_positions is not None:
        mps = [int(p) for p in metric_positions]
        check(len(mps) > 0 and all(0 <= p < T for p in mps), "metric_positions",
              list(metric_positions), f"a non-empty list of positions in [0, {T - 1}]")
    axes = ACT_AXES[setter]
    shaped = cells is None
    if cells is None:
        cells = cells_for(model, T, axes)
    cells = [tuple(int(i) for i in c) for c in cells]
    fn = SETTERS[setter]
    per = max(1, max_batch // B)
    out = torch.zeros(len(cells), device=corrupted_tokens.device)
    todo = list(range(len(cells)))
    logits_c = cc_inc = None
    if incremental and incremental_supported(model, setter, act):
        keep = {f"blocks.{l}.{x}" for l in range(model.cfg.n_layers)
                for x in ("hook_resid_pre", "attn.hook_k", "attn.hook_v")}
        logits_c, cc_inc = model.run_with_cache(corrupted_tokens,
                                                names_filter=lambda n: n in keep)
    if metric_positions is not None:
        skip = [i for i in todo if unreachable(model, setter, act, cells[i], metric_positions)]
        if skip:
            base = model(corrupted_tokens) if logits_c is None else logits_c
            out[skip] = metric(base).reshape(()).to(out)
            todo = [i for i in todo if i not in set(skip)]
    if cc_inc is not None and todo:
        mp = range(T) if metric_positions is None else metric_positions
        _incremental_patch(model, corrupted_tokens, clean_cache, metric, setter, act, cells,
                           todo, out, per, mp, logits_c, cc_inc)
        todo = []
    if suffix and setter in ("layer_pos", "layer_pos_head") and act in _SUFFIX_ACTS and todo:
        _suffix_patch(model, corrupted_tokens, clean_cache, metric, setter, act, cells, todo,
                      out, per, skip_layers)
        todo = []
    # Cells are grouped by layer: a patch in layer l leaves layers < l untouched, so the
    # forward of a group starts at layer l from the corrupted run's residual stream (exact:
    # those activations are the same computation on the same inputs).
    start_resid: dict[int, Tensor] = {}
    layers = sorted({cells[i][0] for i in todo})
    if skip_layers and any(l > 0 for l in layers) and act not in ("resid_pre",):
        names = {f"blocks.{l}.hook_resid_pre" for l in layers if l > 0}
        _, cc = model.run_with_cache(corrupted_tokens, names_filter=lambda n: n in names)
        start_resid = {l: cc[f"blocks.{l}.hook_resid_pre"] for l in layers if l > 0}
    # chunks of one layer each, at most `per` cells
    groups = _group_cells(todo, lambda i: cells[i][0], lambda i: cells[i][0], per)
    for idx in groups:
        chunk = [cells[i] for i in idx]
        C = len(chunk)
        layer0 = chunk[0][0]
        by_layer: dict[int, list[tuple[int, tuple]]] = {}
        for c, cell in enumerate(chunk):
            by_layer.setdefault(cell[0], []).append((c, cell))
        hooks = []
        for layer, items in by_layer.items():
            name = _act_name(act, layer)
            clean = clean_cache[name]

            def hook(a, hook, items=items, clean=clean):
                a = a.clone()
                for c, cell in items:
                    fn(a[c * B:(c + 1) * B], cell, clean)
                return a

            hooks.append((name, hook))
        if layer0 in start_resid:
            resid = start_resid[layer0].repeat(C, 1, 1)  # (C*B, T, d_model)
            logits = model.run_with_hooks(resid, fwd_hooks=hooks, start_at_layer=layer0,
                                          tokens=corrupted_tokens.repeat(C, 1))
        else:
            toks = corrupted_tokens.repeat(C, 1)  # (C*B, T): copy c = rows c*B..(c+1)*B
            logits = model.run_with_hooks(toks, fwd_hooks=hooks)
        for c in range(C):
            out[idx[c]] = metric(logits[c * B:(c + 1) * B]).reshape(())
    if shaped:
        sizes = [max(c[i] for c in cells) + 1 for i in range(len(axes))]
        return out.reshape(sizes)
    return out


_SUFFIX_ACTS = {"z", "q", "k", "v", "result", "resid_pre", "resid_mid", "resid_post",
                "attn_out", "mlp_out"}


@torch.no_grad()
def _suffix_patch(model, tokens, clean_cache, metric, setter, act, cells, todo, out, per,
                  skip_layers, n_windows: int = 8) -> None:
    """Fill ``out[i]`` for cells ``todo`` by suffix forwards over a frozen prefix KV cache."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    B, T = tokens.shape
    L = model.cfg.n_layers
    dev = tokens.device
    keep = {f"blocks.{l}.attn.hook_{x}" for l in range(L) for x in "kv"}
    keep |= {f"blocks.{l}.hook_resid_pre" for l in range(L)}
    logits_c, cc = model.run_with_cache(tokens, names_filter=lambda n: n in keep)
    fn = SETTERS[setter]
    width = max(1, -(-T // n_windows))
    groups = _group_cells(todo, lambda i: (cells[i][1] // width, cells[i][0], cells[i][1:]),
                          lambda i: cells[i][1] // width, per)
    for idx in groups:
        chunk = [cells[i] for i in idx]
        C = len(chunk)
        p0 = min(c[1] for c in chunk)
        l0 = min(c[0] for c in chunk) if skip_layers else 0
        CB = C * B
        kv = TransformerLensKeyValueCache.init_cache(model.cfg, dev, CB)
        for l, e in enumerate(kv.entries):
            e.past_keys = cc[f"blocks.{l}.attn.hook_k"][:, :p0].repeat(C, 1, 1, 1)
            e.past_values = cc[f"blocks.{l}.attn.hook_v"][:, :p0].repeat(C, 1, 1, 1)
        kv.previous_attention_mask = torch.ones(CB, p0, dtype=torch.int, device=dev)
        kv.freeze()
        by_layer: dict[int, list[tuple[int, tuple]]] = {}
        for c, cell in enumerate(chunk):
            by_layer.setdefault(cell[0], []).append((c, (cell[0], cell[1] - p0, *cell[2:])))
        hooks = []
        for layer, items in by_layer.items():
            name = _act_name(act, layer)
            clean = clean_cache[name][:, p0:]

            def hook(a, hook, items=items, clean=clean):
                a = a.clone()
                for c, cell in items:
                    fn(a[c * B:(c + 1) * B], cell, clean)
                return a

            hooks.append((name, hook))
        if l0 > 0:
            resid = cc[f"blocks.{l0}.hook_resid_pre"][:, p0:].repeat(C, 1, 1)
            suf = model.run_with_hooks(resid, fwd_hooks=hooks, start_at_layer=l0,
                                       tokens=tokens[:, p0:].repeat(C, 1), past_kv_cache=kv,
                                       attention_mask=torch.ones(CB, T, dtype=torch.int,
                                                                 device=dev))
        else:
            suf = model.run_with_hooks(tokens[:, p0:].repeat(C, 1), fwd_hooks=hooks,
                                       past_kv_cache=kv,
                                       attention_mask=torch.ones(CB, T - p0, dtype=torch.int,
                                                                 device=dev))
        full = logits_c.repeat(C, 1, 1)
        full[:, p0:] = suf
        for c in range(C):
            out[idx[c]] = metric(full[c * B:(c + 1) * B]).reshape(())


# ---------------------------------------------------------------------------------------------
# Incremental exact patching: compute only what a by-position patch can change
# ---------------------------------------------------------------------------------------------
# activations whose patch at (layer l, position p) changes layer l's output only at p
_LOCAL_ACTS = {"z", "q", "attn_out", "resid_mid", "mlp_out", "resid_post"}
_INCREMENTAL_ACTS = {"layer_pos_head": {"z", "q", "k", "v"},
                     "layer_pos": {"resid_pre", "resid_mid", "attn_out", "mlp_out",
                                   "resid_post"}}


def incremental_supported(model, setter: str, act: str) -> bool:
    """True when :func:`batched_activation_patch` can use ``incremental=True`` for this
    model and activation: by-position setters, and a plain pre-norm causal decoder (standard
    positional embedding, no split q/k/v input, no parallel attention/MLP, no grouped or local
    attention, no soft caps). Other cases fall back to the full forward passes."""
    if act not in _INCREMENTAL_ACTS.get(setter, ()):
        return False
    cfg = model.cfg
    from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

    if cfg.attn_only and act in ("resid_mid", "mlp_out"):
        return False
    flags_off = ("use_split_qkv_input", "use_attn_in", "parallel_attn_mlp",
                 "use_normalization_before_and_after", "use_attn_result", "use_attention_sinks",
                 "use_logn_attn", "use_qk_norm", "load_in_4bit")
    if any(getattr(cfg, f, False) for f in flags_off):
        return False
    if getattr(cfg, "clip_qkv", None) is not None or getattr(cfg, "n_key_value_heads", None):
        return False
    if any(t != "global" for t in (getattr(cfg, "attn_types", None) or [])):
        return False
    for cap in ("attn_scores_soft_cap", "output_logits_soft_cap"):
        c = getattr(cfg, cap, -1.0)
        if c is not None and c > 0:
            return False
    return (cfg.positional_embedding_type == "standard"
            and cfg.original_architecture not in POST_NORM_ARCHITECTURES
            and getattr(cfg, "attention_dir", "causal") == "causal"
            and all(type(b.attn).__name__ == "Attention" for b in model.blocks))


def _kv_rows(blk, x: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values of block ``blk`` for residual rows ``x`` (N, R, d_model)."""
    from transformer_lens.utilities.attention import simple_attn_linear

    a, h = blk.attn, blk.ln1(x)
    return simple_attn_linear(h, a.W_K, a.b_K), simple_attn_linear(h, a.W_V, a.b_V)


def _attend_full(a, q: Tensor, qpos: Tensor, K: Tensor, V: Tensor) -> Tensor:
    """z (N, R, H, d_head) of queries ``q`` (N, R, H, d_head) at positions ``qpos`` (N, R) over
    per-copy keys/values ``K``, ``V`` (N, T, H, d_head), causally masked."""
    scores = a.calculate_attention_scores(q, K)  # (N, H, R, T)
    T = K.shape[1]
    mask = torch.arange(T, device=q.device)[None, None, :] <= qpos[:, :, None]  # (N, R, T)
    scores = torch.where(mask[:, None], scores, a.IGNORE.to(scores.device))
    pattern = torch.softmax(scores, dim=-1)
    pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
    return a.calculate_z_scores(V, pattern.to(V.dtype))


def _attend_shared(a, q: Tensor, qpos: Tensor, Kc: Tensor, Vc: Tensor, P: Tensor,
                   k_row: Tensor | None, v_row: Tensor | None) -> Tensor:
    """Like :func:`_attend_full` for C copies of one batch whose keys/values are the shared
    ``Kc``, ``Vc`` (B, T, H, d_head) except row ``P[n]`` of copy n, which holds ``k_row[n]``,
    ``v_row[n]`` (N, H, d_head) when given. The copies' queries become extra query rows of
    the shared batch (no per-copy key/value tensor); the changed key row's scores are set
    and the changed value row enters as ``pattern[P] * v_row`` added to the other rows' sum:
    the same arithmetic up to float summation order."""
    N, R, H, dh = q.shape
    B, T = Kc.shape[:2]
    C = N // B
    dev = q.device
    q_ = q.reshape(C, B, R, H, dh).permute(1, 3, 0, 2, 4).reshape(B, H, C * R, dh)
    scores = q_ @ Kc.permute(0, 2, 3, 1) / a.attn_scale  # (B, H, C*R, T)
    s5 = scores.view(B, H, C, R, T)
    cidx = torch.arange(C, device=dev).repeat_interleave(B)  # copy of row n
    bidx = torch.arange(B, device=dev).repeat(C)
    if k_row is not None:
        s_row = (q.permute(0, 2, 1, 3) @ k_row[:, :, :, None])[..., 0].permute(0, 2, 1) \
            / a.attn_scale  # (N, R, H)
        s5[bidx, :, cidx, :, P] = s_row.permute(0, 2, 1)  # (N, H, R)
    qp = qpos.reshape(C, B, R).permute(1, 0, 2).reshape(B, 1, C * R, 1)
    mask = torch.arange(T, device=dev).view(1, 1, 1, T) <= qp
    scores = torch.where(mask, scores, a.IGNORE.to(scores.device))
    pattern = torch.softmax(scores, dim=-1)
    pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
    pattern = pattern.to(Vc.dtype)
    p_row = None
    if v_row is not None:  # the changed value row enters separately: z = sum_{t != P} + p_P v
        p5 = pattern.view(B, H, C, R, T)
        p_row = p5[bidx, :, cidx, :, P].permute(0, 2, 1)  # (N, R, H)
        p5[bidx, :, cidx, :, P] = 0.0
    z = pattern @ Vc.permute(0, 2, 1, 3)  # (B, H, C*R, d_head)
    z = z.view(B, H, C, R, dh).permute(2, 0, 3, 1, 4).reshape(N, R, H, dh)
    if p_row is not None:
        z = z + p_row[..., None] * v_row[:, None]
    return z


def _attend_full_kv(a, q, qpos, kv):
    return _attend_full(a, q, qpos, *kv)


def _attend_shared_kv(a, q, qpos, Kc, Vc, P, k_row, v_row):
    return _attend_shared(a, q, qpos, Kc, Vc, P, k_row, v_row)


def _block_rows(blk, x: Tensor, qpos: Tensor, attend: Callable, attn_only: bool,
                patch: Callable[[str, Tensor], Tensor]) -> Tensor:
    """Block output (``resid_post``) at query rows ``x`` (N, R, d_model) that sit at positions
    ``qpos`` (N, R); ``attend(attn, q, qpos) -> z`` supplies the keys and values
    (:func:`_attend_full` or :func:`_attend_shared`). The same operations as
    TransformerLens's block forward, on fewer rows; ``patch(name, t)`` may replace the
    activation ``name`` (``q``, ``z``, ``attn_out``, ``resid_mid``, ``mlp_out``,
    ``resid_post``)."""
    from transformer_lens.utilities.attention import simple_attn_linear

    a = blk.attn
    q = patch("q", simple_attn_linear(blk.ln1(x), a.W_Q, a.b_Q))  # (N, R, H, d_head)
    z = patch("z", attend(a, q, qpos))  # (N, R, H, d_head)
    w = a.W_O.reshape(-1, a.W_O.shape[-1]).T.contiguous()  # (d_model, H*d_head)
    attn_out = patch("attn_out", torch.nn.functional.linear(
        z.reshape(z.shape[0], z.shape[1], -1), w, a.b_O))
    if attn_only:
        return patch("resid_post", x + attn_out)
    mid = patch("resid_mid", x + attn_out)
    mlp_out = patch("mlp_out", blk.mlp(blk.ln2(mid)))
    return patch("resid_post", mid + mlp_out)


def _no_patch(name: str, t: Tensor) -> Tensor:
    return t


def _put_clean(name: str, t: Tensor, qpos: Tensor, act: str, P: Tensor, Hd: Tensor | None,
               clean: Tensor) -> Tensor:
    """Activation ``name`` with copy n's rows at position ``P[n]`` (head ``Hd[n]``) set to
    ``clean[n]``; ``t`` is (N, R, H, d_head) or (N, R, d_model) at positions ``qpos`` (N, R)."""
    if name != act:
        return t
    sel = qpos == P[:, None]  # (N, R)
    if Hd is not None:
        heads = torch.arange(t.shape[2], device=t.device) == Hd[:, None]  # (N, H)
        sel = sel[:, :, None] & heads[:, None, :]  # (N, R, H)
    return torch.where(sel[..., None], clean[:, None], t)


@torch.no_grad()
def _incremental_patch(model, tokens, clean_cache, metric, setter, act, cells, todo, out, per,
                       mp: Sequence[int], logits_c: Tensor, cc) -> None:
    """Fill ``out[i]`` for cells ``todo`` computing only what each patch can change.

    A patch at (layer l, position p) leaves layers < l and positions < p as in the corrupted
    run (cached in ``cc``). Position-local activations (z, q, attn_out, resid_mid, mlp_out,
    resid_post) change layer l's output only at p: layer l is computed at that one row. The
    next layer then differs from the corrupted run only in the key/value row p; layers
    between recompute all rows; the last layer computes only the queries at the metric
    positions ``mp`` (its keys/values come from the cache, with the changed rows recomputed),
    and the unembedding runs on those rows only. All cells of a chunk (up to ``per``) are
    vectorised along the batch axis, whatever their position and head."""
    from transformer_lens.utilities.activation_functions import apply_softcap

    B, T = tokens.shape
    L = model.cfg.n_layers
    dev = tokens.device
    attn_only = bool(model.cfg.attn_only)
    mp_t = torch.as_tensor(sorted(int(p) for p in mp), device=dev, dtype=torch.long)
    buf = logits_c.clone()
    # chunks of one layer each, at most `per` cells
    groups = _group_cells(todo, lambda i: cells[i], lambda i: cells[i][0], per)
    for idx in groups:
        chunk = [cells[i] for i in idx]
        C, l = len(chunk), chunk[0][0]
        N = C * B
        ar = torch.arange(N, device=dev)
        bidx = torch.arange(B, device=dev).repeat(C)  # copy c = rows c*B..(c+1)*B
        P = torch.tensor([c[1] for c in chunk], device=dev).repeat_interleave(B)  # (N,)
        Hd = (torch.tensor([c[2] for c in chunk], device=dev).repeat_interleave(B)
              if setter == "layer_pos_head" else None)
        clean = clean_cache[_act_name(act, l)][bidx, P]  # (N, [H, d_head] | d_model)

        row = clean if act == "resid_pre" else None  # input rows at P that differ
        dense = None  # or the whole input residual (N, T, d_model)
        final = None
        for j in range(l, L):
            blk = model.blocks[j]
            last = j == L - 1
            if dense is not None:
                attend = partial(_attend_full_kv, kv=_kv_rows(blk, dense))
            else:  # the corrupted keys/values, shared by the copies, except row P
                Kc = cc[f"blocks.{j}.attn.hook_k"]  # (B, T, H, d_head)
                Vc = cc[f"blocks.{j}.attn.hook_v"]
                k_row = v_row = None
                if row is not None:
                    kr, vr = _kv_rows(blk, row[:, None])
                    k_row, v_row = kr[:, 0], vr[:, 0]  # (N, H, d_head)
                if j == l and act in ("k", "v"):
                    put = (Kc if act == "k" else Vc)[bidx, P]  # (N, H, d_head)
                    put[ar, Hd] = clean[ar, Hd]
                    k_row, v_row = (put, None) if act == "k" else (None, put)
                attend = partial(_attend_shared_kv, Kc=Kc, Vc=Vc, P=P, k_row=k_row,
                                 v_row=v_row)
            # query rows: the metric positions (last layer), the patched row (position-local
            # patch layer) or every position
            resid = dense if dense is not None else cc[f"blocks.{j}.hook_resid_pre"]
            rep = 1 if dense is not None else C
            if last:
                qpos = mp_t.expand(N, -1)
                x = resid[:, mp_t].repeat(rep, 1, 1)  # (N, R, d_model)
            elif j == l and act in _LOCAL_ACTS:
                qpos = P[:, None]
                x = resid[bidx, P][:, None]
            else:
                qpos = torch.arange(T, device=dev).expand(N, -1)
                x = resid.repeat(rep, 1, 1)
            if row is not None:
                x = torch.where((qpos == P[:, None])[..., None], row[:, None], x)
            fn = (partial(_put_clean, qpos=qpos, act=act, P=P, Hd=Hd, clean=clean) if j == l
                  else _no_patch)
            y = _block_rows(blk, x, qpos, attend, attn_only, fn)
            if last:
                final = y
            elif j == l and act in _LOCAL_ACTS:
                row, dense = y[:, 0], None
            else:
                row, dense = None, y
        if model.cfg.normalization_type is not None:
            final = model.ln_final(final)
        rows = apply_softcap(model.unembed(final), model.cfg.output_logits_soft_cap)
        # one buffer of corrupted logits; copy c's metric-position rows are written in just
        # before its metric is read into `out` (positions the metric does not read keep the
        # corrupted logits)
        rows = rows.to(logits_c.dtype)
        for c in range(C):
            buf[:, mp_t] = rows[c * B:(c + 1) * B]
            out[idx[c]] = metric(buf).reshape(())
        buf[:, mp_t] = logits_c[:, mp_t]


# activations whose patch at position p in the last layer only changes position p's output
_POSITION_LOCAL_LAST = {"z", "q", "attn_out", "resid_mid", "mlp_out", "resid_post", "result"}


def unreachable(model, setter: str, act: str, cell: tuple, metric_positions) -> bool:
    """True when patching ``cell`` cannot change the logits at ``metric_positions``: a
    position after every metric position (causal masking), or a last-layer position-local
    activation (``z``, ``q``, ``attn_out``, ``resid_mid``, ``mlp_out``, ``resid_post``) at a
    position the metric does not read."""
    if setter not in ("layer_pos", "layer_pos_head"):
        return False
    layer, pos = cell[0], cell[1]
    mp = {int(p) for p in metric_positions}
    if pos > max(mp):
        return True
    return layer == model.cfg.n_layers - 1 and act in _POSITION_LOCAL_LAST and pos not in mp


def tl_activation_patch(model, corrupted_tokens, clean_cache, metric, setter: str,
                        act: str) -> Tensor:
    """The TransformerLens per-cell reference (one forward per cell) for the same cells."""
    import transformer_lens.patching as tlp

    tl_setters = {
        "layer_pos": tlp.layer_pos_patch_setter,
        "layer_pos_head": tlp.layer_pos_head_vector_patch_setter,
        "layer_head": tlp.layer_head_vector_patch_setter,
        "pattern_layer_head": tlp.layer_head_pattern_patch_setter,
        "pattern_layer_head_dest": tlp.layer_head_pos_pattern_patch_setter,
    }
    axes = ACT_AXES[setter]
    with torch.no_grad(), _quiet_tqdm(tlp):
        return tlp.generic_activation_patch(
            model, corrupted_tokens, clean_cache, metric, tl_setters[setter], act,
            index_axis_names=axes)


class _quiet_tqdm:
    """Silence transformer_lens.patching's progress bar (it would flood logs)."""

    def __init__(self, mod):
        self.mod = mod

    def __enter__(self):
        self.old = self.mod.tqdm
        self.mod.tqdm = lambda it, *a, **k: it
        return self

    def __exit__(self, *exc):
        self.mod.tqdm = self.old


# thin specialisations (TransformerLens names in parentheses)
patch_head_out_by_pos = partial(batched_activation_patch, setter="layer_pos_head", act="z")
patch_head_out_all_pos = partial(batched_activation_patch, setter="layer_head", act="z")
patch_q_by_pos = partial(batched_activation_patch, setter="layer_pos_head", act="q")
patch_k_by_pos = partial(batched_activation_patch, setter="layer_pos_head", act="k")
patch_v_by_pos = partial(batched_activation_patch, setter="layer_pos_head", act="v")
patch_q_all_pos = partial(batched_activation_patch, setter="layer_head", act="q")
patch_k_all_pos = partial(batched_activation_patch, setter="layer_head", act="k")
patch_v_all_pos = partial(batched_activation_patch, setter="layer_head", act="v")
patch_pattern_all_pos = partial(batched_activation_patch, setter="pattern_layer_head",
                                act="pattern")
patch_pattern_by_pos = partial(batched_activation_patch, setter="pattern_layer_head_dest",
                               act="pattern")
patch_resid_pre = partial(batched_activation_patch, setter="layer_pos", act="resid_pre")
patch_resid_mid = partial(batched_activation_patch, setter="layer_pos", act="resid_mid")
patch_attn_out = partial(batched_activation_patch, setter="layer_pos", act="attn_out")


# ---------------------------------------------------------------------------------------------
# Attribution patching
# ---------------------------------------------------------------------------------------------
def attribution_patch(model, clean_tokens: Tensor, corrupted_tokens: Tensor,
                      metric: Callable[[Tensor], Tensor], act: str = "z",
                      by: str = "pos_head", clean_cache=None) -> Tensor:
    """First-order estimate of patching every cell: ``(clean - corrupted) . grad``.

    ``act`` a head-vector activation (``z``, ``q``, ``k``, ``v``) with ``by`` ``pos_head``
    -> (layers, pos, heads) or ``head`` -> (layers, heads); or a residual-shaped activation
    (``resid_pre``, ``resid_mid``, ``attn_out``) with ``by="pos"`` -> (layers, pos).
    Values estimate ``metric(patched) - metric(corrupted)``; add the corrupted metric to
    compare them with exact patching. ``clean_cache`` (optional) reuses the clean run's
    activations, as the exact functions do.
    """
    L = model.cfg.n_layers
    names = [_act_name(act, l) for l in range(L)]
    keep = set(names)
    if clean_cache is None or not all(n in clean_cache for n in names):
        with torch.no_grad():
            _, clean_cache = model.run_with_cache(clean_tokens,
                                                  names_filter=lambda n: n in keep)
    acts: dict[str, Tensor] = {}

    def fwd(a, hook):
        acts[hook.name] = a
        a.retain_grad()
        return a

    model.zero_grad(set_to_none=True)
    req = {n: p.requires_grad for n, p in model.named_parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        with torch.enable_grad():
            emb_hook = ("hook_embed", lambda a, hook: a.requires_grad_(True))
            logits = model.run_with_hooks(corrupted_tokens,
                                          fwd_hooks=[emb_hook] + [(n, fwd) for n in names])
            metric(logits).backward()
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(req[n])
    rows = []
    for n in names:
        g = acts[n].grad  # same shape as activation
        d = (clean_cache[n] - acts[n].detach()) * g
        if act in ("z", "q", "k", "v"):
            s = d.sum(-1).sum(0)  # (pos, heads)
            rows.append(s if by == "pos_head" else s.sum(0))
        else:
            rows.append(d.sum(-1).sum(0))  # (pos,)
    return torch.stack(rows).detach()


# ---------------------------------------------------------------------------------------------
# Path patching: sender head -> receiver head q/k/v (or -> logits)
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def path_patch(model, clean_tokens: Tensor, corrupted_tokens: Tensor,
               metric: Callable[[Tensor], Tensor], sender: tuple[int, int],
               receivers: Sequence[tuple], freeze_mlps: bool = True) -> Tensor:
    """Effect of the sender head's clean output along the paths into ``receivers`` only.

    ``sender = (layer, head)``. ``receivers`` is a list of ``(layer, head, "q"|"k"|"v")`` or
    ``("logits",)`` (the direct path to the unembedding).

    1. Cache the clean and corrupted runs.
    2. Run the corrupted tokens with the sender's ``z`` set to its clean value and every
       other head's ``z`` (and the MLP outputs when ``freeze_mlps``) frozen at the corrupted
       value; record the receivers' q/k/v (and the final residual for ``logits``).
    3. Run the corrupted tokens with only the receivers' inputs replaced by the recordings;
       return ``metric`` of those logits.

    With a sender in the last layer and ``receivers=[("logits",)]`` this is exactly activation
    patching of the sender's output (tested).
    """
    L = model.cfg.n_layers
    sl, sh = sender
    _, clean = model.run_with_cache(clean_tokens, names_filter=lambda n: n.endswith("hook_z"))
    _, corr = model.run_with_cache(
        corrupted_tokens, names_filter=lambda n: n.endswith(("hook_z", "mlp_out")))

    def freeze_z(a, hook, layer):
        a = corr[hook.name].clone()
        if layer == sl:
            a[:, :, sh] = clean[hook.name][:, :, sh]
        return a

    rec: dict[str, Tensor] = {}

    def record(a, hook):
        rec[hook.name] = a.clone()
        return a

    hooks = []
    for l in range(sl, L):
        hooks.append((_act_name("z", l), partial(freeze_z, layer=l)))
        if freeze_mlps and not model.cfg.attn_only and l >= sl:
            hooks.append((_act_name("mlp_out", l), lambda a, hook: corr[hook.name]))
    want = set()
    for r in receivers:
        if r[0] == "logits":
            want.add(f"blocks.{L - 1}.hook_resid_post")
        else:
            rl, rh, kind = r
            if rl <= sl:
                raise ConfigError(f"receivers = {r!r} is not allowed; expected a head in a "
                                  f"later layer than the sender {sender} (or ('logits',))")
            want.add(_act_name(kind, rl))
    hooks += [(n, record) for n in sorted(want)]
    model.run_with_hooks(corrupted_tokens, fwd_hooks=hooks)

    hooks2 = []
    for r in receivers:
        if r[0] == "logits":
            n = f"blocks.{L - 1}.hook_resid_post"
            hooks2.append((n, lambda a, hook: rec[hook.name]))
        else:
            rl, rh, kind = r
            n = _act_name(kind, rl)

            def put(a, hook, rh=rh):
                a = a.clone()
                a[:, :, rh] = rec[hook.name][:, :, rh]
                return a

            hooks2.append((n, put))
    logits = model.run_with_hooks(corrupted_tokens, fwd_hooks=hooks2)
    return metric(logits)


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------
def _gather_last(logits: Tensor, pos: Tensor | int | None) -> Tensor:
    B = logits.shape[0]
    if pos is None:
        return logits[:, -1]
    if isinstance(pos, int):
        return logits[:, pos]
    return logits[torch.arange(B, device=logits.device), pos.to(logits.device)]


def logit_diff_metric(pos, good: Tensor, bad: Tensor) -> Callable[[Tensor], Tensor]:
    """``mean_b logit[good_b] - logit[bad_b]`` at position ``pos`` (int, (B,) tensor or None =
    last). Works on any number of stacked copies of the batch only through the engine."""

    def metric(logits: Tensor) -> Tensor:
        lg = _gather_last(logits, pos)
        idx = torch.arange(lg.shape[0], device=lg.device)
        return (lg[idx, good.to(lg.device)] - lg[idx, bad.to(lg.device)]).mean()

    return metric


def answer_logit_metric(pos, answer: Tensor) -> Callable[[Tensor], Tensor]:
    """Mean log-probability of ``answer`` at ``pos``."""

    def metric(logits: Tensor) -> Tensor:
        lg = _gather_last(logits, pos).log_softmax(-1)
        return lg[torch.arange(lg.shape[0], device=lg.device), answer.to(lg.device)].mean()

    return metric


def normalised_recovery(value, clean_value, corrupted_value):
    """``(value - corrupted) / (clean - corrupted)``: 0 = no effect, 1 = full recovery."""
    den = clean_value - corrupted_value
    if isinstance(den, Tensor):
        return (value - corrupted_value) / torch.where(den.abs() < 1e-12,
                                                       torch.full_like(den, 1e-12), den)
    return (value - corrupted_value) / (den if abs(den) > 1e-12 else 1e-12)


# ---------------------------------------------------------------------------------------------
# Attention-row overwrite (causal tests of a pattern, e.g. IR-3/IR-4)
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def overwrite_attention_row(model, tokens: Tensor, layer: int, head: int, query_pos,
                            row: Tensor | np.ndarray, answer_pos=None,
                            answers: Tensor | None = None, renormalise: bool = False):
    """Run ``model`` with head ``(layer, head)``'s attention row at ``query_pos`` replaced.

    ``query_pos``: int or (B,) tensor. ``row``: (n_src,) or (B, n_src) weights over source
    positions 0..n_src-1 (the rest get 0); ``renormalise`` divides by its sum. Returns the
    logits, and with ``answers`` (B,) also the accuracy of argmax at ``answer_pos`` (default
    ``query_pos``) as a second value. The overwrite goes through the ``hook_pattern`` hook, so
    the head's value vectors and everything downstream are recomputed.
    """
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

    logits = model.run_with_hooks(tokens, fwd_hooks=[(_act_name("pattern", layer), hook)])
    if answers is None:
        return logits
    ap = qp if answer_pos is None else torch.as_tensor(answer_pos, device=tokens.device).long()
    if ap.dim() == 0:
        ap = ap.expand(B)
    pred = logits[bidx, ap].argmax(-1)
    return logits, float((pred == answers.to(pred.device)).float().mean())


def time_call(fn, *a, **k):
    t = time.perf_counter()
    r = fn(*a, **k)
    return r, time.perf_counter() - t


def candidate_rows(n_src: int = 5, a: float = 0.2, delta: float = 0.1,
                   induction_src: int | None = None) -> dict[str, np.ndarray]:
    """Standard attention rows over ``(s1, a1, s2, a2, s3)`` (IR step-1 query at ``s3``):

    ``pairwise`` ``(a, a, 1/2-a, 1/2-a, 0)``; ``one_pair`` ``(1/2, 1/2, 0, 0, 0)``;
    ``unequal`` ``(a+delta, a-delta, 1/2-a-delta, 1/2-a+delta, 0)`` (unequal within each
    pair); ``uniform`` ``1/n_src`` everywhere; ``induction`` all mass on ``induction_src``
    (default: the position before the query, a previous-token/induction-style row)."""
    if n_src != 5:
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


def overwrite_rows_sweep(model, tokens: Tensor, layer: int, head: int, query_pos,
                         rows: dict[str, np.ndarray], answers: Tensor,
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
