"""Logit lens and direct logit attribution (``interp.lens``) on tiny models with random weights
(biases and position embeddings included, so every term is non-zero): the components sum to
the model's logit and logit difference, per-layer sums agree with TransformerLens's own
``decompose_resid`` + ``logit_attrs``, a head's term equals ``z W_O`` times the unembedding
direction by hand, the lens's last point is the model's prediction, and the prompts' answers
are the ones patching_prompts's metric reads."""

import numpy as np
import pytest
import torch

from mechinterp_icr.interp import lens
from mechinterp_icr.interp.patching import logit_diff_metric


def _tasks():
    from mechinterp_icr.tasks.cr import CRTaskConfig
    from mechinterp_icr.tasks.induction import InductionTaskConfig
    from mechinterp_icr.tasks.ir import IRTaskConfig

    return {"cr": CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_tuples=3,
                               n_demos=2, max_demos=3, grammar_len_max=3).build(0),
            "ir": IRTaskConfig(n_subjects=16, n_relations=4).build(0),
            "induction": InductionTaskConfig(n_tokens=12, half_len=5).build()}


TASKS = _tasks()


def random_model(task, attn_only=False, normalization="none", n_layers=2, n_heads=2, seed=0):
    """A tiny model with every parameter (biases, W_pos, norm weights) drawn at random."""
    from mechinterp_icr.config import ModelConfig
    from mechinterp_icr.models.factory import build_model

    cfg = ModelConfig(n_layers=n_layers, n_heads=n_heads, d_model=24, d_head=8, d_mlp=32,
                      attn_only=attn_only, normalization=normalization,
                      d_vocab=task.d_vocab, n_ctx=task.n_ctx)
    model = build_model(cfg, seed=seed, device="cpu")
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return model


@pytest.mark.parametrize("kind", ["cr", "ir", "induction"])
def test_answer_prompts_are_what_the_patching_metric_reads(kind):
    task = TASKS[kind]
    pr = lens.answer_prompts(task, 16, seed=3)
    assert pr.clean.shape == pr.corrupted.shape and pr.pos.shape == (16,)
    logits = torch.randn(16, pr.clean.shape[1], task.d_vocab, generator=torch.Generator()
                         .manual_seed(0))
    ours = logit_diff_metric(pr.pos, pr.answer, pr.corrupted_answer)(logits)
    assert abs(float(ours) - float(pr.metric(logits))) < 1e-6
    if kind == "cr":  # the query subject's attribute, of the clean and the corrupted type
        ty = task.attr_type_of_id(pr.answer)
        assert (ty >= 0).all() and (ty != task.attr_type_of_id(pr.corrupted_answer)).all()
        q = pr.clean[torch.arange(16), pr.pos] - task.subject_base
        assert (pr.answer.numpy() == task.answer_id(q.numpy(), ty)).all()
    else:  # the next token after the answer position
        assert (pr.answer == pr.clean[torch.arange(16), pr.pos + 1]).all()


@pytest.mark.parametrize("kind,attn_only", [("cr", False), ("ir", False), ("induction", True)])
def test_dla_components_sum_to_the_logit_and_the_logit_difference(kind, attn_only):
    task = TASKS[kind]
    model = random_model(task, attn_only=attn_only)
    pr = lens.answer_prompts(task, 12, seed=1)
    B = pr.clean.shape[0]
    with torch.no_grad():
        lg = model(pr.clean)[torch.arange(B), pr.pos]  # (B, d_vocab)
    logit = lg[torch.arange(B), pr.answer]
    diff = logit - lg[torch.arange(B), pr.corrupted_answer]
    a, labels = lens.direct_logit_attribution(model, pr.clean, pr.pos, pr.answer)
    d, _ = lens.direct_logit_attribution(model, pr.clean, pr.pos, pr.answer,
                                         pr.corrupted_answer)
    assert labels[:2] == ["embed", "pos_embed"] and labels[-1] == "unembed_bias"
    assert ("L1_mlp" in labels) == (not attn_only) and "L1H1" in labels
    assert torch.allclose(a.sum(0), logit, atol=1e-4), (a.sum(0), logit)
    assert torch.allclose(d.sum(0), diff, atol=1e-4)
    assert float(a[labels.index("unembed_bias")].abs().max()) > 0.01  # a real bias term
    rows, check = lens.dla_rows(model, pr)
    assert abs(check["sum_diff"] - check["model_diff"]) < 1e-4
    assert abs(check["sum_logit"] - check["model_logit"]) < 1e-4
    assert [r["component"] for r in rows] == labels


def test_dla_agrees_with_transformer_lens_and_a_hand_computation():
    task = TASKS["cr"]
    model = random_model(task)
    pr = lens.answer_prompts(task, 10, seed=2)
    B = pr.clean.shape[0]
    idx = torch.arange(B)
    d, labels = lens.direct_logit_attribution(model, pr.clean, pr.pos, pr.answer,
                                              pr.corrupted_answer)
    _, cache = model.run_with_cache(pr.clean)
    # TransformerLens: per-layer attention / MLP outputs, embeddings, dotted by logit_attrs
    stack, tl = cache.decompose_resid(layer=-1, return_labels=True)
    T = pr.clean.shape[1]
    ref = cache.logit_attrs(stack, tokens=pr.answer[:, None].expand(B, T),
                            incorrect_tokens=pr.corrupted_answer[:, None].expand(B, T))
    ref = ref[:, idx, pr.pos]  # (components, B)
    ours = dict(zip(labels, d))
    for i, name in enumerate(tl):
        if name.endswith("_attn_out"):
            l = int(name.split("_")[0])
            mine = sum(ours[f"L{l}H{h}"] for h in range(2)) + ours[f"L{l}_attn_bias"]
        elif name.endswith("_mlp_out"):
            mine = ours[f"L{int(name.split('_')[0])}_mlp"]
        else:
            mine = ours[name]
        assert torch.allclose(mine, ref[i], atol=1e-4), name
    # by hand: head L1H1's z @ W_O at the answer position, times W_U[:, a] - W_U[:, b]
    z = cache["blocks.1.attn.hook_z"][idx, pr.pos, 1]  # (B, d_head)
    direction = model.W_U[:, pr.answer] - model.W_U[:, pr.corrupted_answer]  # (d, B)
    hand = ((z @ model.blocks[1].attn.W_O[1]) * direction.T).sum(-1)
    assert torch.allclose(ours["L1H1"], hand, atol=1e-4)
    # the components are the final residual stream
    comp, _ = lens.component_stack(model, cache)
    assert torch.allclose(comp.sum(0), cache["blocks.1.hook_resid_post"], atol=1e-4)


@pytest.mark.parametrize("normalization", ["none", "LN"])
def test_logit_lens_ends_at_the_model_and_starts_at_the_embedding(normalization):
    task = TASKS["cr"]
    model = random_model(task, normalization=normalization)
    pr = lens.answer_prompts(task, 12, seed=4)
    rows = lens.logit_lens(model, pr.clean, pr.pos, pr.answer)
    assert [r["layer"] for r in rows] == ["embed", "L0_mid", "L0_out", "L1_mid", "L1_out"]
    B = pr.clean.shape[0]
    idx = torch.arange(B)
    with torch.no_grad():
        lg = model(pr.clean)[idx, pr.pos]
    prob = lg.softmax(-1)[idx, pr.answer]
    assert abs(rows[-1]["answer_prob"] - float(prob.mean())) < 1e-5
    rank = (lg >= lg[idx, pr.answer][:, None]).sum(-1).float()
    assert abs(rows[-1]["answer_rank"] - float(rank.mean())) < 1e-6
    assert abs(rows[-1]["top1_acc"] - float((lg.argmax(-1) == pr.answer).float().mean())) < 1e-6
    if normalization == "none":  # the first point: token + position embedding, unembedded
        tok = pr.clean[idx, pr.pos]
        with torch.no_grad():
            e = model.W_E[tok] + model.W_pos[pr.pos]
            p0 = (e @ model.W_U + model.b_U).softmax(-1)[idx, pr.answer]
        assert abs(rows[0]["answer_prob"] - float(p0.mean())) < 1e-5


def test_logit_lens_rank_counts_ties_against_the_answer():
    task = TASKS["induction"]
    model = random_model(task, attn_only=True)
    with torch.no_grad():
        model.W_U.zero_()
        model.b_U.zero_()
    pr = lens.answer_prompts(task, 4, seed=0)
    rows = lens.logit_lens(model, pr.clean, pr.pos, pr.answer)
    assert all(r["answer_rank"] == task.d_vocab and r["top1_acc"] == 0.0 for r in rows)
    assert np.allclose([r["answer_prob"] for r in rows], 1 / task.d_vocab)


def test_lens_labels():
    assert [lens.lens_label(x, 2) for x in ("0_pre", "0_mid", "1_pre", "1_mid", "final_post")] \
        == ["embed", "L0_mid", "L0_out", "L1_mid", "L1_out"]
