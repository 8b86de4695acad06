"""Every reader of a stored claim (headline, README row, rerun statistic, verdict figure,
claim table, report, ``icr check``) agrees with the protocol that decided it, on the inputs
where they used to disagree: seeds without a value or that a rule cannot read, a fraction
rule, a stored flag that contradicts the stored measurement, a stored seed minimum."""

import json
import math

import pytest
from helpers import registry_summary

from mechinterp_icr.claims import Claim, format_claim_table, spec
from mechinterp_icr.claims.check import check_summary
from mechinterp_icr.claims.headline import claim_headline, condition_phrase, deciding_entry
from mechinterp_icr.claims.protocol import (
    INCONCLUSIVE,
    NOT_HOLD,
    ClaimSpec,
    Condition,
    ControlSpec,
    evaluate_condition,
    spec_controls,
)
from mechinterp_icr.claims.redecide import redecide_claim
from mechinterp_icr.claims.rerun import decision_statistic
from mechinterp_icr.viz import readme as rd
from mechinterp_icr.viz.claim_figures import _seed_color, verdict_panels

GREY = "#7f7f7f"

SEEDS = [0, 1, 2, 3, 4]


def _ir7(gaps):
    per = {str(s): {"within_pair_gap": g, "mass_s3": 0.005, "solved": 1.0,
                    "large_step_swap_expected_acc": 0.5} for s, g in zip(SEEDS, gaps)}
    sp = spec("IR-7")
    return Claim.from_spec(sp, per, controls=spec_controls(sp, per)).to_dict(SEEDS)


def test_a_seed_without_a_value_does_not_hide_the_seed_that_fails():
    """IR-7 (gap <= 0.02 on every seed): seed 0 fails, seed 3 has no value. The claim does
    not hold because of seed 0; the headline says so and names seed 3 as not read."""
    c = _ir7([0.054, 0.001, 0.002, None, 0.017])
    assert c["verdict"] == NOT_HOLD
    h = claim_headline("IR-7", c)
    assert "max 0.054 on seed 0 > 0.02" in h.text and "cannot be read on seed 3" in h.text
    entry = c["conditions"][0]
    assert decision_statistic(entry) == pytest.approx(0.054)
    _, _, number, _ = rd.claim_row("IR-7", c)
    assert "(seed 0)" in number


def test_the_readme_row_reads_only_the_seeds_the_rule_reads():
    """A condition whose seed 4 is stored as unreadable: the README's mean and worst seed
    leave it out, as the headline and the rule do."""
    c = _ir7([0.015, 0.001, 0.002, 0.003, 0.9])
    cond = c["conditions"][0]
    cond["unreadable"] = {"4": "unsolved"}
    cond["met"] = True
    assert deciding_entry(c, claim_headline("IR-7", c)) is cond
    _, _, number, _ = rd.claim_row("IR-7", c)
    mean = (0.015 + 0.001 + 0.002 + 0.003) / 4
    assert number.startswith(f"{mean:.4g} ") and "(seed 0)" in number and "0.9" not in number


def test_a_fraction_counts_every_seed_in_the_statistic_and_the_headline():
    """80% of 10 seeds is 8 whether or not two of them can be read: the statistic is the
    8th best value (2.5), the headline says 8 needed."""
    cond = Condition("speedup", ">=", 2.0, "fraction", 0.8)
    per = {str(s): v for s, v in enumerate([9, 8, 7, 6, 5, 4, 3, 2.5, 1.0, 1.0])}
    ev = evaluate_condition(cond, per, {"8": "no headroom", "9": "no headroom"})
    assert ev["met"] is True
    assert decision_statistic(ev) == 2.5
    text = condition_phrase(cond, ev["per_seed"], unreadable=ev["unreadable"])
    assert "8 of 10 seeds >= 2 (8 needed)" in text and "cannot be read on seeds 8, 9" in text
    # two seeds without a value: 6 pass, 2 fail (8, 9), 2 unread, so the rule cannot be read
    # (8 would be met if both passed); the phrase names the unread seeds apart from the fails
    per2 = {**per, "0": None, "1": None}
    ev2 = evaluate_condition(cond, per2)
    text2 = condition_phrase(cond, ev2["per_seed"], unreadable=ev2["unreadable"])
    assert ev2["met"] is None and decision_statistic(ev2) is None
    assert "6 of 10 seeds >= 2 (8 needed; fails on seeds 8, 9); cannot be read on seeds 0, 1 " \
        "(no value)" in text2


def _cr6_with_control(seed_value):
    summary = registry_summary()
    c = summary["claims"]["CR-6"]
    neg = next(k for k in c["controls"] if k["kind"] == "negative")
    neg["per_seed"]["3"] = seed_value
    return redecide_claim("CR-6", c, summary["seeds"]), neg["name"]


def test_a_stored_as_expected_flag_is_never_trusted_over_the_measurement():
    c, name = _cr6_with_control(1e9)  # the negative control now meets its condition
    k = next(k for k in c["controls"] if k["name"] == name)
    assert c["verdict"] == INCONCLUSIVE and k["meets_rule"] is True and not k["as_expected"]
    k["as_expected"] = True  # an edited (or stale) flag
    problems = check_summary({"claims": {"CR-6": c}}, registry=False)
    assert any("as_expected=True" in p for p in problems), problems
    table = format_claim_table({"CR-6": c})
    assert f"[MISBEHAVED] negative control '{name}'" in table


def test_icr_check_refuses_holds_beside_an_unmeasured_negative_control():
    c, name = _cr6_with_control(None)
    k = next(k for k in c["controls"] if k["name"] == name)
    assert k["meets_rule"] is None and c["verdict"] == INCONCLUSIVE
    c = {**c, "verdict": "holds", "holds": True}
    problems = check_summary({"claims": {"CR-6": c}}, registry=False)
    assert any(f"control {name!r} has meets_rule=None" in p for p in problems), problems


def test_a_claim_never_holds_on_fewer_than_five_seeds_whatever_it_stores():
    summary = registry_summary(seeds=(0, 1, 2, 3))
    c = summary["claims"]["CR-1"]
    stored = {**c, "min_seeds": 3}
    new = redecide_claim("CR-1", stored, summary["seeds"])
    assert new["verdict"] == INCONCLUSIVE and "at least 5 needed" in new["verdict_reason"]
    seven = redecide_claim("CR-1", registry_summary(seeds=range(5))["claims"]["CR-1"]
                           | {"min_seeds": 7}, list(map(str, range(5))))
    h = claim_headline("CR-1", seven)
    assert seven["verdict"] == INCONCLUSIVE and "at least 7 needed" in h.text


def test_the_verdict_figure_greys_a_seed_the_rule_cannot_read():
    cond = Condition("gap", "<=", 0.1)
    sp = ClaimSpec("X-1", "x", (cond,), (ControlSpec("c", "negative", Condition("g2", ">", 1)),),
                   unreadable=lambda cid, per: {"gap": {"0": "unsolved"}})
    per = {str(s): {"gap": 0.6 if s == 0 else 0.05, "g2": 0.0} for s in SEEDS}
    claim = Claim.from_spec(sp, per, controls=spec_controls(sp, per))
    panel = verdict_panels(claim)[0]
    assert panel["unreadable"] == {"0": "unsolved"}
    assert _seed_color(panel, 0.6, "0") == GREY and _seed_color(panel, 0.05, "1") != GREY


def test_a_control_cannot_be_registered_with_a_pooled_rule():
    with pytest.raises(ValueError, match="pooled"):
        ControlSpec("c", "negative", Condition("m", ">", 0.5, "pooled"))


def test_the_headline_the_readme_row_and_the_rerun_statistic_name_one_number():
    """A whole summary built through the protocol: for every claim decided by an every-seed
    or mean rule, the headline and the README row show the number the rerun column compares
    (a fraction's headline counts seeds instead)."""
    summary = json.loads(json.dumps(registry_summary()))
    checked = 0
    for cid, c in summary["claims"].items():
        h = claim_headline(cid, c)
        e = deciding_entry(c, h)
        if e is None or e.get("rule") == "pooled":
            continue
        stat = decision_statistic(e)
        assert stat is not None and math.isfinite(stat), cid
        if e.get("rule") != "fraction":
            assert f"{stat:.4g}" in h.text, (cid, stat, h.text)
        if e.get("rule") == "every_seed":
            assert f"worst {stat:.4g} (seed " in rd.claim_row(cid, c)[2], cid
            checked += 1
    assert checked >= 10


def test_a_fraction_not_met_turns_on_the_seed_that_would_make_it_readable():
    """80% of 10 seeds with 4 unreadable: 3 of the 6 read pass, so even with all 4 unread
    seeds passing 7 < 8 (not met). The rule turns on the 4th best read seed (1.9): were it to
    pass, the rule could no longer be decided."""
    cond = Condition("speedup", ">=", 2.0, "fraction", 0.8)
    per = {str(s): v for s, v in enumerate([9, 8, 7, 1.9, 1.0, 0.5, 5, 5, 5, 5])}
    ev = evaluate_condition(cond, per, {str(s): "no headroom" for s in (6, 7, 8, 9)})
    assert ev["met"] is False
    assert decision_statistic(ev) == 1.9


def test_cr9_lower_bound_is_clipped_to_the_rise_range_like_every_interval_shown():
    """Two seeds rising by +0.9 and three falling by -0.9: the Student-t lower end is below
    -1, outside the range of a difference of two eta^2; it is stored clipped at -1."""
    from helpers import DERIVE_INPUTS

    per = {}
    for i, s in enumerate(map(str, SEEDS)):
        m = json.loads(json.dumps(DERIVE_INPUTS["CR-9"]))
        lo, top = (0.05, 0.95) if i < 2 else (0.95, 0.05)
        m["ft_eta2_by_lam"] = {"0": lo, "0.1": lo, "0.2": lo, "0.3": lo, "0.9": top}
        per[s] = m
    _, pooled = spec("CR-9").derive("CR-9", per)
    assert pooled["ft_rise_from_lam_s_lo95"] == -1.0


def test_a_mean_not_met_with_unread_seeds_is_judged_at_the_mean_that_decided_it():
    """heldout_icl_exact (range [0, 1]) >= 0.9 by the mean, seed 4 unreadable: 0.5, 0.55,
    0.6, 0.5 with seed 4 at 1 still give 0.63 < 0.9 (not met). The statistic is that 0.63,
    not the readable mean 0.5375: its margin to the bar is the one that decided."""
    cond = Condition("heldout_icl_exact", ">=", 0.9, "mean")
    ev = evaluate_condition(cond, {"0": 0.5, "1": 0.55, "2": 0.6, "3": 0.5, "4": 0.99},
                            {"4": "diverged"}, value_range=(0.0, 1.0))
    assert ev["met"] is False
    assert decision_statistic(ev) == pytest.approx((0.5 + 0.55 + 0.6 + 0.5 + 1.0) / 5)


def test_a_hand_edited_rule_is_shown_not_a_traceback():
    c = _ir7([0.054, 0.001, 0.002, 0.003, 0.017])
    c["conditions"][0]["rule"] = "all_seeds"
    assert "all_seeds" in rd.claim_row("IR-7", c)[3]


def test_the_headline_of_a_mean_not_met_with_unread_seeds_names_the_deciding_mean():
    cond = Condition("heldout_icl_exact", ">=", 0.9, "mean")
    ev = evaluate_condition(cond, {"0": 0.5, "1": 0.55, "2": 0.6, "3": 0.5, "4": 0.99},
                            {"4": "diverged"}, value_range=(0.0, 1.0))
    text = condition_phrase(cond, ev["per_seed"], unreadable=ev["unreadable"])
    assert f"{decision_statistic(ev):.4g} even with the unread seed at 1" in text, text
