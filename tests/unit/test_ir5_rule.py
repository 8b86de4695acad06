"""IR-5's rule (claims/ir5_rule.py) on stored runs built to show, or not show, the effect:
N read at the half-gain target, the slope against s_poly, and every control fed the null
model it must catch (an arm that learns nothing, a linear memory, a plateau that is not flat,
a gain of zero)."""

import math

import pytest
from helpers import build_ir5_seed

from mechinterp_icr.claims.ir5_rule import (
    best_case_slope,
    crossing,
    ir5_seed,
    isotonic_fit,
    log_slope,
    s_poly,
)
from mechinterp_icr.experiments.ir.claims import ir_claims
from mechinterp_icr.experiments.ir.config import QUICK

SEEDS = [str(s) for s in range(5)]
RULE = {"flat": 0.02, "min_frac": 0.95, "retrieval_min": 0.99}


def _claim(per5):
    per = {f"IR-{i}": {s: {} for s in SEEDS} for i in range(1, 10)}
    per["IR-5"] = per5
    return next(c for c in ir_claims(per, QUICK, None, []) if c.id == "IR-5").to_dict()


def _all(**kw):
    return {s: build_ir5_seed(**kw) for s in SEEDS}


def _cond(c, metric):
    return next(x for x in c["conditions"] if x["metric"] == metric)


def test_crossing_reads_the_isotonic_fit_log_interpolated():
    acc = {"1": [0.2], "2": [0.4], "4": [0.6], "8": [0.8]}
    assert crossing(acc, 0.4) == pytest.approx(2.0)
    assert crossing(acc, 0.5) == pytest.approx(2 ** 1.5)  # half-way in log N
    assert crossing(acc, 0.1) == 1.0  # already at the smallest N: that N (an upper bound)
    assert crossing(acc, 0.9) is None  # never reached: right-censored
    # one lucky N does not cross alone: the fit pools it with the lower N after it
    assert crossing({"1": [0.2], "2": [0.9], "4": [0.3], "8": [0.95]}, 0.8) == pytest.approx(
        2 ** (2 + (0.8 - 0.6) / (0.95 - 0.6)))
    assert math.isnan(crossing({"1": [0.2, float("nan")], "2": [0.9]}, 0.5))
    assert isotonic_fit([1, 3, 2], [1, 1, 2]) == pytest.approx([1, 7 / 3, 7 / 3])


def test_s_poly_is_the_slope_of_log_n_squared_over_the_range():
    assert s_poly(128, 4096) == pytest.approx(math.log((12 / 7) ** 2) / math.log(32))
    assert 0.30 < s_poly(128, 4096) < 0.32
    ns = [128, 256, 512, 1024, 2048, 4096]
    # (log n)^2 itself has a least-squares slope close to s_poly (concave in log n: below it)
    assert log_slope(ns, [math.log(n) ** 2 for n in ns]) <= s_poly(128, 4096) + 0.01


def test_a_flat_memory_and_a_linear_learned_memory_hold():
    c = _claim(_all())
    assert c["verdict"] == "holds", c["verdict_reason"]
    m = ir5_seed(build_ir5_seed(), 0.5, **RULE)
    assert m["slope"] == pytest.approx(0.0, abs=1e-9)
    assert m["learned_slope"] == pytest.approx(1.0, abs=1e-6)
    assert m["by_n"]["512"]["N_learned"] == pytest.approx(512.0)


def test_a_memory_whose_N_grows_linearly_does_not_hold():
    c = _claim(_all(N_memory=lambda n: n / 64))
    assert c["verdict"] == "does not hold"
    assert _cond(c, "slope_minus_s_poly")["met"] is False


def test_a_polylog_memory_holds_and_a_steeper_one_does_not():
    assert _claim(_all(N_memory=lambda n: math.log(n)))["verdict"] == "holds"
    c = _claim(_all(N_memory=lambda n: math.log(n) ** 3 / 50))
    assert c["verdict"] == "does not hold"


def test_the_seed_mean_slope_upper_bound_decides_when_every_seed_is_under_s_poly():
    per = {}
    for s, e in zip(SEEDS, (0.30, 0.30, 0.10, 0.10, 0.30)):  # every seed <= s_poly = 0.311
        per[s] = build_ir5_seed(N_memory=lambda n, e=e: 2.0 * (n / 128) ** e)
    c = _claim(per)
    assert _cond(c, "slope_minus_s_poly")["met"] is True
    assert _cond(c, "mean_slope_hi95_minus_s_poly")["met"] is False
    assert c["verdict"] == "does not hold"


def test_a_memory_censored_at_n_max_does_not_hold():
    per = _all()
    top = per["3"]["ir5_by_n"]["4096"]  # training makes it worse than zero data there
    top.update(ceiling=0.3, memory={"z": 0.35, "acc": {N: [0.3] * len(v) for N, v in
                                                      top["memory"]["acc"].items()}})
    assert ir5_seed(per["3"], 0.5, **RULE)["by_n"]["4096"]["N_memory"] is None
    c = _claim(per)
    assert c["verdict"] == "does not hold"
    assert _cond(c, "memory_reached_at_n_max")["met"] is False


def test_a_learned_arm_that_learns_nothing_keeps_the_claim_from_holding():
    per = _all()
    per["1"] = build_ir5_seed(N_learned=lambda n: None)  # flat at its zero-data accuracy
    c = _claim(per)
    assert c["verdict"] == "inconclusive" and not c["holds"]
    bad = {k["condition"].split(" ")[0] for k in c["controls"] if not k["as_expected"]}
    assert "learned_uncensored_n" in bad and "learned_slope" in bad


def test_a_learned_arm_whose_N_does_not_grow_keeps_the_claim_from_holding():
    c = _claim(_all(N_learned=lambda n: 64.0))
    assert c["verdict"] == "inconclusive"
    assert any("learned_slope" in k["condition"] for k in c["controls"] if not k["as_expected"])


def test_no_gain_to_measure_keeps_the_claim_from_holding():
    c = _claim(_all(z_memory=0.8))  # P - z = 0.12 < 0.3
    assert c["verdict"] == "inconclusive"
    assert any("min_gain" in k["condition"] for k in c["controls"] if not k["as_expected"])


def test_a_plateau_that_is_not_flat_makes_its_seed_unreadable_not_failing():
    per = _all()
    per["2"] = build_ir5_seed(plateau={128: 0.85, 256: 0.92})
    c = _claim(per)
    assert c["verdict"] == "inconclusive"
    cond = _cond(c, "slope_minus_s_poly")
    assert cond["met"] is None and "not flat" in cond["unreadable"]["2"]
    assert "n = 128" in cond["unreadable"]["2"]  # every n of that seed is named


def test_a_readable_failing_seed_decides_beside_an_unreadable_one():
    per = _all(N_memory=lambda n: n / 64)  # every readable seed fails
    per["2"] = build_ir5_seed(retrieval=0.98)  # not measurable
    c = _claim(per)
    assert c["verdict"] == "does not hold"
    assert "retrieval 0.98" in _cond(c, "slope_minus_s_poly")["unreadable"]["2"]


def test_a_plateau_below_the_ceiling_bar_is_not_measurable():
    c = _claim(_all(ceiling=1.0, P=0.90))  # 0.90 < 0.95 x 1.0
    assert c["verdict"] == "inconclusive"
    assert "ceiling" in _cond(c, "slope_minus_s_poly")["unreadable"]["0"]


def test_conventions_are_reported_not_deciding():
    from mechinterp_icr.claims import spec

    per = _all(N_memory=lambda n: math.log(n))
    m = spec("IR-5").derive("IR-5", per)[0]["0"]
    assert {"slope_q0.3", "slope_q0.7", "slope_q0.9", "learned_slope_q0.9"} <= set(m)
    assert m["slope_q0.9"] != m["ir5_slope"]  # another fraction, another N


def test_a_gap_in_the_learned_arm_never_hides_a_failing_memory_arm():
    per = _all(N_memory=lambda n: n / 64)
    for m in per.values():
        m["ir5_by_n"]["128"]["learned"] = None  # the learned job failed
    c = _claim(per)
    assert c["verdict"] == "does not hold"
    assert _cond(c, "slope_minus_s_poly")["met"] is False


def test_plateau_means_exactly_the_bar_apart_are_flat():
    m = build_ir5_seed(plateau={128: 0.90, 256: 0.92}, ceiling=0.94)
    assert ir5_seed(m, 0.5, **RULE)["unmeasurable"] == {}


def test_a_verdict_that_flips_at_another_gain_fraction_says_so():
    # half the gain at N = 2 everywhere, the rest only at N = n / 64: holds at q = 0.5,
    # not at 0.9
    per = {}
    for s in SEEDS:
        m = build_ir5_seed()
        for n, r in m["ir5_by_n"].items():
            z, P = r["memory"]["z"], 0.92
            for N in r["memory"]["acc"]:
                f = 0.5 * min(1.0, float(N) / 2) + 0.5 * min(1.0, float(N) / (int(n) / 64))
                r["memory"]["acc"][N] = [z + (P - z) * f] * len(r["memory"]["acc"][N])
        per[s] = m
    c = _claim(per)
    assert c["verdict"] == "holds"
    assert "At gain fraction(s)" in c["notes"] and "0.9" in c["notes"]


def test_redecide_recomputes_the_ir5_table_and_check_finds_a_stale_one():
    import copy

    from helpers import registry_summary

    from mechinterp_icr.claims.redecide import differences, redecide_summary

    s = registry_summary()
    s["tables"] = {"IR-5 sample complexity": {"rows": [], "note": "kept"}}
    new = redecide_summary(s)[0]
    table = new["tables"]["IR-5 sample complexity"]
    assert table["note"] == "kept" and table["q"] == 0.5 and len(table["rows"]) == 5 * 6
    assert any("table 'IR-5 sample complexity'" in d for d in differences(s, new))
    again = redecide_summary(copy.deepcopy(new))[0]
    assert differences(new, again) == []


def test_best_case_slope_puts_each_free_n_where_it_lowers_the_slope():
    ns = [128, 256, 512, 1024, 2048, 4096]
    Ns = [2, 4, 8, 16, 32, 64]  # N = n / 64: slope 1
    assert best_case_slope(ns, Ns, [False] * 6, 1, 256) == pytest.approx(1.0)
    # a free n in the upper half goes to the smallest N, one in the lower half to the largest
    assert best_case_slope(ns, Ns, [False] * 5 + [True], 1, 64) == pytest.approx(2.5 / 17.5)
    assert best_case_slope(ns, Ns, [False, False, True, False, False, False], 1, 256
                           ) == pytest.approx(15 / 17.5)
    assert math.isnan(best_case_slope(ns, [None] * 6, [False] * 6, 1, 256))


def _unreadable_at(per, n, **row):
    for m in per.values():
        m["ir5_by_n"][str(n)].update(row)
    return per


def test_an_unreadable_n_never_hides_a_slope_that_fails_whatever_it_holds():
    # null model: a memory whose N grows linearly in n (no polylog bound); n = 512 cannot be
    # read on every seed, yet no N there could bring the slope under s_poly
    per = _unreadable_at(_all(N_memory=lambda n: n / 64), 512, retrieval=0.98)
    c = _claim(per)
    cond = _cond(c, "slope_minus_s_poly")
    assert c["verdict"] == "does not hold", c["verdict_reason"]
    assert cond["met"] is False and not cond.get("unreadable")
    assert all(0.5 < m["ir5_slope_best_case"] < 0.9 for m in c["derived"].values())
    # the same with the top n unreadable: N = 1 there could make the slope 0.14 < s_poly, so
    # the seed cannot be read (and N at n_max neither)
    per = _unreadable_at(_all(N_memory=lambda n: n / 64), 4096, retrieval=0.98)
    c = _claim(per)
    assert c["verdict"] == "inconclusive"
    assert _cond(c, "slope_minus_s_poly")["met"] is None
    assert _cond(c, "memory_reached_at_n_max")["met"] is None


def test_an_unreadable_middle_n_leaves_n_max_readable_and_a_flat_memory_unread():
    per = _unreadable_at(_all(), 512, retrieval=0.98)  # flat memory: holds wherever read
    c = _claim(per)
    assert c["verdict"] == "inconclusive"
    assert _cond(c, "slope_minus_s_poly")["met"] is None
    assert "n = 512: retrieval 0.98" in _cond(c, "slope_minus_s_poly")["unreadable"]["0"]
    assert _cond(c, "memory_reached_at_n_max")["met"] is True


def test_a_run_short_of_the_registered_grid_is_not_measurable():
    from mechinterp_icr.claims.ir_registry import ir5_rule_kwargs

    rule = ir5_rule_kwargs()
    m = build_ir5_seed()
    m["ir5_by_n"]["256"]["memory"]["acc"]["4"] = [0.5, 0.5]  # 2 runs where 8 are registered
    del m["ir5_by_n"]["1024"]  # a registered n not stored
    m["ir5_by_n"]["8192"] = m["ir5_by_n"]["4096"]  # an n outside the grid: ignored
    m["ir5_by_n"]["128"]["learned"]["acc"]["8"] = [0.5]  # 1 learned run where 4 are
    got = ir5_seed(m, 0.5, **rule)
    assert set(got["by_n"]) == {"128", "256", "512", "1024", "2048", "4096"}
    assert "2 of 8 runs at N = 4" in got["unmeasurable"]["256"]
    assert "not measured" in got["unmeasurable"]["1024"]
    assert "1 of 4 runs at N = 8" in got["learned_unmeasurable"]["128"]
    assert set(got["unmeasurable"]) == {"256", "1024"}
    # without the registered grid (ad-hoc use) the stored rows are read as they are
    assert ir5_seed(m, 0.5, **RULE)["unmeasurable"] == {}
    c = _claim({s: build_ir5_seed() if s != "4" else m for s in SEEDS})
    assert c["verdict"] == "inconclusive"
    assert "n = 256: memory arm: 2 of 8 runs" in _cond(c, "slope_minus_s_poly")["unreadable"]["4"]
