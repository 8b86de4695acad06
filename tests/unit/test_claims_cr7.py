"""CR-7 on the claim protocol: the verdict code fed numbers in which the rule is met (holds),
a control misbehaves (inconclusive) or the rule is unmet (does not hold); plus the
measurement pieces the claim rests on (the continuous-probe onset, the placebo schedules)."""

import math

import numpy as np
import pytest

from mechinterp_icr.claims import HOLDS, INCONCLUSIVE, NOT_HOLD, spec

SEEDS = ("0", "1", "2", "3", "4")


# ------------------------------------------------------------------------------------------
# CR-7
# ------------------------------------------------------------------------------------------
LRS = ("3e-3", "6e-3")
# a one-way cascade: OV preset makes KQ 3x faster, OV frozen: KQ never reaches its level, the
# KQ arms leave OV's onset as it is
ARMS = {"ov_preset": 3.0, "ov_frozen": 0.0, "kq_preset": 1.0, "kq_frozen": 1.0}
PROBE = {"ov_preset": "kq", "ov_frozen": "kq", "kq_preset": "ov", "kq_frozen": "ov"}
GOOD = {"ov_first": 1.0, "placebo_ov_first": 1.0,
        "placebo_kq_first": 1.0, "placebo_simultaneous_ov_first": 0.0,
        "placebo_kq_leads_ov_first": 0.0, "placebo_swapped_ov_first": 1.0,
        "placebo_swapped_kq_first": 1.0, "placebo_same_start_ov_first": 1.0, **ARMS}


def _cr7_seed(i: int, **kw):
    """One seed's CR-7 metrics: good numbers, or ``kw`` (a list: one value per seed; keys of
    ``GOOD``, an arm name for both lrs, or full metric names)."""
    from mechinterp_icr.interp.ovkq import synthetic_arm_speedups

    def at(v):
        return v[i] if isinstance(v, list) else v

    g = {**GOOD, **{k: at(v) for k, v in kw.items()}}
    m = dict(synthetic_arm_speedups())
    for lr in LRS:
        m[f"ov_first_lr_{lr}"] = g["ov_first"]
        for arm in ARMS:
            m[f"{arm}_{PROBE[arm]}_speedup_lr_{lr}"] = g[arm]
            for p in (5, 20, 50):
                m[f"{arm}_{PROBE[arm]}_speedup_at_{p}_lr_{lr}"] = g[arm]
        for p in (5, 20, 50):
            m[f"ov_first_at_{p}_lr_{lr}"] = m[f"ov_first_lr_{lr}"]
    m.update({k: g[k] for k in GOOD if k.startswith("placebo")})
    m.update({k: v for k, v in g.items() if k not in GOOD})
    return m


def _cr7(**kw):
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: _cr7_seed(i, **kw) for i, s in enumerate(SEEDS)}
    return cr7_claim_from_metrics(per).to_dict()


def test_cr7_holds_for_a_one_way_cascade_and_lists_every_registered_control():
    c = _cr7()
    assert c["verdict"] == HOLDS, c["verdict_reason"]
    registered = {x.name: x.condition.metric for x in spec("CR-7").controls}
    assert len(registered) == 12  # mutual coupling: one control, (iv) or (v)
    assert {x["name"] for x in c["controls"]} == set(registered)
    assert all(x["as_expected"] for x in c["controls"])


def test_cr7_onset_order_does_not_decide():
    # KQ read first on every seed: reported, the verdict stands on the arms
    assert _cr7(ov_first=0.0)["verdict"] == HOLDS


def test_cr7_mutual_coupling_does_not_hold():
    """The null model of the order: OV and KQ each speed the other up and each wait for the
    other. (ii) and (iii) pass, (iv) or (v) fail."""
    assert _cr7(kq_preset=4.0)["verdict"] == NOT_HOLD  # a finished KQ speeds OV up
    c = _cr7(kq_frozen=0.3)  # OV waits for KQ
    assert c["verdict"] == NOT_HOLD and "KQ frozen" in c["verdict_reason"]
    assert _cr7(kq_frozen=0.0)["verdict"] == NOT_HOLD  # OV never reaches its level


def test_cr7_each_arm_condition_can_fail():
    assert _cr7(ov_preset=1.5)["verdict"] == NOT_HOLD  # KQ not sped up twice
    assert _cr7(ov_frozen=0.8)["verdict"] == NOT_HOLD  # KQ barely waits
    assert _cr7(ov_frozen=0.5)["verdict"] == HOLDS  # exactly twice as late
    assert _cr7(ov_preset=[3, 3, 3, 3, 1])["verdict"] == HOLDS  # 4 of 5 seeds
    assert _cr7(ov_preset=[3, 3, 3, 1, 1])["verdict"] == NOT_HOLD
    assert _cr7(**{"kq_frozen_ov_speedup_lr_6e-3": 0.2})["verdict"] == NOT_HOLD  # one lr


def test_cr7_placebo_misreads_keep_it_from_holding():
    assert _cr7(placebo_kq_first=[1, 1, 1, 1, 0])["verdict"] == INCONCLUSIVE
    assert _cr7(placebo_simultaneous_ov_first=1.0)["verdict"] != HOLDS
    assert _cr7(placebo_kq_leads_ov_first=1.0)["verdict"] != HOLDS
    assert _cr7(placebo_same_start_ov_first=0.0)["verdict"] == INCONCLUSIVE
    # arm statistics that let mutual coupling pass both (iv) and (v): it is read as a cascade
    assert _cr7(placebo_mutual_kq_frozen_speedup=0.9,
                placebo_mutual_kq_preset_speedup=1.5)["verdict"] == INCONCLUSIVE
    assert _cr7(placebo_one_way_ov_frozen_speedup=1.0)["verdict"] == INCONCLUSIVE


def test_cr7_mutual_coupling_placebo_is_as_expected_when_it_fails_iv_or_v():
    """SPEC 1, CR-7: mutual coupling "must fail (iv) or (v)": failing one is enough."""
    name = "placebo arms, mutual coupling: passes both (iv) and (v)"

    def ctrl(**kw):
        c = _cr7(**kw)
        return c, next(k for k in c["controls"] if k["name"] == name)

    c, k = ctrl()  # the synthetic curves fail both
    assert k["as_expected"] and c["verdict"] == HOLDS
    assert k["per_seed"]["0"] == 0.0
    c, k = ctrl(placebo_mutual_kq_frozen_speedup=0.9)  # passes (v), fails (iv)
    assert k["as_expected"] and c["verdict"] == HOLDS
    c, k = ctrl(placebo_mutual_kq_preset_speedup=1.5)  # passes (iv), fails (v)
    assert k["as_expected"] and c["verdict"] == HOLDS
    c, k = ctrl(placebo_mutual_kq_frozen_speedup=[0.9, 0.2, 0.2, 0.2, 0.2],
                placebo_mutual_kq_preset_speedup=1.5)  # passes both on seed 0 only
    assert not k["as_expected"] and k["per_seed"]["0"] == 1.0 and c["verdict"] != HOLDS
    c, k = ctrl(placebo_mutual_kq_frozen_speedup=float("nan"))  # not stored: not read
    assert c["verdict"] != HOLDS


def test_synthetic_arm_curves_one_way_pass_and_mutual_fails():
    from mechinterp_icr.interp.ovkq import synthetic_arm_speedups

    s = synthetic_arm_speedups()
    assert s["placebo_one_way_ov_preset_speedup"] >= 2
    assert s["placebo_one_way_ov_frozen_speedup"] == 0.0  # KQ never rises without OV
    assert s["placebo_one_way_kq_preset_speedup"] == pytest.approx(1.0)
    assert s["placebo_one_way_kq_frozen_speedup"] == pytest.approx(1.0)
    # mutual coupling passes (ii) and (iii) as a cascade would ...
    assert s["placebo_mutual_ov_preset_speedup"] >= 2
    assert s["placebo_mutual_ov_frozen_speedup"] <= 0.5
    # ... and fails (iv) and (v)
    assert s["placebo_mutual_kq_preset_speedup"] > 2
    assert s["placebo_mutual_kq_frozen_speedup"] < 0.5


def test_cr7_a_missing_arm_value_cannot_be_read():
    """nan (the normal probe does not rise) is an unreadable seed under the 4-of-5 rule; arms
    not run (``cascade.causal_arms = false``): no number on any seed, no evidence."""
    assert _cr7(ov_preset=[3, 3, 3, 3, math.nan])["verdict"] == HOLDS  # 4 of 5
    assert _cr7(ov_preset=[3, 3, 3, math.nan, math.nan])["verdict"] == INCONCLUSIVE
    assert _cr7(ov_preset=[3, 3, 3, 1, math.nan])["verdict"] == INCONCLUSIVE
    assert _cr7(ov_preset=[3, 3, 3, 1, 1])["verdict"] == NOT_HOLD
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: {k: v for k, v in _cr7_seed(i).items()
               if not (k.endswith(("_lr_3e-3", "_lr_6e-3")) and "speedup" in k)}
           for i, s in enumerate(SEEDS)}
    c = cr7_claim_from_metrics(per).to_dict()
    assert c["verdict"] == INCONCLUSIVE and "no value on seeds" in c["verdict_reason"]


def test_cr7_notes_say_whether_the_verdict_flips_under_each_onset_level():
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: _cr7_seed(i) for i, s in enumerate(SEEDS)}
    for i, s in enumerate(SEEDS):  # at the 50% level KQ-frozen OV waits on 3 seeds
        per[s]["kq_frozen_ov_speedup_at_50_lr_6e-3"] = 1.0 if i < 2 else 0.3
    notes = cr7_claim_from_metrics(per).to_dict()["notes"]
    assert "at 5%: OV first on 5/5 at lr 3e-3, 5/5 at lr 6e-3; the arm conditions read at " \
           "the 5% onset levels would be met (as at the registered level)" in notes
    assert "the arm conditions read at the 50% onset levels would not be met (unlike the " \
           "registered level: the verdict flips under this convention)" in notes
    assert notes.index("at 5%") < notes.index("at 20%") < notes.index("at 50%")
    # an arm that cannot be read at 20% on two seeds (nan: no rise): not read, not "not met"
    for s in SEEDS[:2]:
        per[s]["ov_preset_kq_speedup_at_20_lr_3e-3"] = math.nan
    notes = cr7_claim_from_metrics(per).to_dict()["notes"]
    assert "the arm conditions read at the 20% onset levels would not be readable (unlike " \
           "the registered level" in notes


STEPS = list(range(21))


def _timing(t_ov, t_kq, kq_gain=1.0, onsets=None, kq=None, ov=None):
    """A timing record; ``kq`` / ``ov`` the curves over STEPS (default: flat, then rising
    from the onset by 0.1 a step, so the onset at 10% of the plateau gain 1.0 is it)."""
    def ramp(t):
        return [0.0 if math.isnan(t) or s < t else min(1.0, 0.1 * (s - t + 1)) for s in STEPS]

    return {"ov_first": float(t_ov < t_kq), "t_onset_ov": t_ov, "t_onset_kq": t_kq,
            "lead_steps": t_kq - t_ov, "kq_gain": kq_gain, "ov_gain": 1.0,
            "onsets": onsets or {}, "steps": STEPS, "kq": ramp(t_kq) if kq is None else kq,
            "ov": ramp(t_ov) if ov is None else ov}


def test_cr7_seed_metrics_read_the_arms_and_the_reported_fractions():
    from mechinterp_icr.experiments.cr.claims_mech import cr7_seed_metrics

    on = {"5": {"fraction": 0.05, "t_onset_ov": 1.0, "t_onset_kq": 4.0, "ov_first": 1.0},
          "50": {"fraction": 0.5, "t_onset_ov": 9.0, "t_onset_kq": 8.0, "ov_first": 0.0}}
    ov = [0.0 if s < 2 else min(1.0, 0.1 * (s - 1)) for s in STEPS]  # OV onset 0.1 at step 2
    by_lr = {}
    for lr in ("0.003", "0.006"):
        v = {**_timing(2.0, 10.0, 2.0, on, ov=ov), "icl_heldout_exact": 0.9,
             "relation_head": 1,
             # the OV-preset arm's KQ reaches the normal run's onset level (0.1) at step 4
             "arms": {"ov_preset": _timing(1.0, 4.0, 2.0, kq=[0.025 * s for s in STEPS],
                                           ov=ov),
                      "ov_frozen": _timing(math.nan, 20.0, 0.2, kq=[0.0] * 21, ov=ov),
                      "kq_preset": _timing(2.0, 1.0, 2.0, ov=ov),
                      "kq_frozen": _timing(8.0, math.nan, 2.0,
                                           ov=[0.0 if s < 8 else 0.5 for s in STEPS])}}
        for a in v["arms"].values():
            a["icl_heldout_exact"] = 0.5
        by_lr[lr] = v
    placebo = {k: 1.0 for k in ("placebo_ov_first", "placebo_kq_first",
                                "placebo_swapped_ov_first", "placebo_swapped_kq_first",
                                "placebo_same_start_ov_first")}
    placebo.update(placebo_simultaneous_ov_first=0.0, placebo_kq_leads_ov_first=0.0)
    m = cr7_seed_metrics({"by_lr": by_lr}, placebo)
    needed = {c.metric for c in spec("CR-7").conditions} | {
        c.condition.metric for c in spec("CR-7").controls}
    # the mutual-coupling verdict is derived from the stored arm placebos when the claim is
    # decided: never stored per seed (a stored None there read as a measurement)
    derived = set(spec("CR-7").derive("CR-7", {"0": {}})[0]["0"])
    assert derived == {"placebo_mutual_meets_iv_and_v"}
    assert needed - derived <= set(m) and not derived & set(m)
    # recomputed from the curves at the normal run's onset levels: KQ 10 -> 4 steps, never
    assert m["ov_preset_kq_speedup_lr_6e-3"] == pytest.approx(2.5)
    assert m["ov_frozen_kq_speedup_lr_3e-3"] == 0.0
    assert m["kq_preset_ov_speedup_lr_3e-3"] == pytest.approx(1.0)
    assert m["kq_frozen_ov_speedup_lr_3e-3"] == pytest.approx(2 / 8)
    assert "kq_frozen_ov_speedup_at_50_lr_3e-3" in m
    assert m["ov_first_at_5_lr_3e-3"] == 1.0 and m["ov_first_at_50_lr_3e-3"] == 0.0
    assert m["t_onset_kq_ov_preset_lr_3e-3"] == 4.0
    assert m["icl_heldout_exact_kq_frozen_lr_6e-3"] == 0.5
    # without the arms (cascade.causal_arms = false) their metrics are absent
    for v in by_lr.values():
        v.pop("arms")
    m = cr7_seed_metrics({"by_lr": by_lr}, placebo)
    assert not any(k.endswith(("lr_3e-3", "lr_6e-3")) and "speedup" in k for k in m)


def test_lr_names_match_the_registry():
    from mechinterp_icr.experiments.cr.claims_mech import lr_name

    assert [lr_name(x) for x in (3e-3, 6e-3, 1e-2)] == ["3e-3", "6e-3", "1e-2"]
    assert {c.metric for c in spec("CR-7").conditions} == {
        f"{arm}_{PROBE[arm]}_speedup_lr_{lr}" for arm in ARMS for lr in LRS}


def test_onset_speedup_reads_the_normal_level_and_never_as_zero():
    from mechinterp_icr.interp.ovkq import (
        fraction_name,
        head_timing,
        onset_speedup,
        plateau_gain,
    )

    assert [fraction_name(f) for f in (0.05, 0.1, 0.2, 0.5)] == ["5", "10", "20", "50"]
    assert plateau_gain([0, 1, 2, 4, 4, 4]) == pytest.approx(4.0)  # last 3 values
    assert math.isnan(plateau_gain([1.0]))
    normal = _timing(1.0, 10.0, 2.0)
    assert onset_speedup({"steps": STEPS, "kq": [0.025 * s for s in STEPS]}, normal,
                         "kq") == pytest.approx(2.5)
    # never reaching the level is infinitely late (0), whatever the budget
    assert onset_speedup({"steps": STEPS, "kq": [0.0] * 21}, normal, "kq") == 0.0
    assert math.isnan(onset_speedup(normal, _timing(1.0, math.nan), "kq"))
    # an arm curve with no number somewhere cannot be read as "never" (no number, no
    # evidence): it would pass (iii) and (iv)
    assert math.isnan(onset_speedup({"steps": STEPS, "kq": [math.nan] * 21}, normal, "kq"))
    assert math.isnan(onset_speedup({"steps": STEPS, "kq": [0.0] * 20 + [math.nan]}, normal,
                                    "kq"))
    assert math.isnan(onset_speedup({"steps": STEPS, "kq": []}, normal, "kq"))
    # already at the level at step 0: read at the first logged step after 0
    assert onset_speedup({"steps": STEPS, "kq": [1.0] * 21}, normal, "kq") == 10.0
    rows = [{"step": s, "h1_ov_margin": ov, "h1_kq_logit": kq}
            for s, ov, kq in ((0, 0, 0), (1, 0.3, 0), (2, 1, 0.1), (3, 1, 0.6), (4, 1, 1),
                              (5, 1, 1), (6, 1, 1))]
    t = head_timing(rows, 1, 0.1, 0.1, (0.05, 0.5))
    assert (t["t_onset_ov"], t["t_onset_kq"], t["ov_first"]) == (1, 2, 1.0)
    assert t["onsets"]["50"] == {"fraction": 0.5, "t_onset_ov": 2, "t_onset_kq": 3,
                                 "ov_first": 1.0, "kq_first": 0.0}
    assert t["kq_gain"] == pytest.approx(1.0)


def test_onset_is_measured_against_the_plateau_and_continuous():
    from mechinterp_icr.interp.ovkq import onset_step

    steps = list(range(20))
    # a probe that overshoots then settles: 10% of the plateau gain (1.0), not of the peak
    v = [0, 0.05, 0.12, 0.5, 2.0, 1.5] + [1.0] * 14
    assert onset_step(steps, v) == 2
    assert math.isnan(onset_step(steps, [0.3] * 20))  # no rise
    assert math.isnan(onset_step(steps, np.linspace(1, 0, 20)))  # falls


def test_placebo_schedules_are_read_in_their_order():
    from mechinterp_icr.interp.ovkq import placebo_orders
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)
    batch = task.sample_icl(np.random.default_rng(0), 16, subjects=task.heldout_subjects)
    r = placebo_orders(task, batch, 11)
    assert r["placebo_ov_first"] == 1.0 and r["placebo_kq_first"] == 1.0
    # same start, OV linear and KQ convex: read "OV first" at every onset fraction
    assert r["placebo_same_start_ov_first"] == 1.0
    # the negative schedules: moving together is a tie, KQ ahead is not OV first
    assert r["placebo_simultaneous_ov_first"] == 0.0
    assert r["placebo_kq_leads_ov_first"] == 0.0
    sim = r["schedules"]["simultaneous"]
    assert sim["t_onset_ov"] == sim["t_onset_kq"]
    ov, kq = r["schedules"]["ov_first"]["ov"], r["schedules"]["ov_first"]["kq"]
    assert ov[0] < ov[1] < ov[2] < ov[4] and ov[-1] == pytest.approx(ov[5])  # then plateaus
    assert kq[0] < kq[-1] and kq[0] == pytest.approx(kq[4])  # KQ moves after the OV
