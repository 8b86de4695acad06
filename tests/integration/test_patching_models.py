"""The patching engine against TransformerLens's own ``transformer_lens.patching`` on small
randomly initialised models of four kinds: LayerNorm (``normalization="LN"``) and gelu MLPs
(both built by ``models.factory.build_model``), rotary and shortformer positional embeddings
(``HookedTransformerConfig`` directly; the project's ``ModelConfig`` has neither). Every
setter/activation pair the engine supports is checked in every mode that applies: default,
batched (small chunks, so groups of later-layer cells restart with ``start_at_layer``),
metric-position pruning, suffix and incremental. Also: path patching into the
logits equals activation patching only with ``freeze_mlps=False``; unknown setter/activation
names are ConfigErrors; tokenizers that pad on the left and bidirectional attention."""

import warnings
from types import SimpleNamespace

import pytest
import torch
import transformer_lens.patching as tlp

from mechinterp_icr.config import ConfigError
from mechinterp_icr.interp import patching as P
from mechinterp_icr.interp import patching_fast as F
from mechinterp_icr.interp.patching_core import layer_head_pattern_patch_setter as PATTERN
from mechinterp_icr.interp.patching_core import layer_head_pos_pattern_patch_setter as PATTERN_DEST
from mechinterp_icr.interp.patching_core import layer_head_vector_patch_setter as HEAD
from mechinterp_icr.interp.patching_core import layer_pos_head_vector_patch_setter as POS_HEAD
from mechinterp_icr.interp.patching_core import layer_pos_patch_setter as POS
from mechinterp_icr.interp.patching_core import unreachable

B, T, V = 2, 6, 23
MP = 3  # the metric reads the logits at this position only
TOL = 1e-5
KINDS = ["ln", "gelu", "rotary", "shortformer"]


def _build(kind: str, **tl_overrides):
    """A 2-layer, 2-head, d_model 32 model with MLPs; weights N(0, 0.2) so patches matter."""
    if kind in ("ln", "gelu"):
        from mechinterp_icr.config import ModelConfig
        from mechinterp_icr.models.factory import build_model

        cfg = ModelConfig(n_layers=2, n_heads=2, d_model=32, d_head=16, d_mlp=64,
                          attn_only=False, normalization="LN" if kind == "ln" else "none",
                          act_fn="gelu" if kind == "gelu" else "relu", init_range=0.2,
                          d_vocab=V, n_ctx=T + 1)
        return build_model(cfg, seed=0, device="cpu")
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    kw = dict(n_layers=2, n_heads=2, d_model=32, d_head=16, d_mlp=64, d_vocab=V,
              n_ctx=T + 1, act_fn="gelu", normalization_type="LN",
              positional_embedding_type=kind, initializer_range=0.2, seed=None,
              device="cpu", default_prepend_bos=False)
    if kind == "rotary":
        kw["rotary_dim"] = 8
    kw.update(tl_overrides)
    with torch.random.fork_rng(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
        torch.manual_seed(0)  # a fixed init; fork_rng leaves the global RNG as it was
        return HookedTransformer(HookedTransformerConfig(**kw))


def _data(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    clean, corr = torch.randint(1, V, (2, B, T), generator=g)
    good, bad = torch.randint(0, V, (2, B), generator=g)
    return clean, corr, P.logit_diff_metric(MP, good, bad)


@pytest.fixture(scope="module", params=KINDS)
def setup(request):
    model = _build(request.param)
    clean, corr, metric = _data()
    _, cache = model.run_with_cache(clean)
    return request.param, model, clean, corr, metric, cache


@pytest.fixture(autouse=True)
def _quiet_tl(monkeypatch):
    monkeypatch.setattr(tlp, "tqdm", lambda it, *a, **k: it)


# (setter, act) -> TransformerLens's function for it (None: generic_activation_patch)
COMBOS = {
    (POS, "resid_pre"): "get_act_patch_resid_pre",
    (POS, "resid_mid"): "get_act_patch_resid_mid",
    (POS, "attn_out"): "get_act_patch_attn_out",
    (POS, "mlp_out"): "get_act_patch_mlp_out",
    (POS, "resid_post"): None,
    (POS, "z"): None,  # every head at the position
    (POS, "post"): None,  # MLP neurons
    (POS_HEAD, "z"): "get_act_patch_attn_head_out_by_pos",
    (POS_HEAD, "q"): "get_act_patch_attn_head_q_by_pos",
    (POS_HEAD, "k"): "get_act_patch_attn_head_k_by_pos",
    (POS_HEAD, "v"): "get_act_patch_attn_head_v_by_pos",
    (HEAD, "z"): "get_act_patch_attn_head_out_all_pos",
    (HEAD, "q"): "get_act_patch_attn_head_q_all_pos",
    (HEAD, "k"): "get_act_patch_attn_head_k_all_pos",
    (HEAD, "v"): "get_act_patch_attn_head_v_all_pos",
    (PATTERN, "pattern"): "get_act_patch_attn_head_pattern_all_pos",
    (PATTERN_DEST, "pattern"): "get_act_patch_attn_head_pattern_by_pos",
    (PATTERN_DEST, "attn_scores"): None,
}
MODES = {
    "default": {},
    "batched": {"max_batch": 2 * B},  # 2 cells per forward: layer-1 groups restart
    "pruned": {"metric_positions": [MP]},
    "suffix": {"suffix": True},
    "suffix_batched": {"suffix": True, "max_batch": 2 * B, "metric_positions": [MP]},
    "incremental": {"incremental": True},
    "incremental_pruned": {"incremental": True, "metric_positions": [MP], "max_batch": 4 * B},
}


def _tl_reference(model, corr, cache, metric, setter, act):
    name = COMBOS.get((setter, act))
    if name is not None:
        with torch.no_grad():
            return getattr(tlp, name)(model, corr, cache, metric)
    return P.tl_activation_patch(model, corr, cache, metric, setter, act)


def _max_diffs(model, corr, cache, metric, setter, act, ref) -> dict[str, float]:
    out = {}
    for mode, kw in MODES.items():
        ours = P.batched_activation_patch(model, corr, cache, metric, setter, act, **kw)
        assert ours.shape == ref.shape, mode
        out[mode] = float((ours - ref).abs().max())
    return out


@pytest.mark.parametrize("setter,act", list(COMBOS))
def test_engine_equals_transformer_lens(setup, setter, act):
    kind, model, clean, corr, metric, cache = setup
    ref = _tl_reference(model, corr, cache, metric, setter, act)
    assert float(ref.max() - ref.min()) > 1e-3  # the patches change the metric
    diffs = _max_diffs(model, corr, cache, metric, setter, act, ref)
    assert max(diffs.values()) <= TOL, (kind, diffs)


def test_rotary_only_activations():
    """``rot_q`` / ``rot_k`` (after the rotation) exist on rotary models only."""
    model = _build("rotary")
    clean, corr, metric = _data()
    _, cache = model.run_with_cache(clean)
    for setter, act in [(POS_HEAD, "rot_q"), (POS_HEAD, "rot_k"),
                        (HEAD, "rot_k"), (POS, "rot_q")]:
        ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
        assert float(ref.max() - ref.min()) > 1e-3
        diffs = _max_diffs(model, corr, cache, metric, setter, act, ref)
        assert max(diffs.values()) <= TOL, (setter, act, diffs)


def test_fast_paths_apply_where_documented(setup):
    """Suffix runs on all four kinds; incremental on standard positions only (rotary and
    shortformer fall back to the full forwards, which the equality test covers)."""
    kind, model = setup[:2]
    assert F.suffix_supported(POS_HEAD, "z", model)
    assert F.incremental_supported(model, POS_HEAD, "z") == (kind in ("ln", "gelu"))


def test_shortformer_restart_needs_the_positional_embedding():
    """Why the engine passes ``shortformer_pos_embed``: TL's forward restarted at layer 1
    without it differs from the full forward (the bug this file guards against)."""
    model = _build("shortformer")
    tokens = _data()[0]
    with torch.no_grad():
        full, cache = model.run_with_cache(tokens)
        resid = cache["blocks.1.hook_resid_pre"]
        bare = model(resid, start_at_layer=1)
        fixed = model(resid, start_at_layer=1, shortformer_pos_embed=cache["hook_pos_embed"])
    assert float((bare - full).abs().max()) > 1e-2
    assert float((fixed - full).abs().max()) <= 1e-6


def test_path_patching_to_logits_equals_activation_patching_only_unfrozen(setup):
    """A last-layer sender into the logits: ``freeze_mlps=False`` is exactly activation
    patching of its output; ``freeze_mlps=True`` (the default) keeps the last MLP at its
    corrupted output and so differs on a model with MLPs."""
    kind, model, clean, corr, metric, cache = setup
    act = P.patch_head_out_all_pos(model, corr, cache, metric)  # (layers, heads)
    frozen_gap = 0.0
    for h in range(model.cfg.n_heads):
        free = P.path_patch(model, clean, corr, metric, sender=(1, h), receivers=[("logits",)],
                            freeze_mlps=False)
        assert abs(float(free) - float(act[1, h])) <= TOL, (kind, h)
        frozen = P.path_patch(model, clean, corr, metric, sender=(1, h),
                              receivers=[("logits",)])
        frozen_gap = max(frozen_gap, abs(float(frozen) - float(act[1, h])))
    assert frozen_gap > 1e-3, kind


def test_unknown_setter_and_activation_names_are_config_errors():
    model = _build("ln")
    clean, corr, metric = _data()
    _, cache = model.run_with_cache(clean)
    # a setter is a function, never a name
    with pytest.raises(ConfigError, match=r"setter = 'layer_pos_head'.*patch-setter function"):
        P.batched_activation_patch(model, corr, cache, metric, "layer_pos_head", "z")
    with pytest.raises(ConfigError, match=r"setter = '<lambda>'.*index_axis_names"):
        P.tl_activation_patch(model, corr, cache, metric, lambda a, i, c: a, "z")
    with pytest.raises(ConfigError, match=r"index_axis_names = \['pos'\]"):
        P.batched_activation_patch(model, corr, cache, metric, POS_HEAD, "z", ["pos"])
    with pytest.raises(ConfigError, match=r"act = 'zz'.*'z'"):
        P.batched_activation_patch(model, corr, cache, metric, POS_HEAD, "zz")
    with pytest.raises(ConfigError, match=r"act = 'resid_pre'.*layer_pos_head_vector"):
        P.batched_activation_patch(model, corr, cache, metric, POS_HEAD, "resid_pre")
    with pytest.raises(ConfigError, match=r"act = 'rot_q'"):  # not a rotary model
        P.batched_activation_patch(model, corr, cache, metric, POS_HEAD, "rot_q")
    with pytest.raises(ConfigError, match=r"clean_cache .*blocks\.1\.attn\.hook_v"):
        small = {k: v for k, v in cache.items() if k != "blocks.1.attn.hook_v"}
        P.batched_activation_patch(model, corr, small, metric, HEAD, "v")
    with pytest.raises(ConfigError, match=r"by = 'pos'"):
        P.attribution_patch(model, clean, corr, metric, act="z", by="pos")
    # TransformerLens aliases still work
    a = P.batched_activation_patch(model, corr, cache, metric, HEAD, "value")
    assert torch.equal(a, P.batched_activation_patch(model, corr, cache, metric,
                                                     HEAD, "v"))


@pytest.mark.parametrize("kind", ["ln", "rotary", "shortformer"])
def test_left_padding_tokenizer(kind):
    """With a tokenizer that pads on the left, TL's forward masks the leading pads itself; a
    restarted forward gets that mask, and the fast paths fall back to the full forwards."""
    model = _build(kind)
    model.tokenizer = SimpleNamespace(padding_side="left", pad_token_id=0, bos_token_id=V)
    clean, corr, metric = _data()
    clean[0, :2] = corr[0, :2] = 0  # two leading pads in row 0, one in row 1
    clean[1, :1] = corr[1, :1] = 0
    _, cache = model.run_with_cache(clean)
    assert not F.suffix_supported(POS_HEAD, "z", model)
    assert not F.incremental_supported(model, POS_HEAD, "z")
    for setter, act in [(POS_HEAD, "z"), (POS, "resid_mid"),
                        (HEAD, "k")]:
        ref = _tl_reference(model, corr, cache, metric, setter, act)
        diffs = _max_diffs(model, corr, cache, metric, setter, act, ref)
        assert max(diffs.values()) <= TOL, (setter, act, diffs)


def test_bidirectional_attention():
    """Later positions reach earlier logits: pruning keeps only the last-layer rule and the
    suffix path falls back."""
    model = _build("shortformer", attention_dir="bidirectional",
                   positional_embedding_type="standard")
    clean, corr, metric = _data()
    _, cache = model.run_with_cache(clean)
    assert not F.suffix_supported(POS_HEAD, "z", model)
    assert not unreachable(model, POS_HEAD, "z", (0, T - 1, 0), [MP])
    for setter, act in [(POS_HEAD, "z"), (POS, "resid_pre")]:
        ref = _tl_reference(model, corr, cache, metric, setter, act)
        diffs = _max_diffs(model, corr, cache, metric, setter, act, ref)
        assert max(diffs.values()) <= TOL, (setter, act, diffs)


def test_a_custom_setter_with_axes_equals_transformer_lens():
    """Any callable of TransformerLens's setter signature works with ``index_axis_names``
    (on the general path): here, patching one head's value vector at a position only in the
    first row of the batch, against TransformerLens's ``generic_activation_patch``."""
    model = _build("ln")
    clean, corr, metric = _data()
    _, cache = model.run_with_cache(clean)

    def first_row_setter(corrupted_activation, index, clean_activation):
        _, pos, head = index
        corrupted_activation[0, pos, head] = clean_activation[0, pos, head]
        return corrupted_activation

    axes = ["layer", "pos", "head"]
    with torch.no_grad():
        ref = tlp.generic_activation_patch(model, corr, cache, metric, first_row_setter, "v",
                                           index_axis_names=axes)
    ours = P.batched_activation_patch(model, corr, cache, metric, first_row_setter, "v", axes,
                                      max_batch=2 * B)
    assert ours.shape == ref.shape
    assert float(ref.max() - ref.min()) > 1e-4
    assert float((ours - ref).abs().max()) <= TOL
    # the fast strategies are for TransformerLens's by-position setters only: asked for, the
    # engine keeps the general path and the same numbers
    fast = P.batched_activation_patch(model, corr, cache, metric, first_row_setter, "v", axes,
                                      suffix=True, incremental=True, metric_positions=[MP])
    assert torch.equal(fast, ours)
