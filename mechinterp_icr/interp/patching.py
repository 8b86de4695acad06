"""Activation patching: one generic engine, strategies that return tensors, batched cells.

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
- **Setters are functions passed in**, TransformerLens's own
  (``transformer_lens.patching.layer_pos_head_vector_patch_setter``, ..., re-exported from
  :mod:`~mechinterp_icr.interp.patching_core`) or any callable of that signature with
  ``index_axis_names``; so ``batched_activation_patch`` is a drop-in for
  ``generic_activation_patch``.
- **Fast strategies** (``suffix=True`` / ``incremental=True``, by-position setters; in
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

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from functools import partial

import torch
from torch import Tensor

from mechinterp_icr.config import ConfigError, check
from mechinterp_icr.interp import patching_fast as fast
from mechinterp_icr.interp.patching_core import (
    POS_ACTS,
    Setter,
    act_name,
    canonical_act,
    cell_metric,
    cells_for,
    chunk_hooks,
    group_cells,
    layer_head_pattern_patch_setter,
    layer_head_pos_pattern_patch_setter,
    layer_head_vector_patch_setter,
    layer_pos_head_vector_patch_setter,
    layer_pos_patch_setter,
    pads_left,
    setter_axes,
    unreachable,
)

__all__ = [
    "answer_logprob_metric",
    "attribution_patch",
    "batched_activation_patch",
    "cells_for",
    "layer_head_pattern_patch_setter",
    "layer_head_pos_pattern_patch_setter",
    "layer_head_vector_patch_setter",
    "layer_pos_head_vector_patch_setter",
    "layer_pos_patch_setter",
    "logit_diff_metric",
    "normalised_recovery",
    "patch_head_out_all_pos",
    "patch_head_out_by_pos",
    "patch_resid_pre",
    "path_patch",
    "tl_activation_patch",
]


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def batched_activation_patch(
    model,
    corrupted_tokens: Tensor,
    clean_cache,
    metric: Callable[[Tensor], Tensor],
    setter: Setter,
    act: str,
    index_axis_names: Sequence[str] | None = None,
    *,
    cells: Sequence[tuple[int, ...]] | None = None,
    max_batch: int = 4096,
    skip_layers: bool = True,
    metric_positions: Sequence[int] | None = None,
    suffix: bool = False,
    incremental: bool = False,
    per_prompt: bool = False,
) -> Tensor:
    """Exact activation patching of many cells per forward pass; TransformerLens's
    ``generic_activation_patch(model, corrupted_tokens, clean_cache, metric, setter, act,
    index_axis_names)`` with the same arguments and result.

    ``clean_cache`` maps hook names to clean activations (an ``ActivationCache`` or a dict).
    ``setter`` is a patch-setter function: one of TransformerLens's five (their cell axes are
    known) or any callable of that signature with ``index_axis_names``. ``act`` is a
    TransformerLens activation short name (``z``, ``q``, ``k``, ``v``, ``pattern``,
    ``resid_pre``, ``resid_mid``, ``attn_out``, ...). Without ``cells`` every cell over the
    axes is patched and the result has one dimension per axis (like TransformerLens); with
    ``cells`` the result is flat. ``max_batch`` bounds the rows of one forward (copies x
    batch).

    ``per_prompt``: ``metric`` returns a (B,) value per prompt (``logit_diff_metric(...,
    per_prompt=True)``) and the result gets a trailing prompt axis, whose mean is the mean
    metric's cell (up to float summation order); :mod:`.uncertainty` reads it.

    Strategies (each returns the metric of the cells it is given):

    - ``metric_positions`` (optional) declares the only positions whose logits ``metric``
      reads; cells that provably cannot reach them (:func:`.patching_core.unreachable`) get
      the corrupted run's metric without a forward pass (exact).
    - ``incremental`` (by-position setters where :func:`.patching_fast.incremental_supported`;
      otherwise ignored): only what each patch can change, from the cached corrupted run
      (:func:`.patching_fast.incremental_values`).
    - ``suffix`` (by-position setters): each group of cells runs only the positions from its
      smallest p on, over a frozen key/value cache of the corrupted prefix
      (:func:`.patching_fast.suffix_values`).
    - otherwise full forwards of the repeated batch, a group of cells in layer l starting at
      layer l from the cached corrupted residual stream when ``skip_layers``
      (:func:`full_forward_values`).

    The fast strategies are mathematically exact; their float summation order differs from a
    full forward (tested <= 1e-5), so they are off by default.
    """
    B, T = corrupted_tokens.shape
    vshape = (B,) if per_prompt else ()
    axes = setter_axes(setter, index_axis_names)
    shaped = cells is None
    cells = cells_for(model, T, axes) if cells is None else [tuple(int(i) for i in c)
                                                            for c in cells]
    act = canonical_act(model, setter, act, clean_cache, [c[0] for c in cells])
    per = max(1, max_batch // B)
    out = torch.zeros(len(cells), *vshape, device=corrupted_tokens.device)
    corrupted = None
    if incremental and fast.incremental_supported(model, setter, act):
        corrupted = fast.corrupted_cache(model, corrupted_tokens)
    todo = list(range(len(cells)))
    if metric_positions is not None:
        todo = _fill_unreachable(out, model, corrupted_tokens, metric, setter, act, cells,
                                 _checked_positions(metric_positions, T), corrupted, per_prompt)
    if todo:
        common = (model, corrupted_tokens, clean_cache, metric, setter, act,
                  [cells[i] for i in todo])
        out[todo] = _strategy_values(common, per, per_prompt, corrupted, metric_positions,
                                     suffix, skip_layers).to(out)
    if shaped:
        return out.reshape([max(c[i] for c in cells) + 1 for i in range(len(axes))]
                           + list(vshape))
    return out


def _strategy_values(common: tuple, per: int, per_prompt: bool, corrupted,
                     metric_positions, suffix: bool, skip_layers: bool) -> Tensor:
    """The metric of the cells in ``common`` (``(model, tokens, clean_cache, metric, setter,
    act, cells)``) by the strategy :func:`batched_activation_patch` chose."""
    model, tokens, _, _, setter, act, _ = common
    kw = {"per": per, "per_prompt": per_prompt}
    if corrupted is not None:
        mp = range(tokens.shape[1]) if metric_positions is None else metric_positions
        return fast.incremental_values(*common, **kw, metric_positions=mp, corrupted=corrupted)
    if suffix and fast.suffix_supported(setter, act, model):
        return fast.suffix_values(*common, **kw, skip_layers=skip_layers)
    return full_forward_values(*common, **kw, skip_layers=skip_layers)


def _checked_positions(metric_positions: Sequence[int], T: int) -> list[int]:
    mps = [int(p) for p in metric_positions]
    check(len(mps) > 0 and all(0 <= p < T for p in mps), "metric_positions",
          list(metric_positions), f"a non-empty list of positions in [0, {T - 1}]")
    return mps


def _fill_unreachable(out: Tensor, model, corrupted_tokens: Tensor, metric, setter: Setter,
                      act: str, cells, metric_positions: list[int], corrupted,
                      per_prompt: bool = False) -> list[int]:
    """Write the corrupted run's metric (per prompt with ``per_prompt``) into ``out`` for
    every cell that cannot reach the metric positions; the indices of the other cells."""
    skip = [i for i, c in enumerate(cells)
            if unreachable(model, setter, act, c, metric_positions)]
    if skip:
        base = model(corrupted_tokens) if corrupted is None else corrupted[0]
        out[skip] = cell_metric(metric, base, per_prompt).to(out)
    gone = set(skip)
    return [i for i in range(len(cells)) if i not in gone]


@torch.no_grad()
def full_forward_values(model, corrupted_tokens: Tensor, clean_cache,
                        metric: Callable[[Tensor], Tensor], setter: Setter, act: str,
                        cells: Sequence[tuple[int, ...]], *, per: int,
                        skip_layers: bool = True, per_prompt: bool = False) -> Tensor:
    """The metric of each cell of ``cells`` (``(cells,)``, or ``(cells, B)`` per prompt with
    ``per_prompt``) by full forwards of the corrupted batch repeated once per cell (at most
    ``per`` copies per forward; cells grouped by layer).

    A patch in layer l leaves layers < l untouched, so with ``skip_layers`` the forward of a
    group starts at layer l from the corrupted run's residual stream (exact: those
    activations are the same computation on the same inputs), with what TransformerLens's
    forward derives from the tokens: a shortformer's positional embedding and the mask of a
    tokenizer that pads on the left."""
    B = corrupted_tokens.shape[0]
    out = torch.zeros(len(cells), *((B,) if per_prompt else ()),
                      device=corrupted_tokens.device)
    start_resid, restart_kw = ({}, {}) if not skip_layers or act == "resid_pre" else \
        _restart_inputs(model, corrupted_tokens, {c[0] for c in cells})
    for idx in group_cells(range(len(cells)), lambda i: cells[i][0], lambda i: cells[i][0],
                           per):
        chunk = [cells[i] for i in idx]
        C, layer0 = len(chunk), chunk[0][0]
        hooks = chunk_hooks(chunk, act, clean_cache, setter, B)
        if layer0 in start_resid:
            resid = start_resid[layer0].repeat(C, 1, 1)  # (C*B, T, d_model)
            kw = {k: v.repeat(C, *[1] * (v.dim() - 1)) for k, v in restart_kw.items()}
            logits = model.run_with_hooks(resid, fwd_hooks=hooks, start_at_layer=layer0,
                                          tokens=corrupted_tokens.repeat(C, 1), **kw)
        else:  # (C*B, T): copy c = rows c*B..(c+1)*B
            logits = model.run_with_hooks(corrupted_tokens.repeat(C, 1), fwd_hooks=hooks)
        for c in range(C):
            out[idx[c]] = cell_metric(metric, logits[c * B:(c + 1) * B], per_prompt)
    return out


def _restart_inputs(model, corrupted_tokens: Tensor, layers: set[int]
                    ) -> tuple[dict[int, Tensor], dict[str, Tensor]]:
    """The corrupted run's ``resid_pre`` of each layer > 0 in ``layers``, and the keyword
    arguments a forward restarted there needs (shortformer positions, a left-padding mask)."""
    later = sorted(layer for layer in layers if layer > 0)
    if not later:
        return {}, {}
    shortformer = model.cfg.positional_embedding_type == "shortformer"
    names = {f"blocks.{layer}.hook_resid_pre" for layer in later}
    names |= {"hook_pos_embed"} if shortformer else set()
    _, cc = model.run_with_cache(corrupted_tokens, names_filter=lambda n: n in names)
    restart_kw: dict[str, Tensor] = {}
    if shortformer:
        restart_kw["shortformer_pos_embed"] = cc["hook_pos_embed"]
    if pads_left(model):  # the mask TL's forward would compute from the tokens
        from transformer_lens.utilities import get_attention_mask

        restart_kw["attention_mask"] = get_attention_mask(
            model.tokenizer, corrupted_tokens, model.cfg.default_prepend_bos)
    return {layer: cc[f"blocks.{layer}.hook_resid_pre"] for layer in later}, restart_kw


def tl_activation_patch(model, corrupted_tokens: Tensor, clean_cache,
                        metric: Callable[[Tensor], Tensor], setter: Setter, act: str,
                        index_axis_names: Sequence[str] | None = None) -> Tensor:
    """The TransformerLens per-cell reference (``generic_activation_patch``, one forward per
    cell) for the same arguments."""
    import transformer_lens.patching as tlp

    axes = setter_axes(setter, index_axis_names)
    act = canonical_act(model, setter, act, clean_cache)
    with torch.no_grad(), _quiet_tqdm(tlp):
        return tlp.generic_activation_patch(model, corrupted_tokens, clean_cache, metric,
                                            setter, act, index_axis_names=axes)


@contextmanager
def _quiet_tqdm(mod):
    """Silence transformer_lens.patching's progress bar (it would flood logs)."""
    old, mod.tqdm = mod.tqdm, (lambda it, *a, **k: it)
    try:
        yield
    finally:
        mod.tqdm = old


# Specialisations with TransformerLens's cells (only those the package uses)
def patch_head_out_by_pos(model, corrupted_tokens: Tensor, clean_cache, metric,
                          **kwargs) -> Tensor:
    """Every head's output ``z`` at every position -> (layers, pos, heads); TransformerLens's
    ``get_act_patch_attn_head_out_by_pos``. Keyword arguments go to
    :func:`batched_activation_patch`."""
    return batched_activation_patch(model, corrupted_tokens, clean_cache, metric,
                                    layer_pos_head_vector_patch_setter, "z", **kwargs)


def patch_head_out_all_pos(model, corrupted_tokens: Tensor, clean_cache, metric,
                           **kwargs) -> Tensor:
    """Every head's output ``z`` at all positions at once -> (layers, heads);
    TransformerLens's ``get_act_patch_attn_head_out_all_pos``."""
    return batched_activation_patch(model, corrupted_tokens, clean_cache, metric,
                                    layer_head_vector_patch_setter, "z", **kwargs)


def patch_resid_pre(model, corrupted_tokens: Tensor, clean_cache, metric,
                    **kwargs) -> Tensor:
    """The residual stream before each layer at every position -> (layers, pos);
    TransformerLens's ``get_act_patch_resid_pre``."""
    return batched_activation_patch(model, corrupted_tokens, clean_cache, metric,
                                    layer_pos_patch_setter, "resid_pre", **kwargs)


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
    check(act in head_acts + POS_ACTS, "act", act, f"one of {list(head_acts + POS_ACTS)}")
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


def logit_diff_metric(pos, good: Tensor, bad: Tensor, per_prompt: bool = False
                      ) -> Callable[[Tensor], Tensor]:
    """``mean_b logit[good_b] - logit[bad_b]`` at position ``pos`` (int, (B,) tensor or None =
    last); with ``per_prompt`` the (B,) values before the mean (the engine's ``per_prompt``).
    Works on any number of stacked copies of the batch only through the engine."""

    def metric(logits: Tensor) -> Tensor:
        lg = _gather_last(logits, pos)
        idx = torch.arange(lg.shape[0], device=lg.device)
        diff = lg[idx, good.to(lg.device)] - lg[idx, bad.to(lg.device)]
        return diff if per_prompt else diff.mean()

    return metric


def answer_logprob_metric(pos, answer: Tensor) -> Callable[[Tensor], Tensor]:
    """Mean log-probability of ``answer`` at ``pos`` (int, (B,) tensor or None = last)."""

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
