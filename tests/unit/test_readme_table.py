"""README.md's claim table is generated from a summary (``mechinterp_icr.viz.readme``), here
one built by the test. That the committed README's table is the one figures/summary.json gives
under the registered specs is checked in CI: `icr redecide figures --check --readme README.md`."""

import json
from pathlib import Path

import pytest
from helpers import registry_summary

from mechinterp_icr.claims.redecide import redecide_summary
from mechinterp_icr.viz import readme as rd

ROOT = Path(__file__).resolve().parents[2]


def test_table_has_one_row_per_claim_with_its_verdict():
    summary = registry_summary()
    rows = rd.claim_table(summary).splitlines()[2:]
    assert len(rows) == len(summary["claims"])
    for row, (cid, c) in zip(rows, sorted(summary["claims"].items(), key=rd.claim_key)):
        assert row.startswith(f"| {cid} | {c['verdict']} |")


def test_replace_needs_the_markers(tmp_path):
    with pytest.raises(ValueError, match="claim-table"):
        rd.replace_table("no markers", "x")
    s = tmp_path / "s.json"
    s.write_text(json.dumps({"claims": {}}))
    r = tmp_path / "R.md"
    r.write_text(f"a\n{rd.BEGIN}\nold\n{rd.END}\nb\n")
    assert rd.main([str(s), str(r), "--check"]) == 1
    assert rd.main([str(s), str(r)]) == 0 and "old" not in r.read_text()
    assert rd.main([str(s), str(r), "--check"]) == 0
    assert rd.main([str(tmp_path / "missing.json"), str(r)]) == 2


def test_cells_are_short_and_the_table_is_on_the_first_screen():
    """Each cell at most MAX_WORDS words; README short, the table near its top."""
    summary = registry_summary()
    summary["claims"]["IR-5"]["not_measurable"] = "a long reason " * 20
    summary = redecide_summary(summary)[0]
    for row in rd.claim_table(summary).splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4, row
        assert all(len(c.split()) <= rd.MAX_WORDS for c in cells), row
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160  # with the TransformerLens-only loading code (issue 40)
    assert lines.index(rd.BEGIN) < 40


def test_short_cuts_at_a_clause():
    text = "not measurable: " + "word " * 40 + "(the end)"
    out = rd._short(text)
    assert len(out.split()) <= rd.MAX_WORDS and out.endswith("…")
    assert rd._short("a few words") == "a few words"


def test_a_control_that_shares_its_metric_with_another_is_shown_by_its_own_rule():
    """CR-5's two negative controls read one metric (a pooled bound 0.05 and an every-seed
    bound 0.10). When only the every-seed one misbehaves, the README row shows its rule and
    its worst seed, not the first control with that metric."""
    summary = registry_summary()
    per = {"0": 0.0, "1": 0.0, "2": 0.12, "3": 0.0, "4": 0.0}  # mean 0.024, seed 2 > 0.10
    for k in summary["claims"]["CR-5"]["controls"]:
        if k["metric"] == "subject_same_query_changed":
            k["per_seed"] = dict(per)
    summary = redecide_summary(summary)[0]
    c = summary["claims"]["CR-5"]
    assert c["verdict"] == "inconclusive"
    misbehaved = [k["name"] for k in c["controls"] if not k["as_expected"]]
    assert misbehaved == [next(k["name"] for k in c["controls"] if k["rule"] == "every_seed"
                               and k["metric"] == "subject_same_query_changed")]
    _, _, number, rule = rd.claim_row("CR-5", c)
    assert "(seed 2)" in number and "0.1" in rule and "0.05" not in rule, (number, rule)
