"""Parts of the IR claims that can be checked on tiny inputs: the IR-5 step-1 fast path, the
logistic crossing, the IR-1 shuffled-triple control, the IR-3 stopping rule, the IR-8 probes,
scores and induction task."""

import numpy as np
import pytest
import torch

from mechinterp_icr.config import apply_overrides
from mechinterp_icr.experiments.ir import profile
from mechinterp_icr.experiments.ir.config import task_config
from mechinterp_icr.experiments.ir.controls import (
    induction_probes,
    induction_targets,
    prefix_matching_score,
)
from mechinterp_icr.experiments.ir.sweeps import logistic_crossing, step1_expected
from mechinterp_icr.experiments.ir.train import gap_stop_rule, tagged_rng
from mechinterp_icr.interp.ir_attention import ir_accuracy
from mechinterp_icr.models.ir import FastIR, IRModelSpec, memory_retrieval, token_embeddings
from mechinterp_icr.tasks.induction import InductionTaskConfig


def test_step1_expected_equals_the_full_fast_path():
    cfg = profile("quick")
    tk = task_config(cfg, 32).build(3)
    sp = IRModelSpec(embedding="random", d_embed=16)
    fast = FastIR(tk, sp, seed=3)
    with torch.no_grad():
        fast.B.copy_(torch.randn(tk.n_ctx, tk.n_ctx, dtype=torch.float64))
    ev = tk.sample(tagged_rng(3, "t"), 64)
    with torch.no_grad():
        ref = ir_accuracy(fast.cot_logits(ev.tokens), ev)["step1_prob"]
        assert step1_expected(fast, ev) == pytest.approx(ref, abs=1e-12)


def test_logistic_crossing():
    assert logistic_crossing([1, 2, 4, 8], [0, 0, 0, 0]) is None
    assert logistic_crossing([1, 2, 4, 8], [1, 1, 1, 1]) == 1.0
    c = logistic_crossing([1, 1, 2, 2, 4, 4, 8, 8], [0, 0, 0, 1, 1, 1, 1, 1])
    assert 1.5 < c < 4


def test_shuffled_memory_fails_retrieval():
    cfg = profile("quick")
    tk = task_config(cfg, 64).build(0)
    sp = IRModelSpec()
    E = token_embeddings(tk, sp, 0)
    assert min(memory_retrieval(tk, sp, None, E).values()) == 1.0
    assert max(memory_retrieval(tk, sp, None, E, shuffle_seed=0).values()) <= 0.1
    part = memory_retrieval(tk, sp, None, E, max_triples=50)
    assert part["relation_acc"] == 1.0


def test_gap_stop_rule_stops_once_the_gap_stops_falling():
    cfg = apply_overrides(profile("quick"), ["steps=10", "stop_every=10", "stop_max=100",
                                             "stop_tol=0.01"])
    checks, stop = gap_stop_rule(cfg)
    assert min(checks) == 11 and max(checks) == 101
    row = lambda g: [0.25 + g, 0.25 - g, 0.25, 0.25, 0.0]  # noqa: E731
    assert not stop({"step": 11, "row1": row(0.2)})
    assert not stop({"step": 15, "row1": row(0.2)})
    assert not stop({"step": 21, "row1": row(0.1)})  # fell by 0.1
    assert stop({"step": 31, "row1": row(0.098)})  # gap 2g fell by 0.004 < 0.01


def test_induction_task_of_varying_period_and_offset():
    t = InductionTaskConfig(n_tokens=16, max_period=4, min_period=2, max_offset=3,
                            seq_len=12).build()
    b = t.sample(np.random.default_rng(0), 32)
    assert b.tokens.shape == (32, 13) and (b.tokens[:, 0] == 0).all()
    for tok, tg in zip(b.tokens, b.targets):
        for pos in torch.nonzero(tg >= 0).squeeze(-1).tolist():
            earlier = [j for j in range(1, pos) if tok[j] == tok[pos]]
            assert earlier and tok[earlier[-1] + 1] == tg[pos]  # induction solves it


def test_prefix_matching_score_of_perfect_and_uniform_heads():
    toks = induction_probes(6, 8, 12, 0)
    M = induction_targets(toks)
    L = toks.shape[1]
    uni = torch.tril(torch.ones(L, L, dtype=torch.float64))
    uni = (uni / uni.sum(-1, keepdim=True)).expand(len(toks), L, L)
    assert prefix_matching_score(uni, toks)["score_minus_baseline"] == pytest.approx(0)
    perfect = uni.clone()
    rows = M.sum(-1) > 0
    perfect[rows] = M[rows] / M[rows].sum(-1, keepdim=True)
    assert prefix_matching_score(perfect, toks)["score_minus_baseline"] > 0.7
