"""``icr redecide``: verdicts are a pure function of the stored measurements and the registered
specs. A rule change is one edit of the specs and a redecide, no training; ``--check`` finds a
stored decision the specs do not give. Every summary here is built by the test."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from helpers import registry_summary

from mechinterp_icr.claims.protocol import HOLDS, NOT_HOLD
from mechinterp_icr.claims.redecide import differences, redecide_summary
from mechinterp_icr.claims.registry import REGISTRY
from mechinterp_icr.cli import main
from mechinterp_icr.viz import readme as rd


def _cr2_at(summary: dict, value: float) -> dict:
    """``summary`` with CR-2's held-out ICL accuracy at ``value`` on every seed, decided under
    the registered specs (a stored run whose CR-2 mean sits between 0.85 and 0.9)."""
    s = copy.deepcopy(summary)
    for m in s["claims"]["CR-2"]["per_seed"].values():
        m["heldout_icl_exact"] = value
    return redecide_summary(s)[0]


def _write(tmp_path, summary: dict):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{rd.BEGIN}\n{rd.claim_table(summary)}\n{rd.END}\n")
    return out, readme


def _cr2_row(readme) -> str:
    return next(line for line in readme.read_text().splitlines() if line.startswith("| CR-2 |"))


def test_redeciding_a_reproduction_changes_nothing():
    s = registry_summary()
    new, unmeasured = redecide_summary(s)
    assert differences(s, new) == [] and unmeasured == {}
    assert new == s


def test_the_cr2_threshold_change_is_one_spec_edit_and_a_redecide(tmp_path, monkeypatch):
    """CR-2's 0.9 moved to 0.85 in the specs: the stored run's verdict, headline and README row
    change, without training; --check first finds the stale decisions, then none."""
    stored = _cr2_at(registry_summary(), 0.87)
    assert stored["claims"]["CR-2"]["verdict"] == NOT_HOLD
    out, readme = _write(tmp_path, stored)
    old_row = _cr2_row(readme)
    assert "≥ 0.9," in old_row

    cr2 = REGISTRY["CR-2"]
    monkeypatch.setitem(REGISTRY, "CR-2", replace(
        cr2, conditions=(replace(cr2.conditions[0], threshold=0.85), *cr2.conditions[1:])))

    r = CliRunner().invoke(main, ["redecide", str(out), "--check", "--readme", str(readme)])
    assert r.exit_code == 1, r.output
    assert "CR-2: verdict stored 'does not hold', the specs give 'holds'" in r.output
    assert "claim table is not the one the specs give" in r.output

    r = CliRunner().invoke(main, ["redecide", str(out), "--readme", str(readme)])
    assert r.exit_code == 0, r.output
    assert "CR-2: does not hold -> holds" in r.output
    new = json.loads((out / "summary.json").read_text())["claims"]["CR-2"]
    assert new["verdict"] == HOLDS and new["holds"] is True
    assert new["conditions"][0]["threshold"] == 0.85 and new["conditions"][0]["met"]
    assert new["headline"] != stored["claims"]["CR-2"]["headline"]
    assert ">= 0.85" in new["headline"]
    row = _cr2_row(readme)
    assert row != old_row and "| holds |" in row and "≥ 0.85," in row
    assert (out / "report.html").exists()
    others = {c: e["verdict"] for c, e in stored["claims"].items() if c != "CR-2"}
    after = json.loads((out / "summary.json").read_text())["claims"]
    assert {c: after[c]["verdict"] for c in others} == others

    r = CliRunner().invoke(main, ["redecide", str(out), "--check", "--readme", str(readme)])
    assert r.exit_code == 0, r.output
    assert "0 stale decisions over 18 claims" in r.output


def test_a_stored_verdict_the_specs_do_not_give_is_found(tmp_path):
    s = registry_summary()
    s["claims"]["IR-3"]["verdict"] = NOT_HOLD
    s["claims"]["CR-4"]["controls"][0]["meets_rule"] = True
    problems = differences(s, redecide_summary(s)[0])
    assert any(p.startswith("IR-3: verdict stored 'does not hold'") for p in problems)
    assert "CR-4: controls differs from what the specs give" in problems
    out, _ = _write(tmp_path, s)
    r = CliRunner().invoke(main, ["redecide", str(out / "summary.json"), "--check"])
    assert r.exit_code == 1 and "IR-3: verdict" in r.output


def test_a_rule_on_a_metric_the_run_did_not_measure_cannot_hold(monkeypatch):
    """A new condition or control on a metric the stored run lacks: no number, no evidence; the
    claim is inconclusive (the condition cannot be read; the control is not measured) and the
    metric is named."""
    s = registry_summary()
    ir1 = REGISTRY["IR-1"]
    new_cond = replace(ir1.conditions[0], metric="new_metric")
    monkeypatch.setitem(REGISTRY, "IR-1", replace(ir1, conditions=(*ir1.conditions, new_cond)))
    cr6 = REGISTRY["CR-6"]
    new_ctrl = replace(cr6.controls[0], name="a control never measured",
                       condition=replace(cr6.controls[0].condition, metric="never_measured"))
    monkeypatch.setitem(REGISTRY, "CR-6", replace(cr6, controls=(*cr6.controls, new_ctrl)))
    new, unmeasured = redecide_summary(s)
    assert new["claims"]["IR-1"]["verdict"] == "inconclusive"
    assert "no value on seeds" in new["claims"]["IR-1"]["verdict_reason"]
    assert new["claims"]["CR-6"]["verdict"] == "inconclusive"
    assert unmeasured == {"IR-1": ["new_metric"],
                          "CR-6": ["control 'a control never measured' (never_measured)"]}


def test_a_failing_measurement_never_holds_under_any_threshold_it_does_not_meet():
    """A null run (the effect absent: CR-2's accuracy at chance) stays 'does not hold' under the
    registered rule, and a negative control that meets its condition keeps a claim from
    holding after a redecide."""
    s = _cr2_at(registry_summary(), 0.25)
    assert s["claims"]["CR-2"]["verdict"] == NOT_HOLD
    ctrl = s["claims"]["CR-5"]["controls"][0]  # a negative control
    ctrl["per_seed"] = {k: ctrl["threshold"] + 0.5 for k in ctrl["per_seed"]}
    new = redecide_summary(s)[0]["claims"]
    assert new["CR-5"]["verdict"] == "inconclusive" and not new["CR-5"]["holds"]
    assert new["CR-2"]["verdict"] == NOT_HOLD


def test_a_not_measurable_reason_and_extra_checks_are_measurements_kept():
    s = registry_summary()
    s["claims"]["IR-5"]["not_measurable"] = "N censored at every n"
    s["claims"]["CR-8"]["extra_checks"] = {"measured over >= 6 values of K": False}
    new = redecide_summary(s)[0]["claims"]
    assert new["IR-5"]["verdict"] == "inconclusive"
    assert new["IR-5"]["verdict_reason"] == "not measurable: N censored at every n"
    # a coverage check that failed: the rule cannot be read at its registered resolution
    assert new["CR-8"]["verdict"] == "inconclusive"
    assert "extra check failed: measured over >= 6 values of K" in new["CR-8"]["verdict_reason"]


def test_a_readable_failing_condition_is_not_hidden_by_not_measurable():
    """SPEC 0 (revised 2026-12-05): a stored not-measurable reason beside a readable failing
    condition reads `does not hold` after a redecide, and the condition is met False while an
    unreadable one is met None."""
    s = _cr2_at(registry_summary(), 0.25)
    s["claims"]["CR-2"]["not_measurable"] = "something else could not be measured"
    new = redecide_summary(s)[0]["claims"]["CR-2"]
    assert new["verdict"] == NOT_HOLD and new["conditions"][0]["met"] is False


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"claims": 5}'])
def test_an_unreadable_summary_is_one_line_and_exit_2(tmp_path, content):
    f = tmp_path / "summary.json"
    f.write_text(content)
    r = CliRunner().invoke(main, ["redecide", str(f)])
    assert r.exit_code == 2 and r.output.startswith("error: summary")
    assert "Traceback" not in r.output and f.read_text() == content
    r = CliRunner().invoke(main, ["redecide", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "No such file or directory" in r.output


# ---- review findings: a statistic must not be read from a curve with points missing --------
def _cr2_curves(s, curves):
    for seed, c in zip(sorted(s["claims"]["CR-2"]["per_seed"]), curves):
        s["claims"]["CR-2"]["per_seed"][seed]["heldout_icl_exact_by_K"] = c
    return s


def test_cr2_a_point_missing_on_one_seed_cannot_hide_a_dip():
    """Every seed dips by 0.15 at K = 5; one seed lacks K = 5. The seed-mean curve must not
    drop K = 5 for everyone (it read 'holds'): the pooled drop cannot be read."""
    dip = {str(k): 0.80 if k == 5 else 0.95 for k in range(1, 9)}
    gap = {k: v for k, v in dip.items() if k != "5"}
    s = _cr2_curves(registry_summary(), [dip] * 4 + [gap])
    new = redecide_summary(s)[0]["claims"]["CR-2"]
    assert new["verdict"] == "inconclusive" and new["conditions"][1]["met"] is None
    s = _cr2_curves(registry_summary(), [dip] * 5)
    new = redecide_summary(s)[0]["claims"]["CR-2"]
    assert new["verdict"] == NOT_HOLD and new["pooled"]["mean_curve_max_drop_over_k"] == \
        pytest.approx(0.15)
    assert "over the seeds together: 0.15 > 0.02" in new["headline"]


def test_cr8_paired_curve_on_two_points_cannot_be_read():
    """A mixed-type arm measured at K = 1 and 8 only would give a Spearman of 1 from two
    points: the paired statistics need both arms at every registered K."""
    s = registry_summary()
    for m in s["claims"]["CR-8"]["per_seed"].values():
        m["mixed_partial_eta2_by_k"] = {"1": 0.3, "8": 0.3}
    new = redecide_summary(s)[0]["claims"]["CR-8"]
    assert new["verdict"] == "inconclusive"


def test_redecide_recomputes_a_control_the_spec_derives():
    """CR-8's control is computed by the spec from the stored curves: a PT-only curve that
    rises with the finetuned one shows the effect after a redecide, whatever value the stored
    control entry holds."""
    s = registry_summary()
    for m in s["claims"]["CR-8"]["per_seed"].values():
        m["pt_partial_eta2_by_k"] = dict(m["ft_partial_eta2_by_k"])
    new = redecide_summary(s)[0]["claims"]["CR-8"]
    assert new["verdict"] == "inconclusive"
    assert new["controls"][0]["meets_rule"] is True


def test_check_finds_a_hand_edited_curve():
    """icr check compares each stored verdict with what its stored measurements give under the
    spec: a curve edited after the verdict was written is found."""
    from mechinterp_icr.claims.check import check_summary

    s = registry_summary()
    assert check_summary(s) == []
    dip = {str(k): 0.5 if k == 5 else 0.95 for k in range(1, 9)}
    s = _cr2_curves(s, [dip] * 5)
    assert any(p.startswith("CR-2: stored verdict 'holds'") for p in check_summary(s))


def test_an_unreadable_seed_is_named_not_counted_as_failing_in_the_headline():
    from mechinterp_icr.claims.headline import condition_phrase
    from mechinterp_icr.claims.protocol import Condition

    cond = Condition("x", ">=", 0.1)
    text = condition_phrase(cond, {"0": -0.8, "1": 0.05, "2": 0.3},
                            unreadable={"0": "no headroom"})
    assert "seed 0" not in text.split(";")[0] and "min 0.05 on seed 1" in text
    assert "cannot be read on seed 0 (no headroom)" in text
    assert condition_phrase(cond, {"0": 1.0}, unreadable={"*": "bound n/a"}) == \
        "cannot be read (bound n/a)"


def test_a_pooled_condition_with_an_unreadable_seed_is_not_met():
    from mechinterp_icr.claims.protocol import Condition, evaluate_condition

    cond = Condition("d", "<=", 0.02, rule="pooled")
    r = evaluate_condition(cond, {"0": {}, "1": {}}, {"1": "bad curve"}, 0.01)
    assert r["met"] is None
    r = evaluate_condition(cond, {"0": {}, "1": {}}, None, 0.01)
    assert r["met"] is True and r["unreadable"] == {}


def test_cr9_is_redecided_and_its_figure_redrawn_from_the_stored_curves(tmp_path):
    """CR-9's lam_s, rise and drop are the spec's, read from the stored per-lam curves: a
    curve flat from lam_s on no longer holds after a redecide, and its figure (which draws
    lam_s and the rule) is redrawn."""
    from mechinterp_icr.viz.redecide import redecide_outputs

    s = registry_summary()
    assert s["claims"]["CR-9"]["verdict"] == HOLDS
    for m in s["claims"]["CR-9"]["per_seed"].values():
        m["ft_eta2_by_lam"] = {"0": 0.2, "0.1": 0.6, "0.2": 0.6, "0.3": 0.61, "0.9": 0.62}
    s["claims"]["CR-9"]["figure"] = "figures/cr9_by_lam.html"
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps(s))
    res = redecide_outputs(out)
    assert res.after["CR-9"] == NOT_HOLD and res.before["CR-9"] == HOLDS
    assert (out / "figures" / "cr9_by_lam.html").exists()
    stored = json.loads((out / "summary.json").read_text())["claims"]["CR-9"]
    assert stored["pooled"]["cr9_lam_s"] == 0.1
