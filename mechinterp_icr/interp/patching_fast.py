"""Fast strategies of the exact activation-patching engine (by-position setters only).

:func:`mechinterp_icr.interp.patching.batched_activation_patch` calls them when it is
called with ``suffix=True`` or ``incremental=True``; each takes the cells to patch and
returns their metric values as a tensor. This module imports only the shared core
(:mod:`~mechinterp_icr.interp.patching_core`), never the engine.
Both strategies are mathematically exact but sum floats in another order than a full forward, so
they agree with TransformerLens's per-cell loop up to float rounding (tested <= 1e-5 in
``tests/integration/test_patching_fast.py``), not bitwise; that is why they are off by default.

- **Suffix** (:func:`suffix_values`): a patch at position p leaves positions < p unchanged, so a
  group of cells runs only the positions from its smallest p on, with the corrupted prefix's
  keys and values in a frozen TransformerLens key/value cache.
- **Incremental** (:func:`incremental_values`, where :func:`incremental_supported`): compute
  only what each patch can change from the cached corrupted run (:func:`corrupted_cache`): the
  patched row of layer l, the changed key/value rows after it, the last layer and the
  unembedding at the metric positions; all cells of a layer in one vectorised pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from mechinterp_icr.interp.patching_core import (
    BY_POSITION_SETTERS,
    Setter,
    act_name,
    cell_metric,
    chunk_hooks,
    group_cells,
    layer_pos_head_vector_patch_setter,
    layer_pos_patch_setter,
    pads_left,
)

__all__ = [
    "SUFFIX_ACTS",
    "corrupted_cache",
    "incremental_supported",
    "incremental_values",
    "suffix_supported",
    "suffix_values",
]


# ---------------------------------------------------------------------------------------------
# Suffix patching: forwards over the positions a patch can change, on a frozen prefix KV cache
# ---------------------------------------------------------------------------------------------
SUFFIX_ACTS = {"z", "q", "k", "v", "result", "resid_pre", "resid_mid", "resid_post",
                "attn_out", "mlp_out"}


def suffix_supported(setter: Setter, act: str, model=None) -> bool:
    """True when ``suffix=True`` applies: a by-position setter and an activation of
    :data:`SUFFIX_ACTS`, and (when ``model`` is given) a causal model with standard,
    shortformer or rotary positions and no tokenizer that pads on the left (the frozen
    prefix cache assumes an all-ones attention mask). Other cases fall back to the full
    forward passes."""
    if setter not in BY_POSITION_SETTERS or act not in SUFFIX_ACTS:
        return False
    if model is None:
        return True
    cfg = model.cfg
    return (getattr(cfg, "attention_dir", "causal") == "causal"
            and cfg.positional_embedding_type in ("standard", "shortformer", "rotary")
            and not pads_left(model))


@torch.no_grad()
def suffix_values(model, tokens: Tensor, clean_cache, metric: Callable[[Tensor], Tensor],
                  setter: Setter, act: str, cells: Sequence[tuple[int, ...]], *, per: int,
                  skip_layers: bool = True, n_windows: int = 8,
                  per_prompt: bool = False) -> Tensor:
    """The metric of each cell of ``cells`` (per prompt, ``(cells, B)``, with ``per_prompt``;
    at most ``per`` copies per forward), by suffix
    forwards over a frozen prefix key/value cache (the positions are cut into ``n_windows``
    windows; cells of one window share a forward)."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    B, T = tokens.shape
    L = model.cfg.n_layers
    dev = tokens.device
    keep = {f"blocks.{l}.attn.hook_{x}" for l in range(L) for x in "kv"}
    keep |= {f"blocks.{l}.hook_resid_pre" for l in range(L)}
    shortformer = model.cfg.positional_embedding_type == "shortformer"
    if shortformer:  # added to every block's query/key input; a restarted forward needs it
        keep.add("hook_pos_embed")
    logits_c, cc = model.run_with_cache(tokens, names_filter=lambda n: n in keep)
    out = torch.zeros(len(cells), *((B,) if per_prompt else ()), device=dev)
    width = max(1, -(-T // n_windows))
    groups = group_cells(range(len(cells)),
                         lambda i: (cells[i][1] // width, cells[i][0], cells[i][1:]),
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
        hooks = chunk_hooks(chunk, act, clean_cache, setter, B, p0)
        if l0 > 0:
            resid = cc[f"blocks.{l0}.hook_resid_pre"][:, p0:].repeat(C, 1, 1)
            kw = ({"shortformer_pos_embed": cc["hook_pos_embed"][:, p0:].repeat(C, 1, 1)}
                  if shortformer else {})
            suf = model.run_with_hooks(resid, fwd_hooks=hooks, start_at_layer=l0,
                                       tokens=tokens[:, p0:].repeat(C, 1), past_kv_cache=kv,
                                       attention_mask=torch.ones(CB, T, dtype=torch.int,
                                                                 device=dev), **kw)
        else:
            suf = model.run_with_hooks(tokens[:, p0:].repeat(C, 1), fwd_hooks=hooks,
                                       past_kv_cache=kv,
                                       attention_mask=torch.ones(CB, T - p0, dtype=torch.int,
                                                                 device=dev))
        full = logits_c.repeat(C, 1, 1)
        full[:, p0:] = suf
        for c in range(C):
            out[idx[c]] = cell_metric(metric, full[c * B:(c + 1) * B], per_prompt)
    return out


# ---------------------------------------------------------------------------------------------
# Incremental exact patching: compute only what a by-position patch can change
# ---------------------------------------------------------------------------------------------
# activations whose patch at (layer l, position p) changes layer l's output only at p
_LOCAL_ACTS = {"z", "q", "attn_out", "resid_mid", "mlp_out", "resid_post"}
_INCREMENTAL_ACTS = {layer_pos_head_vector_patch_setter: {"z", "q", "k", "v"},
                     layer_pos_patch_setter: {"resid_pre", "resid_mid", "attn_out", "mlp_out",
                                              "resid_post"}}


def incremental_supported(model, setter: Setter, act: str) -> bool:
    """True when ``batched_activation_patch`` can use ``incremental=True`` for this
    model and activation: by-position setters, and a plain pre-norm causal decoder (standard
    positional embedding, no split q/k/v input, no parallel attention/MLP, no grouped or local
    attention, no soft caps, no tokenizer that pads on the left). Other cases (shortformer
    and rotary models among them) fall back to the full forward passes."""
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
    return (cfg.positional_embedding_type == "standard" and not pads_left(model)
            and cfg.original_architecture not in POST_NORM_ARCHITECTURES
            and getattr(cfg, "attention_dir", "causal") == "causal"
            and all(type(b.attn).__name__ == "Attention" for b in model.blocks))


def corrupted_cache(model, tokens: Tensor):
    """(logits, cache) of the corrupted run with what :func:`incremental_values` reads: every
    layer's ``resid_pre``, keys and values."""
    keep = {f"blocks.{l}.{x}" for l in range(model.cfg.n_layers)
            for x in ("hook_resid_pre", "attn.hook_k", "attn.hook_v")}
    return model.run_with_cache(tokens, names_filter=lambda n: n in keep)


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


def _attend_shared(a, q: Tensor, qpos: Tensor, Kc: Tensor, Vc: Tensor, prow: Tensor,
                   k_row: Tensor | None, v_row: Tensor | None) -> Tensor:
    """Like :func:`_attend_full` for C copies of one batch whose keys/values are the shared
    ``Kc``, ``Vc`` (B, T, H, d_head) except row ``prow[n]`` of copy n, which holds ``k_row[n]``,
    ``v_row[n]`` (N, H, d_head) when given. The copies' queries become extra query rows of
    the shared batch (no per-copy key/value tensor); the changed key row's scores are set
    and the changed value row enters as ``pattern[prow] * v_row`` added to the other rows' sum:
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
        s5[bidx, :, cidx, :, prow] = s_row.permute(0, 2, 1)  # (N, H, R)
    qp = qpos.reshape(C, B, R).permute(1, 0, 2).reshape(B, 1, C * R, 1)
    mask = torch.arange(T, device=dev).view(1, 1, 1, T) <= qp
    scores = torch.where(mask, scores, a.IGNORE.to(scores.device))
    pattern = torch.softmax(scores, dim=-1)
    pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
    pattern = pattern.to(Vc.dtype)
    p_row = None
    if v_row is not None:  # the changed value row enters separately: z = sum_{t != prow} + p_prow v
        p5 = pattern.view(B, H, C, R, T)
        p_row = p5[bidx, :, cidx, :, prow].permute(0, 2, 1)  # (N, R, H)
        p5[bidx, :, cidx, :, prow] = 0.0
    z = pattern @ Vc.permute(0, 2, 1, 3)  # (B, H, C*R, d_head)
    z = z.view(B, H, C, R, dh).permute(2, 0, 3, 1, 4).reshape(N, R, H, dh)
    if p_row is not None:
        z = z + p_row[..., None] * v_row[:, None]
    return z


def _attend_full_kv(a, q, qpos, kv):
    return _attend_full(a, q, qpos, *kv)


def _attend_shared_kv(a, q, qpos, Kc, Vc, prow, k_row, v_row):
    return _attend_shared(a, q, qpos, Kc, Vc, prow, k_row, v_row)


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


def _put_clean(name: str, t: Tensor, qpos: Tensor, act: str, prow: Tensor, Hd: Tensor | None,
               clean: Tensor) -> Tensor:
    """Activation ``name`` with copy n's rows at position ``prow[n]`` (head ``Hd[n]``) set to
    ``clean[n]``; ``t`` is (N, R, H, d_head) or (N, R, d_model) at positions ``qpos`` (N, R)."""
    if name != act:
        return t
    sel = qpos == prow[:, None]  # (N, R)
    if Hd is not None:
        heads = torch.arange(t.shape[2], device=t.device) == Hd[:, None]  # (N, H)
        sel = sel[:, :, None] & heads[:, None, :]  # (N, R, H)
    return torch.where(sel[..., None], clean[:, None], t)


@torch.no_grad()
def incremental_values(model, tokens: Tensor, clean_cache, metric: Callable[[Tensor], Tensor],
                       setter: Setter, act: str, cells: Sequence[tuple[int, ...]], *,
                       per: int, metric_positions: Sequence[int], corrupted,
                       per_prompt: bool = False) -> Tensor:
    """The metric of each cell of ``cells`` (per prompt, ``(cells, B)``, with
    ``per_prompt``), computing only what each patch can change;
    ``corrupted`` is :func:`corrupted_cache`'s (logits, cache) of the corrupted run.

    A patch at (layer l, position p) leaves layers < l and positions < p as in the corrupted
    run (cached). Position-local activations (z, q, attn_out, resid_mid, mlp_out,
    resid_post) change layer l's output only at p: layer l is computed at that one row. The
    next layer then differs from the corrupted run only in the key/value row p; layers
    between recompute all rows; the last layer computes only the queries at the metric
    positions (its keys/values come from the cache, with the changed rows recomputed),
    and the unembedding runs on those rows only. All cells of a chunk (up to ``per``) are
    vectorised along the batch axis, whatever their position and head."""
    B = tokens.shape[0]
    logits_c, cc = corrupted
    mp_t = torch.as_tensor(sorted(int(p) for p in metric_positions), device=tokens.device,
                           dtype=torch.long)
    out = torch.zeros(len(cells), *((B,) if per_prompt else ()), device=tokens.device)
    buf = logits_c.clone()
    # chunks of one layer each, at most `per` cells
    groups = group_cells(range(len(cells)), lambda i: cells[i], lambda i: cells[i][0], per)
    for idx in groups:
        rows = _chunk_metric_logits(model, cc, clean_cache, setter, act,
                                    [cells[i] for i in idx], B, mp_t).to(logits_c.dtype)
        # one buffer of corrupted logits; copy c's metric-position rows are written in just
        # before its metric is read (positions the metric does not read keep the corrupted
        # logits)
        for c in range(len(idx)):
            buf[:, mp_t] = rows[c * B:(c + 1) * B]
            out[idx[c]] = cell_metric(metric, buf, per_prompt)
        buf[:, mp_t] = logits_c[:, mp_t]
    return out


def _chunk_metric_logits(model, cc, clean_cache, setter: Setter, act: str,
                         chunk: Sequence[tuple[int, ...]], B: int, mp_t: Tensor) -> Tensor:
    """Logits (C*B, R, d_vocab) at the metric positions ``mp_t`` of the C patched copies of
    the corrupted batch (B rows each), one per cell of ``chunk`` (all in one layer)."""
    from transformer_lens.utilities.activation_functions import apply_softcap

    T = cc["blocks.0.hook_resid_pre"].shape[1]
    n_layers = model.cfg.n_layers
    dev = mp_t.device
    C, l = len(chunk), chunk[0][0]
    N = C * B
    bidx = torch.arange(B, device=dev).repeat(C)  # copy c = rows c*B..(c+1)*B
    prow = torch.tensor([c[1] for c in chunk], device=dev).repeat_interleave(B)  # (N,)
    Hd = (torch.tensor([c[2] for c in chunk], device=dev).repeat_interleave(B)
          if setter is layer_pos_head_vector_patch_setter else None)
    clean = clean_cache[act_name(act, l)][bidx, prow]  # (N, [H, d_head] | d_model)
    row = clean if act == "resid_pre" else None  # input rows at prow that differ
    dense = None  # or the whole input residual (N, T, d_model)
    for j in range(l, n_layers):
        blk = model.blocks[j]
        last = j == n_layers - 1
        if dense is not None:
            attend = partial(_attend_full_kv, kv=_kv_rows(blk, dense))
        else:
            attend = _shared_attend(blk, cc, j, row, bidx, prow,
                                    (Hd, clean) if j == l and act in ("k", "v") else None, act)
        # query rows: the metric positions (last layer), the patched row (position-local
        # patch layer) or every position
        resid = dense if dense is not None else cc[f"blocks.{j}.hook_resid_pre"]
        rep = 1 if dense is not None else C
        if last:
            qpos = mp_t.expand(N, -1)
            x = resid[:, mp_t].repeat(rep, 1, 1)  # (N, R, d_model)
        elif j == l and act in _LOCAL_ACTS:
            qpos = prow[:, None]
            x = resid[bidx, prow][:, None]
        else:
            qpos = torch.arange(T, device=dev).expand(N, -1)
            x = resid.repeat(rep, 1, 1)
        if row is not None:
            x = torch.where((qpos == prow[:, None])[..., None], row[:, None], x)
        fn = (partial(_put_clean, qpos=qpos, act=act, prow=prow, Hd=Hd, clean=clean)
              if j == l else _no_patch)
        y = _block_rows(blk, x, qpos, attend, bool(model.cfg.attn_only), fn)
        if last:
            final = y
        elif j == l and act in _LOCAL_ACTS:
            row, dense = y[:, 0], None
        else:
            row, dense = None, y
    if model.cfg.normalization_type is not None:
        final = model.ln_final(final)
    return apply_softcap(model.unembed(final), model.cfg.output_logits_soft_cap)


def _shared_attend(blk, cc, j: int, row: Tensor | None, bidx: Tensor, prow: Tensor,
                   kv_patch: tuple[Tensor, Tensor] | None, act: str) -> Callable:
    """Layer ``j``'s attention over the corrupted keys/values, shared by the copies, except
    row ``prow`` of each copy: recomputed from the changed input ``row`` (when given) or, for
    a key/value patch (``kv_patch`` = (heads, clean rows)), the clean key/value of the head."""
    Kc = cc[f"blocks.{j}.attn.hook_k"]  # (B, T, H, d_head)
    Vc = cc[f"blocks.{j}.attn.hook_v"]
    k_row = v_row = None
    if row is not None:
        kr, vr = _kv_rows(blk, row[:, None])
        k_row, v_row = kr[:, 0], vr[:, 0]  # (N, H, d_head)
    if kv_patch is not None:
        Hd, clean = kv_patch
        ar = torch.arange(len(prow), device=prow.device)
        put = (Kc if act == "k" else Vc)[bidx, prow]  # (N, H, d_head)
        put[ar, Hd] = clean[ar, Hd]
        k_row, v_row = (put, None) if act == "k" else (None, put)
    return partial(_attend_shared_kv, Kc=Kc, Vc=Vc, prow=prow, k_row=k_row, v_row=v_row)
