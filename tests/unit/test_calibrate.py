"""``icr calibrate shared-rate`` (the shared-token variant's sharing rate, from the ideal
reader, no training) and the seed checks of both calibrations."""

import json

import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main


def test_shared_rate_recommends_the_smallest_rate_meeting_both_bounds(tmp_path):
    from mechinterp_icr.claims.cr_registry import SHARED_IDEAL_K1_MAX, SHARED_IDEAL_KMAX_MIN
    from mechinterp_icr.experiments.cr.calibrate import RATES

    out = tmp_path / "rate.json"
    r = CliRunner().invoke(main, ["calibrate", "shared-rate", "--seeds", "100-101", "--n",
                                  "400", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    table = data["table"]
    assert [t["attr_share"] for t in table] == list(RATES) and data["seeds"] == [100, 101]
    for t in table:  # meets <=> both bounds on every seed (2 seeds: the 3 SD check too)
        k1, km = t["rows"][0]["per_seed"], t["rows"][-1]["per_seed"]
        assert len(k1) == 2 and len(t["rows"]) == 8  # K = 1 .. max_demos
        if t["meets"]:
            assert max(k1) <= SHARED_IDEAL_K1_MAX and min(km) >= SHARED_IDEAL_KMAX_MIN
    # no sharing: the demos fix the type at K = 1, no headroom
    assert table[0]["rows"][0]["mean"] == pytest.approx(1.0) and not table[0]["meets"]
    first = next(t["attr_share"] for t in table if t["meets"])
    assert data["recommended"] == first
    assert f"recommended task.attr_share = {first}" in r.output


@pytest.mark.parametrize("cmd", ["shared-rate", "cr9-noise"])
@pytest.mark.parametrize("seeds,why", [("0-3", "outside the decision seeds"),
                                       ("200,4", "outside the decision seeds"),
                                       ("5-x", "expected"), ("9-2", "expected"),
                                       ("", "expected")])
def test_a_calibration_refuses_decision_seeds_and_bad_seeds(tmp_path, cmd, seeds, why):
    r = CliRunner().invoke(main, ["calibrate", cmd, "--seeds", seeds],
                           catch_exceptions=False)
    assert r.exit_code == 2 and "--seeds" in r.output and why in r.output, r.output
    assert "Traceback" not in r.output and not list(tmp_path.iterdir())
