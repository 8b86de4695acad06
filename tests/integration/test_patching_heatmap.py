"""The circuit tools' patching tables (``interp.lens.head_pos_patching``,
``path_patching_table``): the head x position heatmap equals TransformerLens's
``get_act_patch_attn_head_out_by_pos``, and path patching sender L0H0 -> receiver L1H0 equals
a hand computation of the receiver's q / k / v with hooks, with the MLPs frozen or not."""

import pytest
import torch

from mechinterp_icr.interp import lens


def _task(kind):
    from mechinterp_icr.tasks.cr import CRTaskConfig
    from mechinterp_icr.tasks.ir import IRTaskConfig

    if kind == "cr":
        return CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_tuples=3,
                            n_demos=2, max_demos=3, grammar_len_max=3).build(0)
    return IRTaskConfig(n_subjects=16, n_relations=4).build(0)


def _model(task, seed):
    """2 layers, 2 heads, MLPs, no norm; weights ~ N(0, 0.4) (large enough that every head
    moves the metric)."""
    from mechinterp_icr.config import ModelConfig
    from mechinterp_icr.models.factory import build_model

    cfg = ModelConfig(n_layers=2, n_heads=2, d_model=24, d_head=8, d_mlp=32, attn_only=False,
                      init_range=0.4, d_vocab=task.d_vocab, n_ctx=task.n_ctx)
    return build_model(cfg, seed=seed, device="cpu")


@pytest.fixture(scope="module")
def case():
    task = _task("cr")
    model = _model(task, seed=5)
    return task, model, lens.answer_prompts(task, 12, seed=0)


@pytest.mark.parametrize("kind", ["cr", "ir"])
def test_heatmap_equals_transformer_lens(kind):
    import transformer_lens.patching as tlp

    task = _task(kind)
    model = _model(task, seed=7)
    pr = lens.answer_prompts(task, 8, seed=1)
    res = lens.head_pos_patching(model, pr)
    _, cache = model.run_with_cache(pr.clean)
    with torch.no_grad():
        ref = tlp.get_act_patch_attn_head_out_by_pos(model, pr.corrupted, cache, pr.metric)
    assert res["value"].shape == ref.shape == (2, pr.clean.shape[1], 2)
    assert float((res["value"] - ref).abs().max()) <= 1e-4
    assert float((ref - res["corrupted"]).abs().max()) > 0.01  # not a comparison of zeros
    rec = (ref - res["corrupted"]) / (res["clean"] - res["corrupted"])
    assert float((res["recovery"] - rec).abs().max()) <= 1e-3
    labels = lens.position_labels(task, pr.clean[0])
    assert len(labels) == pr.clean.shape[1] and labels[0] == f"0 {task.vocab.names[pr.clean[0, 0]]}"


def _hand_path(model, pr, kinds, freeze_mlps):
    """Sender L0H0 -> receiver L1H0 by hand: the receiver's inputs ``kinds`` are computed from
    the residual stream before layer 1 of the corrupted run plus only the sender's clean -
    corrupted output (MLP 0 at its corrupted output), or, without freezing, of a corrupted
    run whose L0H0 z is clean (MLP 0 responds); the rest of the corrupted forward runs."""
    _, cc = model.run_with_cache(pr.clean)
    _, xc = model.run_with_cache(pr.corrupted)
    attn = model.blocks[1].attn
    if freeze_mlps:
        delta = (cc["blocks.0.attn.hook_z"][:, :, 0] - xc["blocks.0.attn.hook_z"][:, :, 0]) \
            @ model.blocks[0].attn.W_O[0]  # (B, T, d_model)
        resid = xc["blocks.1.hook_resid_pre"] + delta
    else:
        def sender(a, hook):
            a = a.clone()
            a[:, :, 0] = cc["blocks.0.attn.hook_z"][:, :, 0]
            return a

        with model.hooks(fwd_hooks=[("blocks.0.attn.hook_z", sender)]):
            _, sc = model.run_with_cache(pr.corrupted)
        resid = sc["blocks.1.hook_resid_pre"]
    weights = {"q": (attn.W_Q, attn.b_Q), "k": (attn.W_K, attn.b_K), "v": (attn.W_V, attn.b_V)}
    hooks = []
    for k in kinds:
        W, b = weights[k]
        val = resid @ W[0] + b[0]  # (B, T, d_head): receiver head 0 only

        def put(a, hook, val=val):
            a = a.clone()
            a[:, :, 0] = val
            return a

        hooks.append((f"blocks.1.attn.hook_{k}", put))
    with torch.no_grad():
        return float(pr.metric(model.run_with_hooks(pr.corrupted, fwd_hooks=hooks)))


@pytest.mark.parametrize("freeze_mlps", [True, False])
def test_path_patching_matches_a_hand_computation(case, freeze_mlps):
    _, model, pr = case
    rows = lens.path_patching_table(model, pr, freeze_mlps=freeze_mlps)
    got = {(r["sender"], r["receiver"], r["input"]): r for r in rows}
    for kind in ("q", "k", "v", "qkv"):
        hand = _hand_path(model, pr, kind, freeze_mlps)
        r = got[("L0H0", "L1H0", kind)]
        assert abs(r["value"] - hand) <= 1e-4, (kind, r["value"], hand)
        assert abs(r["recovery"] - (hand - r["corrupted"]) / r["gap"]) <= 1e-4
    assert abs(got[("L0H0", "L1H0", "v")]["value"] - got[("L0H0", "L1H0", "v")]["corrupted"]) \
        > 1e-3  # the path carries something


def test_path_patching_direct_path_by_hand(case):
    """Sender L0H0 -> logits with every later head and MLP frozen: the corrupted final
    residual stream plus the sender's clean - corrupted output, unembedded."""
    _, model, pr = case
    _, cc = model.run_with_cache(pr.clean)
    _, xc = model.run_with_cache(pr.corrupted)
    delta = (cc["blocks.0.attn.hook_z"][:, :, 0] - xc["blocks.0.attn.hook_z"][:, :, 0]) \
        @ model.blocks[0].attn.W_O[0]
    with torch.no_grad():
        hand = float(pr.metric((xc["blocks.1.hook_resid_post"] + delta) @ model.W_U
                               + model.b_U))
    rows = lens.path_patching_table(model, pr)
    r = {(x["sender"], x["receiver"]): x for x in rows}[("L0H0", "logits")]
    assert abs(r["value"] - hand) <= 1e-4


def test_path_patching_table_covers_every_sender_and_later_receiver(case):
    _, model, pr = case
    rows = lens.path_patching_table(model, pr)
    # layer-0 senders: 2 receivers x 4 inputs + logits; layer-1 senders: logits only
    assert len(rows) == 2 * (2 * 4 + 1) + 2 * 1
    assert {r["receiver"] for r in rows if r["sender"].startswith("L1")} == {"logits"}
    assert len({(r["clean"], r["corrupted"]) for r in rows}) == 1


# --- per-prompt values and the uncertainty of each cell (interp.uncertainty)
@pytest.mark.parametrize("strategy", [{}, {"skip_layers": False}, {"suffix": True},
                                      {"incremental": True}, {"metric_positions": "answer"}])
def test_per_prompt_values_average_to_the_engines_cells(case, strategy):
    """Every strategy of the engine with ``per_prompt``: (L, T, H, B), whose mean over prompts
    is the cell value of the mean metric (and so TransformerLens's), and each prompt's value
    is the metric of that prompt alone."""
    from mechinterp_icr.interp import patching as P

    task, model, pr = case
    kw = dict(strategy)
    if kw.get("metric_positions") == "answer":
        kw["metric_positions"] = pr.metric_positions
    _, cache = model.run_with_cache(pr.clean)
    per = P.logit_diff_metric(pr.pos, pr.answer, pr.corrupted_answer, per_prompt=True)
    vals = P.patch_head_out_by_pos(model, pr.corrupted, cache, per, per_prompt=True, **kw)
    mean = P.patch_head_out_by_pos(model, pr.corrupted, cache, pr.metric, **kw)
    B = pr.clean.shape[0]
    assert vals.shape == (*mean.shape, B)
    assert float((vals.mean(-1) - mean).abs().max()) <= 1e-5
    one = P.logit_diff_metric(pr.pos[:1], pr.answer[:1], pr.corrupted_answer[:1])
    first = P.patch_head_out_by_pos(model, pr.corrupted[:1], {k: v[:1] for k, v in
                                                              cache.items()}, one)
    assert float((vals[..., 0] - first).abs().max()) <= 1e-4  # prompt 0 on its own (|v| ~ 20)
    with pytest.raises(Exception, match="per_prompt = True"):
        P.patch_head_out_by_pos(model, pr.corrupted, cache, pr.metric, per_prompt=True)


def test_head_pos_patching_gives_each_cell_an_interval_and_a_p_value(case):
    import numpy as np

    from mechinterp_icr.interp import uncertainty as U

    task, model, pr = case
    res = lens.head_pos_patching(model, pr, n_resamples=300, seed=3)
    rec, lo, hi, p = res["recovery"].numpy(), res["lo"], res["hi"], res["p"]
    assert lo.shape == hi.shape == p.shape == rec.shape
    assert np.all(lo <= hi) and np.all((p > 0) & (p <= 1))
    inside = (lo - 1e-6 <= rec) & (rec <= hi + 1e-6)
    assert inside.mean() >= 0.9  # the percentile interval of a ratio may miss the estimate
    # positions after the answer cannot move the metric: exactly [0, 0], p = 1
    after = max(pr.metric_positions) + 1
    assert np.all(lo[:, after:] == 0) and np.all(hi[:, after:] == 0) and np.all(p[:, after:] == 1)
    moved = np.abs(rec[:, :after]) > 0.05
    assert moved.any() and np.all(hi[:, :after][moved] > lo[:, :after][moved])
    # the same numbers as the library's bootstrap on the per-prompt values
    per = lens.patching.logit_diff_metric(pr.pos, pr.answer, pr.corrupted_answer,
                                          per_prompt=True)
    with torch.no_grad():
        c, x = per(model(pr.clean)), per(model(pr.corrupted))
    lo2, hi2 = U.recovery_interval(res["per_prompt"], c, x, 300, seed=3)
    assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)
    assert res["gap"] == pytest.approx(float(c.mean() - x.mean()))
    rows, _ = lens.head_pos_rows(model, pr, lens.position_labels(task, pr.clean[0]), 300, 3)
    assert list(rows[0])[:2] == ["layer", "head"] and set(lens.PATCHING_COLUMNS) - \
        {"checkpoint", "step"} <= set(rows[0])
    r = next(r for r in rows if (r["layer"], r["pos"], r["head"]) == (1, 2, 1))
    assert (r["lo"], r["hi"], r["p_sign"]) == (lo[1, 2, 1], hi[1, 2, 1], p[1, 2, 1])
