"""IR-3/IR-4 causal test: the step-1 attention row overwritten through the pattern hook."""

import pytest
import torch

from mechinterp_icr.interp.ir_attention import (
    confusion_batches,
    critical_within_pair_gap,
    overwrite_row_table,
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
