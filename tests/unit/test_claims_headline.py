"""A claim's headline is the condition or control that decided its verdict, worded with its
seed rule (claims/headline.py), the same in the report and the CLI's claim table; intervals
of bounded metrics stay inside their declared range without changing any verdict."""

import json
from pathlib import Path

from helpers import registry_summary

from mechinterp_icr.claims import Claim, format_claim_table, spec
from mechinterp_icr.claims.headline import claim_headline
from mechinterp_icr.claims.intervals import ci95, interval
from mechinterp_icr.claims.protocol import HOLDS, INCONCLUSIVE, NOT_HOLD, UNIT, spec_controls
from mechinterp_icr.claims.redecide import redecide_summary

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [0, 1, 2, 3, 4]


def _claim(cid: str, per: dict, **kw) -> dict:
    sp = spec(cid)
    ctrls = spec_controls(sp, per)  # a control on a derived metric reads it derived
    return Claim.from_spec(sp, per, controls=ctrls, **kw).to_dict(SEEDS)


def _ir7(gap0=0.054, control=0.5):
    per = {str(s): {"within_pair_gap": 0.004 + 0.001 * s, "mass_s3": 0.005, "solved": 1.0,
                    "large_step_swap_expected_acc": control} for s in SEEDS}
    per["0"]["within_pair_gap"] = gap0
    return per


def test_a_seed_failing_a_per_seed_rule_is_named_with_its_value():
    """IR-7's mean gap (0.0152) is under 0.02, but the rule is per seed: seed 0 fails."""
    c = _claim("IR-7", _ir7(gap0=0.054))
    assert c["verdict"] == NOT_HOLD and c["mean"] < 0.02
    h = claim_headline("IR-7", c)
    assert h.verdict == NOT_HOLD and h.agrees and h.kind == "condition"
    assert h.text == ("within-pair gap (within_pair_gap), every seed: max 0.054 on seed 0 > "
                      "0.02 (fails on 1 of 5 seeds: 0)")
    assert c["headline"] == h.text  # stored in summary.json by the same function


def test_a_claim_failing_a_later_condition_shows_that_condition():
    per = {str(s): {"relation_role": 0.8, "subject_role": 0.9, "relation_margin": 10.0,
                    "subject_margin": 10.0, "distinct_heads": 1.0, "pt_relation_role": 0.0,
                    "subject_same_query_changed": 0.0, "construction_relation": 1.0,
                    "construction_subject": 1.0} for s in SEEDS}
    per["2"]["subject_margin"] = 1.5
    per["4"]["subject_margin"] = 1.2
    h = claim_headline("CR-5", _claim("CR-5", per))
    assert h.verdict == NOT_HOLD and h.metric == "subject_margin"
    assert h.text.startswith("Subject head / other head (subject_margin), every seed: min 1.2 "
                             "on seed 4 < 2")
    assert "seeds: 2, 4" in h.text and "relation_role" not in h.text


def test_a_failing_negative_control_is_named():
    """IR-7's rule met on every seed; the large-step state reaches the swap bound on seed 3:
    inconclusive, and the headline names the control, the seed and the value."""
    per = _ir7(gap0=0.004)
    per["3"]["large_step_swap_expected_acc"] = 0.93
    c = _claim("IR-7", per)
    h = claim_headline("IR-7", c)
    assert c["verdict"] == INCONCLUSIVE and h.verdict == INCONCLUSIVE and h.kind == "control"
    assert h.text.startswith("negative control 'right after the large step")
    assert "shows the effect" in h.text and "0.93 on seed 3 >= 0.9" in h.text


def test_a_failing_positive_control_is_named():
    per = {str(s): {"tok_induction_row_step1_acc": 0.3, "tok_learned_row_step1_acc": 1.0,
                    "tok_head_score_minus_baseline": -0.1,
                    "induction_model_score_minus_baseline": 0.8,
                    "induction_model_tl_score_minus_baseline": 0.8, "tok_solved": 1.0,
                    "tok_query_seen_before": 0.0} for s in SEEDS}
    per["1"]["induction_model_tl_score_minus_baseline"] = 0.2
    h = claim_headline("IR-8", _claim("IR-8", per))
    assert h.verdict == INCONCLUSIVE
    assert "positive control 'induction-head model, TransformerLens" in h.text
    assert "misses its condition" in h.text and "min 0.2 on seed 1 < 0.5" in h.text


def test_a_claim_that_holds_shows_its_primary_condition_with_the_mean_and_a_bounded_ci():
    per = {str(s): {"heldout_icl_exact": v, "mixed_heldout_icl_best_attr_type": 0.2}
           for s, v in zip(SEEDS, (0.99, 0.98, 1.0, 0.86, 0.96))}
    c = _claim("CR-3", per)
    h = claim_headline("CR-3", c)
    assert c["verdict"] == HOLDS and h.kind == "primary"
    assert h.text.startswith("heldout_icl_exact, mean over 5 seeds 0.958 [")
    assert h.text.endswith(", 1] >= 0.8")  # the t-interval's 1.02 is clipped to 1
    assert c["ci95"][1] == 1.0 and c["ci95_clipped"] and c["metric_range"] == [0.0, 1.0]


def test_a_fraction_rule_counts_seeds():
    good = {"ov_preset_kq": 3.0, "ov_frozen_kq": 0.0, "kq_preset_ov": 1.0, "kq_frozen_ov": 1.0}
    per = {str(s): {f"{k}_speedup_lr_{lr}": v for k, v in good.items()
                    for lr in ("3e-3", "6e-3")} for s in SEEDS}
    per["1"]["ov_preset_kq_speedup_lr_6e-3"] = per["3"]["ov_preset_kq_speedup_lr_6e-3"] = 1.0
    h = claim_headline("CR-7", _claim("CR-7", per))
    assert h.verdict == NOT_HOLD
    assert h.text == ("OV preset: KQ at least twice as fast at lr 6e-3 "
                      "(ov_preset_kq_speedup_lr_6e-3), on >= 80% of seeds: 3 of 5 seeds >= 2 "
                      "(4 needed; fails on seeds 1, 3)")


def test_an_entry_without_its_fields_is_shown_by_its_stored_description():
    """A condition entry that lost its metric/op/threshold/rule fields cannot be reworded: the
    headline shows the description stored beside them, and the verdict is still decided."""
    c = _claim("IR-7", _ir7())
    old = json.loads(json.dumps(c))
    for k in old["conditions"]:
        for f in ("metric", "op", "threshold", "rule", "min_fraction", "text"):
            k.pop(f, None)
    h, full = claim_headline("IR-7", old), claim_headline("IR-7", c)
    assert (h.verdict, h.kind) == (full.verdict, full.kind) == (NOT_HOLD, "condition")
    assert h.text in [k["condition"] for k in old["conditions"]] and h.metric is None
    assert h.text != full.text and full.metric is not None


def test_the_claim_table_shows_the_headline():
    table = format_claim_table({"IR-7": _claim("IR-7", _ir7())})
    assert "DOES NOT HOLD" in table and "max 0.054 on seed 0 > 0.02" in table
    assert "0.01" not in table.splitlines()[2]  # the mean is not the headline


def test_every_headline_agrees_with_its_verdict():
    """On a summary of every registered claim with each kind of verdict (built here: a failing
    condition, a misbehaving control, a quantity not measurable, the rest holding)."""
    s = registry_summary()
    ir7 = s["claims"]["IR-7"]
    for m in ir7["per_seed"].values():
        m["within_pair_gap"] = 0.5
    ctrl = s["claims"]["CR-5"]["controls"][0]
    ctrl["per_seed"] = {k: 0.9 for k in ctrl["per_seed"]}
    s["claims"]["IR-5"]["not_measurable"] = "N censored"
    claims = redecide_summary(s)[0]["claims"]
    assert {claims[c]["verdict"] for c in ("IR-7", "CR-5", "IR-5", "CR-1")} == {
        NOT_HOLD, INCONCLUSIVE, HOLDS}
    for cid, c in claims.items():
        h = claim_headline(cid, c)
        assert h.agrees and h.verdict == c["verdict"], (cid, h)
        if c["verdict"] == NOT_HOLD and h.kind == "condition":
            first_unmet = next(k for k in c["conditions"] if not k["met"])
            assert h.metric == first_unmet["condition"].split(": ")[-1].split()[0], cid


def test_intervals_of_bounded_metrics_are_clipped_and_verdicts_do_not_move(monkeypatch):
    assert interval([1.0, 1.0, 0.9, 1.0, 1.0], UNIT)[1:] == (1.0, True)
    lo, hi = ci95([1.0, 1.0, 0.9, 1.0, 1.0])
    assert hi > 1.0 and ci95([1.0, 1.0, 0.9, 1.0, 1.0], UNIT) == (lo, 1.0)
    assert interval([0.4, 0.5, 0.6], UNIT) == (*ci95([0.4, 0.5, 0.6]), False)
    per = {str(s): {"heldout_icl_exact": v, "mixed_heldout_icl_best_attr_type": 0.2}
           for s, v in zip(SEEDS, (0.99, 0.5, 1.0, 0.7, 0.96))}
    clipped = _claim("CR-3", per)
    import mechinterp_icr.claims.registry as reg

    monkeypatch.setattr(reg, "METRIC_RANGES", {})
    raw = _claim("CR-3", per)
    assert raw["ci95"][1] > 1.0 >= clipped["ci95"][1]
    assert (raw["verdict"], raw["verdict_reason"]) == (clipped["verdict"],
                                                       clipped["verdict_reason"])
