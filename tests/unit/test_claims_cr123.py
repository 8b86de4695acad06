"""CR-1, CR-2, CR-3 on the claim protocol: the verdict code fed numbers in which the rule is met
(holds), a negative control shows the effect (not holds) or the rule is unmet (does not hold);
plus the pieces those claims rest on (the K condition, the finetuning K range, mixed-type
demos, the ICL+Grm grammar placement)."""

import numpy as np
import pytest

from mechinterp_icr.claims import HOLDS, INCONCLUSIVE, NOT_HOLD, spec
from mechinterp_icr.experiments.cr.claims import cr123_from_metrics, cr123_seed_metrics
from mechinterp_icr.experiments.cr.evaluate import max_drop_over_k
from mechinterp_icr.tasks.cr import CRTaskConfig

KS = (1, 2, 3, 4, 5, 6, 7, 8)
K = 4
TASK = {"bayes_ceiling_pt": 0.97, "tv_transition": 0.8}


def _icl(exact, type_=None, best_type=None, ks=KS):
    """Held-out and finetune ICL rows; ``exact`` a number or a K -> number map."""
    by_k = exact if isinstance(exact, dict) else {k: exact for k in ks}
    rows = []
    for split in ("heldout", "finetune"):
        for k in ks:
            e = by_k[k]
            rows.append({"split": split, "format": "icl", "K": k, "exact": e,
                         "type": e if type_ is None else type_, "restricted": e, "typed": e,
                         "restricted_type": e if best_type is None else best_type})
            rows.append({"split": split, "format": "iclgrm", "K": k, "exact": e,
                         "type": e, "restricted": e, "typed": e, "restricted_type": e})
    return rows


def _pt(typed=0.99, restricted=0.95, exact=0.95):
    return [{"split": sp, "format": "pt", "K": None, "exact": exact, "type": 0.97,
             "restricted": restricted, "typed": typed, "restricted_type": 0.97}
            for sp in ("heldout", "finetune")]


def _phases(pt_typed=0.99, pt_icl=0.1, pt_best_type=0.25, ft_icl=0.95, ft_best_type=0.99,
            grm_icl=0.85, mixed_icl=0.25, mixed_grm_best_type=0.26):
    return {
        "pretrain": _pt(pt_typed) + _icl(pt_icl, best_type=pt_best_type),
        "ft-icl": _pt() + _icl(ft_icl, best_type=ft_best_type),
        "ft-iclgrm": _pt() + _icl(grm_icl),
        "ft-icl-mixed": _pt() + _icl(mixed_icl, best_type=0.25),
        "ft-iclgrm-mixed": _pt() + _icl(0.2, best_type=mixed_grm_best_type),
    }


def _claims(seeds=(0, 1, 2, 3, 4), **kw):
    """Verdicts of CR-1..3 when every seed has the phases of ``_phases(**kw)``; a value of
    ``kw`` that is a list gives one number per seed."""
    per = {}
    for i, s in enumerate(seeds):
        args = {k: (v[i] if isinstance(v, list) else v) for k, v in kw.items()}
        per[str(s)] = cr123_seed_metrics(_phases(**args), TASK, K, KS, 4)
    claims = cr123_from_metrics(*[{s: m[c] for s, m in per.items()}
                                  for c in ("CR-1", "CR-2", "CR-3")])
    return {c.id: c.to_dict() for c in claims}


def test_good_numbers_hold():
    d = _claims()
    assert {c: d[c]["verdict"] for c in d} == {"CR-1": HOLDS, "CR-2": HOLDS, "CR-3": HOLDS}
    assert all(d[c]["holds"] for c in d)
    assert [k["name"] for k in d["CR-2"]["controls"]] == [
        "PT-only model", "finetuned on mixed-type demos"]
    assert d["CR-2"]["per_seed"]["0"]["max_drop_over_k"] == 0.0


# ---- CR-1 ------------------------------------------------------------------------------------
def test_cr1_control_showing_no_type_inference_after_finetuning_is_not_holds():
    # the ICL-finetuned model's best attribute guess has the right type at chance: the type
    # bound cannot tell a model that infers the type from one that does not
    d = _claims(ft_best_type=[0.99, 0.99, 0.27, 0.99, 0.99])["CR-1"]
    assert d["verdict"] == INCONCLUSIVE and not d["holds"]
    assert "ICL-finetuned model" in d["verdict_reason"]


@pytest.mark.parametrize("kw", [{"pt_best_type": [0.25, 0.25, 0.32, 0.35, 0.35]},
                                {"pt_typed": [0.99, 0.99, 0.94, 0.99, 0.99]}])
def test_cr1_rule_unmet_does_not_hold(kw):
    assert _claims(**kw)["CR-1"]["verdict"] == NOT_HOLD


def test_cr1_type_bound_is_on_the_seed_mean():
    """2026-12-05 (machine noise): the type bound reads the mean over seeds, so one seed over
    the bound by less than the others are under it does not decide."""
    assert _claims(pt_best_type=[0.25, 0.25, 0.25, 0.25, 0.31])["CR-1"]["verdict"] == HOLDS


# ---- CR-2 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,name", [
    ({"mixed_icl": [0.25, 0.25, 0.6, 0.25, 0.25]}, "mixed-type"),
    ({"pt_icl": [0.1, 0.1, 0.1, 0.55, 0.1]}, "PT-only"),
])
def test_cr2_negative_control_showing_the_effect_is_not_holds(kw, name):
    d = _claims(**kw)["CR-2"]
    assert d["verdict"] == INCONCLUSIVE and not d["holds"]
    assert name in d["verdict_reason"]


def test_cr2_one_noisy_seed_does_not_decide():
    """SPEC (revised 2026-12-05): the every-seed largest drop was a maximum over seven noisy
    differences per seed and flipped between two machines on one seed (0.0112 vs 0.0254); the
    seed-mean curve's drop is the rule, per-seed drops are reported."""
    dip = {k: (0.97 if k <= 6 else 0.9446) for k in KS}  # one seed drops by 0.0254
    d = _claims(ft_icl=[0.95, 0.95, 0.95, 0.95, dip])["CR-2"]
    assert d["verdict"] == HOLDS
    assert d["per_seed"]["4"]["max_drop_over_k"] == pytest.approx(0.0254)
    assert d["pooled"]["mean_curve_max_drop_over_k"] == pytest.approx(0.0254 / 5)


def test_cr2_rule_unmet_does_not_hold():
    # the mean misses 0.90
    assert _claims(ft_icl=0.85)["CR-2"]["verdict"] == NOT_HOLD
    # the seed-mean curve falls by 0.03 from K = 6 to K = 7 (0.05 on three seeds)
    dip = {k: (0.97 if k <= 6 else 0.92) for k in KS}
    d = _claims(ft_icl=[dip, dip, dip, 0.95, 0.95])["CR-2"]
    assert d["verdict"] == NOT_HOLD and "mean_curve_max_drop_over_k" in d["verdict_reason"]
    assert d["pooled"]["mean_curve_max_drop_over_k"] == pytest.approx(0.03)
    assert d["per_seed"]["2"]["max_drop_over_k"] == pytest.approx(0.05)  # reported per seed
    # a drop at K = 1 -> 2 is outside the condition (from K = 2 up)
    low1 = {k: (1.0 if k == 1 else 0.95) for k in KS}
    assert _claims(ft_icl=low1)["CR-2"]["verdict"] == HOLDS


# ---- CR-3 ------------------------------------------------------------------------------------
def test_cr3_mixed_type_control_inferring_the_type_is_not_holds():
    # one seed that infers the type is enough, whatever the others (a mean of 0.298 would
    # hide it: why this control reads every seed)
    d = _claims(mixed_grm_best_type=[0.26, 0.26, 0.26, 0.45, 0.26])["CR-3"]
    assert d["verdict"] == INCONCLUSIVE and not d["holds"]
    c = d["controls"][0]
    assert c["meets_rule"] is True and c["as_expected"] is False


def test_cr3_rule_unmet_does_not_hold():
    d = _claims(grm_icl=[0.9, 0.9, 0.5, 0.6, 0.9])["CR-3"]  # mean 0.76
    assert d["verdict"] == NOT_HOLD
    assert d["mean"] == pytest.approx(0.76)


def test_cr3_uses_the_registered_threshold_and_mean_rule():
    c = spec("CR-3").headline
    assert (c.metric, c.op, c.threshold, c.rule) == ("heldout_icl_exact", ">=", 0.80, "mean")
    # the mixed-type control: its type of the best attribute guess minus 1/L + 0.05 (the
    # registered bound, claims.derive.type_bound_derive) above 0
    ctrl = spec("CR-3").controls[0].condition
    assert (ctrl.metric, ctrl.op, ctrl.threshold, ctrl.rule) == (
        "mixed_heldout_icl_type_over_bound", ">", 0.0, "every_seed")
    per = {"0": {"mixed_heldout_icl_best_attr_type": 0.31}}
    derived = spec("CR-3").derive("CR-3", per)[0]["0"]
    assert derived["mixed_heldout_icl_type_bound"] == pytest.approx(0.30)
    assert spec("CR-2").hyperparameters["task.max_demos"] == 8


def test_missing_control_branch_is_not_evidence():
    phases = _phases()
    del phases["ft-icl-mixed"], phases["ft-iclgrm-mixed"]
    m = cr123_seed_metrics(phases, TASK, K, KS, 4)
    five = [{str(s): m[c] for s in range(5)} for c in ("CR-1", "CR-2", "CR-3")]
    d = {c.id: c.to_dict() for c in cr123_from_metrics(*five)}
    assert d["CR-1"]["verdict"] == HOLDS
    assert d["CR-2"]["verdict"] == INCONCLUSIVE and d["CR-3"]["verdict"] == INCONCLUSIVE
    assert "not measured" in d["CR-3"]["verdict_reason"]


# ---- the pieces --------------------------------------------------------------------------------
def test_max_drop_over_k():
    assert max_drop_over_k({1: 0.2, 2: 0.9, 3: 0.95, 4: 0.99}) == 0.0
    assert max_drop_over_k({2: 0.9, 3: 0.8, 4: 0.85, 5: 0.7}) == pytest.approx(0.15)
    assert max_drop_over_k({1: 1.0, 2: 0.5}) != max_drop_over_k({1: 1.0, 2: 0.5}, k_from=1)
    assert np.isnan(max_drop_over_k({2: 0.5}))


def test_finetune_batches_draw_k_from_the_registered_range():
    task = CRTaskConfig().build(0)
    assert task.cfg.finetune_ks == (1, task.cfg.max_demos)
    ks = {task.sample_finetune(np.random.default_rng(i), 4).meta["K"] for i in range(60)}
    assert ks == set(range(1, task.cfg.max_demos + 1))
    fixed = CRTaskConfig(finetune_k_min=4, finetune_k_max=4).build(0)
    assert {fixed.sample_finetune(np.random.default_rng(i), 4).meta["K"]
            for i in range(10)} == {4}
    with pytest.raises(Exception, match="task.finetune_k_min"):
        CRTaskConfig(finetune_k_min=6, finetune_k_max=5)


def test_mixed_type_demos_share_no_type():
    task = CRTaskConfig().build(0)
    b = task.sample_icl(np.random.default_rng(0), 400, K=4, mixed_types=True)
    types = task.attr_type_of_id(b.tokens.numpy())
    per_row = [set(t[t >= 0].tolist()) for t in types]
    assert np.mean([len(s) > 1 for s in per_row]) > 0.9
    # the query's type is independent of the demos': it matches the first demo at chance
    first = np.array([t[t >= 0][0] for t in types])
    assert abs(np.mean(first == b.meta["type"].numpy()) - 0.25) < 0.08


@pytest.mark.parametrize("pt_order", ["gsa", "sga"])
def test_iclgrm_puts_the_grammar_between_subject_and_attribute_whatever_the_pt_order(
        pt_order):
    task = CRTaskConfig(order=pt_order, iclgrm_len_min=1).build(0)
    b = task.sample_icl(np.random.default_rng(0), 16, K=3, grammar=True)
    tok = b.tokens.numpy()
    is_s, is_g = np.isin(tok, task.subject_ids), np.isin(tok, task.grammar_ids)
    for i in range(16):
        for p in np.nonzero(is_s[i])[0]:
            assert is_g[i, p + 1]  # s g.. a: a subject is followed by grammar
    other = CRTaskConfig(order=pt_order, iclgrm_order="gsa").build(0)
    b = other.sample_icl(np.random.default_rng(0), 16, K=3, grammar=True)
    tok = b.tokens.numpy()
    assert np.isin(tok[:, 1], other.grammar_ids).all()  # g.. s a: grammar first


def test_heldout_icl_by_k_uses_the_same_prompts_at_every_k():
    from mechinterp_icr.experiments.cr.evaluate import nested_prompts

    task = CRTaskConfig().build(0)
    p = nested_prompts(task, [0, 310], task.heldout_subjects, 8, 64)
    assert p["demo_subjects"].shape == (64, 8)
    held = set(task.heldout_subjects.tolist())
    for row, q in zip(p["demo_subjects"], p["query_subjects"]):
        assert len(set(row.tolist()) | {int(q)}) == 9 and set(row.tolist()) <= held
    prompts = {}
    for K in (2, 5):
        b = task.sample_icl(np.random.default_rng(K), 64, K=K, subjects=task.heldout_subjects,
                            types=p["types"], query_subjects=p["query_subjects"],
                            demo_subjects=p["demo_subjects"][:, :K])
        prompts[K] = b
        assert np.array_equal(b.meta["answer"].numpy(),
                              task.answer_id(p["query_subjects"], p["types"]))
    # the K = 5 prompt extends the K = 2 prompt's demos
    assert np.array_equal(prompts[5].meta["demo_subjects"][:, :2].numpy(),
                          prompts[2].meta["demo_subjects"].numpy())


@pytest.mark.parametrize("profile", ["quick", "paper"])
def test_profiles_use_the_registered_cr123_hyperparameters(profile):
    from mechinterp_icr.config import to_dict
    from mechinterp_icr.experiments.cr.config import profile as cr_profile

    cfg = to_dict(cr_profile(profile))
    for cid in ("CR-1", "CR-2", "CR-3"):
        for key, value in spec(cid).hyperparameters.items():
            node = cfg
            for part in key.split("."):
                node = node[part]
            got = tuple(node) if isinstance(node, list) else node
            assert got == value, (cid, key, got, value)
