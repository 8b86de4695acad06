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
GOOD = {"ov_first": 1.0, "preset": 0.3, "frozen": 0.1, "placebo_ov_first": 1.0,
        "placebo_kq_first": 1.0, "placebo_simultaneous_ov_first": 0.0,
        "placebo_kq_leads_ov_first": 0.0, "placebo_swapped_ov_first": 1.0,
        "placebo_swapped_kq_first": 1.0}


def _cr7_seed(i: int, ov3=1.0, ov6=1.0, **kw):
    """One seed's CR-7 metrics: good numbers, or ``kw`` (a list: one value per seed; keys of
    ``GOOD``, ``preset`` / ``frozen`` for both lrs, or full metric names)."""
    def at(v):
        return v[i] if isinstance(v, list) else v

    g = {**GOOD, **{k: at(v) for k, v in kw.items()}}
    m = {"ov_first_lr_3e-3": at(ov3), "ov_first_lr_6e-3": at(ov6)}
    for lr in LRS:
        m[f"preset_kq_onset_ratio_lr_{lr}"] = g["preset"]
        m[f"frozen_kq_gain_ratio_lr_{lr}"] = g["frozen"]
        for p in (5, 20, 50):
            m[f"ov_first_at_{p}_lr_{lr}"] = m[f"ov_first_lr_{lr}"]
    m.update({k: g[k] for k in GOOD if k.startswith("placebo")})
    m.update({k: v for k, v in g.items() if k not in GOOD})
    return m


def _cr7(**kw):
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: _cr7_seed(i, **kw) for i, s in enumerate(SEEDS)}
    return cr7_claim_from_metrics(per).to_dict()


def test_cr7_holds_with_good_numbers_and_lists_every_registered_control():
    c = _cr7()
    assert c["verdict"] == HOLDS, c["verdict_reason"]
    registered = {x.name: x.condition.metric for x in spec("CR-7").controls}
    assert len(registered) == 6
    assert {x["name"] for x in c["controls"]} == set(registered)
    assert all(x["as_expected"] for x in c["controls"])


def test_cr7_verdicts():
    assert _cr7(ov3=[1, 1, 1, 1, 0])["verdict"] == HOLDS  # 4 of 5 seeds
    assert _cr7(ov6=[1, 1, 1, 0, 0])["verdict"] == NOT_HOLD  # 3 of 5 at one lr
    assert _cr7(ov3=0.0)["verdict"] == NOT_HOLD
    # the placebo misread on one seed: the probe code cannot be trusted
    assert _cr7(placebo_kq_first=[1, 1, 1, 1, 0])["verdict"] == INCONCLUSIVE
    assert _cr7(placebo_ov_first=0.0)["verdict"] == INCONCLUSIVE
    # a probe pair biased towards OV first: weights moving together (or KQ a checkpoint
    # ahead) read as OV first -> the order the claim reads cannot be trusted
    assert _cr7(placebo_simultaneous_ov_first=1.0)["verdict"] != HOLDS
    assert _cr7(placebo_simultaneous_ov_first=[0, 0, 0, 0, 1])["verdict"] != HOLDS
    assert _cr7(placebo_kq_leads_ov_first=1.0)["verdict"] != HOLDS


@pytest.mark.parametrize("name", ["placebo_swapped_ov_first", "placebo_swapped_kq_first"])
def test_cr7_a_shape_swapped_placebo_misread_is_inconclusive(name):
    c = _cr7(**{name: 0.0})
    assert c["verdict"] == INCONCLUSIVE and c["holds"] is False
    bad = [x for x in c["controls"] if not x["as_expected"]]
    assert [x["per_seed"]["0"] for x in bad] == [0.0] and "swapped" in bad[0]["name"]
    assert _cr7(**{name: [1, 1, 1, 1, 0]})["verdict"] == INCONCLUSIVE  # one seed is enough


def test_cr7_ov_frozen_arm_where_kq_still_learns_does_not_hold():
    c = _cr7(frozen=0.9)
    assert c["verdict"] == NOT_HOLD and "OV frozen" in c["verdict_reason"]
    # KQ still learning at one lr only is enough
    assert _cr7(**{"frozen_kq_gain_ratio_lr_6e-3": 0.9})["verdict"] == NOT_HOLD
    # read on the seed mean (2026-12-05, machine noise): mean 0.26, then 0.58
    assert _cr7(frozen=[0.1, 0.1, 0.1, 0.1, 0.9])["verdict"] == HOLDS
    assert _cr7(frozen=[0.1, 0.5, 0.5, 0.9, 0.9])["verdict"] == NOT_HOLD


def test_cr7_ov_preset_arm_that_does_not_speed_kq_does_not_hold():
    c = _cr7(preset=0.8)
    assert c["verdict"] == NOT_HOLD and "OV preset" in c["verdict_reason"]
    assert _cr7(**{"preset_kq_onset_ratio_lr_3e-3": 0.8})["verdict"] == NOT_HOLD
    assert _cr7(preset=0.5)["verdict"] == HOLDS  # at most half


def test_cr7_a_missing_arm_value_cannot_be_read():
    """nan (the normal run's KQ does not rise: the ratio has no number) is an unreadable seed
    under the 4-of-5 rule: it decides only where it could (SPEC 0); arms not run (their
    metrics absent, ``cascade.causal_arms = false``): no number on any seed, no evidence. An
    arm that never reaches the level is censored, not nan (interp.cascade.kq_onset_ratio)."""
    assert _cr7(preset=[0.3, 0.3, 0.3, 0.3, math.nan])["verdict"] == HOLDS  # 4 of 5
    assert _cr7(preset=[0.3, 0.3, 0.3, math.nan, math.nan])["verdict"] == INCONCLUSIVE
    assert _cr7(preset=[0.3, 0.3, 0.3, 0.8, math.nan])["verdict"] == INCONCLUSIVE
    assert _cr7(preset=[0.3, 0.3, 0.3, 0.8, 0.8])["verdict"] == NOT_HOLD
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: {k: v for k, v in _cr7_seed(i).items() if "ratio" not in k}
           for i, s in enumerate(SEEDS)}
    c = cr7_claim_from_metrics(per).to_dict()
    assert c["verdict"] == INCONCLUSIVE and "no value on seeds" in c["verdict_reason"]


def test_cr7_notes_say_whether_the_verdict_flips_under_each_onset_fraction():
    from mechinterp_icr.experiments.cr.claims_mech import cr7_claim_from_metrics

    per = {s: _cr7_seed(i) for i, s in enumerate(SEEDS)}
    for i, s in enumerate(SEEDS):  # at 50% of the gain KQ passes OV on 3 seeds at 6e-3
        per[s]["ov_first_at_50_lr_6e-3"] = 1.0 if i < 2 else 0.0
    notes = cr7_claim_from_metrics(per).to_dict()["notes"]
    assert "at 5% of the gain OV first on 5/5 at lr 3e-3, 5/5 at lr 6e-3: condition (i) " \
           "would be met (as at the registered fraction)" in notes
    assert "at 50% of the gain OV first on 5/5 at lr 3e-3, 2/5 at lr 6e-3: condition (i) " \
           "would not be met (unlike the registered fraction: the verdict flips under this " \
           "convention)" in notes
    assert notes.index("at 5%") < notes.index("at 20%") < notes.index("at 50%")


STEPS = list(range(21))


def _timing(t_ov, t_kq, kq_gain=1.0, onsets=None, kq=None):
    """A timing record; ``kq`` the KQ curve over STEPS (default: flat, then rising from
    ``t_kq`` by 0.1 a step, so its onset at 10% of the plateau gain 1.0 is ``t_kq``)."""
    if kq is None:
        kq = [0.0 if s < t_kq or math.isnan(t_kq) else 0.1 * (s - t_kq + 1) for s in STEPS]
    return {"ov_first": float(t_ov < t_kq), "t_onset_ov": t_ov, "t_onset_kq": t_kq,
            "lead_steps": t_kq - t_ov, "kq_gain": kq_gain, "ov_gain": 1.0,
            "onsets": onsets or {}, "steps": STEPS, "kq": kq}


def test_cr7_seed_metrics_read_the_arms_and_the_reported_fractions():
    from mechinterp_icr.experiments.cr.claims_mech import cr7_seed_metrics

    on = {"5": {"fraction": 0.05, "t_onset_ov": 1.0, "t_onset_kq": 4.0, "ov_first": 1.0},
          "50": {"fraction": 0.5, "t_onset_ov": 9.0, "t_onset_kq": 8.0, "ov_first": 0.0}}
    by_lr = {}
    for lr in ("0.003", "0.006"):
        v = {**_timing(2.0, 10.0, 2.0, on), "icl_heldout_exact": 0.9, "relation_head": 1,
             # the preset arm's KQ reaches the normal run's onset level (0.1) at step 4
             "arms": {"ov_preset": _timing(1.0, 4.0, 2.0, kq=[0.025 * s for s in STEPS]),
                      "ov_frozen": _timing(math.nan, 20.0, 0.2)},
             "preset_kq_onset_ratio": 0.4, "frozen_kq_gain_ratio": 0.1}
        by_lr[lr] = v
    placebo = {k: 1.0 for k in ("placebo_ov_first", "placebo_kq_first",
                                "placebo_swapped_ov_first", "placebo_swapped_kq_first")}
    placebo.update(placebo_simultaneous_ov_first=0.0, placebo_kq_leads_ov_first=0.0)
    m = cr7_seed_metrics({"by_lr": by_lr}, placebo)
    needed = {c.metric for c in spec("CR-7").conditions} | {
        c.condition.metric for c in spec("CR-7").controls}
    assert needed <= set(m)
    # the preset ratio is recomputed from the curves at the normal run's onset level (step 4
    # of the normal onset 10; the stored 0.4 is not read), the frozen one is the stored ratio
    assert m["preset_kq_onset_ratio_lr_6e-3"] == pytest.approx(0.4)
    assert m["frozen_kq_gain_ratio_lr_3e-3"] == 0.1
    assert m["ov_first_at_5_lr_3e-3"] == 1.0 and m["ov_first_at_50_lr_3e-3"] == 0.0
    assert m["t_onset_kq_preset_lr_3e-3"] == 4.0 and m["kq_gain_frozen_lr_6e-3"] == 0.2
    assert math.isnan(m["t_onset_ov_frozen_lr_3e-3"])
    # without the arms (cascade.causal_arms = false) their metrics are absent
    for v in by_lr.values():
        v.pop("arms")
    m = cr7_seed_metrics({"by_lr": by_lr}, placebo)
    assert not any("ratio" in k or "preset" in k or "frozen" in k for k in m)


def test_lr_names_match_the_registry():
    from mechinterp_icr.experiments.cr.claims_mech import lr_name

    assert [lr_name(x) for x in (3e-3, 6e-3, 1e-2)] == ["3e-3", "6e-3", "1e-2"]
    assert {c.metric for c in spec("CR-7").conditions} == {
        f"{m}_lr_{lr}" for m in ("ov_first", "preset_kq_onset_ratio", "frozen_kq_gain_ratio")
        for lr in LRS}


def test_arm_ratios_compare_onsets_and_plateau_gains():
    from mechinterp_icr.interp.cascade import (
        fraction_name,
        head_timing,
        kq_gain_ratio,
        kq_onset_ratio,
        plateau_gain,
    )

    assert [fraction_name(f) for f in (0.05, 0.1, 0.2, 0.5)] == ["5", "10", "20", "50"]
    assert plateau_gain([0, 1, 2, 4, 4, 4]) == pytest.approx(4.0)  # last 3 values
    assert math.isnan(plateau_gain([1.0]))
    normal = _timing(1.0, 10.0, 2.0)
    assert kq_onset_ratio({"steps": STEPS, "kq": [0.025 * s for s in STEPS]},
                          normal) == pytest.approx(0.4)
    # an arm that never reaches the level: censored one step past its budget, a failing ratio
    assert kq_onset_ratio({"steps": STEPS, "kq": [0.0] * 21}, normal) == pytest.approx(
        (max(STEPS) + 1) / 10)
    assert math.isnan(kq_onset_ratio(normal, _timing(1.0, math.nan)))
    assert kq_gain_ratio({"kq_gain": -0.2}, normal) == pytest.approx(-0.1)
    assert math.isnan(kq_gain_ratio({"kq_gain": 1.0}, {"kq_gain": 0.0}))
    rows = [{"step": s, "h1_ov_margin": ov, "h1_kq_logit": kq}
            for s, ov, kq in ((0, 0, 0), (1, 0.3, 0), (2, 1, 0.1), (3, 1, 0.6), (4, 1, 1),
                              (5, 1, 1), (6, 1, 1))]
    t = head_timing(rows, 1, 0.1, 0.1, (0.05, 0.5))
    assert (t["t_onset_ov"], t["t_onset_kq"], t["ov_first"]) == (1, 2, 1.0)
    assert t["onsets"]["50"] == {"fraction": 0.5, "t_onset_ov": 2, "t_onset_kq": 3,
                                 "ov_first": 1.0, "kq_first": 0.0}
    assert t["kq_gain"] == pytest.approx(1.0)


def test_onset_is_measured_against_the_plateau_and_continuous():
    from mechinterp_icr.interp.cascade import onset_step

    steps = list(range(20))
    # a probe that overshoots then settles: 10% of the plateau gain (1.0), not of the peak
    v = [0, 0.05, 0.12, 0.5, 2.0, 1.5] + [1.0] * 14
    assert onset_step(steps, v) == 2
    assert math.isnan(onset_step(steps, [0.3] * 20))  # no rise
    assert math.isnan(onset_step(steps, np.linspace(1, 0, 20)))  # falls


def test_placebo_schedules_are_read_in_their_order():
    from mechinterp_icr.interp.cascade import placebo_orders
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)
    batch = task.sample_icl(np.random.default_rng(0), 16, subjects=task.heldout_subjects)
    r = placebo_orders(task, batch, 11)
    assert r["placebo_ov_first"] == 1.0 and r["placebo_kq_first"] == 1.0
    # the negative schedules: moving together is a tie, KQ ahead is not OV first
    assert r["placebo_simultaneous_ov_first"] == 0.0
    assert r["placebo_kq_leads_ov_first"] == 0.0
    sim = r["schedules"]["simultaneous"]
    assert sim["t_onset_ov"] == sim["t_onset_kq"]
    ov, kq = r["schedules"]["ov_first"]["ov"], r["schedules"]["ov_first"]["kq"]
    assert ov[0] < ov[1] < ov[2] < ov[4] and ov[-1] == pytest.approx(ov[5])  # then plateaus
    assert kq[0] < kq[-1] and kq[0] == pytest.approx(kq[4])  # KQ moves after the OV
