import numpy as np
import pytest
import torch

from mechinterp_icr.interp.attention import ROLE_GROUPS, head_role_table, role_masses
from mechinterp_icr.interp.circuits import (
    construction_similarity,
    full_ov,
    full_qk,
    kq_probe,
    ov_probe,
    pos_qk,
    restrict,
)
from mechinterp_icr.interp.roles import role_verdict
from mechinterp_icr.models.construction import build_construction, construction_model_config
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.tasks.cr import CRTaskConfig


@pytest.fixture(scope="module")
def task():
    return CRTaskConfig(n_subjects=32, n_values=8).build(1)


@pytest.fixture(scope="module")
def icl_batch(task):
    return task.sample_icl(np.random.default_rng(0), 32, subjects=task.heldout_subjects)


def test_role_masses_sum_to_one(task, icl_batch):
    # a random (untrained) model: masses over the role groups still partition the row
    m = build_model(construction_model_config(task), seed=3)
    for r in head_role_table(m, icl_batch):
        total = sum(r[g] for g in ROLE_GROUPS) + r["other"]
        assert abs(total - 1.0) < 1e-5
    pats = torch.rand(4, 1, 2, 6, 6).tril()
    pats = pats / pats.sum(-1, keepdim=True)
    roles = torch.tensor([[1, 3, 5, 2, 6, 0]] * 4)
    ms = role_masses(pats, roles, torch.tensor([4, 4, 3, 5]))
    assert torch.allclose(sum(ms.values()), torch.ones(1, 2))


def test_construction_heads_are_found(task, icl_batch):
    m = build_construction(task, "icl")
    rows = head_role_table(m, icl_batch)
    assert rows[0]["top_role"] == "demo_attribute" and rows[1]["top_role"] == "query_subject"
    assert ov_probe(m, task, 0, 0)["ov_strict"] == 1.0
    assert kq_probe(m, icl_batch, 0, 0)["kq_top_attr"] == 1.0
    sim = construction_similarity(m, task)
    assert sim[0]["sim_relation_ov"] > 0.999 and sim[1]["sim_subject_ov"] > 0.999
    v = role_verdict(m, task, seed=0, n=32)
    assert v["relation_head"] == "L0H0" and v["subject_head"] == "L0H1" and v["distinct"]
    assert v["relation_moved"] > 0.9 and v["subject_moved"] > 0.9


def test_factored_circuits_match_dense(task):
    m = build_model(construction_model_config(task), seed=0)
    a = m.blocks[0].attn
    dense_ov = m.W_E @ a.W_V[1] @ a.W_O[1] @ m.W_U
    rows, cols = task.attr_ids[:5], task.subject_ids[:7]
    assert torch.allclose(restrict(full_ov(m, 0, 1), rows, cols), dense_ov[rows][:, cols].detach(),
                          atol=1e-4)
    dense_qk = m.W_E @ a.W_Q[0] @ a.W_K[0].T @ m.W_E.T
    assert torch.allclose(restrict(full_qk(m, 0, 0), rows, cols), dense_qk[rows][:, cols].detach(),
                          atol=1e-4)
    assert pos_qk(m, 0, 0).shape == (m.cfg.n_ctx, m.cfg.n_ctx)
