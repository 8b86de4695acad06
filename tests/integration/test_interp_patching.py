import numpy as np
import pytest
import torch

from mechinterp_icr.interp import patching as P
from mechinterp_icr.training.loop import batch_rng
from mechinterp_icr.training.toy import tiny_induction_model


@pytest.fixture(scope="module")
def trained():
    model, task = tiny_induction_model(n_layers=2, n_heads=2, steps=150)
    b = task.sample(batch_rng(1, "t", 0), 8)
    clean = b.tokens
    corr = clean.clone()
    h = task.cfg.half_len
    # corrupt the first half's tokens: the induction answers change
    corr[:, 1:h + 1] = torch.from_numpy(np.random.default_rng(0).integers(1, 17, (8, h)))
    pos = 2 * h - 1
    good = clean[:, pos + 1]
    bad = corr[:, h]  # what the corrupted first half predicts at the same place
    metric = P.logit_diff_metric(pos, good, bad)
    return model, clean, corr, metric


@pytest.mark.parametrize("setter,act", [("layer_pos_head", "z"), ("layer_head", "v"),
                                        ("pattern_layer_head", "pattern"),
                                        ("pattern_layer_head_dest", "pattern"),
                                        ("layer_pos", "resid_pre"), ("layer_pos_head", "q")])
def test_batched_equals_transformer_lens(trained, setter, act):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    ours = P.batched_activation_patch(model, corr, cache, metric, setter, act, max_batch=64)
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    assert ours.shape == ref.shape
    assert float((ours - ref).abs().max()) <= 1e-5
    assert float(ref.abs().max()) > 0.01  # the comparison is not between zeros


def test_metric_values_make_sense(trained):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    with torch.no_grad():
        c_val, x_val = float(metric(model(clean))), float(metric(model(corr)))
    assert c_val > x_val + 1.0  # the trained model separates clean from corrupted answers
    # patching the whole residual at the last layer input, every position = clean run
    full = P.patch_resid_pre(model, corr, cache, metric, cells=None)
    assert full.shape == (2, corr.shape[1])
    rec = P.normalised_recovery(full, c_val, x_val)
    assert rec.max() <= 1.0 + 1e-4


def test_path_patching_reduces_to_activation_patching(trained):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    act = P.patch_head_out_all_pos(model, corr, cache, metric)  # (layers, heads)
    for h in range(2):
        pp = P.path_patch(model, clean, corr, metric, sender=(1, h), receivers=[("logits",)])
        assert abs(float(pp) - float(act[1, h])) <= 1e-5


def test_path_patching_to_qkv_matches_receiver_input_patch(trained):
    """Sender (0,h) -> all of layer 1's q, k, v (attn-only, no LN): the same as adding the
    sender's clean-minus-corrupted output to layer 1's attention input only."""
    model, clean, corr, metric = trained
    h = 0
    _, cc = model.run_with_cache(clean)
    _, xc = model.run_with_cache(corr)
    delta = (cc["blocks.0.attn.hook_z"][:, :, h] - xc["blocks.0.attn.hook_z"][:, :, h]) \
        @ model.blocks[0].attn.W_O[h]  # (B, T, d_model)
    W_Q, W_K, W_V = (model.blocks[1].attn.W_Q, model.blocks[1].attn.W_K, model.blocks[1].attn.W_V)
    resid = xc["blocks.1.hook_resid_pre"] + delta
    hooks = []
    for kind, W, b in (("q", W_Q, model.blocks[1].attn.b_Q), ("k", W_K, model.blocks[1].attn.b_K),
                       ("v", W_V, model.blocks[1].attn.b_V)):
        val = torch.einsum("btd,hde->bthe", resid, W) + b
        hooks.append((f"blocks.1.attn.hook_{kind}", lambda a, hook, val=val: val))
    ref = metric(model.run_with_hooks(corr, fwd_hooks=hooks))
    recv = [(1, rh, k) for rh in range(2) for k in "qkv"]
    pp = P.path_patch(model, clean, corr, metric, sender=(0, h), receivers=recv)
    assert abs(float(pp) - float(ref)) <= 1e-4


def test_attribution_patching_correlates(trained):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    with torch.no_grad():
        base = metric(model(corr))
    exact = P.patch_head_out_by_pos(model, corr, cache, metric) - base
    attr = P.attribution_patch(model, clean, corr, metric, act="z", by="pos_head")
    assert attr.shape == exact.shape
    from scipy.stats import spearmanr

    rho = spearmanr(exact.flatten().numpy(), attr.flatten().detach().numpy()).statistic
    assert rho > 0.5
    assert all(not p.requires_grad or p.grad is None for p in model.parameters())


def test_overwrite_attention_row_is_applied(trained):
    model, clean, _corr, _metric = trained
    T = clean.shape[1]
    row = torch.zeros(T)
    row[0] = 1.0
    seen = {}
    logits = P.overwrite_attention_row(model, clean, 1, 0, T - 1, row)
    # check through a second hook that the pattern really holds the row
    model.run_with_hooks(clean, fwd_hooks=[("blocks.1.attn.hook_pattern",
                                            lambda a, hook: seen.setdefault("p", a.clone()))])
    assert logits.shape == (clean.shape[0], T, model.cfg.d_vocab)
    answers = clean[:, -1]
    _, acc = P.overwrite_attention_row(model, clean, 1, 0, T - 2, row, answers=answers)
    assert 0.0 <= acc <= 1.0


def test_overwrite_rows_sweep_matches_manual(trained):
    model, clean, _corr, _metric = trained
    T = clean.shape[1]
    rows = P.candidate_rows()
    assert all(abs(r.sum() - 1.0) < 1e-9 for r in rows.values())
    answers = clean[:, T - 1]
    qp = T - 2
    res = P.overwrite_rows_sweep(model, clean, 1, 0, qp, rows, answers)
    assert set(res) == {"model", *rows}
    # the "model" entry is the plain accuracy; an overwrite with the model's own row is a no-op
    from mechinterp_icr.interp.attention import attention_row

    own = attention_row(model, clean, 1, 0, qp)  # (B, T)
    logits, acc = P.overwrite_attention_row(model, clean, 1, 0, qp, own, answers=answers)
    assert torch.allclose(logits, model(clean), atol=1e-5)
    assert abs(acc - res["model"]) < 1e-9


@pytest.mark.parametrize("setter,act", [("layer_pos_head", "z"), ("layer_pos_head", "v"),
                                        ("layer_pos", "resid_pre"), ("layer_pos_head", "q")])
def test_metric_position_pruning_is_exact(trained, setter, act):
    model, clean, corr, metric = trained
    T = clean.shape[1]
    pos = 2 * 6 - 1  # the metric position of the fixture (h = 6)
    _, cache = model.run_with_cache(clean)
    pruned = P.batched_activation_patch(model, corr, cache, metric, setter, act,
                                        metric_positions=[pos])
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    assert float((pruned - ref).abs().max()) <= 1e-5
    n_skip = sum(P.unreachable(model, setter, act, c, [pos])
                 for c in P.cells_for(model, T, P.ACT_AXES[setter]))
    assert n_skip > 0


@pytest.mark.parametrize("setter,act", [("layer_pos_head", "z"), ("layer_pos_head", "v"),
                                        ("layer_pos_head", "k"), ("layer_pos", "resid_pre"),
                                        ("layer_pos", "attn_out")])
def test_suffix_mode_equals_transformer_lens(trained, setter, act):
    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    for kw in ({"suffix": True}, {"suffix": True, "metric_positions": [11], "max_batch": 40}):
        ours = P.batched_activation_patch(model, corr, cache, metric, setter, act, **kw)
        assert float((ours - ref).abs().max()) <= 1e-5


INCREMENTAL_ACTS = [("layer_pos_head", a) for a in "zqkv"] + [
    ("layer_pos", a) for a in ("resid_pre", "attn_out", "resid_post")]


@pytest.mark.parametrize("setter,act", INCREMENTAL_ACTS)
def test_incremental_equals_transformer_lens(trained, setter, act):
    model, clean, corr, metric = trained
    assert P.incremental_supported(model, setter, act)
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


@pytest.mark.parametrize("setter,act", [("layer_pos_head", "z"), ("layer_pos_head", "k"),
                                        ("layer_pos", "resid_pre"), ("layer_pos", "resid_mid"),
                                        ("layer_pos", "mlp_out")])
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
    assert not P.incremental_supported(model, "layer_head", "z")
    assert not P.incremental_supported(model, "layer_pos", "mlp_out")  # attention-only model
    a = P.batched_activation_patch(model, corr, cache, metric, "layer_head", "z",
                                   incremental=True)
    b = P.batched_activation_patch(model, corr, cache, metric, "layer_head", "z")
    assert torch.equal(a, b)


def test_bad_metric_positions_are_rejected(trained):
    from mechinterp_icr.config import ConfigError

    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    for bad in ([], [99], [-1]):
        with pytest.raises(ConfigError, match="metric_positions"):
            P.batched_activation_patch(model, corr, cache, metric, "layer_pos_head", "z",
                                       metric_positions=bad, incremental=True)


def test_benchmark_reports_equal_results_and_ratios(tmp_path):
    from mechinterp_icr.interp.patch_bench import benchmark_patching
    from mechinterp_icr.pipeline import resolve_run_config, train_single_phase

    cfg = resolve_run_config("induction", 0, [
        "train.steps=40", "train.progress=false", "train.checkpoint_schedule=linear",
        "train.checkpoint_every=20", "train.eval_every=0", "model.attn_only=true",
        "model.n_heads=2", "model.d_head=16", "model.d_model=32", "task.half_len=6"])
    train_single_phase(cfg, tmp_path / "run")
    lines = []
    res = benchmark_patching(tmp_path / "run", "all", n=4, log=lines.append,
                             float64_check=True)
    assert res["n_checkpoints"] >= 2
    assert res["max_abs_diff"] == 0.0  # plain batched and pruning: bitwise
    assert res["max_abs_diff_incremental"] <= 1e-5
    assert res["f64_err_incremental"] <= 1e-5
    assert res["batched_incremental_speedup_vs_tl"] > 1.0
    assert any("incremental" in ln for ln in lines)
