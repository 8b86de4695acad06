"""Property tests of the CR data-generating process (issue 3, "Must show")."""

import itertools

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


# -- the shared-token variant (task.attr_share; SPEC section 1, CR-8) --------------------------
def _old_attr_id(task, l, v):
    return task.attr_base + np.asarray(l) * task.cfg.n_values + np.asarray(v)


def test_default_value_table_is_the_block_arithmetic():
    task = build()
    L, V = task.cfg.n_types, task.cfg.n_values
    assert task.cfg.attr_share == 0.0 and task.cfg.n_shared_slots == 0
    l, v = np.meshgrid(np.arange(L), np.arange(V), indexing="ij")
    assert np.array_equal(task.value_ids, _old_attr_id(task, l, v))
    assert np.array_equal(task.attr_id(l, v), task.value_ids)
    assert np.array_equal(task.live_attr_ids, task.attr_ids) and not task.shared_slots.any()
    ids = np.arange(-2, task.d_vocab + 3)
    rel = ids - task.attr_base
    old = np.where((rel >= 0) & (rel < L * V), rel // V, -1)
    assert np.array_equal(task.attr_type_of_id(ids), old)
    assert np.array_equal(task.attr_type_of_id(torch.as_tensor(ids)), old)
    for t in range(L):
        assert np.array_equal(task.has_type(ids, t), old == t)


def test_default_numbers_are_bit_identical_to_before_the_variant():
    """Numbers computed before task.attr_share existed (same seeds, same random model)."""
    from mechinterp_icr.config import ModelConfig
    from mechinterp_icr.models.factory import build_model
    from mechinterp_icr.tasks.cr import _scores, evaluate_icl, evaluate_pt

    task = CRTaskConfig().build(3)
    mc = ModelConfig(n_layers=1, n_heads=1, d_model=32, d_head=32, d_mlp=64,
                     d_vocab=task.d_vocab, n_ctx=task.n_ctx)
    m = build_model(mc, seed=5)
    assert evaluate_icl(m, task, 11, n=256, K=3) == {
        "exact": 0.0078125, "type": 0.1484375, "restricted": 0.015625, "typed": 0.078125,
        "restricted_type": 0.23046875}
    assert evaluate_icl(m, task, 12, n=256, K=2, grammar=True) == {
        "exact": 0.00390625, "type": 0.0859375, "restricted": 0.0078125, "typed": 0.0703125,
        "restricted_type": 0.1953125}
    assert evaluate_pt(m, task, 13, n=64) == {
        "exact": 0.015625, "type": 0.07421875, "restricted": 0.0234375, "typed": 0.0546875,
        "restricted_type": 0.24609375}
    g = torch.Generator().manual_seed(1)
    lg = torch.randn(4000, task.d_vocab, generator=g)
    lg[:, task.attr_base:] += 1.5  # so that attribute tokens win the argmax often
    types = torch.randint(0, 4, (4000,), generator=g)
    subj = torch.randint(0, 64, (4000,), generator=g)
    ans = torch.as_tensor(task.answer_id(subj.numpy(), types.numpy()))
    assert {k: int(v.sum()) for k, v in _scores(task, lg, ans, types).items()} == {
        "exact": 51, "type": 932, "restricted": 51, "typed": 217, "restricted_type": 943}
    b = task.sample_icl(np.random.default_rng(0), 64, K=4, grammar=True)
    p = task.sample_pt(np.random.default_rng(0), 64)
    assert (int(b.tokens.sum()), int(b.targets.sum()), int(p.tokens.sum()),
            int(p.targets.sum())) == (78054, 6048, 96800, 86204)


@pytest.mark.parametrize("r", [0.5, 1.0])
def test_shared_value_table(r):
    task = build(attr_share=r)
    L, V = task.cfg.n_types, task.cfg.n_values
    n_sh = round(r * V)
    assert task.cfg.n_shared_slots == n_sh
    assert task.d_vocab == build().d_vocab  # same vocabulary, same model
    assert all(len(set(row.tolist())) == V for row in task.value_ids)  # V distinct per type
    n_types_of = task.type_member.sum(1)
    attr = n_types_of[task.attr_ids]
    assert set(np.unique(n_types_of[task.live_attr_ids]).tolist()) <= {1, 2}
    assert (n_types_of[task.subject_ids] == 0).all() and (n_types_of[task.grammar_ids] == 0).all()
    assert np.array_equal(task.shared_slots.sum(1), np.full(L, n_sh))  # round(r V) / V each
    shared_tok = task.value_ids[task.shared_slots]
    assert (n_types_of[shared_tok] == 2).all()  # a shared token belongs to exactly two types
    assert (n_types_of[task.value_ids[~task.shared_slots]] == 1).all()
    assert (attr == 0).sum() == L * V - len(task.live_attr_ids)  # dead tokens
    assert np.array_equal(task.live_attr_ids, np.flatnonzero(n_types_of))
    # every shared token comes from the lower type's own block
    for l in range(L):
        for v in np.flatnonzero(task.shared_slots[l]):
            t = task.value_ids[l, v]
            home = (t - task.attr_base) // V
            assert home == np.flatnonzero(task.type_member[t]).min()
    # membership tables agree, attr_type_of_id: the type, -2 shared, -1 none
    ids = np.arange(task.d_vocab)
    for l in range(L):
        assert np.array_equal(task.has_type(ids, l), task.type_member[:, l])
        assert np.array_equal(task.has_type(torch.as_tensor(ids), torch.tensor(l)),
                              task.type_member[:, l])
    ty = task.attr_type_of_id(ids)
    assert np.array_equal(ty == -2, n_types_of == 2)
    assert np.array_equal(ty == -1, n_types_of == 0)
    one = n_types_of == 1
    assert np.array_equal(ty[one], task.type_member[one].argmax(1))
    assert not task.has_type(np.array([-1, task.d_vocab]), 0).any()
    # deterministic per seed, different for another seed; the rest of the task is unchanged
    same, other, default = build(attr_share=r), build(seed=1, attr_share=r), build()
    assert np.array_equal(task.value_ids, same.value_ids)
    assert not np.array_equal(task.value_ids, other.value_ids)
    assert np.array_equal(task.kb, default.kb)
    assert np.array_equal(task.heldout_subjects, default.heldout_subjects)


def test_shared_value_table_odd_number_of_types():
    task = build(n_types=5, attr_share=1.0)
    V = task.cfg.n_values
    assert all(len(set(row.tolist())) == V for row in task.value_ids)
    assert (task.shared_slots.sum(1) <= V).all() and (task.shared_slots.sum(1) > 0).all()
    assert (task.type_member.sum(1)[task.value_ids[task.shared_slots]] == 2).all()
    assert (task.type_member.sum(1) <= 2).all()


@pytest.mark.parametrize("r", [0.5, 1.0])
def test_shared_samples_answers_belong_to_their_type(r):
    task = build(attr_share=r)
    p = task.sample_pt(np.random.default_rng(1), 64)
    assert task.has_type(p.meta["answer"], p.meta["type"]).all()
    s, ty = p.meta["subject"].numpy(), p.meta["type"].numpy()
    assert np.array_equal(p.meta["answer"].numpy(), task.value_ids[ty, task.kb[s, ty]])
    b = task.sample_icl(np.random.default_rng(2), 128, K=4, grammar=True)
    assert task.has_type(b.meta["answer"], b.meta["type"]).all()
    toks = b.tokens.numpy()
    demo = toks[np.arange(128)[:, None], b.meta["demo_attr_pos"].numpy() + 1]  # (B, K)
    assert task.has_type(demo, b.meta["type"].numpy()[:, None]).all()
    assert np.isin(demo, task.live_attr_ids).all()


def test_shared_scores_count_a_shared_token_for_both_types():
    from mechinterp_icr.tasks.cr import _scores

    task = build(attr_share=1.0)
    l, v = np.argwhere(task.shared_slots)[0]
    t = int(task.value_ids[l, v])
    other = int(np.flatnonzero(task.type_member[t] & (np.arange(task.cfg.n_types) != l))[0])
    lg = torch.zeros(2, task.d_vocab)
    lg[:, t] = 5.0
    types = torch.tensor([int(l), other])
    ans = torch.tensor([t, t])
    sc = _scores(task, lg, ans, types)
    assert all(bool(sc[k].all()) for k in ("exact", "type", "restricted", "typed",
                                           "restricted_type"))
    nonmember = next(x for x in range(task.cfg.n_types) if not task.type_member[t, x])
    sc = _scores(task, lg[:1], ans[:1], torch.tensor([nonmember]))
    assert not bool(sc["type"][0]) and not bool(sc["restricted_type"][0])


def test_ideal_type_accuracy():
    default = build(iclgrm_query_grammar=False)
    assert default.ideal_type_accuracy(1, n=4000) == 1.0
    task = build(attr_share=1.0)
    acc = [task.ideal_type_accuracy(k, n=4000) for k in (1, 2, 4, 8)]
    assert all(a < b for a, b in zip(acc, acc[1:])) and acc[-1] > 0.99
    assert task.ideal_type_accuracy(3, n=500, seed=4) == task.ideal_type_accuracy(3, n=500,
                                                                                   seed=4)
    # many subjects: the counts of a shared token's two types are nearly equal, so one demo's
    # token leaves a coin flip between them: accuracy 1 - (share of shared slots) / 2
    for r in (0.5, 1.0):
        big = build(n_subjects=20000, n_values=4, attr_share=r)
        share = big.cfg.n_shared_slots / big.cfg.n_values
        assert abs(big.ideal_type_accuracy(1, n=20000) - (1 - share / 2)) < 0.03


def test_ideal_type_accuracy_matches_brute_force_posterior():
    """The knowledge-base reader's exact without-replacement posterior against enumerating
    every K-subset."""
    task = build(n_subjects=12, n_values=3, n_types=2, attr_share=1.0, n_demos=2, max_demos=3)
    subj = task.heldout_subjects
    K, L = 2, 2
    acc = 0.0
    combos = list(itertools.permutations(range(len(subj)), K))
    for l in range(L):
        for c in combos:
            obs = task.answer_id(subj[list(c)], l)
            lik = [sum(np.array_equal(task.answer_id(subj[list(d)], m), obs) for d in combos)
                   for m in range(L)]
            top = [m for m in range(L) if lik[m] == max(lik)]
            acc += (l in top) / len(top)
    exact = acc / (L * len(combos))
    assert abs(task.ideal_type_accuracy(K, n=40000, reader="kb") - exact) < 0.01


def test_generative_reader_is_uniform_over_the_consistent_types():
    """The generative reader (the one the rate is chosen by) knows only which types a token
    belongs to: at K = 1 a shared token leaves two types, a private one one; the knowledge-base
    reader can only do better."""
    task = build(attr_share=1.0)
    assert task.ideal_type_accuracy(1, n=20000) == pytest.approx(0.5, abs=1e-9)
    assert task.ideal_type_accuracy(1, n=20000, reader="kb") > 0.5
    with pytest.raises(ConfigError, match="reader"):
        task.ideal_type_accuracy(1, reader="oracle")


def test_ideal_reader_table():
    from mechinterp_icr.tasks.cr import ideal_reader_table

    rows = ideal_reader_table(CRTaskConfig(attr_share=1.0), [1, 8], seeds=(0, 1), n=2000)
    assert [r["K"] for r in rows] == [1, 8]
    for r in rows:
        assert len(r["per_seed"]) == 2 and r["min"] == min(r["per_seed"])
        assert r["mean"] == pytest.approx(np.mean(r["per_seed"]))


@pytest.mark.parametrize("kw", [{"attr_share": 1.5}, {"attr_share": -0.1},
                                {"attr_share": float("nan")}, {"attr_share": "0.5"},
                                {"n_types": 1, "attr_share": 0.5}])
def test_bad_attr_share_is_rejected_naming_the_field(kw):
    with pytest.raises(ConfigError, match=r"task\.attr_share"):
        CRTaskConfig(**kw)


def test_construction_refuses_the_shared_variant():
    from mechinterp_icr.models.construction import build_construction

    with pytest.raises(ConfigError, match=r"task\.attr_share = 0\.5"):
        build_construction(build(attr_share=0.5), "icl")


def test_lens_answer_reads_the_type_from_membership():
    from mechinterp_icr.interp.lens import _icl_answer

    task = build(attr_share=0.5)
    b = task.sample_icl(np.random.default_rng(0), 256, K=8, subjects=task.heldout_subjects)
    assert torch.equal(_icl_answer(task, b.tokens, b.meta["query_pos"]), b.meta["answer"])
    b1 = task.sample_icl(np.random.default_rng(0), 256, K=1, subjects=task.heldout_subjects)
    with pytest.raises(ValueError, match="belong to types"):
        _icl_answer(task, b1.tokens, b1.meta["query_pos"])
