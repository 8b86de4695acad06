"""IR-3/IR-4 causal test: the step-1 attention row overwritten through the pattern hook."""

import pytest
import torch

from mechinterp_icr.interp.attention import attention_row
from mechinterp_icr.interp.ir_attention import (
    candidate_rows,
    confusion_batches,
    critical_within_pair_gap,
    overwrite_attention_row,
    overwrite_row_table,
    overwrite_rows_sweep,
)
from mechinterp_icr.models.ir import IRModelSpec, build_ir_hooked, ideal_pos_block
from mechinterp_icr.tasks.ir import IRTaskConfig


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    task = IRTaskConfig(n_subjects=32).build(0)
    model = build_ir_hooked(task, IRModelSpec(), seed=0,
                            B=ideal_pos_block(task.n_ctx, 2, 0.29))
    return task, model, confusion_batches(task, 128, 0)


def test_confusion_batches_are_what_they_say(setup):
    task, _, b = setup
    assert not bool(b["clean"].meta["confusing"].any())
    assert bool(b["single"].meta["single"].all()) and not bool(b["single"].meta["swap"].any())
    assert bool(b["swap"].meta["swap"].all())
    assert all(len(x) == 128 for x in b.values())


def test_overwrite_rows_measured_truth(setup):
    _, model, b = setup
    t = overwrite_row_table(model, b, a=0.29, deltas=(0.02, 0.1))
    acc, prob = t["acc"], t["prob"]
    # the model's own row is the ideal pairwise row: overwriting with it changes nothing
    assert acc["own_paired"] == acc["model"] == acc["pairwise"]
    # the pairwise row decides clean, single-pair and swap sequences
    assert acc["pairwise"]["clean"] == 1.0
    assert acc["pairwise"]["swap"] == 1.0 and acc["pairwise"]["single"] >= 0.95
    # one pair only: swaps are still resolved (the other pair is ignored, not re-paired),
    # but a single-pair confusion in the attended pair ties (about half of them: 0.7)
    assert acc["one_pair"]["swap"] == 1.0
    assert 0.6 <= acc["one_pair"]["single"] <= 0.8
    # unequal within pairs (tilted toward the re-paired relation): swaps are decided wrongly
    assert acc["unequal_0.1"]["swap"] == 0.0
    assert acc["unequal_0.02"]["swap"] == 1.0  # a gap of 0.04 is still tolerated at a=0.29
    # uniform: the saddle, swaps tie at 1/2
    assert abs(acc["uniform"]["swap"] - 0.5) < 0.02
    # induction-style row (all on the previous token): no recall
    assert acc["induction"]["clean"] < 0.5
    assert prob["pairwise"]["swap"] > 0.8
    assert 0.04 < t["critical_gap"] < 0.2


def test_critical_gap_shrinks_toward_the_saddle(setup):
    _, model, b = setup
    near = critical_within_pair_gap(model, b["swap"], 0.26)
    far = critical_within_pair_gap(model, b["swap"], 0.30)
    assert near < far


def test_overwrite_attention_row_is_applied(setup, monkeypatch):
    """The pattern the head really uses holds the written row at the query (recorded by a hook
    that runs after the overwrite in the same forward), and nowhere else; the model's own row
    differs from it, so an overwrite that wrote nothing would fail this test."""
    _, model, b = setup
    tokens = b["swap"].tokens[:32]
    B, T = tokens.shape
    q = 4
    row = candidate_rows(5, a=0.29, delta=0.0)["one_pair"]  # (1/2, 1/2, 0, 0, 0)
    want = torch.zeros(T, dtype=torch.float64)
    want[:5] = torch.as_tensor(row)
    name = "blocks.0.attn.hook_pattern"
    seen = {}
    run = model.run_with_hooks

    def spy(*args, fwd_hooks=(), **kw):  # record the pattern after every other hook on it
        rec = (name, lambda a, hook: seen.__setitem__("pattern", a.detach().clone()))
        return run(*args, fwd_hooks=[*fwd_hooks, rec], **kw)

    monkeypatch.setattr(model, "run_with_hooks", spy)
    logits = overwrite_attention_row(model, tokens, 0, 0, q, row)
    monkeypatch.undo()
    written = seen["pattern"][:, 0].double()  # (B, T, T)
    assert torch.allclose(written[:, q], want.expand(B, T), atol=1e-6)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=name)
    own = cache[name][:, 0].double()
    assert float((own[:, q] - want).abs().max()) > 0.1  # a no-op overwrite would be caught
    others = [t for t in range(T) if t != q]
    assert torch.equal(written[:, others], own[:, others])  # only the query row is written
    assert logits.shape == (B, T, model.cfg.d_vocab)
    assert not torch.allclose(logits[:, q], model(tokens)[:, q])
    _, acc = overwrite_attention_row(model, tokens, 0, 0, q, row,
                                     answers=b["swap"].targets[:32, q])
    assert 0.0 <= acc <= 1.0


def test_overwrite_rows_sweep_matches_manual(setup):
    _, model, b = setup
    q = 4
    tokens, answers = b["clean"].tokens, b["clean"].targets[:, q]
    rows = candidate_rows()
    assert all(abs(r.sum() - 1.0) < 1e-9 for r in rows.values())
    res = overwrite_rows_sweep(model, tokens, 0, 0, q, rows, answers)
    assert set(res) == {"model", *rows}
    for name, row in rows.items():
        _, acc = overwrite_attention_row(model, tokens, 0, 0, q, row, answers=answers)
        assert res[name] == acc
    # the "model" entry is the plain accuracy; an overwrite with the model's own row is a no-op
    own = attention_row(model, tokens, 0, 0, q)  # (B, T)
    logits, acc = overwrite_attention_row(model, tokens, 0, 0, q, own, answers=answers)
    assert torch.allclose(logits, model(tokens), atol=1e-5)
    assert abs(acc - res["model"]) < 1e-9
