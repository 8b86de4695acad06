"""The registry is pinned to SPEC (sections 1 and 2): every threshold SPEC states for a claim's
rule and for its controls is registered, with its comparison. A change here is a change of the
pre-registration and needs a dated entry in docs/registry.md."""

import dataclasses

import pytest

from mechinterp_icr.claims import REGISTRY

TYPE_BOUND = 1 / 4 + 0.05  # 1/L + 0.05 at L = 4 types
F8 = ("fraction", 0.8)  # "on at least 4 of 5 seeds"
E, M, P = "every_seed", "mean", "pooled"

# claim -> (conditions, controls) as SPEC states them: (metric, op, threshold, seed rule) and
# (kind, metric, op, threshold, seed rule); a control's condition is the one the effect would
# satisfy (a negative control must fail it, a positive one pass it). The first condition is the
# headline. Metric names are the registry's names for SPEC's quantities.
SPEC_PINS = {
    # 2026-12-05, machine noise: a tail rule whose noise is over half its margin -> the mean.
    # Revised 2026-12-06: the type bound is read as the type accuracy minus its bound
    # (heldout_icl_best_attr_type - (1/L + 0.05); in the shared-token variant the contrast with
    # uninformative demos - 0.05), pinned in test_cr_type_bounds_are_specs
    "CR-1": ([("pt_typed_recall", ">=", 0.95, E), ("heldout_icl_type_over_bound", "<=", 0.0, M)],
             [("negative", "ft_heldout_icl_type_over_bound", "<=", 0.0, E)]),
    # revised 2026-12-05: the seed-mean curve's largest drop over K (one number over the seeds)
    "CR-2": ([("heldout_icl_exact", ">=", 0.90, M), ("mean_curve_max_drop_over_k", "<=", 0.02, P)],
             [("negative", "pt_heldout_icl_exact", ">", 0.5, E),
              ("negative", "mixed_heldout_icl_exact", ">", 0.5, E)]),
    "CR-3": ([("heldout_icl_exact", ">=", 0.80, M)],
             [("negative", "mixed_heldout_icl_type_over_bound", ">", 0.0, E)]),
    "CR-4": ([("ft_acc_pc", ">=", 0.95, E), ("ft_transfer_acc_pc", ">=", 0.90, E),
              ("ft_patch_gain", ">=", 0.80, M)],  # revised 2026-12-05: necessity reported only
             [("negative", "pt_acc_pc", ">", 0.5, E), ("negative", "pt_patch_gain", ">", 0.3, E),
              ("negative", "ft_shuffle_gap", ">", 0.05, E),
              ("negative", "ft_random_patch_gain", ">", 0.1, M)]),
    "CR-5": ([("relation_role", ">=", 0.5, E), ("subject_role", ">=", 0.5, E),
              ("relation_margin", ">=", 2.0, E), ("subject_margin", ">=", 2.0, E),
              ("distinct_heads", ">=", 1.0, E)],
             # revised 2026-12-05: <= 0.05 pooled over seeds and <= 0.10 on every seed; the
             # PT-only model's Relation role is reported, not a control
             [("negative", "subject_same_query_changed", ">", 0.05, M),
              ("negative", "subject_same_query_changed", ">", 0.10, E),
              ("positive", "construction_relation", ">=", 0.9, E),
              ("positive", "construction_subject", ">=", 0.9, E)]),
    "CR-6": ([("own_format_min", ">=", 0.99, E),
              ("pt_construction_icl_heldout_exact", "<=", 0.10, E)],
             [("negative", "zeroed_relation_ov_icl_exact", ">", 0.5, E)]),
    # revised 2026-12-05: four causal arms, each a speed-up at the normal onset level
    "CR-7": ([(f"{arm}_speedup_lr_{lr}", op, thr, F8)
              for arm, op, thr in (("ov_preset_kq", ">=", 2.0), ("ov_frozen_kq", "<=", 0.5),
                                   ("kq_preset_ov", "<=", 2.0), ("kq_frozen_ov", ">=", 0.5))
              for lr in ("3e-3", "6e-3")],
             [("positive", "placebo_ov_first", ">=", 1.0, E),
              ("positive", "placebo_kq_first", ">=", 1.0, E),
              ("negative", "placebo_simultaneous_ov_first", ">=", 1.0, E),
              ("negative", "placebo_kq_leads_ov_first", ">=", 1.0, E),
              ("positive", "placebo_swapped_ov_first", ">=", 1.0, E),
              ("positive", "placebo_swapped_kq_first", ">=", 1.0, E),
              ("positive", "placebo_same_start_ov_first", ">=", 1.0, E),
              ("positive", "placebo_one_way_ov_preset_speedup", ">=", 2.0, E),
              ("positive", "placebo_one_way_ov_frozen_speedup", "<=", 0.5, E),
              ("positive", "placebo_one_way_kq_preset_speedup", "<=", 2.0, E),
              ("positive", "placebo_one_way_kq_frozen_speedup", ">=", 0.5, E),
              # SPEC: mutual coupling must fail (iv) or (v) (one control since 2026-12-06)
              ("negative", "placebo_mutual_meets_iv_and_v", ">=", 1.0, E)]),
    # revised 2026-12-05: the paired curve (finetuned minus the mixed-type finetune)
    "CR-8": ([("paired_partial_eta2_rho_k", ">=", 0.8, M),
              ("paired_partial_eta2_rise_k", ">=", 0.1, E), ("ft_exact_rise_k", ">=", 0.05, M)],
             [("negative", "pt_paired_partial_eta2_rise_k", ">=", 0.1, M)]),
    # revised 2026-12-05: from lam_s, the seed mean with its interval, the seed-mean curve
    "CR-9": ([("ft_rise_from_lam_s", ">=", 0.1, M), ("ft_rise_from_lam_s_lo95", ">", 0.0, P),
              ("mean_curve_drop_over_tol_lam", "<=", 0.0, P)],
             [("negative", "mixed_rise_from_lam_s", ">=", 0.1, M)]),
    "IR-1": ([("memory_acc", ">=", 1.0, E)], [("negative", "shuffled_memory_acc", ">", 0.1, E)]),
    "IR-2": ([("step1_argmax_acc", ">=", 0.999, E), ("step1_expected_acc", ">=", 0.98, E),
              ("swap_expected_acc", ">=", 0.90, E), ("step2_expected_acc", ">=", 0.99, E)],
             [("negative", "saddle_swap_expected_acc", ">=", 0.90, E),
              ("negative", "zero_data_swap_expected_acc", ">=", 0.90, E)]),
    "IR-3": ([("within_pair_gap", "<=", 0.02, E), ("pair_mass_diff", ">=", 0.05, E),
              ("mass_s3", "<=", 0.02, E), ("ir2_met", ">=", 1.0, E)],
             [("negative", "large_step_pair_mass_diff", ">=", 0.05, E)]),
    # IR-4's GD/PGD >= 2.0 half is "not tested" when not shown (SPEC 2), so it is not part of
    # the rule; it is ir_registry.IR4_PERTURBATION_ROLE, pinned in tests/unit/test_claims_ir.py
    "IR-4": ([("saddle_tie_dev_sym", "<=", 0.02, E), ("saddle_tie_dev_raw", "<=", 0.02, E),
              ("pgd_escaped", ">=", 1.0, E)],
             [("negative", "no_swap_tie_dev", "<=", 0.02, E)]),
    # IR-5: an upper bound, with the learned-memory positive control
    # IR-5 (revised 2026-12-05): slope of log N on log n against s_poly, every seed and the
    # seed mean's upper 95% bound; the learned arm's slope >= 0.8 over >= 4 uncensored n
    "IR-5": ([("slope_minus_s_poly", "<=", 0.0, E),
              ("mean_slope_hi95_minus_s_poly", "<=", 0.0, "pooled"),
              ("memory_reached_at_n_max", ">=", 1.0, E)],
             [("positive", "learned_slope", ">=", 0.8, E),
              ("positive", "learned_uncensored_n", ">=", 4.0, E),
              ("negative", "zero_data_reaches", ">=", 1.0, E),
              ("negative", "min_gain", "<", 0.3, E)]),
    "IR-6": ([("within_pair_gap", "<=", 0.02, E), ("pair_mass_diff", ">=", 0.05, E),
              ("mass_s3", "<=", 0.05, E), ("ir2_met", ">=", 1.0, E)],
             [("positive", "constructed_rows_met", ">=", 1.0, E),
              ("negative", "large_step_pair_mass_diff", ">=", 0.05, E)]),
    # IR-7's control: the large-step state must not reach IR-2's swap bound (a rows-met
    # control cannot fail at K = 3; docs/registry.md)
    "IR-7": ([("within_pair_gap", "<=", 0.02, E), ("mass_s3", "<=", 0.02, E),
              ("solved", ">=", 1.0, E)],
             [("negative", "large_step_swap_expected_acc", ">=", 0.90, E)]),
    # IR-8: decided on the token-dependent model (solved, IR8_SOLVED, is not in the rule; the
    # induction-style row test is reported as structural)
    "IR-8": ([("tok_head_score_minus_baseline", "<=", 0.1, E)],
             [("positive", "induction_model_score_minus_baseline", ">=", 0.5, E),
              ("positive", "induction_model_tl_score_minus_baseline", ">=", 0.5, E)]),
    # IR-9: within-pair equality is an attractor (SPEC 2, new 2026-12-05)
    "IR-9": ([("ir9_final_gap", "<=", 0.02, E)],
             [("negative", "ir9_frozen_final_gap", "<", 0.04, E),
              ("positive", "ir9_placebo_decay_read", ">=", 1.0, E),
              ("negative", "ir9_placebo_flat_read", ">=", 1.0, E)]),
}


def _rule(c):
    return ("fraction", round(c.min_fraction, 9)) if c.rule == "fraction" else c.rule


def _pin(c):
    return (c.metric, c.op, round(c.threshold, 9), _rule(c))


def _want(t):
    *head, thr, rule = t
    rule = (rule[0], round(rule[1], 9)) if isinstance(rule, tuple) else rule
    return (*head, round(thr, 9), rule)


@pytest.mark.parametrize("cid", sorted(SPEC_PINS))
def test_registry_is_specs_rule_and_controls(cid):
    """Metric names, operators, thresholds and seed rules of every condition (in order: the
    first is the headline) and of every control, as SPEC states them."""
    s = REGISTRY[cid]
    conds, ctrls = SPEC_PINS[cid]
    assert [_pin(c) for c in s.conditions] == [_want(c) for c in conds]
    assert [(k.kind, *_pin(k.condition)) for k in s.controls] == [_want(c) for c in ctrls]


def test_every_claim_is_pinned():
    assert set(REGISTRY) == set(SPEC_PINS)


def test_cr_constants_are_specs():
    from mechinterp_icr.claims import cr_registry as cr

    assert cr.CR8_HEADROOM == 0.90 and cr.CR8_MIN_K == 6 and cr.CR9_MIN_LAM == 5
    assert (cr.SHARED_IDEAL_K1_MAX, cr.SHARED_IDEAL_KMAX_MIN) == (0.70, 0.99)
    assert cr.NECESSITY_BOUND == pytest.approx(0.35)


@pytest.mark.parametrize("cid,arm", [("CR-1", ""), ("CR-1", "ft_"), ("CR-3", "mixed_")])
def test_cr_type_bounds_are_specs(cid, arm):
    """SPEC 1 (CR-1, CR-3) and SPEC 0 ("chance from the model"): the bound the type of the best
    attribute guess is read against is 1/L + 0.05 in the default task and, in the shared-token
    variant, the same model's type accuracy with uninformative demos + 0.05."""
    from mechinterp_icr.claims import cr_registry as cr

    assert cr.TYPE_BOUND == pytest.approx(TYPE_BOUND) and cr.TYPE_CONTRAST_BOUND == 0.05
    per = {"0": {f"{arm}heldout_icl_best_attr_type": 0.62,
                 f"{arm}heldout_icl_best_attr_type_uninf": 0.45}}
    sp = REGISTRY[cid]
    default = sp.derive(cid, per)[0]["0"]
    shared = sp.derive(f"{cid} (shared tokens)", per)[0]["0"]
    assert default[f"{arm}heldout_icl_type_bound"] == pytest.approx(TYPE_BOUND)
    assert default[f"{arm}heldout_icl_type_over_bound"] == pytest.approx(0.62 - TYPE_BOUND)
    assert shared[f"{arm}heldout_icl_type_bound"] == pytest.approx(0.45 + 0.05)
    assert shared[f"{arm}heldout_icl_type_over_bound"] == pytest.approx(0.62 - 0.45 - 0.05)
    assert default[f"{arm}heldout_icl_type_contrast"] == pytest.approx(0.17)


def test_analysis_constants_are_the_codes():
    """Constants a verdict reads that are not config keys (probe regularisation, iteration
    caps, split and evaluation sizes) are registered and the code uses the registered value."""
    import importlib

    from mechinterp_icr.claims.cr_registry import ANALYSIS_CONSTANTS
    from mechinterp_icr.claims.ir_registry import IR_ANALYSIS_CONSTANTS

    for path, value in {**ANALYSIS_CONSTANTS, **IR_ANALYSIS_CONSTANTS}.items():
        mod, name = path.rsplit(".", 1)
        assert getattr(importlib.import_module(f"mechinterp_icr.{mod}"), name) == value, path


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_every_config_key_is_registered_or_not_read(target):
    """SPEC 0: the whole resolved config of each run a verdict reads is registered. Every key
    of the target's config is a registered hyperparameter of one of its claims, a
    report-only key (REPORT_ONLY) or one no verdict reads under the registered settings
    (NOT_READ); a new key fails here until it is placed."""
    from mechinterp_icr.claims.registry import NOT_READ, REPORT_ONLY

    keys = set(_profile_values(target, "quick")) | set(_profile_values(target, "paper"))
    registered = set()
    for cid, s in REGISTRY.items():
        if cid.startswith(target.upper() + "-"):
            registered |= set(s.hyperparameters)
    placed = registered | set(REPORT_ONLY[target]) | set(NOT_READ[target])
    assert sorted(keys - placed) == []
    assert sorted(set(NOT_READ[target]) & registered) == []


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
    change log): every metric a condition or control reads is declared (None = unbounded),
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


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_default_configs_are_the_registered_ones(target):
    """One source of truth per setting: a config built in Python with the dataclass defaults
    (CRConfig(), IRConfig(), and each of the experiment's own sections: CascadeConfig(),
    TaskvecConfig(), ...) is the registered quick-profile config the claims are about, not a
    smaller or older one. The library's generic sections (task, model, train) keep the
    library's defaults; the experiment config sets them explicitly."""
    from mechinterp_icr.experiments.cr.config import CRConfig
    from mechinterp_icr.experiments.ir.config import IRConfig
    from mechinterp_icr.runner import TARGETS, config_keys

    default = CRConfig() if target == "cr" else IRConfig()
    quick = TARGETS[target].profile("quick")
    assert default == quick
    for f in dataclasses.fields(default):
        section = getattr(default, f.name)
        if dataclasses.is_dataclass(section) and \
                type(section).__module__.startswith("mechinterp_icr.experiments."):
            fresh = type(section)()
            assert fresh == section, f"{target}: {type(section).__name__}() is not the " \
                                     f"registered {f.name}"
    values = dict(config_keys(default))
    for cid, s in REGISTRY.items():
        if cid.startswith(target.upper() + "-"):
            for key, value in s.hyperparameters.items():
                want = list(value) if isinstance(value, tuple) else value
                got = values[key]
                assert (list(got) if isinstance(got, tuple) else got) == want, (cid, key)


def test_conditions_are_named_by_metric_and_controls_by_name():
    """A stored condition is found by its metric and a control by its name (icr check, the
    README row, the rerun column, the machine-noise table): within a claim both must be
    unique. Two controls may read one metric (CR-5's pooled and every-seed bounds)."""
    for cid, sp in REGISTRY.items():
        metrics = [c.metric for c in sp.conditions]
        names = [k.name for k in sp.controls]
        assert len(set(metrics)) == len(metrics), (cid, metrics)
        assert len(set(names)) == len(names), (cid, names)
