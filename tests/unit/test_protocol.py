"""The claim protocol (SPEC section 0): verdicts, controls and the seed rules."""

import pytest

from mechinterp_icr.claims import (
    HOLDS,
    INCONCLUSIVE,
    NOT_HOLD,
    REGISTRY,
    Claim,
    Condition,
    ControlSpec,
    evaluate_control,
    spec,
)
from mechinterp_icr.claims.protocol import ClaimSpec, evaluate_condition

SPEC = ClaimSpec(
    "T-1", "test claim",
    conditions=(Condition("acc", ">=", 0.9), Condition("gap", "<=", 0.02, rule="mean")),
    controls=(ControlSpec("untrained", "negative", Condition("ctrl_acc", ">=", 0.9)),
              ControlSpec("construction", "positive", Condition("pos_acc", ">=", 0.99))))
SEEDS = [str(i) for i in range(5)]
GOOD = {s: {"acc": 0.95, "gap": 0.01} for s in SEEDS}


def _five(*vals):
    """Per-seed control values: the given ones first, the rest equal to the last."""
    vals = list(vals) + [vals[-1]] * (len(SEEDS) - len(vals))
    return dict(zip(SEEDS, vals))


def _claim(neg, pos, per_seed=GOOD):
    return Claim.from_spec(SPEC, per_seed, controls=[
        evaluate_control(SPEC.controls[0], neg), evaluate_control(SPEC.controls[1], pos)])


def test_holds_only_with_rule_met_and_controls_as_expected():
    d = _claim(_five(0.3, 0.4), _five(1.0, 0.995)).to_dict()
    assert d["verdict"] == HOLDS and d["holds"] is True
    assert [k["meets_rule"] for k in d["controls"]] == [False, True]


def test_negative_control_showing_the_effect_on_one_seed_is_inconclusive():
    d = _claim(_five(0.95, 0.3), _five(1.0)).to_dict()
    assert d["verdict"] == INCONCLUSIVE and d["holds"] is False
    assert "untrained" in d["verdict_reason"]


def test_positive_control_missing_on_one_seed_is_inconclusive():
    d = _claim(_five(0.3), _five(0.9, 1.0)).to_dict()
    assert d["verdict"] == INCONCLUSIVE


def test_unmeasured_control_is_not_evidence():
    d = _claim({}, _five(1.0)).to_dict()
    assert d["verdict"] == INCONCLUSIVE and d["controls"][0]["meets_rule"] is None


def test_rule_not_met_does_not_hold_whatever_the_controls():
    bad = {"0": {"acc": 0.95, "gap": 0.01}, "1": {"acc": 0.85, "gap": 0.01}}
    assert _claim({"0": 0.3}, {"0": 1.0}, bad).to_dict()["verdict"] == NOT_HOLD
    # the mean rule: one seed over the bar is fine when the mean is under it
    per = {"0": {"gap": 0.005}, "1": {"gap": 0.03}}
    assert evaluate_condition(SPEC.conditions[1], per)["met"] is True
    assert evaluate_condition(Condition("gap", "<=", 0.02), per)["met"] is False


def test_fraction_rule():
    c = Condition("ov_first", ">=", 1.0, rule="fraction", min_fraction=0.8)
    four = {str(i): {"ov_first": float(i != 0)} for i in range(5)}
    three = {str(i): {"ov_first": float(i > 1)} for i in range(5)}
    assert evaluate_condition(c, four)["met"] and not evaluate_condition(c, three)["met"]


def test_unregistered_claim_is_never_holds():
    c = Claim("X-1", "s", "acc", ">=", 0.5, per_seed={"0": {"acc": 1.0}})
    assert c.to_dict()["verdict"] == INCONCLUSIVE


def test_registry_has_every_claim_with_a_control():
    assert sorted(REGISTRY) == sorted([f"CR-{i}" for i in range(1, 10)] +
                                      [f"IR-{i}" for i in range(1, 10)])
    for s in REGISTRY.values():
        assert s.conditions and s.controls, s.id
    with pytest.raises(KeyError, match="registered"):
        spec("CR-99")


def test_bad_condition_is_refused():
    with pytest.raises(ValueError, match="op"):
        Condition("a", "=>", 1.0)


def test_not_measurable_never_hides_a_readable_failing_condition():
    """SPEC 0 (revised 2026-12-05): a readable condition that fails decides `does not hold`
    whatever else cannot be read; `inconclusive (not measurable)` only when every readable
    condition is met."""
    bad = {"0": {"acc": 0.1, "gap": 0.5}}
    d = Claim.from_spec(SPEC, bad, not_measurable="N does not grow").to_dict()
    assert d["verdict"] == NOT_HOLD and d["conditions"][0]["met"] is False
    ok = Claim.from_spec(SPEC, {"0": {"acc": 0.95, "gap": 0.01}},
                         not_measurable="N does not grow").to_dict()
    assert ok["verdict"] == INCONCLUSIVE and ok["verdict_reason"].startswith("not measurable")


def test_an_unreadable_condition_is_met_null_beside_a_readable_failing_one():
    """A condition that cannot be read is stored `met: None` with its reason, never False;
    a readable failing condition beside it still decides `does not hold`."""
    per = {s: {"acc": 0.95, "gap": 0.01} for s in SEEDS}
    unread = {"acc": {"1": "no headroom"}}
    c = _claim(_five(0.3), _five(1.0), per)
    c.unreadable = unread
    d = c.to_dict()
    assert d["conditions"][0]["met"] is None and d["conditions"][0]["unreadable"] == {
        "1": "no headroom"}
    assert d["verdict"] == INCONCLUSIVE and "no headroom on seeds 1" in d["verdict_reason"]
    per["3"]["gap"] = 0.5  # the mean gap fails and can be read: does not hold
    c = _claim(_five(0.3), _five(1.0), per)
    c.unreadable = unread
    d = c.to_dict()
    assert d["verdict"] == NOT_HOLD and d["conditions"][1]["met"] is False
    per["3"]["gap"] = 0.01
    per["2"]["acc"] = 0.5  # a readable seed fails an every-seed rule with another unreadable
    c = _claim(_five(0.3), _five(1.0), per)
    c.unreadable = unread
    assert c.to_dict()["verdict"] == NOT_HOLD


@pytest.mark.parametrize("passed,unread,met", [(4, 0, True), (3, 1, None), (2, 1, False),
                                               (3, 0, False), (4, 1, True)])
def test_a_fraction_rule_is_unreadable_only_when_the_unreadable_seeds_could_decide(
        passed, unread, met):
    cond = Condition("x", ">=", 1.0, rule="fraction", min_fraction=0.8)
    vals = [1.0] * passed + [None] * unread
    vals += [0.0] * (5 - len(vals))
    r = evaluate_condition(cond, {str(i): {"x": v} for i, v in enumerate(vals)})
    assert r["met"] is met


def test_a_pooled_condition_compares_one_number():
    cond = Condition("mean_curve_drop", "<=", 0.02, rule="pooled")
    per = {s: {"other": 1.0} for s in SEEDS}
    assert evaluate_condition(cond, per, pooled=0.01)["met"] is True
    assert evaluate_condition(cond, per, pooled=0.03)["met"] is False
    assert evaluate_condition(cond, per, pooled=None)["met"] is None


@pytest.mark.parametrize("bad", [float("nan"), None])
def test_a_nan_or_missing_control_value_on_one_seed_is_not_evidence(bad):
    neg = _five(0.3)
    neg["2"] = bad
    d = _claim(neg, _five(1.0)).to_dict()
    assert d["verdict"] == INCONCLUSIVE and d["controls"][0]["meets_rule"] is None
    pos = _five(1.0)
    pos["4"] = bad
    assert _claim(_five(0.3), pos).to_dict()["verdict"] == INCONCLUSIVE


def test_a_control_measured_on_fewer_seeds_than_the_claim_is_not_evidence():
    d = _claim({"0": 0.3}, _five(1.0)).to_dict()
    assert d["verdict"] == INCONCLUSIVE and "seeds" in d["verdict_reason"]


def test_fewer_than_five_seeds_never_hold():
    two = {s: GOOD[s] for s in SEEDS[:2]}
    d = _claim({"0": 0.3, "1": 0.3}, {"0": 1.0, "1": 1.0}, two).to_dict()
    assert d["verdict"] == INCONCLUSIVE and "5 needed" in d["verdict_reason"]


@pytest.mark.parametrize("bad", [float("nan"), None])
def test_a_nan_or_missing_metric_on_one_seed_cannot_hold(bad):
    """No number, no evidence: the condition cannot be read (met None) and the claim is
    inconclusive, naming the seed; a readable failing seed beside it decides `does not hold`."""
    per = {s: dict(m) for s, m in GOOD.items()}
    per["3"]["acc"] = bad
    d = _claim(_five(0.3), _five(1.0), per).to_dict()
    assert d["verdict"] == INCONCLUSIVE and "no value on seeds 3" in d["verdict_reason"]
    assert d["conditions"][0]["met"] is None
    per = {s: dict(m) for s, m in GOOD.items()}
    per["1"]["gap"] = bad  # the mean rule must not average the gap away
    assert _claim(_five(0.3), _five(1.0), per).to_dict()["verdict"] == INCONCLUSIVE
    per["2"]["acc"] = 0.5
    assert _claim(_five(0.3), _five(1.0), per).to_dict()["verdict"] == NOT_HOLD


def test_a_requested_seed_missing_from_per_seed_cannot_hold():
    """A seed whose job failed is not silently dropped (Summary passes its seeds)."""
    from mechinterp_icr.claims import Summary

    four = {s: GOOD[s] for s in SEEDS[:4]}
    c = Claim.from_spec(SPEC, four, controls=[evaluate_control(SPEC.controls[0], _five(0.3)),
                                              evaluate_control(SPEC.controls[1], _five(1.0))])
    s = Summary("t", "quick", [0, 1, 2, 3, 4])
    s.add(c)
    d = s.to_dict()["claims"]["T-1"]
    assert d["verdict"] == INCONCLUSIVE and "no value on seeds 4" in d["verdict_reason"]
    five = dict(four, **{"4": GOOD["4"]})
    c.per_seed = five
    assert s.to_dict()["claims"]["T-1"]["verdict"] == HOLDS


def test_a_value_equal_to_the_threshold_up_to_rounding_meets_it():
    from mechinterp_icr.claims.protocol import compare

    assert compare(0.7999999999999998, ">=", 0.8) and not compare(0.79, ">=", 0.8)
    assert compare(0.02 + 1e-12, "<=", 0.02) and not compare(0.0201, "<=", 0.02)
    assert not compare(0.5 + 1e-12, ">", 0.5) and compare(0.51, ">", 0.5)


@pytest.mark.parametrize("bad", [float("nan"), None])
def test_under_the_fraction_rule_a_missing_seed_decides_only_when_it_could(bad):
    """'On at least 4 of 5 seeds': one seed without a number leaves 4 of 5 that meet the rule
    (met); with two, the rule cannot be read (met None); one failing and one missing cannot
    reach 4 (3 of 5 at best would need the missing one: None)."""
    from mechinterp_icr.claims.protocol import Condition, evaluate_condition

    cond = Condition("x", ">=", 1.0, "fraction", 0.8)
    per = {s: {"x": 1.0} for s in SEEDS}
    per["2"]["x"] = bad
    r = evaluate_condition(cond, per)
    assert r["met"] is True and r["missing"] == ["2"]
    per["3"]["x"] = bad
    assert evaluate_condition(cond, per)["met"] is None
    per = {s: {"x": 1.0} for s in SEEDS}
    per["2"]["x"] = 0.0
    per["4"]["x"] = bad  # one failing and one missing: 4 of 5 only if the missing one passed
    assert evaluate_condition(cond, per)["met"] is None
    per["3"]["x"] = 0.0  # two failing: no missing seed can rescue it
    assert evaluate_condition(cond, per)["met"] is False


def test_a_mean_no_unreadable_seed_could_rescue_is_not_met():
    """SPEC 0, not measurable never hides a failure: under the mean rule an unreadable seed
    leaves the condition unread unless even its most favourable value in the metric's declared
    range could not lift the mean past the threshold."""
    c = Condition("acc", ">=", 0.9, rule="mean")
    four_low = {"0": 0.1, "1": 0.1, "2": 0.1, "3": 0.1, "4": None}
    assert evaluate_condition(c, four_low, value_range=(0.0, 1.0))["met"] is False
    assert evaluate_condition(c, four_low)["met"] is None  # no declared range: unread
    near = {"0": 0.88, "1": 0.88, "2": 0.88, "3": 0.88, "4": None}
    assert evaluate_condition(c, near, value_range=(0.0, 1.0))["met"] is None
    low = Condition("gap", "<=", 0.02, rule="mean")
    high = {"0": 0.5, "1": 0.5, "2": 0.5, "3": 0.5, "4": None}
    assert evaluate_condition(low, high, value_range=(0.0, 1.0))["met"] is False
