"""The shared core of activation patching: setters, cells, hooks and the reachability rule.

The engine (:mod:`mechinterp_icr.interp.patching`) and its fast strategies
(:mod:`mechinterp_icr.interp.patching_fast`) both import this module; it imports neither.

**Setters are TransformerLens's own functions** (``transformer_lens.patching``): a setter
``setter(corrupted_activation, index, clean_activation) -> corrupted_activation`` writes the
clean activation of one cell into the corrupted one, as in
``transformer_lens.patching.generic_activation_patch``. The five TransformerLens setters are
re-exported here with their cell axes (:data:`SETTER_AXES`) and the activations they patch
(:data:`SETTER_ACTS`); any other callable of that signature works with explicit
``index_axis_names``, on the engine's general path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import transformer_lens.patching as _tlp
from torch import Tensor

from mechinterp_icr.config import ConfigError, check

__all__ = [
    "BY_POSITION_SETTERS",
    "POS_ACTS",
    "SETTER_ACTS",
    "SETTER_AXES",
    "Setter",
    "act_name",
    "canonical_act",
    "cell_metric",
    "cells_for",
    "chunk_hooks",
    "group_cells",
    "layer_head_pattern_patch_setter",
    "layer_head_pos_pattern_patch_setter",
    "layer_head_vector_patch_setter",
    "layer_pos_head_vector_patch_setter",
    "layer_pos_patch_setter",
    "pads_left",
    "setter_axes",
    "unreachable",
]

Setter = Callable[[Tensor, Sequence[int], Tensor], Tensor]
"""``setter(corrupted_activation, index, clean_activation) -> patched activation`` (batch
axis first; ``index`` is one cell, layer first), TransformerLens's patch-setter signature."""

# TransformerLens's setters: cells (layer, pos), (layer, pos, head), (layer, head),
# (layer, head) on an attention pattern, (layer, head, dest_pos) on an attention pattern
layer_pos_patch_setter: Setter = _tlp.layer_pos_patch_setter
layer_pos_head_vector_patch_setter: Setter = _tlp.layer_pos_head_vector_patch_setter
layer_head_vector_patch_setter: Setter = _tlp.layer_head_vector_patch_setter
layer_head_pattern_patch_setter: Setter = _tlp.layer_head_pattern_patch_setter
layer_head_pos_pattern_patch_setter: Setter = _tlp.layer_head_pos_pattern_patch_setter

SETTER_AXES: dict[Setter, tuple[str, ...]] = {
    layer_pos_patch_setter: ("layer", "pos"),
    layer_pos_head_vector_patch_setter: ("layer", "pos", "head"),
    layer_head_vector_patch_setter: ("layer", "head"),
    layer_head_pattern_patch_setter: ("layer", "head"),
    layer_head_pos_pattern_patch_setter: ("layer", "head", "dest_pos"),
}
"""The cell axes of each TransformerLens setter (the first axis is always the layer)."""

BY_POSITION_SETTERS = (layer_pos_patch_setter, layer_pos_head_vector_patch_setter)
"""Setters whose cell names one position: the only ones the fast strategies and the
reachability rule apply to."""

# TransformerLens activation short names each setter patches (``layer_pos_patch_setter`` on
# a head vector patches every head at the position)
_HEAD_ACTS = ("z", "q", "k", "v", "result", "rot_q", "rot_k")
POS_ACTS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "pre", "post")
_PATTERN_ACTS = ("pattern", "attn_scores")
SETTER_ACTS: dict[Setter, tuple[str, ...]] = {
    layer_pos_patch_setter: POS_ACTS + _HEAD_ACTS,
    layer_pos_head_vector_patch_setter: _HEAD_ACTS,
    layer_head_vector_patch_setter: _HEAD_ACTS,
    layer_head_pattern_patch_setter: _PATTERN_ACTS,
    layer_head_pos_pattern_patch_setter: _PATTERN_ACTS,
}
"""Activations each TransformerLens setter can patch (where the model hooks them)."""

# TransformerLens aliases (``get_act_name``) accepted for the names above
_ACT_ALIASES = {"key": "k", "query": "q", "value": "v", "attn": "pattern",
                "attn_logits": "attn_scores", "mlp_pre": "pre", "mlp_post": "post"}


def _setter_name(setter) -> str:
    return getattr(setter, "__name__", repr(setter))


def setter_axes(setter: Setter, index_axis_names: Sequence[str] | None = None
                ) -> tuple[str, ...]:
    """The cell axes of ``setter``: ``index_axis_names`` when given (any callable setter), else
    the TransformerLens setter's own (:data:`SETTER_AXES`); a ConfigError otherwise."""
    known = [_setter_name(s) for s in SETTER_AXES]
    check(callable(setter), "setter", setter,
          f"a patch-setter function, e.g. one of {known} (transformer_lens.patching)")
    if index_axis_names is not None:
        axes = tuple(index_axis_names)
        check(len(axes) > 0 and axes[0] == "layer"
              and all(a in ("layer", "pos", "head", "dest_pos", "src_pos") for a in axes),
              "index_axis_names", list(index_axis_names),
              "axes starting with 'layer' from layer, pos, head, dest_pos, src_pos")
        return axes
    check(setter in SETTER_AXES, "setter", _setter_name(setter),
          f"one of {known}, or any setter with index_axis_names")
    return SETTER_AXES[setter]


def act_name(act: str, layer: int) -> str:
    """TransformerLens hook name of activation ``act`` in ``layer`` (``z``, 1 ->
    ``blocks.1.attn.hook_z``)."""
    from transformer_lens.utilities import get_act_name

    return get_act_name(act, layer)


def canonical_act(model, setter: Setter, act: str, clean_cache=None,
                  layers: Sequence[int] | None = None) -> str:
    """``act``'s canonical short name, or a ConfigError naming the argument, its value and the
    allowed names: ``act`` not one the TransformerLens ``setter`` patches
    (:data:`SETTER_ACTS`, or a TL alias such as ``key``) that ``model`` hooks in every layer
    (any hooked activation for another setter), or ``clean_cache`` (if given) without it in
    one of ``layers`` (default all)."""
    n_layers = model.cfg.n_layers
    canon = _ACT_ALIASES.get(act, act) if isinstance(act, str) else act
    if setter in SETTER_ACTS:
        have = [a for a in SETTER_ACTS[setter]
                if all(act_name(a, layer) in model.hook_dict for layer in range(n_layers))]
        check(canon in have, "act", act, f"one of {have} with setter = "
              f"{_setter_name(setter)} on this model (TransformerLens activation short names)")
    else:
        check(isinstance(canon, str) and act_name(canon, 0) in model.hook_dict, "act", act,
              "a TransformerLens activation short name this model hooks")
    if clean_cache is not None:
        for layer in range(n_layers) if layers is None else sorted(set(layers)):
            name = act_name(canon, layer)
            if name not in clean_cache:
                raise ConfigError(
                    f"clean_cache without {name!r} is not allowed; expected the clean run's "
                    f"cache holding act = {act!r} in every patched layer (e.g. "
                    "model.run_with_cache(clean_tokens))")
    return canon


def cell_metric(metric: Callable[[Tensor], Tensor], logits: Tensor, per_prompt: bool = False
                ) -> Tensor:
    """``metric(logits)`` of one patched copy of the corrupted batch (``B`` rows): a scalar,
    or with ``per_prompt`` one value per prompt, shape ``(B,)`` (the metric before its mean
    over prompts, e.g. ``logit_diff_metric(..., per_prompt=True)``); a ConfigError when the
    metric returns another number of values."""
    v = metric(logits)
    B = logits.shape[0]
    n = B if per_prompt else 1
    if v.numel() != n:
        want = f"one value per prompt ({B},)" if per_prompt else "a scalar"
        raise ConfigError(f"metric returning shape {tuple(v.shape)} is not allowed with "
                          f"per_prompt = {per_prompt}; expected {want} for a batch of {B}")
    return v.reshape((B,) if per_prompt else ())


def cells_for(model, n_pos: int, axes: Sequence[str]) -> list[tuple[int, ...]]:
    """All cells over ``axes`` in TransformerLens's order (row-major, layer first)."""
    size = {"layer": model.cfg.n_layers, "pos": n_pos, "dest_pos": n_pos, "src_pos": n_pos,
            "head": model.cfg.n_heads}
    return list(itertools.product(*[range(size[a]) for a in axes]))


def chunk_hooks(chunk: Sequence[tuple[int, ...]], act: str, clean_cache, setter: Setter,
                batch: int, p0: int = 0) -> list:
    """Hooks writing cell ``chunk[c]`` (``setter``, clean activation) into batch copy ``c``
    (rows ``c*batch..(c+1)*batch``); with ``p0`` the forward sees positions ``p0..`` only
    (the suffix strategy), so a cell's position is shifted by ``p0``."""
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
                setter(a[c * batch:(c + 1) * batch], cell, clean)
            return a

        hooks.append((name, hook))
    return hooks


def group_cells(todo: Sequence[int], sort_key, group_key, per: int) -> list[list[int]]:
    """Cell indices sorted by ``sort_key`` and cut into runs of equal ``group_key`` holding at
    most ``per`` cells each (one batched forward per run)."""
    groups: list[list[int]] = []
    for i in sorted(todo, key=sort_key):
        if groups and group_key(groups[-1][0]) == group_key(i) and len(groups[-1]) < per:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def pads_left(model) -> bool:
    """True when ``model`` has a tokenizer that pads on the left: TransformerLens's forward
    then masks the leading pad tokens of a token batch itself."""
    tok = getattr(model, "tokenizer", None)
    return tok is not None and getattr(tok, "padding_side", None) == "left"


# activations whose patch at position p in the last layer only changes position p's output
_POSITION_LOCAL_LAST = {"z", "q", "attn_out", "resid_mid", "mlp_out", "resid_post", "result"}


def unreachable(model, setter: Setter, act: str, cell: tuple[int, ...],
                metric_positions: Sequence[int]) -> bool:
    """True when patching ``cell`` cannot change the logits at ``metric_positions``: a
    position after every metric position (causal masking), or a last-layer position-local
    activation (``z``, ``q``, ``attn_out``, ``resid_mid``, ``mlp_out``, ``resid_post``) at a
    position the metric does not read. Only by-position setters (:data:`BY_POSITION_SETTERS`);
    the first rule needs causal attention, so a bidirectional model keeps only the second."""
    if setter not in BY_POSITION_SETTERS:
        return False
    layer, pos = cell[0], cell[1]
    mp = {int(p) for p in metric_positions}
    if pos > max(mp) and getattr(model.cfg, "attention_dir", "causal") == "causal":
        return True
    return layer == model.cfg.n_layers - 1 and act in _POSITION_LOCAL_LAST and pos not in mp
