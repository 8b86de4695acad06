"""The optional fast paths of the patching engine (``interp.patching_fast``): suffix forwards
over a frozen prefix KV cache and incremental patching equal TransformerLens's per-cell loop
up to float summation order, and fall back to the plain engine where they do not apply."""

import numpy as np
import pytest
import torch
from helpers import build_induction_patching_case

from mechinterp_icr.interp import patching as P
from mechinterp_icr.interp import patching_fast as F
from mechinterp_icr.interp.patching_core import layer_head_vector_patch_setter as HEAD
from mechinterp_icr.interp.patching_core import layer_pos_head_vector_patch_setter as POS_HEAD
from mechinterp_icr.interp.patching_core import layer_pos_patch_setter as POS
from mechinterp_icr.training.loop import batch_rng
from mechinterp_icr.training.toy import tiny_induction_model


@pytest.fixture(scope="module")
def trained():
    return build_induction_patching_case()


@pytest.fixture(scope="module")
def trained_mlp_ln():
    """3 layers (a middle layer recomputed in full), MLPs and LayerNorm."""
    model, task = tiny_induction_model(n_layers=3, n_heads=2, steps=60, attn_only=False,
                                       normalization="LN")
    b = task.sample(batch_rng(2, "t", 0), 6)
    clean, corr = b.tokens, b.tokens.clone()
    h = task.cfg.half_len
    corr[:, 1:h + 1] = torch.from_numpy(np.random.default_rng(1).integers(1, 17, (6, h)))
    pos = 2 * h - 1
    return model, clean, corr, P.logit_diff_metric(pos, clean[:, pos + 1], corr[:, h]), pos


@pytest.mark.parametrize("setter,act", [(POS_HEAD, "z"), (POS_HEAD, "v"),
                                        (POS_HEAD, "k"), (POS, "resid_pre"),
                                        (POS, "attn_out")])
def test_suffix_mode_equals_transformer_lens(trained, setter, act):
    model, clean, corr, metric = trained
    assert F.suffix_supported(setter, act)
    _, cache = model.run_with_cache(clean)
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    assert float(ref.abs().max()) > 0.01
    for kw in ({"suffix": True}, {"suffix": True, "metric_positions": [11], "max_batch": 40}):
        ours = P.batched_activation_patch(model, corr, cache, metric, setter, act, **kw)
        assert ours.shape == ref.shape
        assert float((ours - ref).abs().max()) <= 1e-5


INCREMENTAL_ACTS = [(POS_HEAD, a) for a in "zqkv"] + [
    (POS, a) for a in ("resid_pre", "attn_out", "resid_post")]


@pytest.mark.parametrize("setter,act", INCREMENTAL_ACTS)
def test_incremental_equals_transformer_lens(trained, setter, act):
    model, clean, corr, metric = trained
    assert F.incremental_supported(model, setter, act)
    _, cache = model.run_with_cache(clean)
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    assert float(ref.abs().max()) > 0.01
    # metric positions: none declared (last layer at every position), the metric's own
    # position, and a superset; max_batch=40 splits the cells of a layer into chunks
    for kw in ({}, {"metric_positions": [11]}, {"metric_positions": [3, 11], "max_batch": 40}):
        ours = P.batched_activation_patch(model, corr, cache, metric, setter, act,
                                          incremental=True, **kw)
        assert ours.shape == ref.shape
        assert float((ours - ref).abs().max()) <= 1e-5, kw


@pytest.mark.parametrize("setter,act", [(POS_HEAD, "z"), (POS_HEAD, "k"),
                                        (POS, "resid_pre"), (POS, "resid_mid"),
                                        (POS, "mlp_out")])
def test_incremental_equals_transformer_lens_mlp_layernorm(trained_mlp_ln, setter, act):
    model, clean, corr, metric, pos = trained_mlp_ln
    _, cache = model.run_with_cache(clean)
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    ours = P.batched_activation_patch(model, corr, cache, metric, setter, act,
                                      incremental=True, metric_positions=[pos])
    assert float(ref.abs().max()) > 0.01
    assert float((ours - ref).abs().max()) <= 1e-5


def test_incremental_falls_back_where_unsupported(trained):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    assert not F.incremental_supported(model, HEAD, "z")
    assert not F.incremental_supported(model, POS, "mlp_out")  # attention-only model
    a = P.batched_activation_patch(model, corr, cache, metric, HEAD, "z",
                                   incremental=True)
    b = P.batched_activation_patch(model, corr, cache, metric, HEAD, "z")
    assert torch.equal(a, b)


def test_suffix_falls_back_where_unsupported(trained):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    assert not F.suffix_supported(HEAD, "v")
    assert not F.suffix_supported(POS_HEAD, "pattern")
    a = P.batched_activation_patch(model, corr, cache, metric, HEAD, "v", suffix=True)
    b = P.batched_activation_patch(model, corr, cache, metric, HEAD, "v")
    assert torch.equal(a, b)
