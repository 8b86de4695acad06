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
GOOD = {"0": {"acc": 0.95, "gap": 0.01}, "1": {"acc": 0.97, "gap": 0.03}}


def _claim(neg, pos, per_seed=GOOD):
    return Claim.from_spec(SPEC, per_seed, controls=[
        evaluate_control(SPEC.controls[0], neg), evaluate_control(SPEC.controls[1], pos)])


def test_holds_only_with_rule_met_and_controls_as_expected():
    d = _claim({"0": 0.3, "1": 0.4}, {"0": 1.0, "1": 0.995}).to_dict()
    assert d["verdict"] == HOLDS and d["holds"] is True
    assert [k["meets_rule"] for k in d["controls"]] == [False, True]


def test_negative_control_showing_the_effect_on_one_seed_is_inconclusive():
    d = _claim({"0": 0.3, "1": 0.95}, {"0": 1.0, "1": 1.0}).to_dict()
    assert d["verdict"] == INCONCLUSIVE and d["holds"] is False
    assert "untrained" in d["verdict_reason"]


def test_positive_control_missing_on_one_seed_is_inconclusive():
    d = _claim({"0": 0.3, "1": 0.3}, {"0": 1.0, "1": 0.9}).to_dict()
    assert d["verdict"] == INCONCLUSIVE


def test_unmeasured_control_is_not_evidence():
    d = _claim({}, {"0": 1.0}).to_dict()
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
    assert sorted(REGISTRY) == sorted([f"CR-{i}" for i in range(1, 8)] +
                                      [f"IR-{i}" for i in range(1, 9)])
    for s in REGISTRY.values():
        assert s.conditions and s.controls, s.id
    with pytest.raises(KeyError, match="registered"):
        spec("CR-99")


def test_bad_condition_is_refused():
    with pytest.raises(ValueError, match="op"):
        Condition("a", "=>", 1.0)


def test_not_measurable_is_inconclusive_even_when_the_rule_fails():
    bad = {"0": {"acc": 0.1, "gap": 0.5}}
    c = Claim.from_spec(SPEC, bad, not_measurable="N does not grow")
    d = c.to_dict()
    assert d["verdict"] == INCONCLUSIVE and "not measurable" in d["verdict_reason"]
