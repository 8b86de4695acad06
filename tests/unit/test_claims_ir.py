"""IR-1..IR-8 verdicts from numbers (no training): for every claim, good numbers hold, a
negative control that shows the effect (or a positive control that misses it) keeps the claim
from holding, and an unmet rule does not hold."""

import copy
import math

import pytest

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
    "IR-5": {"N_grows": 1.0, "polylog_beats_linear": 1.0, "polylog_r2": 0.9,
             "growth_over_bound": 0.5,
             "retrieval_min": 1.0, "zero_data_reaches": 0.0, "N_smallest_n": 2,
             "N_largest_n": 4},
    "IR-6": {"within_pair_gap": 0.01, "pair_mass_diff": 0.1, "mass_s3": 0.03, "ir2_met": 1.0,
             "constructed_rows_met": 1.0, "large_step_pair_mass_diff": 0.01},
    "IR-7": {"within_pair_gap": 0.01, "mass_s3": 0.0, "solved": 1.0,
             "large_step_swap_expected_acc": 0.5},
    "IR-8": {"induction_row_step1_acc": 0.2, "learned_row_step1_acc": 1.0,
             "ir_head_score_minus_baseline": -0.05,
             "induction_model_score_minus_baseline": 0.7,
             "induction_model_tl_score_minus_baseline": 0.7},
}

# per claim: every control showing the effect (negative) / missing it (positive) on one seed,
# and a rule that is not met
BAD_CONTROLS = [
    ("IR-1", "shuffled_memory_acc", 0.5),
    ("IR-2", "saddle_swap_expected_acc", 0.93),
    ("IR-2", "zero_data_swap_expected_acc", 0.93),
    ("IR-3", "large_step_pair_mass_diff", 0.08),
    ("IR-4", "no_swap_tie_dev", 0.01),
    ("IR-5", "zero_data_reaches", 1.0),
    ("IR-6", "constructed_rows_met", 0.0),
    ("IR-6", "large_step_pair_mass_diff", 0.08),
    ("IR-7", "large_step_swap_expected_acc", 0.93),
    ("IR-8", "induction_model_score_minus_baseline", 0.3),
    ("IR-8", "induction_model_tl_score_minus_baseline", 0.3),
]
BAD_CONTROL = {cid: (k, v) for cid, k, v in BAD_CONTROLS}
UNMET = {
    "IR-1": ("memory_acc", 0.98),
    "IR-2": ("swap_expected_acc", 0.85),
    "IR-3": ("within_pair_gap", 0.026),
    "IR-4": ("saddle_tie_dev_raw", 0.05),
    "IR-5": ("growth_over_bound", 1.5),
    "IR-6": ("mass_s3", 0.07),
    "IR-7": ("within_pair_gap", 0.031),
    "IR-8": ("induction_row_step1_acc", 0.7),
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
    for cid in GOOD:
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


@pytest.mark.parametrize("cid", sorted(GOOD))
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
            assert cond.metric in GOOD[cid]


def test_ir5_is_not_measurable_when_N_does_not_grow():
    per = _per()
    for s in SEEDS:
        per["IR-5"][s]["N_grows"] = 0.0
        per["IR-5"][s]["N_largest_n"] = 2
    c = _verdicts(per)["IR-5"]
    assert c["verdict"] == "inconclusive" and "not measurable" in c["verdict_reason"]


@pytest.mark.parametrize("value", [0.83, 0.9899, None, float("nan")])
def test_ir5_is_not_measurable_when_the_memory_does_not_retrieve(value):
    c = _verdicts(_per({"IR-5": ("retrieval_min", value)}))["IR-5"]
    assert c["verdict"] == "inconclusive" and "retrieval" in c["verdict_reason"]


@pytest.mark.parametrize("key", ["N_smallest_n", "N_largest_n"])
def test_ir5_is_not_measurable_when_N_is_censored_at_an_end(key):
    per = _per({"IR-5": (key, None)})
    per["IR-5"]["2"]["N_grows"] = None
    c = _verdicts(per)["IR-5"]
    assert c["verdict"] == "inconclusive" and "censored" in c["verdict_reason"]


def test_ir5_polylog_fit_on_noise_does_not_hold():
    c = _verdicts(_per({"IR-5": ("polylog_r2", 0.017)}))["IR-5"]
    assert c["verdict"] == "does not hold" and "polylog_r2" in c["verdict_reason"]


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

    for cid in GOOD:
        s = spec(cid)
        assert s.hyperparameters, cid
        for key, value in s.hyperparameters.items():
            assert getattr(QUICK, key) == value, (cid, key)
            if key not in s.profile_specific:
                assert getattr(PAPER, key) == value, (cid, key)


def test_runs_cut_off_by_the_length_bound_are_named():
    """A run that the length bound (``stop_max``) ended, not IR-3's stopping rule, is listed
    in the claim's details, so a gap still moving is not read as settled."""
    per = {"0": {"small_steps": 300}, "1": {"small_steps": QUICK.stop_max},
           "2": {"small_steps": None}, "3": {}}
    assert ran_to_stop_max(per, QUICK) == ["1"]
