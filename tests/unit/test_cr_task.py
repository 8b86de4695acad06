"""Property tests of the CR data-generating process (issue 3, "Must show")."""

import numpy as np
import pytest
import torch

from mechinterp_icr.config import ConfigError, apply_overrides
from mechinterp_icr.tasks.base import IGNORE
from mechinterp_icr.tasks.cr import BOS, PAD, ROLES, SEP, CRTaskConfig


def build(seed=0, **kw):
    return CRTaskConfig(**kw).build(seed)


def _tuples_of(task, tokens):
    """Split a sequence into tuples at [SEP] (drops BOS/PAD)."""
    out, cur = [], []
    for t in tokens.tolist():
        if t in (BOS, PAD):
            continue
        if t == SEP:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    return out, cur


def _kind(task, t):
    if t in set(task.subject_ids.tolist()):
        return "s"
    if t in set(task.grammar_ids.tolist()):
        return "g"
    if t in set(task.attr_ids.tolist()):
        return "a"
    return "?"


def test_vocab_blocks_and_decode():
    task = build(n_subjects=8, n_grammar=3, n_types=2, n_values=4, n_demos=2, max_demos=2)
    assert task.vocab.names[:3] == ["[PAD]", "[BOS]", "[SEP]"]
    assert task.decode([task.subject_id(5)]) == "S5"
    assert task.decode([task.grammar_id(2)]) == "G2"
    assert task.decode([task.attr_id(1, 3)]) == "A1_3"
    assert task.attr_id(1, 3) == task.attr_base + 1 * 4 + 3
    assert task.d_vocab == 3 + 8 + 3 + 2 * 4
    assert task.attr_type_of_id(np.array([task.attr_id(1, 0), task.subject_id(0)])).tolist() \
        == [1, -1]


@pytest.mark.parametrize("order", ["sga", "gsa"])
def test_pt_attributes_belong_to_subject_and_type(order):
    task = build(order=order)
    b = task.sample_pt(np.random.default_rng(1), 64)
    n = task.cfg.n_tuples
    for i in range(64):
        tuples, rest = _tuples_of(task, b.tokens[i])
        assert len(tuples) == n and rest == []
        for j, tup in enumerate(tuples):
            kinds = "".join(_kind(task, t) for t in tup)
            k = kinds.count("g")
            assert task.cfg.grammar_len_min <= k <= task.cfg.grammar_len_max
            assert kinds == ("s" + "g" * k + "a" if order == "sga" else "g" * k + "sa")
            s = next(t for t in tup if _kind(task, t) == "s") - task.subject_base
            a = tup[-1]
            l = int(task.attr_type_of_id(a))
            assert l == int(b.meta["type"][i, j])
            assert a == task.attr_id(l, task.kb[s, l])
            # the attribute is the target at attr_pos
            p = int(b.meta["attr_pos"][i, j])
            assert int(b.tokens[i, p + 1]) == a and int(b.targets[i, p]) == a
    # loss only on grammar and attribute targets
    tg = b.targets[b.targets != IGNORE].numpy()
    kinds = {_kind(task, t) for t in np.unique(tg)}
    assert kinds <= {"g", "a"}


@pytest.mark.parametrize("order", ["sga", "gsa"])
def test_icl_shares_one_type_and_has_no_grammar(order):
    task = build(order=order)
    K = 4
    b = task.sample_icl(np.random.default_rng(2), 128, K=K, subjects=task.heldout_subjects)
    assert b.tokens.shape[1] == 3 * K + 2
    assert torch.all(b.meta["query_pos"] == 3 * K + 1)
    g = torch.as_tensor(task.grammar_ids)
    assert not torch.isin(b.tokens, g).any()
    for i in range(128):
        toks = b.tokens[i].numpy()
        attrs = toks[np.isin(toks, task.attr_ids)]
        types = task.attr_type_of_id(attrs)
        assert len(attrs) == K and (types == int(b.meta["type"][i])).all()
        subs = toks[np.isin(toks, task.subject_ids)] - task.subject_base
        assert len(set(subs.tolist())) == K + 1  # distinct
        assert subs[-1] == int(b.meta["query_subject"][i])
        for s, a in zip(subs[:-1], attrs):
            assert a == task.attr_id(types[0], task.kb[s, types[0]])
        assert int(b.meta["answer"][i]) == task.attr_id(types[0], task.kb[subs[-1], types[0]])
    # only the query answer carries loss by default
    assert torch.all((b.targets != IGNORE).sum(1) == 1)
    assert torch.all(b.targets[torch.arange(128), b.meta["query_pos"]] == b.meta["answer"])


@pytest.mark.parametrize("lo,hi", [(1, 2), (0, 2), (0, 0), (2, 3)])
@pytest.mark.parametrize("order", ["sga", "gsa"])
def test_iclgrm_grammar_lengths_in_range(lo, hi, order):
    task = build(order=order, iclgrm_len_min=lo, iclgrm_len_max=hi)
    K = 3
    b = task.sample_icl(np.random.default_rng(3), 200, K=K, grammar=True)
    seen = set()
    for i in range(200):
        tuples, query = _tuples_of(task, b.tokens[i])
        assert len(tuples) == K
        for tup in tuples + [query]:
            k = sum(_kind(task, t) == "g" for t in tup)
            assert lo <= k <= hi
            seen.add(k)
        qp = int(b.meta["query_pos"][i])
        assert int(b.targets[i, qp]) == int(b.meta["answer"][i])
        assert int(b.tokens[i, qp + 1]) == PAD if qp + 1 < b.tokens.shape[1] else True
    assert seen == set(range(lo, hi + 1))


def test_finetune_sequences_use_only_finetune_subjects():
    task = build()
    ft = set(task.finetune_subjects.tolist())
    assert ft.isdisjoint(task.heldout_subjects.tolist())
    assert len(ft) + len(task.heldout_subjects) == task.cfg.n_subjects
    for grammar in (False, True):
        b = task.sample_icl(np.random.default_rng(4), 256, subjects=task.finetune_subjects,
                            grammar=grammar)
        toks = b.tokens.numpy()
        subs = toks[np.isin(toks, task.subject_ids)] - task.subject_base
        assert set(subs.tolist()) <= ft
    b = task.sample_pt(np.random.default_rng(5), 64, subjects=task.heldout_subjects)
    assert set(b.meta["subject"].flatten().tolist()) <= set(task.heldout_subjects.tolist())


def test_lam_zero_gives_identical_chains():
    task = build(lam=0.0)
    assert np.allclose(task.type_trans, task.type_trans[0:1])
    assert np.allclose(task.type_init, task.type_init[0:1])
    assert task.separation()["tv_transition"] == pytest.approx(0.0)
    assert task.bayes_ceiling() == pytest.approx(1 / task.cfg.n_types)
    sep_hi = build(lam=0.9).separation()["tv_transition"]
    sep_mid = build(lam=0.5).separation()["tv_transition"]
    assert 0 < sep_mid < sep_hi
    # rows are distributions
    assert np.allclose(task.type_trans.sum(-1), 1.0)


def test_bayes_ceiling_exact_matches_monte_carlo():
    task = build(lam=0.5, n_grammar=4)
    exact = task.bayes_ceiling(2, 3)
    # brute-force Monte Carlo: sample runs per type and read with the posterior argmax
    rng = np.random.default_rng(0)
    N = 40000
    types = rng.integers(task.cfg.n_types, size=N)
    lens = rng.integers(2, 4, size=N)
    g = task._grammar_runs(rng, lens, types, 3, "type")
    logp = np.log(task.type_init[:, g[:, 0]])
    for j in range(1, 3):
        step = np.log(task.type_trans[:, g[:, j - 1], g[:, j]])
        logp += np.where(j < lens, step, 0.0)
    mc = (logp.argmax(0) == types).mean()
    assert abs(mc - exact) < 0.015
    assert 1 / task.cfg.n_types < exact <= 1.0


def test_same_seed_same_data_and_different_seed_differs():
    a, b = CRTaskConfig().build(7), CRTaskConfig().build(7)
    c = CRTaskConfig().build(8)
    assert np.array_equal(a.kb, b.kb) and not np.array_equal(a.kb, c.kb)
    assert np.array_equal(a.finetune_subjects, b.finetune_subjects)
    for fn in (lambda t, r: t.sample_pt(r, 16), lambda t, r: t.sample_icl(r, 16, grammar=True)):
        x = fn(a, np.random.default_rng(11))
        y = fn(b, np.random.default_rng(11))
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.targets, y.targets)


def test_icl_loss_all_marks_demo_attributes_after_the_first():
    task = build(icl_loss="all")
    b = task.sample_icl(np.random.default_rng(0), 8, K=4)
    assert torch.all((b.targets != IGNORE).sum(1) == 4)  # demos 2..4 + query
    roles = b.meta["roles"]
    assert int((roles == ROLES["query_subject"]).sum()) == 8


@pytest.mark.parametrize("kw,field", [
    ({"lam": 1.5}, "task.lam"),
    ({"lam": -0.1}, "task.lam"),
    ({"n_demos": 40}, "task.n_demos"),
    ({"n_subjects": 8, "n_demos": 4, "max_demos": 4}, "task.n_demos"),
    ({"order": "sag"}, "task.order"),
    ({"iclgrm_chain": "foo"}, "task.iclgrm_chain"),
    ({"grammar_len_min": 3, "grammar_len_max": 2}, "task.grammar_len_max"),
    ({"finetune_fraction": 1.0}, "task.finetune_fraction"),
])
def test_bad_config_is_rejected_naming_the_field(kw, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        CRTaskConfig(**kw)


def test_too_many_demos_and_too_long_context_rejected():
    task = build()
    with pytest.raises(ConfigError, match="K"):
        task.sample_icl(np.random.default_rng(0), 4, K=task.cfg.max_demos + 1)
    small = build(n_subjects=8, n_demos=2, max_demos=3)
    with pytest.raises(ConfigError, match="distinct subjects"):
        small.sample_icl(np.random.default_rng(0), 4, K=3, subjects=np.arange(3))
    from mechinterp_icr.tasks.cr import evaluate_pt

    class M:  # a model whose context is too short: refused before any forward pass
        class cfg:
            n_ctx = 10

    with pytest.raises(ConfigError, match="n_ctx"):
        evaluate_pt(M, task, 0, n=4)


def test_override_path_validates():
    from mechinterp_icr.config import RunConfig

    cfg = RunConfig(task=CRTaskConfig())
    with pytest.raises(ConfigError, match="task.lam"):
        apply_overrides(cfg, ["task.lam=2"])
    with pytest.raises(ConfigError, match="not a known field"):
        apply_overrides(cfg, ["task.nope=2"])
