"""Task-vector extraction and geometry: query-position residual vs a manual forward, PCA and
participation ratio on constructed data, within/between cosine, the transplant hook."""

import numpy as np
import pytest
import torch
from helpers import build_model_cfg

from mechinterp_icr.config import ConfigError
from mechinterp_icr.interp import taskvec as tv
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.tasks.base import IGNORE, Batch


class FakeICLTask:
    """The slice of the CR task contract that task-vector extraction uses (sample_icl)."""

    def __init__(self, M=12, L=3, V=4, seed=0):
        self.M, self.L, self.V = M, L, V
        self.attr_base = 3 + M
        self.d_vocab = 3 + M + L * V
        self.n_ctx = 16
        self.kb = np.random.default_rng(seed).integers(0, V, size=(M, L))
        self.finetune_subjects = np.arange(M // 2)
        self.heldout_subjects = np.arange(M // 2, M)

    def attr_id(self, l, v):
        return self.attr_base + np.asarray(l) * self.V + np.asarray(v)

    def has_type(self, ids, types):
        rel = np.asarray(ids) - self.attr_base
        return (rel >= 0) & (rel < self.L * self.V) & (rel // self.V == np.asarray(types))

    def sample_icl(self, rng, B, K=2, subjects=None, types=None, grammar=False):
        K = 2 if K is None else K
        subj = np.arange(self.M) if subjects is None else np.asarray(subjects)
        toks, tgts, ty, qs, ans, demos = [], [], [], [], [], []
        for _ in range(B):
            l = int(rng.integers(self.L)) if types is None else int(rng.choice(types))
            s = rng.choice(subj, K + 1, replace=False)
            seq = [1]
            for d in s[:K]:
                seq += [3 + int(d), int(self.attr_id(l, self.kb[d, l])), 2]
            seq.append(3 + int(s[K]))
            t = [IGNORE] * len(seq)
            a = int(self.attr_id(l, self.kb[s[K], l]))
            t[-1] = a
            toks.append(seq), tgts.append(t), ty.append(l), qs.append(int(s[K]))
            ans.append(a), demos.append(s[:K])
        T = len(toks[0])
        meta = {"query_pos": torch.full((B,), T - 1, dtype=torch.long),
                "type": torch.tensor(ty), "query_subject": torch.tensor(qs),
                "answer": torch.tensor(ans), "demo_subjects": torch.tensor(np.array(demos))}
        return Batch(torch.tensor(toks), torch.tensor(tgts), meta)


def _model(task, **kw):
    cfg = build_model_cfg(d_vocab=task.d_vocab, n_ctx=task.n_ctx, attn_only=False, d_mlp=32,
                          **kw)
    return build_model(cfg, seed=3, device="cpu")


def test_boundary_names():
    assert tv.boundary_names(2) == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post",
                                    "blocks.1.hook_resid_post"]
    with pytest.raises(ConfigError, match="n_layers"):
        tv.boundary_names(0)


def test_extraction_equals_manual_forward():
    task = FakeICLTask()
    model = _model(task)
    s = tv.icl_task_vectors(model, task, n=20, K=2, seed=1)
    assert s.vectors.shape == (20, 3, 32)
    b = task.sample_icl(np.random.default_rng([1, 0x7A5C]), 20, K=2)
    assert np.array_equal(b.tokens.numpy(), s.tokens)  # same prompts from the same seed
    with torch.no_grad():
        resid = model.embed(b.tokens) + model.pos_embed(b.tokens)  # (B, T, d)
        manual = [resid]
        for blk in model.blocks:
            resid = blk(resid)
            manual.append(resid)
        logits = model.unembed(resid)
    q = b.meta["query_pos"]
    rows = torch.arange(20)
    for k, r in enumerate(manual):
        np.testing.assert_allclose(s.vectors[:, k], r[rows, q].numpy(), atol=1e-5)
    np.testing.assert_array_equal(s.pred, logits[rows, q].argmax(-1).numpy())
    # a position that is not the query gives different vectors: we did pick the query position
    assert not np.allclose(s.vectors[:, 1], manual[1][rows, q - 1].numpy(), atol=1e-3)
    np.testing.assert_array_equal(s.types, b.meta["type"].numpy())


def test_readout_hook_is_the_query_residual_plus_the_attention_write():
    """CR-4's diagnostic: resid_mid = resid_pre + attn_out at the query position, so eta^2 of
    the write (write_hook) and the query subject's share of the hook are parts of one sum."""
    task = FakeICLTask()
    model = _model(task, n_layers=2)
    assert tv.write_hook(2) == "blocks.1.hook_attn_out" != tv.readout_hook(2)
    names = ["blocks.1.hook_resid_pre", tv.write_hook(2), tv.readout_hook(2)]
    s = tv.icl_task_vectors(model, task, n=40, K=2, seed=2, names=names)
    np.testing.assert_allclose(s.at(0) + s.at(1), s.at(2), atol=1e-5)
    # any labels: the query subject explains part of the variance at the hook, and all of
    # it for vectors that are a function of the query subject alone
    share = tv.type_variance_fraction(s.at(2), s.query_subject)
    assert 0.0 < share < 1.0
    one_hot = np.eye(12)[s.query_subject]
    assert tv.type_variance_fraction(one_hot, s.query_subject) == pytest.approx(1.0)


def test_extraction_chunking_and_subject_restriction():
    task = FakeICLTask()
    model = _model(task)
    b = task.sample_icl(np.random.default_rng(0), 10, K=2, subjects=task.heldout_subjects)
    a, pa = tv.extract_task_vectors(model, b.tokens, b.meta["query_pos"], batch_size=3)
    c, pc = tv.extract_task_vectors(model, b.tokens, b.meta["query_pos"], batch_size=100)
    np.testing.assert_allclose(a, c, atol=1e-5)
    np.testing.assert_array_equal(pa, pc)
    s = tv.icl_task_vectors(model, task, n=30, K=2, subjects=task.heldout_subjects)
    assert set(s.query_subject) <= set(task.heldout_subjects)
    assert set(s.demo_subjects.ravel()) <= set(task.heldout_subjects)
    with pytest.raises(ConfigError, match="query_pos"):
        tv.extract_task_vectors(model, b.tokens, b.meta["query_pos"][:3])


def test_pca_and_effective_dimension_on_constructed_data():
    rng = np.random.default_rng(0)
    # 3 independent directions with variances 9, 4, 1 embedded in 10 dims by a rotation
    Z = rng.standard_normal((4000, 3)) * np.array([3.0, 2.0, 1.0])
    Q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    X = Z @ Q[:, :3].T + 5.0
    p = tv.pca(X, 3)
    np.testing.assert_allclose(p.explained_variance_ratio_, [9 / 14, 4 / 14, 1 / 14],
                               atol=0.02)
    # components recover the embedding directions (up to sign, fixed deterministically:
    # the largest |loading| of each component is positive)
    np.testing.assert_allclose(np.abs(p.components_ @ Q[:, :3]), np.eye(3), atol=0.05)
    assert np.array_equal(tv.pca(X, 3).components_, p.components_)  # deterministic
    rows = np.arange(3)
    assert (p.components_[rows, np.abs(p.components_).argmax(1)] > 0).all()
    np.testing.assert_allclose(p.transform(X), (X - X.mean(0)) @ p.components_.T, atol=1e-9)
    assert tv.pca(X).n_components_ == 10  # all components by default
    with pytest.raises(ConfigError, match="k"):
        tv.pca(X, 11)
    # participation ratio (sum l)^2 / sum l^2 = 14^2 / (81 + 16 + 1) = 2.0
    assert tv.participation_ratio(X) == pytest.approx(196 / 98, rel=0.03)
    iso = rng.standard_normal((20000, 5))
    assert tv.participation_ratio(iso) == pytest.approx(5.0, rel=0.03)
    assert tv.n_components_for(X, 0.9) == 2  # 13/14 = 0.93 >= 0.9 > 9/14
    assert tv.n_components_for(X, 0.95) == 3


def test_separation_metrics_on_clusters_and_noise():
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(4), 200)
    centres = rng.standard_normal((4, 16)) * 5
    X = centres[labels] + rng.standard_normal((800, 16))
    g = tv.geometry(X, labels)
    assert g["type_variance_fraction"] > 0.9
    assert g["silhouette"] > 0.5
    assert g["cos_within"] > 0.5 and g["cos_gap"] > 0.5
    noise = rng.standard_normal((800, 16))
    h = tv.geometry(noise, labels)
    assert h["type_variance_fraction"] < 0.05
    assert abs(h["silhouette"]) < 0.05
    assert abs(h["cos_gap"]) < 0.05


def test_transplant_hook_patches_the_query_residual():
    task = FakeICLTask()
    model = _model(task)
    b = task.sample_icl(np.random.default_rng(0), 8, K=2)
    q = b.meta["query_pos"]
    last = tv.boundary_names(2)[-1]
    vec, pred = tv.extract_task_vectors(model, b.tokens, q)
    src = np.zeros(8, int)
    # scale 0 adds nothing: every prompt keeps its own answer
    out = tv.transplant_accuracy(model, b.tokens, q, src, np.ones(8, int), pred,
                                 np.zeros((3, 32)), last, mode="add", scale=0.0,
                                 original_answers=pred)
    assert out["transplant_success"] == 1.0 and out["kept_original"] == 1.0
    # replacing the final residual of every prompt with prompt 5's final residual gives
    # prompt 5's prediction everywhere (the hook writes exactly the query position)
    means = np.stack([vec[0, -1], vec[5, -1], vec[0, -1]])
    out = tv.transplant_accuracy(model, b.tokens, q, src, np.ones(8, int),
                                 np.full(8, pred[5]), means, last, mode="replace")
    assert out["transplant_success"] == 1.0 and out["n"] == 8
    # "add" with the difference of the two rows gives the same result for prompt 0
    out = tv.transplant_accuracy(model, b.tokens[:1], q[:1], src[:1], np.ones(1, int),
                                 np.full(1, pred[5]), means, last, mode="add")
    assert out["transplant_success"] == 1.0
    with pytest.raises(ConfigError, match="mode"):
        tv.transplant_accuracy(model, b.tokens, q, src, src, pred, means, last, mode="swap")
