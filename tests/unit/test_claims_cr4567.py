"""CR-4 .. CR-7 on the claim protocol: the verdict code fed numbers in which the rule is met
(holds), a negative control shows the effect or a positive control misses it (not holds), or
the rule is unmet (does not hold); plus the measurement pieces those claims rest on (the
trend of eta^2, the continuous-probe onset, the role margins)."""

import math

import numpy as np
import pytest

from mechinterp_icr.claims import HOLDS, INCONCLUSIVE, NOT_HOLD, spec
from mechinterp_icr.experiments.cr.claims import cr4_claim_from_metrics
from mechinterp_icr.experiments.cr.config import TaskvecConfig

SEEDS = ("0", "1", "2", "3", "4")


# ------------------------------------------------------------------------------------------
# CR-4
# ------------------------------------------------------------------------------------------
def _cr4_seed(**kw):
    m = {"hook": "blocks.1.hook_resid_mid", "ft_acc_pc": 0.99, "ft_transfer_acc_pc": 0.97,
         "ft_rho_k": 0.94, "ft_rise_k": 0.2, "ft_rho_lam": 1.0, "ft_rise_lam": 0.3,
         "ft_patch_success": 0.9, "ft_output_type_acc": 0.98, "pt_acc_pc": 0.3,
         "pt_rise_k": 0.01, "pt_patch_success": 0.05, "ft_shuffle_gap": 0.01,
         "ft_random_patch_success": 0.0, "ft_pc_minus_random": 0.5, "ft_n_k": 6, "n_lam": 4}
    m.update(kw)
    return m


def _cr4(**kw):
    """The CR-4 verdict when every seed has ``_cr4_seed(**kw)``; a list value gives one number
    per seed."""
    per = {s: _cr4_seed(**{k: (v[i] if isinstance(v, list) else v) for k, v in kw.items()})
           for i, s in enumerate(SEEDS)}
    return cr4_claim_from_metrics(per, TaskvecConfig()).to_dict()


def test_cr4_holds_with_good_numbers():
    c = _cr4()
    assert c["verdict"] == HOLDS and c["holds"] is True, c["verdict_reason"]
    assert {x["name"] for x in c["controls"]} == {x.name for x in spec("CR-4").controls}
    assert all(x["as_expected"] for x in c["controls"])
    assert "output-type accuracy" in c["notes"] and "hook_resid_mid" in c["notes"]


@pytest.mark.parametrize("kw,control", [
    ({"pt_acc_pc": [0.3, 0.3, 0.7, 0.3, 0.3]}, "PT-only probe"),
    ({"pt_rise_k": 0.15}, "PT-only eta^2 rise over K"),
    ({"pt_patch_success": 0.5}, "PT-only patch"),
    ({"ft_shuffle_gap": [0.0, 0.0, 0.0, 0.0, 0.09]}, "label shuffle (distance from chance)"),
    ({"ft_random_patch_success": 0.3}, "norm-matched random vector patch"),
    ({"ft_pc_minus_random": [0.5, 0.5, 0.1, 0.5, 0.5]},
     "3 random directions (top-PC probe minus random)"),
])
def test_cr4_a_negative_control_showing_the_effect_keeps_it_from_holding(kw, control):
    c = _cr4(**kw)
    assert c["verdict"] == INCONCLUSIVE and c["holds"] is False
    bad = [x for x in c["controls"] if not x["as_expected"]]
    assert [x["name"] for x in bad] == [control] and bad[0]["meets_rule"] is True
    assert control in c["verdict_reason"]


@pytest.mark.parametrize("kw", [
    {"ft_acc_pc": [0.99, 0.99, 0.99, 0.99, 0.90]},  # one seed below 0.95
    {"ft_transfer_acc_pc": 0.85},
    {"ft_rho_k": 0.7},
    {"ft_rise_k": 0.05},  # monotone but flat
    {"ft_rho_lam": [1.0, 1.0, 0.4, 1.0, 1.0]},
    {"ft_rise_lam": 0.02},
    {"ft_patch_success": 0.6},
    {"ft_n_k": 4},  # fewer than 6 values of K
    {"n_lam": 3},  # fewer than 4 values of lam
])
def test_cr4_rule_unmet_does_not_hold(kw):
    c = _cr4(**kw)
    assert c["verdict"] == NOT_HOLD and c["holds"] is False


def test_cr4_a_seed_without_a_lam_sweep_does_not_hold():
    per = {s: _cr4_seed() for s in SEEDS}
    for k in ("ft_rho_lam", "ft_rise_lam", "n_lam"):
        del per["4"][k]
    c = cr4_claim_from_metrics(per, TaskvecConfig()).to_dict()
    assert c["verdict"] == NOT_HOLD


def test_cr4_trend_is_rank_correlation_and_end_to_end_rise():
    from mechinterp_icr.experiments.cr.claims import _trend

    rho, rise = _trend([1, 2, 3, 4, 6, 8], [0.1, 0.2, 0.25, 0.3, 0.35, 0.4])
    assert rho == pytest.approx(1.0) and rise == pytest.approx(0.3)
    rho, rise = _trend([8, 1, 2], [0.4, 0.1, 0.5])  # sorted by x first
    assert rise == pytest.approx(0.3) and rho == pytest.approx(0.5)
    assert all(math.isnan(v) for v in _trend([1], [0.2]))
    assert np.isnan(_trend([1, 2], [0.2, 0.2])[0])  # constant: no correlation


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


@pytest.mark.parametrize("kw,control", [
    ({"pt_rel": [0.0, 0.0, 0.0, 0.3, 0.0]}, "Relation role in the PT-only model"),
    ({"same_q": 0.1}, "Subject head patched from other demo subjects, same query subject"),
    ({"con_rel": [1.0, 1.0, 0.8, 1.0, 1.0]}, "role code on the ICL construction (Relation)"),
    ({"con_sub": 0.5}, "role code on the ICL construction (Subject)"),
])
def test_cr5_a_misbehaving_control_keeps_it_from_holding(kw, control):
    c = _cr5(**kw)
    assert c["verdict"] == INCONCLUSIVE
    assert [x["name"] for x in c["controls"] if not x["as_expected"]] == [control]


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


# ------------------------------------------------------------------------------------------
# CR-7
# ------------------------------------------------------------------------------------------
def _cr7(ov3=1.0, ov6=1.0, p_ov=1.0, p_kq=1.0):
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {}
    for i, s in enumerate(SEEDS):
        v = [x[i] if isinstance(x, list) else x for x in (ov3, ov6, p_ov, p_kq)]
        per[s] = {"ov_first_lr_3e-3": v[0], "ov_first_lr_6e-3": v[1],
                  "placebo_ov_first": v[2], "placebo_kq_first": v[3]}
    return cr7_claim_from_metrics(per).to_dict()


def test_cr7_verdicts():
    assert _cr7()["verdict"] == HOLDS
    assert _cr7(ov3=[1, 1, 1, 1, 0])["verdict"] == HOLDS  # 4 of 5 seeds
    assert _cr7(ov6=[1, 1, 1, 0, 0])["verdict"] == NOT_HOLD  # 3 of 5 at one lr
    assert _cr7(ov3=0.0)["verdict"] == NOT_HOLD
    # the placebo misread on one seed: the probe code cannot be trusted
    assert _cr7(p_kq=[1, 1, 1, 1, 0])["verdict"] == INCONCLUSIVE
    assert _cr7(p_ov=0.0)["verdict"] == INCONCLUSIVE


def test_lr_names_match_the_registry():
    from mechinterp_icr.experiments.cr.claims_mech import lr_name

    assert [lr_name(x) for x in (3e-3, 6e-3, 1e-2)] == ["3e-3", "6e-3", "1e-2"]
    assert {c.metric for c in spec("CR-7").conditions} == {"ov_first_lr_3e-3",
                                                           "ov_first_lr_6e-3"}


def test_onset_is_measured_against_the_plateau_and_continuous():
    from mechinterp_icr.interp.cascade import onset_step

    steps = list(range(20))
    # a probe that overshoots then settles: 10% of the plateau gain (1.0), not of the peak
    v = [0, 0.05, 0.12, 0.5, 2.0, 1.5] + [1.0] * 14
    assert onset_step(steps, v) == 2
    assert math.isnan(onset_step(steps, [0.3] * 20))  # no rise
    assert math.isnan(onset_step(steps, np.linspace(1, 0, 20)))  # falls


def test_placebo_schedules_are_read_in_their_order():
    from mechinterp_icr.interp.cascade import placebo_orders
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)
    batch = task.sample_icl(np.random.default_rng(0), 16, subjects=task.heldout_subjects)
    r = placebo_orders(task, batch, 11)
    assert r["placebo_ov_first"] == 1.0 and r["placebo_kq_first"] == 1.0
    ov, kq = r["schedules"]["ov_first"]["ov"], r["schedules"]["ov_first"]["kq"]
    assert ov[0] < ov[1] < ov[2] < ov[-1] and ov[-1] > 1  # rises gradually, then plateaus
    assert kq[-1] > 0.9
