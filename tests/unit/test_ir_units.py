"""The sparse units (models/ir_units.py) equal the dense sum over every unit, in value and
gradient, on the inputs the IR-5 sweep feeds them."""

import pytest
import torch

from mechinterp_icr.experiments.ir.config import profile, task_config
from mechinterp_icr.experiments.ir.train import tagged_rng
from mechinterp_icr.models import ir_units
from mechinterp_icr.models.ir import FastIR, IRModelSpec, token_embeddings
from mechinterp_icr.models.ir_units import (
    UnitIndex,
    answer_block,
    answer_block_dense,
    relation_block,
    relation_block_dense,
)


@pytest.fixture(autouse=True)
def _sparse_at_any_size(monkeypatch):
    """The tests' tiny unit tables would take the dense form (SPARSE_MIN_UNITS)."""
    monkeypatch.setattr(ir_units, "SPARSE_MIN_UNITS", 0)


def _inputs(n=64, d=12, seed=3, B=48):
    tk = task_config(profile("quick"), n).build(seed)
    sp = IRModelSpec(embedding="random", d_embed=d)
    E = token_embeddings(tk, sp, seed)
    R = tk.cfg.n_relations
    tr = torch.from_numpy(tk.triples)
    s_idx, r_idx, a_idx = tr[:, 0], tr[:, 1], tr[:, 2]
    batch = tk.sample(tagged_rng(seed, "units"), B)
    # copy blocks as the attention makes them: a convex mix of the context's embeddings,
    # some rows sharp on one pair (the trained row), some uniform (the start)
    gen = torch.Generator().manual_seed(seed)
    w = torch.softmax(4 * torch.randn(B, 5, generator=gen, dtype=torch.float64), 1)
    c = torch.einsum("bt,btd->bd", w, E[batch.tokens[:, :5]]).requires_grad_(True)
    return E[:n], E[n + R:], s_idx, r_idx, a_idx, R, c


def _both(c, *args, index=None):
    outs = []
    for fn in (relation_block_dense, relation_block):
        c.grad = None
        kw = {"index": index} if fn is relation_block else {}
        y = fn(c, *args, **kw)
        (y * torch.linspace(0.5, 2.0, y.shape[1], dtype=y.dtype)).sum().backward()
        outs.append((y.detach(), c.grad.clone()))
    return outs


@pytest.mark.parametrize("theta", [1 / 3, 0.05])
def test_sparse_units_equal_the_dense_sum(theta):
    E_s, E_a, s_idx, r_idx, a_idx, R, c = _inputs()
    gate = torch.zeros(c.shape[0], dtype=torch.float64)
    gate[::5] = 10.0  # gated rows: no unit fires
    (y0, g0), (y1, g1) = _both(c, E_s, E_a, s_idx, r_idx, a_idx, R, theta, gate)
    assert (y0 > 0).sum() > 10  # the test has units that fire
    assert torch.allclose(y1, y0, rtol=0, atol=1e-13)
    assert torch.allclose(g1, g0, rtol=0, atol=1e-12)
    assert float(y1[::5].abs().max()) == 0.0


def test_sparse_units_on_a_subset_and_a_permutation_of_the_units():
    """The learned arm keeps a subset of the units; IR-1's shuffle control permutes their
    answers: the index built from those units gives the dense sum over them."""
    E_s, E_a, s_idx, r_idx, a_idx, R, c = _inputs()
    gen = torch.Generator().manual_seed(0)
    keep = torch.randperm(len(s_idx), generator=gen)[: len(s_idx) // 3].sort().values
    perm = a_idx[torch.randperm(len(a_idx), generator=gen)]
    gate = torch.zeros(c.shape[0], dtype=torch.float64)
    for s, r, a in ((s_idx[keep], r_idx[keep], a_idx[keep]), (s_idx, r_idx, perm)):
        idx = UnitIndex.build(s, r, a, E_s.shape[0], R, E_a.shape[0])
        (y0, g0), (y1, g1) = _both(c, E_s, E_a, s, r, a, R, 1 / 3, gate, index=idx)
        assert torch.allclose(y1, y0, rtol=0, atol=1e-13)
        assert torch.allclose(g1, g0, rtol=0, atol=1e-12)


def test_no_unit_can_be_ruled_out_without_a_positive_threshold():
    """theta <= 0: every unit may fire, so every unit is evaluated (the dense form, bitwise)."""
    E_s, E_a, s_idx, r_idx, a_idx, R, c = _inputs()
    gate = torch.zeros(c.shape[0], dtype=torch.float64)
    (y0, _), (y1, _) = _both(c, E_s, E_a, s_idx, r_idx, a_idx, R, -0.1, gate)
    assert torch.equal(y0, y1)


def test_sparse_answer_units_equal_the_dense_sum():
    """Answer units at the step-2 position (current token a relation: one relation's units
    near threshold) and at other positions (gated), values and gradients."""
    E_s, E_a, s_idx, r_idx, a_idx, R, c = _inputs()
    n = E_s.shape[0]
    tk = task_config(profile("quick"), n).build(3)
    E = token_embeddings(tk, IRModelSpec(embedding="random", d_embed=E_s.shape[1]), 3)
    E_r = E[n: n + R]
    gen = torch.Generator().manual_seed(1)
    x = E_r[torch.randint(0, R, (c.shape[0],), generator=gen)]
    gate = torch.zeros(c.shape[0], dtype=torch.float64)
    gate[::4] = 10.0
    m = E_a.shape[0]
    outs = []
    for fn in (answer_block_dense, answer_block):
        c.grad = None
        y = fn(c, x, E_s, E_r, s_idx, r_idx, a_idx, m, 0.9, gate)
        (y * torch.linspace(0.5, 2.0, m, dtype=y.dtype)).sum().backward()
        outs.append((y.detach(), c.grad.clone()))
    (y0, g0), (y1, g1) = outs
    assert (y0 > 0).sum() > 10
    assert torch.allclose(y1, y0, rtol=0, atol=1e-13)
    assert torch.allclose(g1, g0, rtol=0, atol=1e-12)


def test_fast_model_follows_its_units():
    """FastIR rebuilds its unit index when its units change (the learned arm's subset): its
    blocks equal the dense sums over the units it holds."""
    tk = task_config(profile("quick"), 32).build(1)
    sp = IRModelSpec(embedding="random", d_embed=12)
    fast = FastIR(tk, sp, seed=1)
    ev = tk.sample(tagged_rng(1, "ev"), 40)
    n, R = 32, tk.cfg.n_relations
    with torch.no_grad():
        full = fast.cot_blocks(ev.tokens)[0]
        fast.s_tok, fast.r_tok, fast.a_tok = fast.s_tok[::2], fast.r_tok[::2], fast.a_tok[::2]
        b1, b2 = fast.cot_blocks(ev.tokens)
        A = fast.attention([tk.step1_pos, tk.step1_pos + 1])
        copy = torch.einsum("pt,btd->bpd", A, fast.E[ev.tokens])
        sp_ = fast.spec
        d1 = relation_block_dense(copy[:, 0], fast.E[:n], fast.E[n + R:], fast.s_tok,
                                  fast.r_tok - n, fast.a_tok - n - R, R, sp_.theta_rel,
                                  torch.zeros(40, dtype=torch.float64))
        d2 = answer_block_dense(copy[:, 1], fast.E[ev.tokens[:, tk.step1_pos + 1]],
                                fast.E[:n], fast.E[n: n + R], fast.s_tok, fast.r_tok - n,
                                fast.a_tok - n - R, fast.V - n - R, sp_.theta_ans,
                                torch.zeros(40, dtype=torch.float64))
    scale = sp_.lam2 / tk.cfg.temperature
    assert not torch.allclose(full, b1)
    assert torch.allclose(b1, d1 * scale, rtol=0, atol=1e-12)
    assert torch.allclose(b2, d2 * scale, rtol=0, atol=1e-12)
