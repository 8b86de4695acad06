"""The exact patching engine (batched, metric-position pruning) against TransformerLens's
per-cell loop, attribution and path patching, the metrics, and the benchmark's equalities.
The fast paths (suffix, incremental) are tested in ``test_patching_fast.py``; the IR
attention-row overwrite in ``test_ir_overwrite.py``."""

import pytest
import torch
from helpers import build_induction_patching_case

from mechinterp_icr.interp import patching as P
from mechinterp_icr.interp.patching_core import SETTER_AXES, unreachable
from mechinterp_icr.interp.patching_core import layer_head_pattern_patch_setter as PATTERN
from mechinterp_icr.interp.patching_core import layer_head_pos_pattern_patch_setter as PATTERN_DEST
from mechinterp_icr.interp.patching_core import layer_head_vector_patch_setter as HEAD
from mechinterp_icr.interp.patching_core import layer_pos_head_vector_patch_setter as POS_HEAD
from mechinterp_icr.interp.patching_core import layer_pos_patch_setter as POS


@pytest.fixture(scope="module")
def trained():
    return build_induction_patching_case()


@pytest.mark.parametrize("setter,act", [(POS_HEAD, "z"), (HEAD, "v"),
                                        (PATTERN, "pattern"),
                                        (PATTERN_DEST, "pattern"),
                                        (POS, "resid_pre"), (POS_HEAD, "q")])
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
    with torch.no_grad():
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


@pytest.mark.parametrize("setter,act", [(POS_HEAD, "z"), (POS_HEAD, "v"),
                                        (POS, "resid_pre"), (POS_HEAD, "q")])
def test_metric_position_pruning_is_exact(trained, setter, act):
    model, clean, corr, metric = trained
    T = clean.shape[1]
    pos = 2 * 6 - 1  # the metric position of the fixture (h = 6)
    _, cache = model.run_with_cache(clean)
    pruned = P.batched_activation_patch(model, corr, cache, metric, setter, act,
                                        metric_positions=[pos])
    ref = P.tl_activation_patch(model, corr, cache, metric, setter, act)
    assert float((pruned - ref).abs().max()) <= 1e-5
    n_skip = sum(unreachable(model, setter, act, c, [pos])
                 for c in P.cells_for(model, T, SETTER_AXES[setter]))
    assert n_skip > 0


def test_bad_metric_positions_are_rejected(trained):
    from mechinterp_icr.config import ConfigError

    model, clean, corr, metric = trained
    _, cache = model.run_with_cache(clean)
    for bad in ([], [99], [-1]):
        with pytest.raises(ConfigError, match="metric_positions"):
            P.batched_activation_patch(model, corr, cache, metric, POS_HEAD, "z",
                                       metric_positions=bad, incremental=True)


def test_benchmark_reports_equal_results_and_ratios(tmp_path, monkeypatch):
    """The benchmark's exact modes agree; its timings are only reported (no speed assertion:
    wall-clock ratios belong to ``benchmarks/patching.py``)."""
    from helpers import load_repo_script

    from mechinterp_icr.pipeline import resolve_run_config, train_single_phase

    cfg = resolve_run_config("induction", 0, [
        "train.steps=40", "train.progress=false", "train.checkpoint_schedule=linear",
        "train.checkpoint_every=20", "train.eval_every=0", "model.attn_only=true",
        "model.n_heads=2", "model.d_head=16", "model.d_model=32", "task.half_len=6"])
    train_single_phase(cfg, tmp_path / "run")
    lines = []
    benchmark_patching = load_repo_script("benchmarks/patching.py", monkeypatch).benchmark_patching
    res = benchmark_patching(tmp_path / "run", "all", n=4, log=lines.append,
                             float64_check=True)
    assert res["n_checkpoints"] >= 2
    assert res["max_abs_diff"] == 0.0  # plain batched and pruning: bitwise
    assert res["max_abs_diff_suffix"] <= 1e-5
    assert res["max_abs_diff_incremental"] <= 1e-5
    assert res["f64_err_incremental"] <= 1e-5
    # the speed-up ratios are reported (benchmarks/patching.py prints them); their size depends
    # on the machine's load, so it is not asserted here
    assert {"batched_speedup_vs_tl", "batched_incremental_speedup_vs_tl"} <= set(res)
    assert any("incremental" in ln for ln in lines)
