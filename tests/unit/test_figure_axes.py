"""Every plotly figure the package draws titles each axis that shows data: every figure
function is built here on tiny synthetic rows and each x / y axis a trace is drawn on must
have a title, or (a shared axis: tick labels hidden, matched to another) share a titled one.
``task_vectors_pca`` (probes/task_vectors.py) had no axis titles at all."""

import math

import numpy as np
import pytest

pytest.importorskip("plotly")

PT, FT, GRM = "pretrain", "ft-icl", "ft-iclgrm"


def _axis_name(ref: str, letter: str) -> str:
    """'x' -> 'xaxis', 'x3' -> 'xaxis3'."""
    return f"{letter}axis{ref[1:]}"


def untitled_axes(fig) -> list[str]:
    """The axes (``xaxis``, ``yaxis2``, ...) that carry a trace but no title (a shared axis
    with hidden tick labels counts as titled when the axis it matches is)."""
    def title(name: str) -> str:
        ax = fig.layout[name]
        return (ax.title.text or "") if ax.title is not None else ""

    used = set()
    for tr in fig.data:
        if tr.type in ("pie", "table", "sankey"):  # no cartesian axes
            continue
        for letter in "xy":
            used.add(_axis_name(getattr(tr, f"{letter}axis", None) or letter, letter))
    bad = []
    for name in sorted(used):
        if title(name).strip():
            continue
        ax = fig.layout[name]
        if ax.showticklabels is False and ax.matches and \
                title(_axis_name(ax.matches, name[0])).strip():
            continue
        bad.append(name)
    return bad


@pytest.fixture
def captured(monkeypatch):
    """Figures passed to ``save_figure`` by the viz modules, instead of written."""
    import mechinterp_icr.viz.claim_figures as claim_figures
    import mechinterp_icr.viz.cr9_figure as cr9_figure
    import mechinterp_icr.viz.cr_figures as cr_figures
    import mechinterp_icr.viz.cr_mech_figures as cr_mech_figures
    import mechinterp_icr.viz.ir_figures as ir_figures

    figs = {}

    def fake(fig, stem, **kw):
        figs[str(stem).replace("\\", "/").rsplit("/", 1)[-1]] = fig
        return {"html": f"{stem}.html"}

    for mod in (cr_figures, cr9_figure, cr_mech_figures, ir_figures, claim_figures):
        monkeypatch.setattr(mod, "save_figure", fake)
    return figs


def _pca(rng, n=40, types=3):
    return {"x": rng.normal(size=n).tolist(), "y": rng.normal(size=n).tolist(),
            "type": (np.arange(n) % types).tolist(), "var_ratio": [0.4, 0.2],
            "boundary_label": "L1.mid"}


def _cr4_results():
    rng = np.random.default_rng(0)
    out = []
    for seed in (0, 1):
        layers = [{"label": lab, "acc_pc": 0.3 + 0.2 * i, "acc_full": 0.4 + 0.1 * i}
                  for i, lab in enumerate(("embed", "L0", "L1.mid"))]
        phases = {p: {"acc_pc": 0.9, "layers": layers, "boundary_label": "L1.mid",
                      "hook": "blocks.1.hook_resid_mid", "acc_random_dir": 0.5}
                  for p in (PT, FT, GRM)}
        ks = {p: [{"K": k, "type_variance_fraction": 0.1 * k, "acc_pc": 0.2 * k,
                   "write_type_variance_fraction": 0.15 * k} for k in (1, 2, 3)]
              for p in (PT, FT, GRM)}
        lam = [{"lam": lm, "pt_type_variance_fraction": 0.1, "pt_acc_pc": 0.3,
                "ft_type_variance_fraction": 0.5 * lm, "ft_acc_pc": 0.9} for lm in (0, 0.5, 1)]
        curve = [{"step": s, "acc_pc": 0.5, "acc_full": 0.6} for s in (0, 10, 20)]
        out.append({"seed": seed, "pca": {p: _pca(rng) for p in (PT, FT, GRM)},
                    "phases": phases, "k_sweep": ks, "lam_sweep": lam, "curve": curve})
    return out


def test_the_task_vector_scatter_has_axis_titles():
    from mechinterp_icr.viz.cr_figures import task_vector_views_figure

    rng = np.random.default_rng(0)
    row = {"boundary_label": "L1.mid", "acc_pc": 0.93}
    views = [(f"ft-icl-{i:07d}", row, rng.normal(size=(30, 2)), np.arange(30) % 3,
              [0.41, 0.22]) for i in range(2)]
    fig = task_vector_views_figure(views, 3, umap=False)
    assert untitled_axes(fig) == []
    assert fig.layout.xaxis.title.text == "PC1 (41% var)"
    assert fig.layout.yaxis2.title.text == "PC2 (22% var)"
    # views written before the variance shares were passed, and the UMAP view
    old = [v[:4] for v in views]
    assert task_vector_views_figure(old, 3, umap=False).layout.yaxis.title.text == "PC2"
    umap = task_vector_views_figure(old, 3, umap=True)
    assert untitled_axes(umap) == [] and umap.layout.xaxis.title.text == "UMAP 1"
    # more than four checkpoints: four panels, each titled
    many = task_vector_views_figure(views * 3, 3, umap=False)
    assert untitled_axes(many) == [] and len(many.layout.annotations) == 4


def test_every_cr_figure_titles_its_axes(captured, tmp_path):
    from mechinterp_icr.viz import cr_figures as cf

    res = _cr4_results()
    cf.write_cr4_figures(res, tmp_path)
    cf.write_cr123_figures(
        {PT: [[0.2, 0.3], [0.25, 0.3]], FT: [[0.9, 0.95], [0.92, 0.97]]}, [1, 2], 2,
        {(FT, "heldout_icl_exact"): {0: [0.2, 0.3], 10: [0.9, 0.8]}},
        [{"setting": f"setting {i}", "seeds": [0, 1], "heldout_icl_exact_mean": 0.9,
          "heldout_icl_exact_per_seed": [0.88, 0.92], "heldout_iclgrm_exact_mean": 0.95,
          "heldout_iclgrm_exact_per_seed": [0.94, 0.96]} for i in range(3)],
        tmp_path, seeds=[0, 1])
    wide = [{"setting": f"setting {i}", "seeds": [0], "heldout_icl_exact_mean": 0.9,
             "heldout_icl_exact_per_seed": [0.9], "heldout_iclgrm_exact_mean": 0.95,
             "heldout_iclgrm_exact_per_seed": [0.95]} for i in range(6)]
    cf._sweep_figure(wide, tmp_path / "cr3_sweep_wide")  # horizontal bars
    cf.write_cr5_figure({"0": {"relation_role": 0.8, "subject_role": 0.7},
                         "1": {"relation_role": 0.9, "subject_role": 0.6}}, tmp_path)
    cf.write_cr6_figure({"0": {"pt_construction_pt_exact": 1.0}}, tmp_path)
    steps = [0, 1, 2, 4, 8, 16]
    curve = {"steps": steps, "ov": [0, .1, .3, .6, .9, 1], "kq": [0, 0, .1, .4, .8, 1],
             "t_onset_ov": 1.0, "t_onset_kq": math.nan}
    cf.write_cr7_figure({"0": {"by_lr": {"0.001": curve, "0.003": curve}}}, tmp_path,
                        placebo={"0": {"schedules": {"ov_first": {"ov": [0, .5, 1],
                                                                  "kq": [0, 0, 1]}}}})
    per = {"0": {"ft_partial_eta2_by_k": {"1": 0.2, "8": 0.5}, "ft_exact_by_k": {"1": 0.5},
                 "ft_output_type_by_k": {"1": 0.6}, "mixed_partial_eta2_by_k": {"1": 0.1},
                 "ft_eta2_by_lam": {"0": 0.2, "0.9": 0.6}, "mixed_eta2_by_lam": {"0": 0.0},
                 "ft_icl_exact_by_lam": {"0": 0.3, "0.9": 0.9}}}
    cf.write_cr8_figure(per, tmp_path, 0.9)
    cf.write_cr9_figure(per, tmp_path)
    expected = {"cr4_pca_scatter", "cr4_separation_vs_k", "cr4_separation_vs_lam",
                "cr4_probe_layers", "cr4_overview", "cr_icl_by_k", "cr_finetune_curves",
                "cr3_sweep", "cr3_sweep_wide", "cr5_head_roles", "cr6_construction",
                "cr7_cascade", "cr8_by_k", "cr9_by_lam"}
    assert expected <= set(captured)
    bad = {name: untitled_axes(fig) for name, fig in captured.items() if untitled_axes(fig)}
    assert bad == {}
    ov = captured["cr4_overview"]  # the PCA row: titled with the components' shares
    assert ov.layout.xaxis.title.text == "PC1 (40% var)"
    assert ov.layout.yaxis3.title.text == "PC2 (20% var)"


def test_every_ir_figure_titles_its_axes():
    from helpers import build_ir5_seed

    from mechinterp_icr.viz import ir_figures as irf
    from mechinterp_icr.viz.ir5_figure import ir5_figure

    recs = [{"step": s, "row1": [0.2, 0.1, 0.3, 0.1, 0.3]} for s in (0, 1, 10)]
    traj = {f"{d}_{a}": recs for d in ("sym", "raw") for a in ("pgd", "gd")}
    kinds = {"swap": 0.5, "single": 0.6}
    rows = ["model", "pairwise", "own_paired", "one_pair", "unequal_1", "uniform",
            "induction"]
    ck = [{"label": f"ck{i}", "acc": {r: dict(kinds) for r in rows},
           "prob": {r: dict(kinds) for r in rows}} for i in range(3)]
    figs = {
        "attention_rows": irf.attention_rows_figure(traj, 16, 0, [0, 1]),
        "gap_vs_n": irf.gap_vs_n_figure([{"seed": 0, "n": n, "within_pair_gap": 0.1 / n}
                                         for n in (4, 8)], [0]),
        "sample_complexity": ir5_figure({"0": build_ir5_seed()}),
        "gap_decay": irf.gap_decay_figure({"0": [[0, 0.5], [10, 0.01]]}, 16),
        "row_overwrite": irf.row_overwrite_figure({"ht_sym_pgd": ck, "ht_raw_gd": ck}, 16, 0),
    }
    assert {k: untitled_axes(f) for k, f in figs.items() if untitled_axes(f)} == {}


def test_the_other_figures_title_their_axes():
    from mechinterp_icr.claims import Claim, evaluate_control, spec
    from mechinterp_icr.interp.attention import roles_figure
    from mechinterp_icr.viz.claim_figures import verdict_figure
    from mechinterp_icr.viz.figures import checkpoint_figure

    sp = spec("IR-6")
    per = {str(s): {"within_pair_gap": 0.01, "pair_mass_diff": 0.2, "mass_s3": 0.01,
                    "ir2_met": 1.0, "constructed_rows_met": 1.0,
                    "large_step_pair_mass_diff": 0.001} for s in range(3)}
    claim = Claim.from_spec(sp, per, controls=[evaluate_control(c, per) for c in sp.controls])
    roles = [{"checkpoint": f"ck{i}", "layer": 0, "head": 0, "demo_attribute": 0.5,
              "query_subject": 0.1, "demo_subject": 0.1, "separator": 0.2, "grammar": 0.1}
             for i in range(3)]
    rows = [{"phase": "ft-icl", "step": s, "acc": 0.1 * i} for i, s in enumerate((0, 10, 100))]
    figs = {"verdict": verdict_figure(claim),
            "roles": roles_figure(roles),
            "checkpoints": checkpoint_figure(rows, {"accuracy": "acc"}, "t", "accuracy")}
    assert {k: untitled_axes(f) for k, f in figs.items() if untitled_axes(f)} == {}


def test_ir5_figure_labels_N_in_powers_of_two():
    """IR-5's N axes: a log axis with its own minor tick labels shows "2" for 2000, so the
    ticks are powers of two up to the largest N, written out."""
    from helpers import build_ir5_seed

    from mechinterp_icr.viz.ir5_figure import ir5_figure

    fig = ir5_figure({"0": build_ir5_seed(learned_top=1024)})
    for axis in (fig.layout.yaxis, fig.layout.xaxis2):
        assert list(axis.tickvals) == [2 ** k for k in range(0, 11, 2)]
        assert list(axis.ticktext) == [str(2 ** k) for k in range(0, 11, 2)]


def test_the_task_vector_scatter_colours_by_what_is_asked():
    """--color-by: one trace per type, one colour-scaled trace per panel by query subject,
    or right / wrong answers; the title says which; axes stay titled."""
    from mechinterp_icr.viz.cr_figures import task_vector_views_figure

    rng = np.random.default_rng(0)
    row = {"boundary_label": "L1.mid", "acc_pc": 0.93}
    Z = rng.normal(size=(30, 2))
    by_type = task_vector_views_figure([("a", row, Z, np.arange(30) % 3, [0.4, 0.2])] * 2, 3,
                                       umap=False)
    assert [t.name for t in by_type.data] == ["type 0", "type 1", "type 2"] * 2
    subj = task_vector_views_figure([("a", row, Z, np.arange(30) % 7, [0.4, 0.2])] * 2, 3,
                                    umap=False, color_by="query-subject")
    assert len(subj.data) == 2 and list(subj.data[0].marker.color) == list(np.arange(30) % 7)
    assert "query subject" in subj.layout.title.text and untitled_axes(subj) == []
    assert subj.layout.coloraxis.colorbar.title.text == "query subject"
    right = task_vector_views_figure([("a", row, Z, np.arange(30) % 2, [0.4, 0.2])], 3,
                                     umap=False, color_by="correct")
    assert [t.name for t in right.data] == ["model right", "model wrong"]
    assert [len(t.x) for t in right.data] == [15, 15]


def test_pc_signs_face_the_same_way_across_checkpoints():
    """orient_to_types: a component and its negation give the same oriented coordinates, with
    the lowest type's mean on the positive side."""
    from mechinterp_icr.experiments.cr.taskvec import orient_to_types

    rng = np.random.default_rng(1)
    types = np.arange(40) % 2
    Z = rng.normal(size=(40, 2)) + np.where(types[:, None] == 0, 2.0, -2.0)
    a, b = orient_to_types(Z, types), orient_to_types(Z * np.array([-1.0, 1.0]), types)
    assert np.allclose(a, b)
    assert (a[types == 0].mean(0) > 0).all()
