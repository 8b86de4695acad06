"""IR-1..IR-9 verdicts from numbers (no training): for every claim, good numbers hold, a
negative control that shows the effect (or a positive control that misses it) keeps the claim
from holding, and an unmet rule does not hold."""

import copy
import math

import pytest
from helpers import build_ir5_seed

from mechinterp_icr.claims import spec
from mechinterp_icr.experiments.ir.claims import ir_claims, perturbation_role, ran_to_stop_max
from mechinterp_icr.experiments.ir.config import QUICK

SEEDS = ["0", "1", "2", "3", "4"]

GOOD = {
    "IR-1": {"memory_acc": 1.0, "shuffled_memory_acc": 0.01, "ceiling_step1": 0.999},
    "IR-2": {"step1_argmax_acc": 1.0, "step1_expected_acc": 0.99, "swap_expected_acc": 0.95,
             "step2_expected_acc": 0.999, "saddle_swap_expected_acc": 0.5,
             "zero_data_swap_expected_acc": 0.5},
    "IR-3": {"within_pair_gap": 0.005, "pair_mass_diff": 0.17, "mass_s3": 0.0, "ir2_met": 1.0,
             "large_step_pair_mass_diff": 0.01, "a": 0.2},
    "IR-4": {"saddle_tie_dev_sym": 0.001, "saddle_tie_dev_raw": 0.01, "pgd_escaped": 1.0,
             "no_swap_tie_dev": 0.45, "gd_over_pgd_escape_eps": 3.0,
             "gd_over_pgd_escape_sym_structural": 6.0},
    "IR-5": build_ir5_seed(),  # the stored runs; the rule derives every metric from them
    "IR-6": {"within_pair_gap": 0.01, "pair_mass_diff": 0.1, "mass_s3": 0.03, "ir2_met": 1.0,
             "constructed_rows_met": 1.0, "large_step_pair_mass_diff": 0.01},
    "IR-7": {"within_pair_gap": 0.01, "mass_s3": 0.0, "solved": 1.0,
             "large_step_swap_expected_acc": 0.5},
    "IR-8": {"tok_solved": 1.0, "tok_query_seen_before": 0.0, "tok_induction_row_step1_acc": 0.35,
             "tok_learned_row_step1_acc": 0.995, "tok_head_score_minus_baseline": -0.01,
             "induction_model_score_minus_baseline": 0.7,
             "induction_model_tl_score_minus_baseline": 0.7,
             "posonly": {"induction_row_step1_acc": 0.36, "score_minus_baseline": -0.11}},
    "IR-9": {"ir9_imposed": 1.0, "ir9_final_gap": 0.005, "ir9_frozen_final_gap": 0.05,
             "ir9_placebo_decay_read": 1.0, "ir9_placebo_flat_read": 0.0},
}

# per claim: every control showing the effect (negative) / missing it (positive) on one seed,
# and a rule that is not met
BAD_CONTROLS = [
    ("IR-1", "shuffled_memory_acc", 0.5),
    ("IR-2", "saddle_swap_expected_acc", 0.93),
    ("IR-2", "zero_data_swap_expected_acc", 0.93),
    ("IR-3", "large_step_pair_mass_diff", 0.08),
    ("IR-4", "no_swap_tie_dev", 0.01),
    ("IR-6", "constructed_rows_met", 0.0),
    ("IR-6", "large_step_pair_mass_diff", 0.08),
    ("IR-7", "large_step_swap_expected_acc", 0.93),
    ("IR-8", "induction_model_score_minus_baseline", 0.3),
    ("IR-8", "induction_model_tl_score_minus_baseline", 0.3),
    ("IR-9", "ir9_frozen_final_gap", 0.03),
    ("IR-9", "ir9_placebo_decay_read", 0.0),
    ("IR-9", "ir9_placebo_flat_read", 1.0),
]
BAD_CONTROL = {cid: (k, v) for cid, k, v in BAD_CONTROLS}
UNMET = {
    "IR-1": ("memory_acc", 0.98),
    "IR-2": ("swap_expected_acc", 0.85),
    "IR-3": ("within_pair_gap", 0.026),
    "IR-4": ("saddle_tie_dev_raw", 0.05),
    "IR-6": ("mass_s3", 0.07),
    "IR-7": ("within_pair_gap", 0.031),
    "IR-8": ("tok_head_score_minus_baseline", 0.3),
    "IR-9": ("ir9_final_gap", 0.023),
}


def _per(changes=None, seed="2"):
    per = {cid: {s: copy.deepcopy(m) for s in SEEDS} for cid, m in GOOD.items()}
    for cid, (key, value) in (changes or {}).items():
        per[cid][seed][key] = value
    return per


def _verdicts(per):
    return {c.id: c.to_dict() for c in ir_claims(per, QUICK, None, [])}


def test_good_numbers_hold_for_every_claim():
    out = _verdicts(_per())
    for cid, c in out.items():
        assert c["verdict"] == "holds", (cid, c["verdict_reason"])
        assert c["n_seeds"] == 5 and c["registered"]


def test_every_registered_control_has_a_failing_case():
    for cid in set(GOOD) - {"IR-5"}:  # IR-5's: tests/unit/test_ir5_rule.py
        metrics = {k for c, k, _ in BAD_CONTROLS if c == cid}
        assert {k.condition.metric for k in spec(cid).controls} == metrics, cid


@pytest.mark.parametrize("cid,key,value", BAD_CONTROLS)
def test_a_misbehaving_control_keeps_the_claim_from_holding(cid, key, value):
    c = _verdicts(_per({cid: (key, value)}))[cid]
    assert c["verdict"] == "inconclusive", c["verdict_reason"]
    assert not c["holds"]
    bad = [k for k in c["controls"] if not k["as_expected"]]
    assert bad and all(key in k["condition"] for k in bad)


@pytest.mark.parametrize("cid,key,value", BAD_CONTROLS)
@pytest.mark.parametrize("missing", [None, float("nan")])
def test_an_unmeasured_control_keeps_the_claim_from_holding(cid, key, value, missing):
    c = _verdicts(_per({cid: (key, missing)}))[cid]
    assert c["verdict"] == "inconclusive", c["verdict_reason"]


@pytest.mark.parametrize("cid", sorted(set(GOOD) - {"IR-5"}))
@pytest.mark.parametrize("missing", [None, float("nan")])
def test_a_missing_or_nan_headline_metric_does_not_hold(cid, missing):
    key = spec(cid).headline.metric
    c = _verdicts(_per({cid: (key, missing)}))[cid]
    assert c["verdict"] != "holds", c["verdict_reason"]


@pytest.mark.parametrize("cid", sorted(UNMET))
def test_an_unmet_rule_does_not_hold(cid):
    c = _verdicts(_per({cid: UNMET[cid]}))[cid]
    assert c["verdict"] == "does not hold", c["verdict_reason"]


def test_every_claim_is_built_from_its_registered_conditions_and_controls():
    out = _verdicts(_per())
    for cid, c in out.items():
        s = spec(cid)
        assert [k["name"] for k in c["controls"]] == [k.name for k in s.controls]
        assert len(c["conditions"]) == len(s.conditions)
        for cond in s.conditions:  # every condition's metric is in the per-seed numbers
            assert cond.metric in GOOD[cid] or s.derive is not None


def test_ir5_d_of_n_is_below_n_and_from_the_registered_table():
    from mechinterp_icr.experiments.ir.config import sweep_width
    from mechinterp_icr.experiments.ir.ir5_dn import d_grid

    sc = QUICK.sample_complexity
    assert sc.d_n == sc.n  # every registered n has a registered width
    assert all(d < n for n, d in zip(sc.d_n, sc.d))
    assert all(d in d_grid(n) for n, d in zip(sc.d_n, sc.d))
    assert max(sc.n) / min(sc.n) >= 2 ** 5  # at least 5 doublings
    c = _verdicts(_per())["IR-5"]
    assert c["details"]["d_of_n"] == {str(n): d for n, d in zip(sc.n, sc.d)}
    assert sweep_width(QUICK, 16) == 8  # outside the table (tests' tiny sizes): n // 2


def test_ir8_token_dependent_head_with_an_induction_score_does_not_hold():
    c = _verdicts(_per({"IR-8": ("tok_head_score_minus_baseline", 0.15)}))["IR-8"]
    assert c["verdict"] == "does not hold" and "tok_head_score" in c["verdict_reason"]


def test_ir8_decided_on_the_token_dependent_model_not_the_position_only_one():
    """The position-only numbers are structural: a position-only head that 'fails' changes
    nothing, and a token-dependent one that fails is decisive."""
    per = _per()
    for s in SEEDS:
        per["IR-8"][s]["posonly"] = {"induction_row_step1_acc": 0.9,
                                     "score_minus_baseline": 0.9}
    c = _verdicts(per)["IR-8"]
    assert c["verdict"] == "holds"
    assert "position_only_structural_per_seed" in c["details"]
    c = _verdicts(_per({"IR-8": ("tok_head_score_minus_baseline", 0.4)}))["IR-8"]
    assert c["verdict"] == "does not hold"


def test_ir8_structural_row_test_is_reported_not_decided():
    """An induction-style row's accuracy cannot fail (a row on one token cannot solve a
    two-pair task, SPEC 2): it is reported per seed, and a 'failing' value changes nothing."""
    c = _verdicts(_per({"IR-8": ("tok_induction_row_step1_acc", 0.8)}))["IR-8"]
    assert c["verdict"] == "holds"
    assert [k["metric"] for k in c["conditions"]] == ["tok_head_score_minus_baseline"]
    assert all("tok_induction_row_step1_acc" in m for m in c["per_seed"].values())


@pytest.mark.parametrize("solved", [0.0, None])
def test_ir8_token_dependent_model_that_does_not_solve_the_task_is_inconclusive(solved):
    per = _per({"IR-8": ("tok_solved", solved)})
    per["IR-8"]["2"]["tok_learned_row_step1_acc"] = 0.97
    c = _verdicts(per)["IR-8"]
    assert c["verdict"] == "inconclusive"
    assert "does not solve the task" in c["verdict_reason"] and "2 (0.97)" in \
        c["verdict_reason"]


@pytest.mark.parametrize("seen", [0.01, None])
def test_ir8_with_the_query_token_earlier_in_the_context_is_inconclusive(seen):
    """(a) tests rows at fixed offsets; where the query's token occurred earlier, the row to
    the token after that occurrence would go untested, so the claim cannot be decided."""
    per = _per({"IR-8": ("tok_query_seen_before", seen)})
    c = _verdicts(per)["IR-8"]
    assert c["verdict"] == "inconclusive" and "occurs earlier" in c["verdict_reason"]


def test_derived_settings_are_pinned():
    """Registered 0 / -1 values mean 'derived'; the derivations are pinned here (SPEC 0:
    every setting registered or derived from registered values)."""
    from mechinterp_icr.experiments.ir.config import model_spec, task_config
    from mechinterp_icr.models.ir import resolve_theta

    assert QUICK.theta_rel == 0.0
    assert resolve_theta(model_spec(QUICK), 2).theta_rel == pytest.approx(1 / 3)
    assert resolve_theta(model_spec(QUICK), 3).theta_rel == pytest.approx(2 / 9)
    task = task_config(QUICK, 64).build(0)
    assert len(task.kb.singles) == QUICK.R * (QUICK.R - 1) // 2  # kb_single = -1
    assert task.cfg.m == 64  # n_answers = 0: m = n
    assert task.cfg.kb_swap_frac == QUICK.kb_swap_frac == 0.5


def test_registered_constants_of_the_conventions():
    from mechinterp_icr.claims.ir_registry import STOP_TOL_FACTORS

    assert STOP_TOL_FACTORS == (0.5, 1.0, 2.0)


def _variants(gaps):
    labels = ("tol/2", "tol", "2 tol")
    return {lab: {"within_pair_gap": g, "pair_mass_diff": 0.17, "mass_s3": 0.0,
                  "small_steps": 300} for lab, g in zip(labels, gaps)}


@pytest.mark.parametrize("cid", ["IR-3", "IR-6", "IR-7"])
def test_a_verdict_that_flips_under_the_stopping_tolerance_says_so(cid):
    per = _per()
    for s in SEEDS:
        per[cid][s]["stop_tol_variants"] = _variants((0.005, 0.005, 0.005))
    c = _verdicts(per)[cid]
    conv = c["details"]["stop_tol_conventions"]
    assert conv["flips"] == [] and "flips" not in c["notes"]
    assert "stop_tol_variants" not in c["per_seed"]["0"]  # reported in details only
    per[cid]["3"]["stop_tol_variants"] = _variants((0.03, 0.005, 0.005))  # tol/2: gap opens
    c = _verdicts(per)[cid]
    assert c["verdict"] == "holds"  # the registered rule decides
    conv = c["details"]["stop_tol_conventions"]
    assert conv["flips"] == ["tol/2"] and not conv["variants"]["tol/2"]["rule_met"]
    assert "flips under the stopping rule's tolerance tol/2" in c["notes"]


def test_ir4_perturbation_role_is_registered_and_nan_is_not_shown():
    from mechinterp_icr.claims.ir_registry import IR4_PERTURBATION_ROLE as c

    assert (c.op, c.threshold, c.rule, c.min_fraction) == (">=", 2.0, "fraction", 0.8)
    per = _per()["IR-4"]
    per["1"]["gd_over_pgd_escape_eps"] = 1.0
    assert perturbation_role(per)["status"] == "shown"  # 4 of 5 seeds
    for bad in (math.nan, None):  # no number on a seed: no evidence (protocol)
        per["3"]["gd_over_pgd_escape_eps"] = bad
        assert perturbation_role(per)["status"] == "not tested"


def test_notes_say_why_ir6_cannot_be_decided_and_what_ir7s_control_is():
    c7 = _verdicts(_per())["IR-7"]
    assert "3-cycle" in c7["notes"] and "swap bound" in c7["notes"]
    c6 = _verdicts(_per({"IR-6": ("constructed_rows_met", 0.0)}))["IR-6"]
    assert c6["notes"].startswith("undecidable at n = ")


def test_ir4_perturbation_role_shown_or_not_tested():
    per = _per()["IR-4"]
    assert perturbation_role(per)["status"] == "shown"
    per["1"]["gd_over_pgd_escape_eps"] = 1.2
    assert perturbation_role(per)["status"] == "shown"  # 4 of 5 seeds
    per["3"]["gd_over_pgd_escape_eps"] = 1.9
    assert perturbation_role(per)["status"] == "not tested"
    c = _verdicts(_per({"IR-4": ("gd_over_pgd_escape_eps", 1.0)}))["IR-4"]
    assert c["details"]["perturbation_role"]["status"] == "shown"


def test_registered_hyperparameters_are_the_profiles_values():
    from mechinterp_icr.experiments.ir.config import PAPER
    from mechinterp_icr.runner import config_keys

    quick, paper = dict(config_keys(QUICK)), dict(config_keys(PAPER))
    for cid in GOOD:
        s = spec(cid)
        assert s.hyperparameters, cid
        for key, value in s.hyperparameters.items():
            want = list(value) if isinstance(value, tuple) else value
            assert quick[key] == want, (cid, key)
            if key not in s.profile_specific:
                assert paper[key] == want, (cid, key)


def test_runs_cut_off_by_the_length_bound_are_named():
    """A run that the length bound (``stop_max``) ended, not IR-3's stopping rule, is listed
    in the claim's details, so a gap still moving is not read as settled."""
    per = {"0": {"small_steps": 300}, "1": {"small_steps": QUICK.stop_max},
           "2": {"small_steps": None}, "3": {}}
    assert ran_to_stop_max(per, QUICK) == ["1"]


def test_ir9_a_gap_that_does_not_decay_never_holds():
    """A flat gap (the start gap kept) or one that settles above the converged gap does not
    hold; the same flat numbers in the learning-rate-0 arm are what the control expects."""
    for final in (0.05, 0.0201):
        per = _per()
        for s in SEEDS:
            per["IR-9"][s]["ir9_final_gap"] = final
        c = _verdicts(per)["IR-9"]
        assert c["verdict"] == "does not hold" and "ir9_final_gap" in c["verdict_reason"]


def test_ir9_reading_and_placebo_on_synthetic_trajectories():
    """The code that reads convergence: a gap decaying to 0 is converged, a flat one and one
    that dips below the bar and comes back are not."""
    from mechinterp_icr.experiments.ir.ir9 import _placebo, converged, converged_gap

    bar = converged_gap()
    assert converged([[0, 0.05], [10, 0.01]]) and not converged([[0, 0.05], [10, 0.05]])
    assert not converged([[0, 0.05], [5, bar / 2], [10, 2 * bar]])
    assert _placebo([0, 1, 10, 100, 1000], 0.05) == {"placebo_decay_read": 1.0,
                                                     "placebo_flat_read": 0.0}


def test_ir9_a_seed_with_nothing_imposed_is_unreadable_not_failing():
    per = _per({"IR-9": ("ir9_imposed", 0.0)})
    per["IR-9"]["2"]["ir9_final_gap"] = None
    c = _verdicts(per)["IR-9"]
    assert c["verdict"] == "inconclusive" and "nothing imposed" in c["verdict_reason"]
    per["IR-9"]["3"]["ir9_final_gap"] = 0.04  # a readable failing seed beside it decides
    assert _verdicts(per)["IR-9"]["verdict"] == "does not hold"
