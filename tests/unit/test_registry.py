"""The registry is pinned to SPEC (sections 1 and 2): every threshold SPEC states for a claim's
rule and for its controls is registered, with its comparison. A change here is a change of the
pre-registration and needs a dated entry in docs/registry.md."""

import pytest

from mechinterp_icr.claims import REGISTRY

TYPE_BOUND = 1 / 4 + 0.05  # 1/L + 0.05 at L = 4 types

# claim -> (rule thresholds, control thresholds), each a list of (op, value) from SPEC.
SPEC_NUMBERS = {
    "CR-1": ([(">=", 0.95), ("<=", TYPE_BOUND)], [("<=", TYPE_BOUND)]),
    "CR-2": ([(">=", 0.90), ("<=", 0.02)], [(">", 0.5), (">", 0.5)]),
    "CR-3": ([(">=", 0.80)], [(">", TYPE_BOUND)]),
    "CR-4": ([(">=", 0.95), (">=", 0.90), (">=", 0.8), (">=", 0.1), (">=", 0.8), (">=", 0.1),
              (">=", 0.80)],
             [(">", 0.5), (">=", 0.1), (">", 0.3), (">", 0.05), (">", 0.1), ("<", 0.2)]),
    "CR-5": ([(">=", 0.5), (">=", 0.5), (">=", 2.0), (">=", 2.0)],
             [(">", 0.2), (">", 0.05), (">=", 0.9), (">=", 0.9)]),
    "CR-6": ([(">=", 0.99), ("<=", 0.10)], [(">", 0.5)]),
    "CR-7": ([(">=", 1.0), (">=", 1.0)], [(">=", 1.0), (">=", 1.0)]),
    "IR-1": ([(">=", 1.0)], [(">", 0.1)]),
    "IR-2": ([(">=", 0.999), (">=", 0.98), (">=", 0.90), (">=", 0.99)],
             [(">=", 0.90), (">=", 0.90)]),
    "IR-3": ([("<=", 0.02), (">=", 0.05), ("<=", 0.02)], [(">=", 0.05)]),
    # IR-4's GD/PGD >= 2.0 half is "not tested" when not shown (SPEC 2), so it is not part of
    # the rule; it is ir_registry.IR4_PERTURBATION_ROLE, pinned in tests/unit/test_claims_ir.py
    "IR-4": ([("<=", 0.02), ("<=", 0.02)], [("<=", 0.02)]),
    "IR-6": ([("<=", 0.02), (">=", 0.05), ("<=", 0.05)], [(">=", 0.05)]),
    # IR-7's control: the large-step state must not reach IR-2's swap bound (docs/registry.md,
    # 2026-12-01; the rows-met control could not fail at K = 3)
    "IR-7": ([("<=", 0.02), ("<=", 0.02)], [(">=", 0.90)]),
    "IR-8": ([("<=", 0.5), (">=", 0.99), ("<=", 0.1)], [(">=", 0.5), (">=", 0.5)]),
}


def _contains(registered, wanted):
    pool = [(op, round(v, 9)) for op, v in registered]
    for op, v in wanted:
        key = (op, round(v, 9))
        if key not in pool:
            return key
        pool.remove(key)
    return None


@pytest.mark.parametrize("cid", sorted(SPEC_NUMBERS))
def test_registry_has_specs_numbers(cid):
    spec = REGISTRY[cid]
    rule, controls = SPEC_NUMBERS[cid]
    missing = _contains([(c.op, c.threshold) for c in spec.conditions], rule)
    assert missing is None, f"{cid}: rule threshold {missing} not registered"
    missing = _contains([(k.condition.op, k.condition.threshold) for k in spec.controls],
                        controls)
    assert missing is None, f"{cid}: control threshold {missing} not registered"


def test_cr7_runs_at_both_learning_rates_on_four_of_five_seeds():
    for c in REGISTRY["CR-7"].conditions:
        assert c.rule == "fraction" and c.min_fraction == pytest.approx(0.8)


def test_every_claim_is_pinned():
    assert set(REGISTRY) - set(SPEC_NUMBERS) <= {"IR-5"}  # IR-5 is pinned by its own rule
    s5 = REGISTRY["IR-5"]
    assert s5.controls and len(s5.conditions) >= 3


def _profile_values(target: str, name: str) -> dict:
    from mechinterp_icr.runner import TARGETS, config_keys

    exp = TARGETS[target]
    return dict(config_keys(exp.profile(name)))


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_profiles_use_the_registered_hyperparameters(target):
    """Every registered hyperparameter is a real config key whose value is the registered
    one in both profiles (unless SPEC makes it profile-specific)."""
    quick, paper = _profile_values(target, "quick"), _profile_values(target, "paper")
    prefix = target.upper() + "-"
    for cid, s in REGISTRY.items():
        if not cid.startswith(prefix):
            continue
        for key, value in s.hyperparameters.items():
            assert key in quick, f"{cid}: hyperparameter {key!r} is not a {target} config key"
            want = list(value) if isinstance(value, tuple) else value
            for name, vals in (("quick", quick), ("paper", paper)):
                if key in s.profile_specific and name == "paper":
                    continue
                got = vals[key]
                got = list(got) if isinstance(got, tuple) else got
                assert got == want, f"{cid}: {name} profile has {key} = {got!r}, registered " \
                                    f"{want!r}"


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_profiles_differ_only_where_no_verdict_reads_the_key(target):
    """SPEC 0: what a verdict depends on is identical in quick and paper unless SPEC says
    otherwise; any other difference must be a registered report-only key."""
    from mechinterp_icr.claims.registry import REPORT_ONLY

    quick, paper = _profile_values(target, "quick"), _profile_values(target, "paper")
    allowed = set(REPORT_ONLY[target])
    for s in REGISTRY.values():
        if s.id.startswith(target.upper() + "-"):
            allowed |= set(s.profile_specific)
    differ = sorted(k for k in set(quick) | set(paper) if quick.get(k) != paper.get(k))
    assert [k for k in differ if k not in allowed] == []


def test_every_registered_metric_declares_its_range():
    """Intervals over seeds are reported inside a metric's declared range (docs/registry.md,
    2026-12-02): every metric a condition or control reads is declared (None = unbounded),
    CR and IR agree on shared names, and a range is (lo, hi) with lo < hi."""
    from mechinterp_icr.claims.cr_registry import CR_METRIC_RANGES
    from mechinterp_icr.claims.ir_registry import IR4_PERTURBATION_ROLE, IR_METRIC_RANGES
    from mechinterp_icr.claims.registry import METRIC_RANGES, metric_range

    metrics = {c.metric for s in REGISTRY.values() for c in s.conditions}
    metrics |= {k.condition.metric for s in REGISTRY.values() for k in s.controls}
    metrics.add(IR4_PERTURBATION_ROLE.metric)
    assert metrics - set(METRIC_RANGES) == set()
    for m in set(CR_METRIC_RANGES) & set(IR_METRIC_RANGES):
        assert CR_METRIC_RANGES[m] == IR_METRIC_RANGES[m], m
    for m, r in METRIC_RANGES.items():
        assert r is None or (len(r) == 2 and r[0] < r[1]), m
    assert metric_range("heldout_icl_exact") == (0.0, 1.0)
    assert metric_range("relation_margin") is None and metric_range("no such metric") is None
