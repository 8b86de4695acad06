"""Probes: splits never leak, controls are at chance on random data, probes find planted
low-dimensional structure (and the top-PC probe misses low-variance structure)."""

import numpy as np
import pytest

from mechinterp_icr.config import ConfigError
from mechinterp_icr.interp import probes as pr


def _prompts(n=300, M=20, K=3, seed=0, dup=True):
    rng = np.random.default_rng(seed)
    S = np.stack([rng.choice(M, K + 1, replace=False) for _ in range(n)])
    if dup:  # some prompts occur twice: they must stay on one side
        S[n // 2: n // 2 + 20] = S[:20]
    ids = np.unique(S, axis=0, return_inverse=True)[1].reshape(-1)
    return S, ids


def test_split_by_prompt_never_shares_a_prompt():
    _, ids = _prompts()
    for seed in range(5):
        sp = pr.split_by_prompt(ids, 0.3, 0.2, seed=seed)
        pr.check_no_leak(sp, ids)
        assert not set(ids[sp.train]) & set(ids[sp.test])
        assert not set(ids[sp.dev]) & set(ids[sp.test])
        assert len(sp.train) + len(sp.test) + len(sp.dev) == len(ids)
    # the checker does fail on a leaking split (so the test above can fail)
    bad = pr.Split(np.array([0, 1, 2]), np.array([150, 3]), "prompt")  # 150 repeats row 0
    with pytest.raises(pr.ProbeLeakError, match="share 1 prompt"):
        pr.check_no_leak(bad, ids)
    with pytest.raises(pr.ProbeLeakError, match="row indices"):
        pr.check_no_leak(pr.Split(np.array([0, 1]), np.array([1]), "prompt"), ids)


def test_split_by_subject_never_shares_a_subject():
    S, ids = _prompts(n=2000, M=12, K=1)
    sp = pr.split_by_subject(S[:, 0], S[:, 1:], test_fraction=0.5, seed=3)
    assert len(sp.train) > 50 and len(sp.test) > 50
    tr, te = set(S[sp.train].ravel()), set(S[sp.test].ravel())
    assert not tr & te
    pr.check_no_leak(sp, ids, S)
    # a by-prompt split of the same data does share subjects: the checker says so
    spp = pr.split_by_prompt(ids, 0.3, seed=0)
    with pytest.raises(pr.ProbeLeakError, match="subject"):
        pr.check_no_leak(spp, ids, S)
    with pytest.raises(ConfigError, match="test_fraction"):
        pr.split_by_subject(S[:, 0], S[:, 1:], test_fraction=1.0)


def test_split_from_sets_checks_leaks():
    S, ids = _prompts(n=100, M=20, K=2, dup=False)
    a = np.array([r for r in range(100) if S[r].max() < 10])
    b = np.array([r for r in range(100) if S[r].min() >= 10])
    rows = np.concatenate([a, b])
    sp = pr.split_from_sets(len(a), len(b), ids[rows], S[rows])
    assert len(sp.train) == len(a)
    with pytest.raises(pr.ProbeLeakError):
        pr.split_from_sets(50, 50, ids, S)  # unsorted rows mix subjects


def test_controls_are_at_chance_on_random_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1200, 32))
    y = rng.integers(0, 4, 1200)
    sp = pr.split_by_prompt(np.arange(1200), 0.5, seed=0)
    r = pr.evaluate_probes(X, y, sp, n_pc=3)
    for k in ("acc_pc", "acc_full", "acc_shuffle_pc", "acc_shuffle_full", "acc_random_dir"):
        assert abs(r[k] - 0.25) < 0.07, (k, r[k])
    assert r["chance"] == 0.25


def test_probes_find_planted_structure_and_shuffle_destroys_it():
    rng = np.random.default_rng(1)
    n, d = 1200, 32
    y = rng.integers(0, 4, n)
    centres = rng.standard_normal((4, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X = 4.0 * centres[y] + rng.standard_normal((n, d))  # type = the dominant variance
    sp = pr.split_by_prompt(np.arange(n), 0.5, seed=0)
    r = pr.evaluate_probes(X, y, sp, n_pc=3)
    assert r["acc_pc"] > 0.97 and r["acc_full"] > 0.97
    assert abs(r["acc_shuffle_pc"] - 0.25) < 0.07 and abs(r["acc_shuffle_full"] - 0.25) < 0.07
    # low-variance structure: the type lives in one weak direction, 10 noisy strong ones
    Xw = rng.standard_normal((n, d))
    Xw[:, :10] *= 6.0
    Xw[:, 20] += 1.5 * (y - 1.5)
    rw = pr.evaluate_probes(Xw, y, sp, n_pc=3)
    assert rw["acc_full"] > 0.6  # the full probe reads the weak direction
    assert rw["acc_pc"] < 0.4  # the top-PC probe does not: low-dimensional claim is stricter


def test_probe_fits_on_train_only():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((100, 8))
    y = rng.integers(0, 3, 100)
    sp = pr.split_by_prompt(np.arange(100), 0.3, seed=0)
    p1 = pr.fit_probe(X[sp.train], y[sp.train], "pca", 2)
    X2 = X.copy()
    X2[sp.test] += 1000.0  # changing test rows must not change the fitted probe
    p2 = pr.fit_probe(X2[sp.train], y[sp.train], "pca", 2)
    np.testing.assert_array_equal(p1.projection, p2.projection)
    # the top-PC feature map is the package's one PCA, fitted on the training rows
    from mechinterp_icr.interp.taskvec import pca

    np.testing.assert_array_equal(p1.projection, pca(X[sp.train], 2).components_.T)
    with pytest.raises(ConfigError, match="kind"):
        pr.fit_probe(X, y, "umap")


def test_probe_layers_and_choice_and_ci():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 400)
    V = rng.standard_normal((400, 3, 6))
    V[:, 2, 0] += 5 * y  # only boundary 2 encodes the type
    sp = pr.split_by_prompt(np.arange(400), 0.3, 0.2, seed=0)
    rows = pr.probe_layers(V, y, sp, ["a", "b", "c"], n_pc=2, on="dev", controls=False)
    assert pr.choose_boundary(rows) == 2
    lo, hi = pr.wilson_ci(95, 100)
    assert 0.88 < lo < 0.95 < hi < 0.99


def test_stratified_split_keeps_label_proportions_and_unbiases_the_shuffle_control():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 4, 1000)
    ids = np.arange(1000)
    sp = pr.split_by_prompt(ids, 0.25, 0.25, seed=1, stratify=y)
    pr.check_no_leak(sp, ids)
    for part in (sp.train, sp.dev, sp.test):
        frac = np.bincount(y[part], minlength=4) / len(part)
        np.testing.assert_allclose(frac, np.bincount(y, minlength=4) / 1000, atol=0.01)
    # four tight clusters: the shuffle control averages to chance on a stratified split
    X = 10.0 * np.eye(4)[y] + 0.1 * rng.standard_normal((1000, 4))
    accs = [pr.probe_accuracy(X, y, pr.split_by_prompt(ids, 0.5, seed=s, stratify=y), "pca",
                              3, seed=s, shuffle_labels=True, n_shuffles=8) for s in range(6)]
    assert abs(np.mean(accs) - 0.25) < 0.05
    with pytest.raises(ConfigError, match="one label per prompt"):
        pr.split_by_prompt(np.array([0, 0, 1, 2]), 0.3, stratify=np.array([0, 1, 1, 1]))
