"""Figures of the CR reproduction (claims CR-1 .. CR-4, CR-8, CR-9; CR-5 .. CR-7 in
:mod:`.cr_mech_figures`, re-exported here), drawn from result rows.

Every function takes the rows or dicts a CR stage produced (evaluation rows, sweep rows,
task-vector results, head-role verdicts, cascade curves) and writes plotly figures with
:func:`mechinterp_icr.viz.figures.save_figure`; none reads an experiment's constants. Phase
names (``pretrain``, ``ft-icl``, ...) are the keys of those rows. plotly is imported when a
figure is drawn, not when this module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims import ci95
from mechinterp_icr.claims.protocol import UNIT
from mechinterp_icr.claims.registry import threshold
from mechinterp_icr.viz.cr9_figure import cr9_figure, write_cr9_figure  # CR-9, re-exported
from mechinterp_icr.viz.cr_mech_figures import (  # CR-5 .. CR-7, re-exported
    write_cr5_figure,
    write_cr6_figure,
    write_cr7_figure,
)
from mechinterp_icr.viz.figures import SEED_COLORS, curve_points, save_figure, seeds_caption

__all__ = [
    "cr4_overview_figure",
    "write_cr123_figures",
    "write_cr4_figures",
    "write_cr5_figure",
    "write_cr6_figure",
    "write_cr7_figure",
    "cr8_figure",
    "write_cr8_figure",
    "cr9_figure",
    "write_cr9_figure",
    "COLOR_BY",
    "task_vector_views_figure",
    "write_task_vector_views",
]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"


# ------------------------------------------------------------------------------------------------
# CR-1 .. CR-3
# ------------------------------------------------------------------------------------------------
def write_cr123_figures(icl_by_k: dict[str, list[list[float]]], ks, n_seeds: int,
                        curves: dict[tuple[str, str], dict[int, list[float]]],
                        sweep: list[dict[str, Any]], fig_dir: Path,
                        seeds: list | None = None) -> dict[str, Any]:
    """Held-out plain-ICL accuracy by K per phase (``icl_by_k``: phase -> per K the values
    over seeds), the finetuning curves (``curves``: (phase, metric) -> step -> values over
    seeds) and the CR-3 sweep (aggregated rows). ``seeds``: the claims' seeds, named in the
    titles (the sweep's own seeds, from its rows, are named against them). Intervals of the
    accuracies are clipped to [0, 1]. Returns the written paths."""
    try:
        import plotly.graph_objects as go
    except ImportError as e:  # pragma: no cover
        return {"error": str(e)}
    fig_dir = Path(fig_dir)
    out = {}
    fig = go.Figure()
    for phase, by_k in icl_by_k.items():
        means, los, his = [], [], []
        for vals in by_k:
            lo, hi = ci95(vals, UNIT)
            means.append(float(np.mean(vals)))
            los.append(means[-1] - lo)
            his.append(hi - means[-1])
        control = phase.endswith("-mixed")  # negative controls (mixed-type demos): dotted
        fig.add_trace(go.Scatter(x=list(ks), y=means,
                                 name=f"{phase} (control)" if control else phase,
                                 mode="lines+markers",
                                 line={"dash": "dot" if control else "solid"},
                                 error_y={"type": "data", "symmetric": False,
                                          "array": his, "arrayminus": los}))
    cr2 = threshold("CR-2", "heldout_icl_exact")
    fig.add_hline(y=cr2, line_dash="dot", annotation_text=f"CR-2 {cr2:.2f}")
    ctrl = {m: threshold("CR-2", m, control=True)  # one line per registered control bound
            for m in ("pt_heldout_icl_exact", "mixed_heldout_icl_exact")}
    for bound in sorted(set(ctrl.values())):
        which = [m for m, b in ctrl.items() if b == bound]
        fig.add_hline(y=bound, line_dash="dot", annotation_text=(
            f"CR-2 controls <= {bound:g}" if len(which) == len(ctrl)
            else f"CR-2 control {', '.join(which)} <= {bound:g}"))
    over = seeds_caption(seeds) if seeds else f"{n_seeds} seeds"
    fig.update_layout(title="CR: held-out plain-ICL exact accuracy by number of demos K "
                            f"(mean, 95% CI over {over})",
                      xaxis_title="K (demos)", yaxis_title="exact accuracy",
                      yaxis_range=[-0.02, 1.02])
    out["cr_icl_by_k"] = save_figure(fig, fig_dir / "cr_icl_by_k")
    # finetuning dynamics from the checkpoint evaluations, mean over seeds
    if curves:
        fig = go.Figure()
        names = {"heldout_icl_exact": "held-out plain ICL",
                 "heldout_iclgrm_exact": "held-out ICL+Grm", "pt_restricted": "PT restricted"}
        dashes = {"heldout_icl_exact": "solid", "heldout_iclgrm_exact": "dash",
                  "pt_restricted": "dot"}
        for (phase, key), by_step in sorted(curves.items()):
            steps = sorted(by_step)
            fig.add_trace(go.Scatter(x=[max(s, 0.5) for s in steps],
                                     y=[float(np.mean(by_step[s])) for s in steps],
                                     mode="lines+markers", name=f"{phase}: {names[key]}",
                                     line={"dash": dashes[key]},
                                     marker={"size": 4}))
        fig.update_layout(title="CR finetuning dynamics (checkpoint evaluations, mean over "
                                f"{over}; step 0 drawn at 0.5)",
                          xaxis={"type": "log", "title": "finetuning step"},
                          yaxis_title="exact accuracy", yaxis_range=[-0.02, 1.02])
        out["cr_finetune_curves"] = save_figure(fig, fig_dir / "cr_finetune_curves")
    if sweep:
        out["cr3_sweep"] = _sweep_figure(sweep, fig_dir / "cr3_sweep", claim_seeds=seeds)
    return out


def _sweep_figure(sweep: list[dict], stem, claim_seeds: list | None = None) -> dict[str, str]:
    """CR-3 sweep bars (mean) with the seeds as dots; vertical bars for a few settings,
    horizontal ones (a row per setting, readable labels) for the paper profile's many. The
    subtitle names the sweep's seeds (its rows' ``seeds``) against the claim's
    (``claim_seeds``): the sweep runs on the first ``sweep_seeds`` seeds only."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = [r["setting"] for r in sweep]
    flip = len(labels) > 4
    for key, name in (("heldout_icl_exact", "held-out plain ICL"),
                      ("heldout_iclgrm_exact", "held-out ICL+Grm")):
        means = [r[f"{key}_mean"] for r in sweep]
        pts = [r[f"{key}_per_seed"] for r in sweep]
        cats = [lab for lab, p in zip(labels, pts) for _ in p]
        vals = [v for p in pts for v in p]
        bar = dict(x=means, y=labels, orientation="h") if flip else dict(x=labels, y=means)
        dots = dict(x=vals, y=cats, orientation="h") if flip else dict(x=cats, y=vals)
        fig.add_trace(go.Bar(name=name, offsetgroup=key, **bar))
        fig.add_trace(go.Scatter(mode="markers", offsetgroup=key, name=f"{name} (per seed)",
                                 marker={"size": 7, "color": "black"}, showlegend=False,
                                 **dots))
    shown = [sd for r in sweep for sd in r.get("seeds", [])]
    sub = ""
    if shown:
        sub = seeds_caption(shown, claim_seeds,
                            f"the sweep runs on the first {len(set(map(str, shown)))} seeds")
        if claim_seeds and set(map(str, claim_seeds)) - set(map(str, shown)):
            sub += "; the CR-3 verdict and the default row of its table read every seed"
        sub = f"<br><sub>{sub}</sub>"
    title = ("CR-3 sweep: ICL+Grm finetuning, held-out accuracy (bars: mean; dots: seeds)"
             + sub)
    acc = {"title": "exact accuracy", "range": [-0.02, 1.05]}
    cr3 = threshold("CR-3", "heldout_icl_exact")
    if flip:
        fig.add_vline(x=cr3, line_dash="dot", annotation_text=f"CR-3 threshold {cr3:.2f}",
                      annotation_position="bottom left")
        fig.update_layout(title=title, barmode="group", scattermode="group", xaxis=acc,
                          yaxis={"autorange": "reversed", "automargin": True,
                                 "title": "ICL+Grm finetuning setting"},
                          legend={"orientation": "h", "y": -0.08})
        return save_figure(fig, stem, width=1100, height=160 + 46 * len(labels))
    fig.add_hline(y=cr3, line_dash="dot", annotation_text=f"CR-3 threshold {cr3:.2f}")
    fig.update_layout(title=title, barmode="group", scattermode="group", yaxis=acc,
                      xaxis_title="ICL+Grm finetuning setting")
    return save_figure(fig, stem, width=1100)


# ------------------------------------------------------------------------------------------------
# CR-4
# ------------------------------------------------------------------------------------------------
def _add_type_scatter(fig, x, y, t, colors, row: int, col: int, legend: bool,
                      size: int) -> None:
    """One marker trace per attribute type (coloured by type) into subplot (row, col)."""
    import plotly.graph_objects as go

    x, y, t = np.asarray(x), np.asarray(y), np.asarray(t)
    for l in range(len(colors)):
        m = t == l
        fig.add_trace(go.Scatter(x=x[m], y=y[m], mode="markers", name=f"type {l}",
                                 legendgroup=f"type {l}", showlegend=legend,
                                 marker=dict(size=size, color=colors[l], opacity=0.7)),
                      row, col)


def _type_colors(n):
    base = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
            "#e377c2"]
    return [base[i % len(base)] for i in range(n)]


def _k_values(results: list[dict[str, Any]], phase: str, key: str
              ) -> tuple[list[int], list[list[float]]]:
    """(the K values, ``key`` of every seed at each K) from the K sweeps of ``phase``; rows
    without ``key`` (records written before it existed) are left out."""
    rows = [row for r in results for row in r["k_sweep"].get(phase, []) if key in row]
    ks = sorted({row["K"] for row in rows})
    return ks, [[row[key] for row in rows if row["K"] == k] for k in ks]


_CR4_TITLES = {PHASE_PT: "PT only", PHASE_FT: "after ICL finetuning",
               PHASE_FT_GRM: "after ICL+Grm finetuning"}
_CR4_COLORS = ["#7f7f7f", "#1f77b4", "#ff7f0e"]


def write_cr4_figures(results: list[dict[str, Any]], fig_dir: Path) -> dict[str, Any]:
    """PCA scatter (PT-only vs finetuned), separation vs K, separation vs lam, per-layer and
    per-checkpoint probe accuracy. Returns the written paths."""
    fig_dir = Path(fig_dir)
    r0 = results[0]
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if p in r0["pca"]]
    out: dict[str, Any] = {"pca_scatter": _cr4_pca_scatter(results, phases, fig_dir),
                           "sep_vs_k": _cr4_separation_vs_k(results, phases, fig_dir)}
    if any(r.get("lam_sweep") for r in results):
        out["sep_vs_lam"] = _cr4_separation_vs_lam(results, fig_dir)
    out["probe_layers"] = _cr4_probe_layers(results, phases, fig_dir)
    out["overview"] = save_figure(cr4_overview_figure(results), fig_dir / "cr4_overview",
                                  width=1400, height=900)
    return out


def _cr4_pca_scatter(results: list[dict[str, Any]], phases: list[str], fig_dir: Path):
    """One seed's task vectors in the first two PCs per phase, coloured by type."""
    from plotly.subplots import make_subplots

    r0, seeds, titles = results[0], [r["seed"] for r in results], _CR4_TITLES
    fig = make_subplots(rows=1, cols=len(phases), subplot_titles=[
        f"{titles[p]} ({r0['pca'][p]['boundary_label']}; top-PC probe "
        f"{r0['phases'][p]['acc_pc']:.2f})" for p in phases])
    n_types = int(max(max(r0["pca"][p]["type"]) for p in phases)) + 1
    cols = _type_colors(n_types)
    for j, p in enumerate(phases):
        d = r0["pca"][p]
        x, y, t = np.asarray(d["x"]), np.asarray(d["y"]), np.asarray(d["type"])
        _add_type_scatter(fig, x, y, t, cols, 1, j + 1, legend=j == 0, size=5)
        fig.update_xaxes(title_text=f"PC1 ({d['var_ratio'][0]:.0%} var)", row=1, col=j + 1)
        fig.update_yaxes(title_text=f"PC2 ({d['var_ratio'][1]:.0%} var)", row=1, col=j + 1)
    fig.update_layout(title=f"CR-4: task vectors of held-out-subject ICL prompts at the query "
                            f"position, first two PCs, coloured by attribute type<br><sub>"
                            f"{seeds_caption([r0['seed']], seeds, 'one seed drawn')}</sub>")
    return save_figure(fig, fig_dir / "cr4_pca_scatter", width=1300, height=480)



def _cr4_separation_vs_k(results: list[dict[str, Any]], phases: list[str], fig_dir: Path):
    """Type variance share and top-PC probe accuracy against K, per phase (mean, min-max)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    seeds, titles = [r["seed"] for r in results], _CR4_TITLES
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "type variance share of task vectors", "top-PC probe accuracy (held-out prompts)"])
    for p, colr in zip(phases, _CR4_COLORS):
        for c, key in enumerate(("type_variance_fraction", "acc_pc")):
            ks, vals = _k_values(results, p, key)
            mean = [float(np.mean(v)) for v in vals]
            lo = [float(np.min(v)) for v in vals]
            hi = [float(np.max(v)) for v in vals]
            fig.add_trace(go.Scatter(x=ks, y=mean, mode="lines+markers", name=titles[p],
                                     legendgroup=p, showlegend=c == 0, line=dict(color=colr),
                                     error_y=dict(type="data", symmetric=False,
                                                  array=np.subtract(hi, mean).tolist(),
                                                  arrayminus=np.subtract(mean, lo).tolist())),
                          1, c + 1)
        fig.update_xaxes(title_text="number of demonstrations K")
    fig.update_yaxes(title_text="between-type / total variance", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=2, range=[0, 1.02])
    fig.update_layout(title="CR-4: separation of the attribute type vs number of demos K "
                            f"(mean over {seeds_caption(seeds)}, bars: min-max)")
    return save_figure(fig, fig_dir / "cr4_separation_vs_k", width=1100)



def _cr4_separation_vs_lam(results: list[dict[str, Any]], fig_dir: Path):
    """Separation against the pretraining grammar separation lam (the small lam runs)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    seeds = [r["seed"] for r in results]
    lam_seeds = [r["seed"] for r in results if r.get("lam_sweep")]
    lam_rows = [row for r in results for row in r.get("lam_sweep", [])]
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "type variance share of task vectors", "top-PC probe accuracy (held-out prompts)"])
    lams = sorted({row["lam"] for row in lam_rows})
    for key, name, colr in (("pt", "PT only", "#7f7f7f"),
                            ("ft", "after ICL finetuning", "#1f77b4")):
        for c, metric in enumerate(("type_variance_fraction", "acc_pc")):
            vals = [[row[f"{key}_{metric}"] for row in lam_rows if row["lam"] == lm]
                    for lm in lams]
            fig.add_trace(go.Scatter(x=lams, y=[float(np.mean(v)) for v in vals],
                                     mode="lines+markers", name=name, legendgroup=key,
                                     showlegend=c == 0, line=dict(color=colr)), 1, c + 1)
            fig.add_trace(go.Scatter(x=[row["lam"] for row in lam_rows],
                                     y=[row[f"{key}_{metric}"] for row in lam_rows],
                                     mode="markers", showlegend=False, legendgroup=key,
                                     marker=dict(color=colr, size=5, opacity=0.4)), 1, c + 1)
    fig.update_xaxes(title_text="pretraining grammar separation lam")
    fig.update_yaxes(title_text="between-type / total variance", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=2, range=[0, 1.02])
    fig.update_layout(title="CR-4: separation vs the Markov separation lam of pretraining "
                            "(small PT + ICL-finetune runs; line: mean, dots: seeds)"
                            f"<br><sub>{seeds_caption(lam_seeds, seeds, 'lam runs')}</sub>")
    return save_figure(fig, fig_dir / "cr4_separation_vs_lam", width=1100)


def _cr4_probe_layers(results: list[dict[str, Any]], phases: list[str], fig_dir: Path):
    """Probe accuracy per layer boundary (per phase) and across ICL finetuning (per seed)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    r0, seeds, titles = results[0], [r["seed"] for r in results], _CR4_TITLES
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "per layer boundary (held-out test prompts)", "across ICL finetuning (read-out hook)"])
    for p, colr in zip(phases, _CR4_COLORS):
        labels = [row["label"] for row in r0["phases"][p]["layers"]]
        for key, dash in (("acc_pc", "solid"), ("acc_full", "dot")):
            vals = np.mean([[row[key] for row in r["phases"][p]["layers"]] for r in results], 0)
            fig.add_trace(go.Scatter(x=labels, y=vals.tolist(), mode="lines+markers",
                                     name=f"{titles[p]}, {'top-PC' if key == 'acc_pc' else 'full'}"
                                     , line=dict(color=colr, dash=dash)), 1, 1)
    for key, dash in (("acc_pc", "solid"), ("acc_full", "dot")):
        for r in results:
            fig.add_trace(go.Scatter(x=[row["step"] for row in r["curve"]],
                                     y=[row[key] for row in r["curve"]], mode="lines+markers",
                                     name=f"seed {r['seed']} {key}", showlegend=False,
                                     line=dict(color="#1f77b4", dash=dash)), 1, 2)
    fig.update_xaxes(title_text="layer boundary", row=1, col=1)
    fig.update_xaxes(title_text="ICL finetuning step", row=1, col=2)
    fig.update_yaxes(title_text="type probe accuracy", range=[0, 1.02])
    fig.update_layout(title="CR-4: type probe accuracy (solid: top-PC probe, dotted: full probe; "
                            f"{seeds_caption(seeds)})")
    # HTML only: the overview figure carries the per-boundary curve into the report, and each
    # PNG export costs seconds of headless Chromium
    return save_figure(fig, fig_dir / "cr4_probe_layers", width=1200, png=False)


def cr4_overview_figure(results: list[dict[str, Any]]):
    """One figure for the report: PCA scatters (top row), separation vs K, vs lam, and the
    top-PC probe per boundary (bottom row)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    r0 = results[0]
    seeds = [r["seed"] for r in results]
    lam_seeds = [r["seed"] for r in results if r.get("lam_sweep")]
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if p in r0["pca"]]
    titles = {PHASE_PT: "PT only", PHASE_FT: "ICL-finetuned", PHASE_FT_GRM: "ICL+Grm-finetuned"}
    colors = {PHASE_PT: "#7f7f7f", PHASE_FT: "#1f77b4", PHASE_FT_GRM: "#ff7f0e"}
    lam_rows = [row for r in results for row in r.get("lam_sweep", [])]
    sub = [f"{titles[p]}: PCA at {r0['pca'][p]['boundary_label']} (top-PC probe "
           f"{r0['phases'][p]['acc_pc']:.2f})" for p in phases]
    sub += [""] * (3 - len(phases))
    sub += ["eta^2 vs K (solid: read-out hook; dashed: attn_out)",
            "eta^2 vs pretraining lam (one run per lam)", "top-PC probe per boundary (x: control)"]
    fig = make_subplots(rows=2, cols=3, subplot_titles=sub, vertical_spacing=0.14)
    n_types = int(max(max(r0["pca"][p]["type"]) for p in phases)) + 1
    tcols = _type_colors(n_types)
    for j, p in enumerate(phases):
        d = r0["pca"][p]
        x, y, t = np.asarray(d["x"]), np.asarray(d["y"]), np.asarray(d["type"])
        _add_type_scatter(fig, x, y, t, tcols, 1, j + 1, legend=j == 0, size=4)
        _pc_titles(fig, d.get("var_ratio"), 1, j + 1)
    for p in phases:
        ks, vals = _k_values(results, p, "type_variance_fraction")
        fig.add_trace(go.Scatter(x=ks, y=[float(np.mean(v)) for v in vals],
                                 mode="lines+markers", name=titles[p], legendgroup=p,
                                 line=dict(color=colors[p])), 2, 1)
        wk, wvals = _k_values(results, p, "write_type_variance_fraction")
        if p == PHASE_FT and wk:  # the last attention layer's write alone (diagnostic)
            fig.add_trace(go.Scatter(x=wk, y=[float(np.mean(v)) for v in wvals],
                                     mode="lines+markers", name=titles[p] + ": write (attn_out)",
                                     line=dict(color=colors[p], dash="dash")), 2, 1)
        labels = [row["label"] for row in r0["phases"][p]["layers"]]
        acc = np.mean([[row["acc_pc"] for row in r["phases"][p]["layers"]] for r in results], 0)
        fig.add_trace(go.Scatter(x=labels, y=acc.tolist(), mode="lines+markers",
                                 name=titles[p], legendgroup=p, showlegend=False,
                                 line=dict(color=colors[p])), 2, 3)
    rnd = [r["phases"][PHASE_FT]["acc_random_dir"] for r in results
           if "acc_random_dir" in r["phases"][PHASE_FT]]
    if rnd:  # the random-direction control beside the top-PC probe, at the read-out hook
        fig.add_trace(go.Scatter(
            x=[r0["phases"][PHASE_FT]["boundary_label"]], y=[float(np.mean(rnd))],
            mode="markers", marker=dict(symbol="x", size=11, color=colors[PHASE_FT]),
            name=titles[PHASE_FT] + ": 3 random dirs"), 2, 3)
    if lam_rows:
        lams = sorted({row["lam"] for row in lam_rows})
        for key, p in (("pt", PHASE_PT), ("ft", PHASE_FT)):
            fig.add_trace(go.Scatter(
                x=lams, y=[float(np.mean([row[f"{key}_type_variance_fraction"]
                                          for row in lam_rows if row["lam"] == lm]))
                           for lm in lams],
                mode="lines+markers", name=titles[p] + " (lam runs)", legendgroup=p,
                showlegend=False, line=dict(color=colors[p])), 2, 2)
    fig.update_xaxes(title_text="demos K", row=2, col=1)
    fig.update_xaxes(title_text="lam", row=2, col=2)
    fig.update_xaxes(title_text="layer boundary", row=2, col=3)
    fig.update_yaxes(title_text="type variance share", row=2, col=1)
    fig.update_yaxes(title_text="type variance share", row=2, col=2)
    fig.update_yaxes(title_text="accuracy", range=[0, 1.02], row=2, col=3)
    fig.update_layout(title=f"CR-4: task vectors at the query position of held-out-subject ICL "
                            f"prompts, read at {r0['phases'][PHASE_FT].get('hook', '?')}<br><sub>"
                            f"scatter: {seeds_caption([r0['seed']], seeds, 'one seed drawn')}; "
                            f"lines: mean over {seeds_caption(seeds)}"
                            + (f"; lam panel: {seeds_caption(lam_seeds, seeds)}"
                               if lam_seeds and set(lam_seeds) != set(seeds) else "")
                            + "</sub>", margin={"t": 120})
    return fig


def _pc_titles(fig, var_ratio, row: int, col: int) -> None:
    """Axis titles ``PC1 (x% var)`` / ``PC2 (y% var)`` of a PCA scatter subplot (the share of
    variance when ``var_ratio`` is given)."""
    for i, update in enumerate((fig.update_xaxes, fig.update_yaxes)):
        share = (f" ({var_ratio[i]:.0%} var)" if var_ratio is not None and len(var_ratio) > i
                 else "")
        update(title_text=f"PC{i + 1}{share}", row=row, col=col)


COLOR_BY = ("type", "query-subject", "correct")  # what a task-vector scatter is coloured by


def _add_label_scatter(fig, Z, labels, color_by: str, n_types: int, col: int,
                       first: bool) -> None:
    """One panel's points coloured by ``color_by`` (:data:`COLOR_BY`): the attribute type
    (one trace per type), the query subject (its index on a continuous scale, one colour bar)
    or whether the model's answer is right."""
    import plotly.graph_objects as go

    labels = np.asarray(labels)
    if color_by == "type":
        _add_type_scatter(fig, Z[:, 0], Z[:, 1], labels, _type_colors(n_types), 1, col,
                          legend=first, size=5)
    elif color_by == "query-subject":
        fig.add_trace(go.Scatter(
            x=Z[:, 0], y=Z[:, 1], mode="markers", name="query subject", showlegend=False,
            text=[f"query subject {int(v)}" for v in labels], hoverinfo="text",
            marker=dict(size=5, opacity=0.8, color=labels, colorscale="Viridis",
                        coloraxis="coloraxis")), 1, col)
    else:
        for ok, name, colr in ((1, "model right", "#2ca02c"), (0, "model wrong", "#d62728")):
            m = labels == ok
            fig.add_trace(go.Scatter(x=Z[m, 0], y=Z[m, 1], mode="markers", name=name,
                                     legendgroup=name, showlegend=first,
                                     marker=dict(size=5, color=colr, opacity=0.7)), 1, col)


def task_vector_views_figure(views: list[tuple], n_types: int, umap: bool,
                             color_by: str = "type"):
    """The figure of :func:`write_task_vector_views` (not written)."""
    from plotly.subplots import make_subplots

    shown = views if len(views) <= 4 else [views[int(i)] for i in
                                            np.linspace(0, len(views) - 1, 4).round()]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[
        f"{v[0]} ({v[1]['boundary_label']}, top-PC {v[1]['acc_pc']:.2f})" for v in shown])
    for j, v in enumerate(shown):
        _add_label_scatter(fig, np.asarray(v[2]), v[3], color_by, n_types, j + 1, j == 0)
        if umap:
            fig.update_xaxes(title_text="UMAP 1", row=1, col=j + 1)
            fig.update_yaxes(title_text="UMAP 2", row=1, col=j + 1)
        else:
            _pc_titles(fig, v[4] if len(v) > 4 else None, 1, j + 1)
    kind = "UMAP" if umap else "PCA"
    what = {"type": "attribute type", "query-subject": "query subject",
            "correct": "whether the model's answer is right"}[color_by]
    fig.update_layout(title=f"Task vectors of held-out-subject ICL prompts ({kind}), coloured "
                            f"by {what}", legend_title_text=what)
    if color_by == "query-subject":
        fig.update_layout(coloraxis={"colorscale": "Viridis",
                                     "colorbar": {"title": {"text": "query subject"}}})
    return fig


def write_task_vector_views(views: list[tuple], n_types: int, umap: bool,
                            out_dir: Path, color_by: str = "type") -> dict[str, str]:
    """Scatter of 2-D task-vector coordinates per checkpoint (at most four, evenly spaced),
    coloured by ``color_by`` (:data:`COLOR_BY`), with axis titles (``PC1 (x% var)``,
    ``PC2``; ``UMAP 1``, ``UMAP 2``). ``views``: (checkpoint name, its probe row, (N, 2)
    coordinates, (N,) colour labels (the types, query subjects or 1/0 right answers)
    [, the two components' explained-variance ratios for PCA])."""
    fig = task_vector_views_figure(views, n_types, umap, color_by)
    kind = "UMAP" if umap else "PCA"
    return save_figure(fig, Path(out_dir) / f"task_vectors_{kind.lower()}",
                       width=380 * min(len(views), 4) + 200, height=460)


# ------------------------------------------------------------------------------------------------
# CR-8 and CR-9 (per-seed metrics of experiments.cr.claims_taskvec.per_seed_metrics)
# ------------------------------------------------------------------------------------------------


def cr8_figure(per_seed: dict[str, dict[str, Any]], headroom: float,
               label: str = "default task"):
    """CR-8's figure: the deciding paired curve (partial eta^2 of the ICL-finetuned model minus
    the mixed-type finetune's, per K, as its rise from K = 1, with the registered rise drawn;
    the PT-only model paired the same way, the control, dotted), then the unpaired partial
    eta^2 (the mixed-type finetune dashed), held-out exact accuracy and output-type accuracy
    against K, one colour per seed, the headroom bound at K = 1 marked. None without seeds."""
    if not per_seed:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from mechinterp_icr.claims.registry import spec, threshold

    rise = threshold("CR-8", "paired_partial_eta2_rise_k")
    fig = make_subplots(rows=1, cols=4, subplot_titles=[
        "paired partial eta^2, rise from K = 1 (decides)",
        "partial eta^2 of type (unpaired)", "held-out exact accuracy",
        "held-out output-type accuracy"], horizontal_spacing=0.06)
    derived = spec("CR-8").derive("CR-8", per_seed)[0]  # the registered paired curve
    for i, (seed, m) in enumerate(sorted(per_seed.items(), key=lambda kv: str(kv[0]))):
        colr = SEED_COLORS[i % len(SEED_COLORS)]
        x, y = curve_points((derived.get(str(seed)) or {}).get("paired_partial_eta2_by_k"))
        if x:
            fig.add_trace(go.Scatter(x=x, y=[v - y[0] for v in y], mode="lines+markers",
                                     name=f"seed {seed}", legendgroup=f"{seed}ft",
                                     line=dict(color=colr)), 1, 1)
        base = curve_points(m.get("mixed_partial_eta2_by_k"))
        pt = curve_points(m.get("pt_partial_eta2_by_k"))
        mixed = dict(zip(*base))
        px = [k for k in pt[0] if k in mixed]
        if px:
            py = [v - mixed[k] for k, v in zip(*pt) if k in mixed]
            fig.add_trace(go.Scatter(x=px, y=[v - py[0] for v in py], mode="lines",
                                     name="PT-only paired (control, each seed)",
                                     legendgroup="pt", showlegend=i == 0,
                                     line=dict(color="#999999", dash="dot")), 1, 1)
        for c, key in enumerate(("partial_eta2_by_k", "exact_by_k", "output_type_by_k")):
            for ph, dash in (("ft", "solid"), ("mixed", "dash")):
                x, y = curve_points(m.get(f"{ph}_{key}"))
                if not x:
                    continue
                fig.add_trace(go.Scatter(
                    x=x, y=y, mode="lines+markers" if ph == "ft" else "lines",
                    name="mixed-type finetune (each seed)" if ph == "mixed" else f"seed {seed}",
                    legendgroup=f"{seed}{ph}" if ph == "ft" else "mixed",
                    showlegend=ph == "mixed" and c == 0 and i == 0,
                    line=dict(color=colr if ph == "ft" else "#999999", dash=dash)), 1, c + 2)
    fig.add_hline(y=rise, line=dict(color="black", dash="dash"), row=1, col=1,
                  annotation_text=f"registered rise ({rise:g})", annotation_position="top left")
    fig.add_hline(y=headroom, line=dict(color="black", dash="dot"), row=1, col=4,
                  annotation_text=f"headroom bound at K = 1 ({headroom:g})",
                  annotation_position="bottom right")
    fig.update_xaxes(title_text="number of demonstrations K")
    fig.update_yaxes(title_text="paired curve minus its K = 1 value", row=1, col=1)
    fig.update_yaxes(title_text="SS_type / (SS_type + SS_residual)", row=1, col=2,
                     range=[0, 1.02])
    fig.update_yaxes(title_text="accuracy", row=1, col=3, range=[0, 1.02])
    fig.update_yaxes(title_text="accuracy", row=1, col=4, range=[0, 1.02])
    fig.update_layout(title=f"CR-8 ({label}): the type code and recall against the number of "
                            f"demonstrations, per seed; decided on the paired curve (finetuned "
                            f"minus the mixed-type ICL finetune, dashed grey in the other "
                            f"panels)<br><sub>{seeds_caption(sorted(per_seed, key=str))}</sub>")
    return fig


def write_cr8_figure(per_seed: dict[str, dict[str, Any]], fig_dir: Path, headroom: float,
                     label: str = "default task", name: str = "cr8_by_k") -> str | None:
    """Write :func:`cr8_figure` as ``fig_dir/name`` (HTML and PNG)."""
    fig = cr8_figure(per_seed, headroom, label)
    if fig is None:
        return None
    return save_figure(fig, Path(fig_dir) / name, width=1700, height=500)
