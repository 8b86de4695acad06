"""A rounding rerun attached to a published reproduction (SPEC 0, "robust to the machine"):
every claim carries the rerun's verdict and ``fragile``; a fragile verdict is never shown as
settled (README table, report); ``icr check`` and ``icr redecide --check`` find a flag that is
not what the pair gives; machine noise is measured per rule. Every summary is built here."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from helpers import registry_summary

from mechinterp_icr.claims.check import check_summary
from mechinterp_icr.claims.protocol import HOLDS, NOT_HOLD
from mechinterp_icr.claims.redecide import redecide_summary
from mechinterp_icr.claims.rerun import (
    attach_rerun,
    decision_statistic,
    machine_noise,
    shown_verdict,
)
from mechinterp_icr.cli import main
from mechinterp_icr.viz import readme as rd
from mechinterp_icr.viz.report import render_report


def _cr2_at(summary: dict, values) -> dict:
    s = copy.deepcopy(summary)
    for v, m in zip(values, s["claims"]["CR-2"]["per_seed"].values()):
        m["heldout_icl_exact"] = v
    return redecide_summary(s)[0]


def _pair():
    """A decision run where CR-2 holds (mean 0.91) and its rerun where it does not (0.89)."""
    base = registry_summary()
    main_run = _cr2_at(base, [0.91] * 5)
    rerun = {**_cr2_at(base, [0.89] * 5), "rounding": "avx2"}
    assert main_run["claims"]["CR-2"]["verdict"] == HOLDS
    assert rerun["claims"]["CR-2"]["verdict"] == NOT_HOLD
    return main_run, rerun


def test_a_fragile_pair_is_flagged_and_never_shown_as_settled(tmp_path):
    main_run, rerun = _pair()
    s = attach_rerun(main_run, rerun, "rerun/summary.json")
    cr2 = s["claims"]["CR-2"]
    assert cr2["fragile"] is True and cr2["rerun"]["verdict"] == NOT_HOLD
    assert cr2["rerun"]["deciding"]["value"] == pytest.approx(0.91)
    assert cr2["rerun"]["deciding"]["rerun_value"] == pytest.approx(0.89)
    assert s["rerun"]["fragile"] == ["CR-2"] and s["rerun"]["rounding"] == "avx2"
    assert not any(c["fragile"] for cid, c in s["claims"].items() if cid != "CR-2")
    assert shown_verdict(cr2) == "holds, fragile (does not hold under avx2 rounding)"
    assert check_summary(s) == []

    row = next(r for r in rd.claim_table(s).splitlines() if r.startswith("| CR-2 |"))
    assert "| holds, fragile (does not hold under avx2 rounding) |" in row
    assert row.endswith("| does not hold (0.89) |")
    assert "rerun under avx2 rounding" in rd.claim_table(s).splitlines()[0]
    html = render_report(s, tmp_path)
    assert "holds, fragile (does not hold under avx2 rounding)" in html
    assert "1 verdicts differ there and are marked fragile (CR-2)" in html

    # without a rerun nothing of it is shown
    assert "rerun" not in rd.claim_table(main_run).splitlines()[0]
    assert shown_verdict(main_run["claims"]["CR-2"]) == HOLDS


def test_check_finds_a_fragile_flag_the_pair_does_not_give():
    main_run, rerun = _pair()
    s = attach_rerun(main_run, rerun, "rerun/summary.json")
    s["claims"]["CR-2"]["fragile"] = False
    assert any("CR-2: fragile is False" in p for p in check_summary(s))
    del s["claims"]["CR-1"]["fragile"]
    assert any(p.startswith("CR-1: the summary has a rounding rerun") for p in check_summary(s))


def test_redecide_attaches_a_rerun_and_checks_it(tmp_path):
    main_run, rerun = _pair()
    out, other = tmp_path / "figures", tmp_path / "out-avx2"
    out.mkdir()
    other.mkdir()
    (out / "summary.json").write_text(json.dumps(main_run))
    (other / "summary.json").write_text(json.dumps(rerun))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{rd.BEGIN}\n{rd.claim_table(main_run)}\n{rd.END}\n")
    r = CliRunner().invoke(main, ["redecide", str(out), "--rerun", str(other),
                                  "--readme", str(readme)])
    assert r.exit_code == 0, r.output
    assert (out / "rerun" / "summary.json").is_file()
    s = json.loads((out / "summary.json").read_text())
    assert s["claims"]["CR-2"]["fragile"] is True and s["rerun"]["summary"] == "rerun/summary.json"
    assert "holds, fragile" in readme.read_text()
    r = CliRunner().invoke(main, ["redecide", str(out), "--check", "--readme", str(readme)])
    assert r.exit_code == 0, r.output

    # the rerun's measurements change (a hand edit): its stored decisions are stale
    rr = json.loads((out / "rerun" / "summary.json").read_text())
    for m in rr["claims"]["CR-2"]["per_seed"].values():
        m["heldout_icl_exact"] = 0.95
    (out / "rerun" / "summary.json").write_text(json.dumps(rr))
    r = CliRunner().invoke(main, ["redecide", str(out), "--check"])
    assert r.exit_code == 1
    assert "rerun CR-2: verdict stored 'does not hold', the specs give 'holds'" in r.output
    assert "CR-2: rerun differs from what the specs give" in r.output
    # redecided, CR-2 is no longer fragile
    assert CliRunner().invoke(main, ["redecide", str(out)]).exit_code == 0
    assert json.loads((out / "summary.json").read_text())["claims"]["CR-2"]["fragile"] is False

    # a rerun of other seeds is not a rerun of this run; a missing attached rerun is named
    (other / "summary.json").write_text(json.dumps({**rerun, "seeds": [0, 1, 2]}))
    r = CliRunner().invoke(main, ["redecide", str(out), "--rerun", str(other)])
    assert r.exit_code == 2 and "not a rerun of it" in r.output
    (out / "rerun" / "summary.json").unlink()
    r = CliRunner().invoke(main, ["redecide", str(out), "--check"])
    assert r.exit_code == 2 and "rounding rerun" in r.output and "missing" in r.output


def test_decision_statistic_is_the_number_each_seed_rule_compares():
    per = {"0": 0.5, "1": 0.9, "2": 0.7, "3": 0.8, "4": 0.6}
    e = {"per_seed": per, "op": ">=", "threshold": 0.5}
    assert decision_statistic({**e, "rule": "every_seed"}) == 0.5
    assert decision_statistic({**e, "rule": "mean"}) == pytest.approx(0.7)
    assert decision_statistic({**e, "rule": "fraction", "min_fraction": 0.8}) == 0.6
    assert decision_statistic({**e, "rule": "every_seed", "op": "<="}) == 0.9
    # a negative control misbehaves when any seed meets it: its best seed decides
    assert decision_statistic({**e, "rule": "every_seed", "kind": "negative"}) == 0.9
    assert decision_statistic({**e, "rule": "pooled", "pooled_value": 0.3}) == 0.3
    assert decision_statistic({**e, "per_seed": {**per, "4": None}}) is None


def test_machine_noise_flags_a_rule_tighter_than_its_noise():
    """CR-2's mean moves by 0.02 between the two roundings with a margin of 0.01: tight."""
    main_run, rerun = _pair()
    rows = {(r.claim, r.what): r for r in machine_noise(main_run, rerun)}
    cr2 = rows[("CR-2", "condition heldout_icl_exact")]
    assert cr2.stat_noise == pytest.approx(0.02) and cr2.margin == pytest.approx(0.01)
    assert cr2.tight
    same = [r for (c, _), r in rows.items() if c != "CR-2"]
    assert same and not any(r.tight for r in same)
    assert all(r.noise == 0 for r in same if r.noise is not None)


def test_every_registered_machine_noise_names_a_registered_rule():
    from mechinterp_icr.claims.noise import MACHINE_NOISE
    from mechinterp_icr.claims.registry import REGISTRY, registered_id

    for cid, rules in MACHINE_NOISE.items():
        rid = registered_id(cid)
        assert rid is not None, cid
        spec = REGISTRY[rid]
        names = {f"condition {c.metric}" for c in spec.conditions} | {
            f"control {k.name}" for k in spec.controls}
        assert set(rules) <= names, (cid, set(rules) - names)
        assert all(v >= 0 for v in rules.values())


def test_a_rerun_that_cannot_show_fragility_is_refused(tmp_path):
    """A rerun under the decision run's own rounding, or none named, or of other seeds, is
    refused when attached and when an attached one is redecided (it could never show a
    fragile verdict)."""
    main_run, rerun = _pair()
    out, other = tmp_path / "figures", tmp_path / "other"
    out.mkdir()
    other.mkdir()
    (out / "summary.json").write_text(json.dumps({**main_run, "rounding": "avx2"}))
    (other / "summary.json").write_text(json.dumps(rerun))
    r = CliRunner().invoke(main, ["redecide", str(out), "--rerun", str(other)])
    assert r.exit_code == 2 and "decision run's own rounding 'avx2'" in r.output
    (out / "summary.json").write_text(json.dumps(main_run))
    (other / "summary.json").write_text(json.dumps({**rerun, "rounding": None}))
    r = CliRunner().invoke(main, ["redecide", str(out), "--rerun", str(other)])
    assert r.exit_code == 2 and "names no rounding" in r.output
    (other / "summary.json").write_text(json.dumps(rerun))
    assert CliRunner().invoke(main, ["redecide", str(out), "--rerun", str(other)]).exit_code == 0
    # the attached file replaced by a run of other seeds: every later redecide refuses it
    swapped = {**json.loads((out / "rerun" / "summary.json").read_text()), "seeds": [5, 6]}
    (out / "rerun" / "summary.json").write_text(json.dumps(swapped))
    for args in (["redecide", str(out)], ["redecide", str(out), "--check"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "not a rerun of it" in r.output
    r = CliRunner().invoke(main, ["check", str(out / "summary.json")])
    assert r.exit_code == 1 and "not a rerun of it" in r.output


def test_check_reads_the_attached_rerun_and_the_record(tmp_path):
    main_run, rerun = _pair()
    s = attach_rerun(main_run, rerun, "rerun/summary.json")
    (tmp_path / "rerun").mkdir()
    (tmp_path / "rerun" / "summary.json").write_text(json.dumps(rerun))
    (tmp_path / "summary.json").write_text(json.dumps(s))
    r = CliRunner().invoke(main, ["check", str(tmp_path / "summary.json")])
    assert r.exit_code == 0, r.output
    # CR-2 made consistent with itself but not with the rerun's summary
    t = copy.deepcopy(s)
    t["claims"]["CR-2"]["rerun"]["verdict"] = HOLDS
    t["claims"]["CR-2"]["fragile"] = False
    t["rerun"]["fragile"] = []
    (tmp_path / "summary.json").write_text(json.dumps(t))
    r = CliRunner().invoke(main, ["check", str(tmp_path / "summary.json")])
    assert r.exit_code == 1 and "the attached rerun's summary says 'does not hold'" in r.output
    # the record's list of fragile claims, and a record deleted under flagged claims
    t = copy.deepcopy(s)
    t["rerun"]["fragile"] = []
    assert any("its rerun record lists fragile" in p for p in check_summary(t))
    del t["rerun"]
    assert any("names no rounding rerun" in p for p in check_summary(t))


def test_the_deciding_number_is_the_deciding_controls_when_two_share_a_metric():
    """CR-5's two Subject-head controls read one metric (pooled mean, every seed): when the
    every-seed one decides, its number (the worst seed) is the one reported."""
    base = registry_summary()
    vals = dict(zip(["0", "1", "2", "3", "4"], [0.0, -0.1, -0.1, 0.0, 0.2]))
    for k in base["claims"]["CR-5"]["controls"]:
        if k["metric"] == "subject_same_query_changed":
            k["per_seed"] = dict(vals)
    s = redecide_summary(base)[0]
    assert s["claims"]["CR-5"]["verdict"] == "inconclusive"
    out = attach_rerun(s, {**s, "rounding": "avx2"}, "rerun/summary.json")
    d = out["claims"]["CR-5"]["rerun"]["deciding"]
    assert d["what"].startswith("control Subject head") and "(every seed)" in d["what"]
    assert d["value"] == pytest.approx(0.2) and d["rerun_value"] == pytest.approx(0.2)


def test_the_report_does_not_count_a_fragile_holds_as_holding(tmp_path):
    main_run, rerun = _pair()
    s = attach_rerun(main_run, rerun, "rerun/summary.json")
    import re

    n = sum(1 for c in s["claims"].values() if c["verdict"] == HOLDS)
    got = re.search(r"(\d+) of (\d+) claims\s+hold and are not fragile",
                    render_report(s, tmp_path))
    assert got and (int(got[1]), int(got[2])) == (n - 1, len(s["claims"]))
