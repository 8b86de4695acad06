"""The verdict figure shows what decided a claim: each condition and control per seed against
its registered threshold, a failing seed and a misbehaving control marked as such."""

import pytest

from mechinterp_icr.claims import Claim, evaluate_control, spec
from mechinterp_icr.viz.claim_figures import _seed_color, verdict_panels, write_verdict_figures

GREEN, RED, GREY = "#2ca02c", "#d62728", "#7f7f7f"


def _ir6(gap_seed1: float, comparator_seed2: float | None):
    sp = spec("IR-6")
    per = {str(s): {"within_pair_gap": 0.01, "pair_mass_diff": 0.2, "mass_s3": 0.01,
                    "ir2_met": 1.0, "constructed_rows_met": 1.0,
                    "large_step_pair_mass_diff": 0.001} for s in range(5)}
    per["1"]["within_pair_gap"] = gap_seed1
    per["2"]["constructed_rows_met"] = comparator_seed2
    ctrls = [evaluate_control(c, per) for c in sp.controls]
    return Claim.from_spec(sp, per, controls=ctrls)


def test_panels_follow_the_registry_and_mark_failing_seeds():
    claim = _ir6(gap_seed1=0.05, comparator_seed2=0.0)
    panels = verdict_panels(claim)
    sp = spec("IR-6")
    assert [p["metric"] for p in panels] == ([c.metric for c in sp.conditions] +
                                             [c.condition.metric for c in sp.controls])
    gap = panels[0]
    assert gap["threshold"] == 0.02 and gap["ok"] is False
    assert [_seed_color(gap, v) for v in gap["values"].values()] == \
        [GREEN, RED, GREEN, GREEN, GREEN]
    comp = next(p for p in panels if p["kind"] == "positive control")
    assert comp["ok"] is False  # the comparator misbehaves on seed 2
    assert _seed_color(comp, comp["values"]["2"]) == RED
    neg = next(p for p in panels if p["kind"] == "negative control")
    assert neg["ok"] is True and {_seed_color(neg, v) for v in neg["values"].values()} == {GREEN}
    # a negative control that shows the effect is red there
    assert _seed_color(neg, 0.3) == RED


def test_a_control_without_a_value_is_not_measured_and_grey():
    claim = _ir6(gap_seed1=0.01, comparator_seed2=None)
    comp = next(p for p in verdict_panels(claim) if p["kind"] == "positive control")
    assert comp["ok"] is None and comp["values"]["2"] is None
    assert _seed_color(comp, None) == GREY


def test_only_claims_without_a_figure_get_one(tmp_path, monkeypatch):
    pytest.importorskip("plotly")
    import mechinterp_icr.viz.claim_figures as cf

    a, b = _ir6(0.01, 1.0), _ir6(0.05, 1.0)
    b.figure = "figures/own.html"
    orig = cf.save_figure
    monkeypatch.setattr(cf, "save_figure",
                        lambda fig, stem, **kw: orig(fig, stem, png=False, **kw))
    out = write_verdict_figures([a, b], tmp_path)
    assert out == {"IR-6": "ir_6_verdict"}
    assert a.figure == "figures/ir_6_verdict.html" and b.figure == "figures/own.html"
    assert (tmp_path / "ir_6_verdict.html").exists()


def test_a_seed_of_the_run_without_numbers_is_shown_and_a_mean_rule_colours_the_panel():
    claim = _ir6(gap_seed1=0.05, comparator_seed2=1.0)
    panels = verdict_panels(claim, seeds=[0, 1, 2, 3, 4, 5])
    assert all(list(p["values"]) == ["0", "1", "2", "3", "4", "5"] for p in panels)
    assert panels[0]["values"]["5"] is None and panels[0]["ok"] is False
    mean_panel = {**panels[1], "rule": "mean", "ok": True}
    assert _seed_color(mean_panel, -1.0) == GREEN  # below the bar, but the mean decides
    assert _seed_color({**mean_panel, "ok": False}, 1.0) == RED


def test_figures_name_the_seeds_they_show(tmp_path, monkeypatch):
    """Every claim figure names its seeds; one that shows fewer than the claim says which and
    why (the CR-3 sweep runs on the first 3 seeds, IR-4's trajectories are one seed's)."""
    pytest.importorskip("plotly")
    from mechinterp_icr.viz.claim_figures import verdict_figure
    from mechinterp_icr.viz.cr_figures import _sweep_figure
    from mechinterp_icr.viz.figures import seeds_caption
    from mechinterp_icr.viz.ir_figures import attention_rows_figure, gap_decay_figure

    assert seeds_caption([0, 1, 2], [0, 1, 2, 3, 4], "the sweep runs on the first 3 seeds") \
        == "seeds 0, 1, 2 of the claim's 0, 1, 2, 3, 4 (the sweep runs on the first 3 seeds)"
    assert seeds_caption(["1", "0"], [0, 1]) == "seeds 0, 1"
    monkeypatch.setenv("MECHINTERP_ICR_NO_PNG", "1")
    rows = [{"setting": "default", "seeds": [0, 1, 2], "heldout_icl_exact_mean": 0.9,
             "heldout_icl_exact_per_seed": [0.9, 0.9, 0.9], "heldout_iclgrm_exact_mean": 0.9,
             "heldout_iclgrm_exact_per_seed": [0.9, 0.9, 0.9]}]
    _sweep_figure(rows, tmp_path / "cr3_sweep", claim_seeds=[0, 1, 2, 3, 4])
    html = (tmp_path / "cr3_sweep.html").read_text()
    assert "seeds 0, 1, 2 of the claim's 0, 1, 2, 3, 4 (the sweep runs on the first 3 seeds" \
        in html
    fig = verdict_figure(_ir6(0.05, 1.0))
    assert "(seeds 0, 1, 2, 3, 4)" in fig.layout.title.text
    recs = [{"step": s, "row1": [0.2] * 5} for s in (0, 1, 2)]
    traj = {f"{d}_{a}": recs for d in ("sym", "raw") for a in ("pgd", "gd")}
    title = attention_rows_figure(traj, 32, 0, seeds=[0, 1, 2, 3, 4]).layout.title.text
    assert "seed 0 of the claim's 0, 1, 2, 3, 4 (one seed drawn)" in title
    title = gap_decay_figure({"0": [[0, 0.1]], "1": [[0, 0.1]]}, 32, [0, 1]).layout.title.text
    assert "seeds 0, 1" in title and "of the claim's" not in title
