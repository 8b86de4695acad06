"""``icr check``: the protocol and registry checks of a summary, on a summary of every
registered claim built by the test and on copies tampered in the ways a wrong verdict would
show. (The committed figures/summary.json is checked in CI by `icr redecide figures --check`.)"""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from helpers import registry_summary

from mechinterp_icr.claims.check import check_summary, registered_id
from mechinterp_icr.cli import main


@pytest.fixture(scope="module")
def summary() -> dict:
    return registry_summary()


def _holding(summary: dict) -> str:
    return next(cid for cid, c in summary["claims"].items()
                if c["verdict"] == "holds" and registered_id(cid))


def test_a_reproduction_summary_passes(summary, tmp_path):
    assert check_summary(summary) == []
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(summary))
    r = CliRunner().invoke(main, ["check", str(f)])
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith(f"0 protocol problems over {len(summary['claims'])} claims")


def test_variant_ids_name_their_registered_claim():
    assert registered_id("CR-2 (shared tokens)") == "CR-2"
    assert registered_id("IR-8") == "IR-8"
    assert registered_id("XY-1") is None
    # only a variant's own suffix is read: another parenthesis names no registered claim,
    # and icr check says so (its rules would otherwise go unchecked)
    assert registered_id("CR-2 (other)") is None
    problems = check_summary({"claims": {"CR-2 (shared-tokens)": {}}})
    assert any("CR-2 (shared-tokens): names registered claim CR-2" in p for p in problems)
    from mechinterp_icr.claims.protocol import split_variant, variant_id

    for cid in ("CR-8", "IR-3", "CR-1 (shared tokens)"):
        assert variant_id(*split_variant(cid)) == cid


def test_a_moved_threshold_is_found(summary):
    s = copy.deepcopy(summary)
    cid = _holding(s)
    s["claims"][cid]["conditions"][0]["threshold"] = -1e9
    assert any("registered:" in p for p in check_summary(s))


def test_a_flipped_met_flag_is_found_and_holds_refused(summary):
    s = copy.deepcopy(summary)
    cid = _holding(s)
    cond = s["claims"][cid]["conditions"][0]
    cond["per_seed"] = {k: None for k in cond["per_seed"]}  # no numbers, still "met"
    problems = check_summary(s)
    assert any("per-seed values give met=None" in p for p in problems)
    assert any(p.startswith(f"{cid}: holds although the registered rule") for p in problems)


def test_a_negative_control_that_meets_its_condition_refuses_holds(summary):
    s = copy.deepcopy(summary)
    cid = _holding(s)
    neg = next(k for k in s["claims"][cid]["controls"] if k["kind"] == "negative")
    neg["meets_rule"] = True
    problems = check_summary(s)
    assert any("holds although negative control" in p for p in problems)
    assert check_summary(s, registry=False)  # the protocol check alone finds it too


def test_a_missing_control_and_too_few_seeds_are_found(summary):
    s = copy.deepcopy(summary)
    cid = _holding(s)
    s["claims"][cid]["controls"] = s["claims"][cid]["controls"][1:]
    s["claims"][cid]["per_seed"] = dict(list(s["claims"][cid]["per_seed"].items())[:3])
    problems = check_summary(s)
    assert any("control" in p and "is missing" in p for p in problems)
    assert any("3 seeds (< 5)" in p for p in problems)


def test_cli_exit_codes(tmp_path, summary):
    bad = copy.deepcopy(summary)
    bad["claims"][_holding(bad)]["holds"] = False
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(bad))
    r = CliRunner().invoke(main, ["check", str(f)])
    assert r.exit_code == 1 and "disagrees with verdict" in r.output
    r = CliRunner().invoke(main, ["check", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "cannot be read" in r.output
    assert "Traceback" not in r.output
