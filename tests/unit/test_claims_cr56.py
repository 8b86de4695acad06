"""CR-5 and CR-6 on the claim protocol: the verdict code fed numbers in which the rule is met
(holds), a negative control shows the effect or a positive control misses it (not holds), or
the rule is unmet (does not hold); plus the role margins they rest on. CR-4, CR-8 and CR-9
are in ``test_claims_cr489.py``, CR-7 in ``test_claims_cr7.py``."""


import pytest

from mechinterp_icr.claims import HOLDS, INCONCLUSIVE, NOT_HOLD

SEEDS = ("0", "1", "2", "3", "4")


# ------------------------------------------------------------------------------------------
# CR-5
# ------------------------------------------------------------------------------------------
def _cr5_mech(rel=0.8, sub=0.8, rel_other=0.05, sub_other=0.02, pt_rel=0.02, same_q=0.01,
              con_rel=1.0, con_sub=1.0, distinct=True):
    def roles(r, s, ro, so, d=True):
        return {"relation_head": "L0H0", "subject_head": "L0H1" if d else "L0H0",
                "relation_score": r, "subject_score": s, "relation_other": ro,
                "subject_other": so, "relation_margin": r / max(ro, 0.05),
                "subject_margin": s / max(so, 0.05), "distinct": d,
                "recovery": {"relation_score": r, "subject_score": s}}
    return {"ft": roles(rel, sub, rel_other, sub_other, distinct),
            "pt": roles(pt_rel, 0.5, 0.0, 0.0), "construction": roles(con_rel, con_sub, 0, 0),
            "subject_same_query_changed": same_q, "icl_heldout_exact": 0.9}


def _cr5(**kw):
    from mechinterp_icr.experiments.cr.claims_mech import cr5_claim

    mech = {int(s): _cr5_mech(**{k: (v[i] if isinstance(v, list) else v)
                                 for k, v in kw.items()}) for i, s in enumerate(SEEDS)}
    return cr5_claim(mech, {}, None).to_dict()


def test_cr5_holds_with_good_numbers():
    c = _cr5()
    assert c["verdict"] == HOLDS, c["verdict_reason"]
    assert {x["kind"] for x in c["controls"]} == {"negative", "positive"}


SAME_Q = "Subject head patched from other demo subjects, same query subject"


@pytest.mark.parametrize("kw,control", [
    # SPEC (revised 2026-12-05): <= 0.05 pooled over seeds, <= 0.10 on every seed
    ({"same_q": 0.06}, f"{SAME_Q} (pooled over seeds)"),
    ({"same_q": [0.0, 0.0, 0.0, 0.0, 0.12]}, f"{SAME_Q} (every seed)"),
    ({"con_rel": [1.0, 1.0, 0.8, 1.0, 1.0]}, "role code on the ICL construction (Relation)"),
    ({"con_sub": 0.5}, "role code on the ICL construction (Subject)"),
])
def test_cr5_a_misbehaving_control_keeps_it_from_holding(kw, control):
    c = _cr5(**kw)
    assert c["verdict"] == INCONCLUSIVE
    assert [x["name"] for x in c["controls"] if not x["as_expected"]] == [control]


def test_cr5_one_seed_level_impurity_is_reported_not_deciding():
    """A rare seed-level impurity (0.082 on one of ten seeds, as measured) is below the
    every-seed bound 0.10 and leaves the pooled rate under 0.05; and the PT-only model's
    Relation role is reported, not a control (it fails for an unrelated reason: the PT model
    does no ICL)."""
    assert _cr5(same_q=[0.0, 0.0, 0.0, 0.0, 0.082])["verdict"] == HOLDS
    c = _cr5(pt_rel=[0.0, 0.0, 0.0, 0.3, 0.0])
    assert c["verdict"] == HOLDS and c["per_seed"]["3"]["pt_relation_role"] == 0.3


@pytest.mark.parametrize("kw", [
    {"sub": [0.8, 0.8, 0.8, 0.45, 0.8]},  # one seed's Subject role below 0.5
    {"rel": 0.4},
    {"sub_other": 0.5},  # the other head does 0.5 of the Subject role: margin 1.6 < 2
    {"rel_other": [0.05, 0.05, 0.05, 0.05, 0.45]},
    {"distinct": False},  # one head takes both roles
])
def test_cr5_rule_unmet_does_not_hold(kw):
    assert _cr5(**kw)["verdict"] == NOT_HOLD


def test_role_margins_guard_a_near_zero_denominator():
    from mechinterp_icr.interp.roles import role_margins

    heads = [{"head": "L0H0", "type_moved_gain": 0.8, "subject_moved_gain": -0.02},
             {"head": "L0H1", "type_moved_gain": 0.001, "subject_moved_gain": 0.7}]
    m = role_margins({"heads": heads}, "moved_gain")
    assert m["relation_head"] == "L0H0" and m["subject_head"] == "L0H1" and m["distinct"]
    assert m["relation_margin"] == pytest.approx(0.8 / 0.05)
    assert m["subject_margin"] == pytest.approx(0.7 / 0.05)  # negative other: the floor
    heads[1]["type_moved_gain"] = 0.5
    assert role_margins({"heads": heads}, "moved_gain")["relation_margin"] == pytest.approx(1.6)


# ------------------------------------------------------------------------------------------
# CR-6
# ------------------------------------------------------------------------------------------
def _cr6(own=1.0, pt_icl=0.0, zeroed=0.0):
    from mechinterp_icr.experiments.cr.claims_mech import cr6_claim

    per = {int(s): {"own_format_min": own, "pt_construction_icl_heldout_exact": pt_icl,
                    "zeroed_relation_ov_icl_exact": zeroed} for s in SEEDS}
    return cr6_claim(per, None).to_dict()


def test_cr6_verdicts():
    assert _cr6()["verdict"] == HOLDS
    assert _cr6(zeroed=0.9)["verdict"] == INCONCLUSIVE  # the zeroed construction still works
    assert _cr6(own=0.95)["verdict"] == NOT_HOLD
    assert _cr6(pt_icl=0.3)["verdict"] == NOT_HOLD


def test_cr6_zeroed_relation_ov_breaks_the_icl_construction():
    from mechinterp_icr.experiments.cr.mechanism import construction_numbers
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)
    r = construction_numbers(task, 0)
    assert r["own_format_min"] >= 0.99 and r["zeroed_relation_ov_icl_exact"] <= 0.5


def test_cr6_ties_are_shared_not_won_by_the_lowest_id():
    """A logit row with the answer among n tokens tied at the top scores 1/n (argmax would
    pick the lowest tied id, e.g. [PAD]); restricted accuracy shares ties the same way."""
    import torch

    from mechinterp_icr.models.construction import tie_aware_scores
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)
    lg = torch.full((2, task.d_vocab), -1.0)
    a = task.attr_base
    lg[0, :4] = 0.0  # [PAD], [BOS], [SEP], a subject tied at the top...
    lg[0, a + 1] = 0.0  # ...with the answer: 5 tokens tied
    lg[1, a + 2] = 3.0  # a clean argmax, not the answer
    sc = tie_aware_scores(task, lg, torch.tensor([a + 1, a + 1]))
    assert sc["exact_argmax"].tolist() == [0.0, 0.0]  # argmax picks [PAD] on row 0
    assert sc["exact"].tolist() == pytest.approx([0.2, 0.0])
    assert sc["n_top"].tolist() == [5.0, 1.0]
    assert sc["restricted"].tolist() == pytest.approx([1.0, 0.0])  # only the answer among attrs


def test_mechanism_pt_weight_decay_reaches_the_optimizer():
    """``cascade.pt_weight_decay`` (registered for CR-5 / CR-7) is the PT's AdamW decay: the
    same seed and data with a large decay end with smaller attention weights, and the frozen
    embeddings are untouched by it."""
    from dataclasses import replace

    import torch
    from helpers import CR_TINY

    from mechinterp_icr.config import apply_overrides
    from mechinterp_icr.experiments import cr
    from mechinterp_icr.experiments.cr.mechanism_model import train_mechanism_model

    torch.set_num_threads(1)
    cfg = apply_overrides(cr.profile("quick"), CR_TINY)
    task = cfg.task.build(0)
    norms, embeds = {}, {}
    for wd in (0.0, 5.0):
        cc = replace(cfg.cascade, pt_steps=20, pt_weight_decay=wd, ft_steps=1, ft_lrs=(6e-3,),
                     ft_lr=6e-3, embedding="orthonormal")
        pt, _, _, _ = train_mechanism_model(task, 0, cc, None)
        norms[wd] = float(sum(p.norm() ** 2 for n, p in pt.named_parameters()
                              if n.startswith("blocks.")))
        embeds[wd] = pt.embed.W_E.detach().clone()
    assert norms[5.0] < 0.8 * norms[0.0]
    assert torch.equal(embeds[0.0], embeds[5.0])


def test_mechanism_pt_weight_decay_rejects_bad_values_by_name():
    from mechinterp_icr.config import ConfigError, apply_overrides
    from mechinterp_icr.experiments import cr

    for bad in ("-0.1", "11", "nan"):
        with pytest.raises(ConfigError, match=r"cascade\.pt_weight_decay = .* is not allowed"):
            apply_overrides(cr.profile("quick"), [f"cascade.pt_weight_decay={bad}"])
