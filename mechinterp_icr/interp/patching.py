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
- **Fast paths** (``suffix=True`` / ``incremental=True``, by-position setters; in
  :mod:`mechinterp_icr.interp.patching_fast`): forwards over the changed suffix only, or only
  what a patch can change computed from the cached corrupted run (the patched row of layer l,
  the changed key/value rows after it, the last layer at the metric positions), all cells of a
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
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from mechinterp_icr.config import ConfigError, check

__all__ = [
    "ACT_AXES",
    "PATCH_ACTS",
    "SETTERS",
    "PatchResult",
    "answer_logit_metric",
    "attribution_patch",
    "act_name",
    "batched_activation_patch",
    "cells_for",
    "check_patch_args",
    "chunk_hooks",
    "group_cells",
    "logit_diff_metric",
    "normalised_recovery",
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
    "pads_left",
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


# TransformerLens activation short names each setter patches (``layer_pos`` on a head vector
# patches every head at the position); usable when the model has the hook in every layer
_HEAD_ACTS = ("z", "q", "k", "v", "result", "rot_q", "rot_k")
_POS_ACTS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "pre", "post")
_PATTERN_ACTS = ("pattern", "attn_scores")
PATCH_ACTS: dict[str, tuple[str, ...]] = {
    "layer_pos": _POS_ACTS + _HEAD_ACTS,
    "layer_pos_head": _HEAD_ACTS,
    "layer_head": _HEAD_ACTS,
    "pattern_layer_head": _PATTERN_ACTS,
    "pattern_layer_head_dest": _PATTERN_ACTS,
}
# TransformerLens aliases (``get_act_name``) accepted for the names above
_ACT_ALIASES = {"key": "k", "query": "q", "value": "v", "attn": "pattern",
                "attn_logits": "attn_scores", "mlp_pre": "pre", "mlp_post": "post"}


def check_patch_args(model, setter: str, act: str, clean_cache=None,
                     layers: Sequence[int] | None = None) -> str:
    """``act``'s canonical short name, or a ConfigError naming the argument, its value and the
    allowed names: ``setter`` not a key of :data:`SETTERS`, ``act`` not one of
    ``PATCH_ACTS[setter]`` (or a TL alias such as ``key``) that ``model`` has a hook for in
    every layer, or ``clean_cache`` (if given) without it in one of ``layers`` (default all)."""
    check(isinstance(setter, str) and setter in SETTERS, "setter", setter,
          f"one of {sorted(SETTERS)}")
    L = model.cfg.n_layers
    have = [a for a in PATCH_ACTS[setter]
            if all(act_name(a, l) in model.hook_dict for l in range(L))]
    canon = _ACT_ALIASES.get(act, act) if isinstance(act, str) else act
    check(canon in have, "act", act, f"one of {have} with setter = {setter!r} on this "
          "model (TransformerLens activation short names)")
    if clean_cache is not None:
        for l in range(L) if layers is None else sorted(set(layers)):
            name = act_name(canon, l)
            if name not in clean_cache:
                raise ConfigError(
                    f"clean_cache without {name!r} is not allowed; expected the clean run's "
                    f"cache holding act = {act!r} in every patched layer (e.g. "
                    "model.run_with_cache(clean_tokens))")
    return canon


def cells_for(model, n_pos: int, axes: Sequence[str]) -> list[tuple[int, ...]]:
    """All cells over ``axes`` in TransformerLens's order (row-major, layer first)."""
    rng = {"layer": model.cfg.n_layers, "pos": n_pos, "dest_pos": n_pos, "src_pos": n_pos,
           "head": model.cfg.n_heads}
    return list(itertools.product(*[range(rng[a]) for a in axes]))


def act_name(act: str, layer: int) -> str:
    """TransformerLens hook name of activation ``act`` in ``layer`` (``z``, 1 ->
    ``blocks.1.attn.hook_z``)."""
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
def chunk_hooks(chunk, act: str, clean_cache, fn: Callable, B: int, p0: int = 0) -> list:
    """Hooks writing cell ``chunk[c]`` (setter ``fn``, clean activation) into batch copy ``c``
    (rows ``c*B..(c+1)*B``); with ``p0`` the forward sees positions ``p0..`` only (suffix)."""
    by_layer: dict[int, list[tuple[int, tuple]]] = {}
    for c, cell in enumerate(chunk):
        by_layer.setdefault(cell[0], []).append((c, (cell[0], cell[1] - p0, *cell[2:])
                                                     if p0 else cell))
    hooks = []
    for layer, items in by_layer.items():
        name = act_name(act, layer)
        clean = clean_cache[name][:, p0:] if p0 else clean_cache[name]

        def hook(a, hook, items=items, clean=clean):
            a = a.clone()
            for c, cell in items:
                fn(a[c * B:(c + 1) * B], cell, clean)
            return a

        hooks.append((name, hook))
    return hooks


def group_cells(todo, sort_key, group_key, per: int) -> list[list[int]]:
    """Cell indices sorted by ``sort_key`` and cut into runs of equal ``group_key`` holding at
    most ``per`` cells each (one batched forward per run; the engine's loop and the fast
    paths of :mod:`~mechinterp_icr.interp.patching_fast` share it)."""
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
    from a full forward, so it is off by default (:func:`.patching_fast.suffix_patch`).
    ``incremental`` (by-position setters, see :func:`.patching_fast.incremental_supported`;
    otherwise ignored): compute only what each patch can change, from the cached corrupted
    run: layer l at the patched row only for position-local activations, the changed
    key/value rows of later layers, and the last layer and the unembedding only at
    ``metric_positions`` (all positions when not given); all cells of a layer in one
    vectorised pass (:func:`.patching_fast.incremental_patch`). Mathematically exact; float
    summation order differs from a full forward (tested <= 1e-5), so it is off by default.
    """
    B, T = corrupted_tokens.shape
    if metric_positions is not None:
        mps = [int(p) for p in metric_positions]
        check(len(mps) > 0 and all(0 <= p < T for p in mps), "metric_positions",
              list(metric_positions), f"a non-empty list of positions in [0, {T - 1}]")
    act = check_patch_args(model, setter, act)
    axes = ACT_AXES[setter]
    shaped = cells is None
    if cells is None:
        cells = cells_for(model, T, axes)
    cells = [tuple(int(i) for i in c) for c in cells]
    check_patch_args(model, setter, act, clean_cache, [c[0] for c in cells])
    fn = SETTERS[setter]
    per = max(1, max_batch // B)
    out = torch.zeros(len(cells), device=corrupted_tokens.device)
    todo = list(range(len(cells)))
    fast = None
    if suffix or incremental:  # the optional fast paths live in their own module
        from mechinterp_icr.interp import patching_fast as fast
    logits_c = cc_inc = None
    if incremental and fast.incremental_supported(model, setter, act):
        logits_c, cc_inc = fast.corrupted_cache(model, corrupted_tokens)
    if metric_positions is not None:
        skip = [i for i in todo if unreachable(model, setter, act, cells[i], metric_positions)]
        if skip:
            base = model(corrupted_tokens) if logits_c is None else logits_c
            out[skip] = metric(base).reshape(()).to(out)
            todo = [i for i in todo if i not in set(skip)]
    if cc_inc is not None and todo:
        mp = range(T) if metric_positions is None else metric_positions
        fast.incremental_patch(model, corrupted_tokens, clean_cache, metric, setter, act,
                               cells, todo, out, per, mp, logits_c, cc_inc)
        todo = []
    if suffix and fast.suffix_supported(setter, act, model) and todo:
        fast.suffix_patch(model, corrupted_tokens, clean_cache, metric, setter, act, cells,
                          todo, out, per, skip_layers)
        todo = []
    # Cells are grouped by layer: a patch in layer l leaves layers < l untouched, so the
    # forward of a group starts at layer l from the corrupted run's residual stream (exact:
    # those activations are the same computation on the same inputs). It also gets what TL's
    # forward derives from the tokens: a shortformer's positional embedding (added to every
    # block's query/key input) and the mask of a tokenizer that pads on the left.
    start_resid: dict[int, Tensor] = {}
    restart_kw: dict[str, Tensor] = {}
    shortformer = model.cfg.positional_embedding_type == "shortformer"
    layers = sorted({cells[i][0] for i in todo})
    if skip_layers and any(l > 0 for l in layers) and act not in ("resid_pre",):
        names = {f"blocks.{l}.hook_resid_pre" for l in layers if l > 0}
        names |= {"hook_pos_embed"} if shortformer else set()
        _, cc = model.run_with_cache(corrupted_tokens, names_filter=lambda n: n in names)
        start_resid = {l: cc[f"blocks.{l}.hook_resid_pre"] for l in layers if l > 0}
        if shortformer:
            restart_kw["shortformer_pos_embed"] = cc["hook_pos_embed"]
        if pads_left(model):  # the mask TL's forward would compute from the tokens
            from transformer_lens.utilities import get_attention_mask

            restart_kw["attention_mask"] = get_attention_mask(
                model.tokenizer, corrupted_tokens, model.cfg.default_prepend_bos)
    # chunks of one layer each, at most `per` cells
    groups = group_cells(todo, lambda i: cells[i][0], lambda i: cells[i][0], per)
    for idx in groups:
        chunk = [cells[i] for i in idx]
        C = len(chunk)
        layer0 = chunk[0][0]
        hooks = chunk_hooks(chunk, act, clean_cache, fn, B)
        if layer0 in start_resid:
            resid = start_resid[layer0].repeat(C, 1, 1)  # (C*B, T, d_model)
            kw = {k: v.repeat(C, *[1] * (v.dim() - 1)) for k, v in restart_kw.items()}
            logits = model.run_with_hooks(resid, fwd_hooks=hooks, start_at_layer=layer0,
                                          tokens=corrupted_tokens.repeat(C, 1), **kw)
        else:
            toks = corrupted_tokens.repeat(C, 1)  # (C*B, T): copy c = rows c*B..(c+1)*B
            logits = model.run_with_hooks(toks, fwd_hooks=hooks)
        for c in range(C):
            out[idx[c]] = metric(logits[c * B:(c + 1) * B]).reshape(())
    if shaped:
        sizes = [max(c[i] for c in cells) + 1 for i in range(len(axes))]
        return out.reshape(sizes)
    return out


def pads_left(model) -> bool:
    """True when ``model`` has a tokenizer that pads on the left: TransformerLens's forward
    then masks the leading pad tokens of a token batch itself."""
    tok = getattr(model, "tokenizer", None)
    return tok is not None and getattr(tok, "padding_side", None) == "left"


# activations whose patch at position p in the last layer only changes position p's output
_POSITION_LOCAL_LAST = {"z", "q", "attn_out", "resid_mid", "mlp_out", "resid_post", "result"}


def unreachable(model, setter: str, act: str, cell: tuple, metric_positions) -> bool:
    """True when patching ``cell`` cannot change the logits at ``metric_positions``: a
    position after every metric position (causal masking), or a last-layer position-local
    activation (``z``, ``q``, ``attn_out``, ``resid_mid``, ``mlp_out``, ``resid_post``) at a
    position the metric does not read. (The first rule needs causal attention; a
    bidirectional model keeps only the second.)"""
    if setter not in ("layer_pos", "layer_pos_head"):
        return False
    layer, pos = cell[0], cell[1]
    mp = {int(p) for p in metric_positions}
    if pos > max(mp) and getattr(model.cfg, "attention_dir", "causal") == "causal":
        return True
    return layer == model.cfg.n_layers - 1 and act in _POSITION_LOCAL_LAST and pos not in mp


def tl_activation_patch(model, corrupted_tokens, clean_cache, metric, setter: str,
                        act: str) -> Tensor:
    """The TransformerLens per-cell reference (one forward per cell) for the same cells."""
    import transformer_lens.patching as tlp

    act = check_patch_args(model, setter, act, clean_cache)
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


@contextmanager
def _quiet_tqdm(mod):
    """Silence transformer_lens.patching's progress bar (it would flood logs)."""
    old, mod.tqdm = mod.tqdm, (lambda it, *a, **k: it)
    try:
        yield
    finally:
        mod.tqdm = old


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
    head_acts = ("z", "q", "k", "v")
    check(act in head_acts + _POS_ACTS, "act", act, f"one of {list(head_acts + _POS_ACTS)}")
    if act in head_acts:
        check(by in ("pos_head", "head"), "by", by, f"'pos_head' or 'head' with act = {act!r}")
    L = model.cfg.n_layers
    names = [act_name(act, l) for l in range(L)]
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

    With a sender in the last layer, ``receivers=[("logits",)]`` and ``freeze_mlps=False``
    (or an attention-only model) this is exactly activation patching of the sender's output
    (tested). With ``freeze_mlps=True`` on a model with MLPs it is not: the last layer's MLP
    stays at its corrupted output, so the sender's effect through that MLP is left out and
    only the direct path (sender -> residual -> unembedding) counts (tested to differ).
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
        hooks.append((act_name("z", l), partial(freeze_z, layer=l)))
        if freeze_mlps and not model.cfg.attn_only and l >= sl:
            hooks.append((act_name("mlp_out", l), lambda a, hook: corr[hook.name]))
    want = set()
    for r in receivers:
        if r[0] == "logits":
            want.add(f"blocks.{L - 1}.hook_resid_post")
        else:
            rl, rh, kind = r
            if rl <= sl:
                raise ConfigError(f"receivers = {r!r} is not allowed; expected a head in a "
                                  f"later layer than the sender {sender} (or ('logits',))")
            want.add(act_name(kind, rl))
    hooks += [(n, record) for n in sorted(want)]
    model.run_with_hooks(corrupted_tokens, fwd_hooks=hooks)

    hooks2 = []
    for r in receivers:
        if r[0] == "logits":
            n = f"blocks.{L - 1}.hook_resid_post"
            hooks2.append((n, lambda a, hook: rec[hook.name]))
        else:
            rl, rh, kind = r
            n = act_name(kind, rl)

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
