"""Figures of the IR reproduction, drawn from its result rows.

- :func:`attention_rows_figure` (IR-4): the step-1 attention row over steps for the four
  fast runs (pair-symmetric / raw data, PGD / GD) of one seed;
- :func:`gap_vs_n_figure` (IR-3): the converged within-pair gap against n per seed;
- :func:`gap_decay_figure` (IR-3): the within-pair gap over steps until the stopping rule;
- :func:`sample_complexity_figure` (IR-5): N against n for the memory arm and its positive
  control (the learned memory), per seed and mean, with the polylog and linear fits of the
  mean and their R^2 (random embeddings of width d(n));
- :func:`probe_attention_figure` (IR-8): the token-dependent head's mean attention on
  repeated-token probes beside the induction-head control's;
- :func:`row_overwrite_figure` (IR-3 / IR-4 causal): P(r*) and step-1 accuracy with the
  step-1 row overwritten, across the checkpoints of the HookedTransformer runs;
- :func:`write_ir_figures`: all of them, returning the paths written by figure name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims.registry import setting, threshold
from mechinterp_icr.viz.figures import save_figure, seeds_caption

__all__ = [
    "attention_rows_figure",
    "gap_decay_figure",
    "gap_vs_n_figure",
    "probe_attention_figure",
    "row_overwrite_figure",
    "sample_complexity_figure",
    "write_ir_figures",
]

ROW_NAMES = ["s1", "a1", "s2", "a2", "s3"]
OVERWRITE_RUNS = ("ht_sym_pgd", "ht_sym_gd", "ht_raw_pgd", "ht_raw_gd")


def attention_rows_figure(traj: dict[str, list[dict[str, Any]]], n: int, seed: int,
                          seeds: list | None = None):
    """IR-4: ``traj["<sym|raw>_<pgd|gd>"]`` are run records with ``step`` and ``row1``;
    ``seeds``: the claim's seeds (the title says the figure draws one of them)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = [("sym", "pgd"), ("sym", "gd"), ("raw", "pgd"), ("raw", "gd")]
    fig = make_subplots(rows=2, cols=2, shared_yaxes=True,
                        subplot_titles=[f"{d} data, {a.upper()}" for d, a in panels])
    colors = ["#1f77b4", "#aec7e8", "#d62728", "#ff9896", "#2ca02c"]
    for i, (d, a) in enumerate(panels):
        recs = traj[f"{d}_{a}"]
        x = [max(r["step"], 0.5) for r in recs]
        rows = np.asarray([r["row1"] for r in recs])
        for j in range(5):
            fig.add_trace(go.Scatter(x=x, y=rows[:, j], name=ROW_NAMES[j], mode="lines",
                                     line={"color": colors[j],
                                           "dash": "dot" if j % 2 else "solid"},
                                     showlegend=(i == 0)), row=i // 2 + 1, col=i % 2 + 1)
    fig.update_xaxes(type="log", title_text="step (1 = after the large step)")
    fig.update_yaxes(title_text="step-1 attention")
    fig.update_layout(title=f"IR-4: step-1 attention row over steps (n={n})<br><sub>"
                            f"{seeds_caption([seed], seeds, 'one seed drawn')}</sub>")
    return fig


def _log_threshold(fig, y: float, label: str = "threshold") -> None:
    """A dashed threshold line at ``y`` on a log y axis, labelled at the line (``add_hline``'s
    own annotation takes ``y`` as log10 on a log axis and lands at the top)."""
    import math

    fig.add_hline(y=y, line_dash="dash")
    fig.add_annotation(x=1, xref="paper", y=math.log10(y), yref="y", text=f"{label} {y:g}",
                       showarrow=False, xanchor="right", yanchor="bottom")


def gap_vs_n_figure(gap_rows: list[dict[str, Any]], seeds: list[int]):
    """IR-3: rows with ``seed``, ``n`` and ``within_pair_gap``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in seeds:
        rr = [r for r in gap_rows if r["seed"] == s]
        fig.add_trace(go.Scatter(x=[r["n"] for r in rr], y=[r["within_pair_gap"] for r in rr],
                                 mode="lines+markers", name=f"seed {s}"))
    _log_threshold(fig, threshold("IR-3", "within_pair_gap"))
    fig.update_xaxes(type="log", title_text="n (subjects)")
    fig.update_yaxes(type="log", title_text="within-pair gap")
    fig.update_layout(title="IR-3: within-pair gap of the converged step-1 row vs n<br><sub>"
                            f"{seeds_caption(seeds)}</sub>")
    return fig


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def sample_complexity_figure(rows: list[dict[str, Any]], seeds: list | None = None,
                             n_cap: float | None = None, target_frac: float | None = None,
                             fits: dict[str, dict[str, Any] | None] | None = None):
    """IR-5, two panels. Left: sweep rows with ``seed``, ``n``, ``d_embed``, ``arm``
    ("memory" or "learned"; missing = memory) and the fitted ``N`` (None: not reached, drawn
    as x at ``n_cap``, default 2 x the largest N measured or 2048); per arm the per-seed
    markers, the mean over the measured N, and ``fits[arm]`` (the fits of that mean against
    log n, (log n)^2 and n with their R^2, as ``experiments/ir/ir5.growth_fits`` gives them
    in the IR-5 table's ``fit_mean``; none drawn where missing). Right: each row's
    ``peak_over_ceiling`` (the top of its fitted accuracy-vs-N curve over the ideal-row
    ceiling) against n, with the target
    fraction ``target_frac``: where an arm stays below it, its N is censored."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if target_frac is None:  # the registered target
        target_frac = setting("IR-5", "sample_complexity.target_frac")
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "N reaching the target (x: censored)",
        f"best fitted accuracy / ceiling (target {target_frac:g})"))
    got = [r["N"] for r in rows if _finite(r["N"])]
    cap = n_cap or 2.0 * (max(got) if got else 1024)
    style = {"memory": ("#1f77b4", "memory (constructed)"),
             "learned": ("#d62728", "positive control (learned memory)")}
    for arm, (color, label) in style.items():
        rr = [r for r in rows if r.get("arm", "memory") == arm]
        if rr:
            _sample_complexity_arm(fig, go, rr, color, label, arm, cap,
                                   (fits or {}).get(arm))
    d = ", ".join(f"{r['n']}:{r['d_embed']}" for r in sorted(rows, key=lambda r: r["n"])
                  if r["seed"] == rows[0]["seed"] and r.get("arm", "memory") == "memory")
    ns = sorted({r["n"] for r in rows})
    fig.add_hline(y=target_frac, line={"color": "black", "dash": "dash", "width": 1},
                  row=1, col=2)
    fig.update_xaxes(type="log", title_text="n (subjects)", tickvals=ns,
                     ticktext=[str(n) for n in ns])
    # powers of two up to the largest N measured, and the censored row: a log axis's own minor
    # tick labels ("2" for 2000) cannot be read
    top = max(got) if got else 1024
    yt = [2 ** k for k in range(int(np.log2(max(top, 1))) + 1)] + [cap]
    fig.update_yaxes(type="log", title_text="N (finetuning sequences)", tickvals=yt,
                     ticktext=[f"{v:g}" for v in yt[:-1]] + ["not reached"], row=1, col=1)
    fig.update_yaxes(title_text="peak fitted accuracy / ceiling", row=1, col=2)
    shown = sorted({r["seed"] for r in rows})
    fig.update_layout(title=f"IR-5: sample complexity, random embeddings (n:d = {d})<br><sub>"
                            f"{seeds_caption(shown, seeds)}</sub>", width=1300, height=640,
                      legend={"font": {"size": 10}, "orientation": "h", "y": -0.18,
                              "x": 0})
    return fig


def _sample_complexity_arm(fig, go, rr, color, label, arm, cap, fits) -> None:
    """One arm's traces of :func:`sample_complexity_figure`."""
    ns = sorted({r["n"] for r in rr})
    for s in sorted({r["seed"] for r in rr}):
        pts = sorted((r for r in rr if r["seed"] == s), key=lambda r: r["n"])
        # censored markers of the two arms sit side by side on the "not reached" row
        shift = {"memory": 0.94, "learned": 1.06}.get(arm, 1.0)
        fig.add_trace(go.Scatter(
            x=[r["n"] if _finite(r["N"]) else r["n"] * shift for r in pts],
            y=[r["N"] if _finite(r["N"]) else cap for r in pts],
            mode="markers", marker={"color": color, "size": 6, "opacity": 0.4,
                                    "symbol": ["circle" if _finite(r["N"]) else "x"
                                               for r in pts]},
            name=f"{label}, seed {s}", legendgroup=arm, showlegend=False), row=1, col=1)
        peak = [(r["n"], r.get("peak_over_ceiling")) for r in pts
                if _finite(r.get("peak_over_ceiling"))]
        if peak:
            fig.add_trace(go.Scatter(
                x=[p[0] for p in peak], y=[p[1] for p in peak], mode="lines+markers",
                line={"color": color, "width": 1}, marker={"size": 5}, opacity=0.6,
                name=f"{label}, seed {s}", legendgroup=arm, showlegend=False), row=1, col=2)
    mean = {n: float(np.mean([r["N"] for r in rr if r["n"] == n and _finite(r["N"])]))
            for n in ns if any(r["n"] == n and _finite(r["N"]) for r in rr)}
    mn = sorted(mean)
    fig.add_trace(go.Scatter(x=mn, y=[mean[n] for n in mn], mode="lines+markers",
                             line={"color": color, "width": 3}, legendgroup=arm,
                             name=f"{label}: mean N over the seeds that reached it"),
                  row=1, col=1)
    if len(mn) < 3 or not fits:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", legendgroup=arm,
                                 marker={"color": color, "symbol": "x"},
                                 name=f"{label}: N reached at {len(mn)} of {len(ns)} n, "
                                      + ("too few for a fit" if len(mn) < 3 else "no fit")),
                      row=1, col=1)
        return
    xs = np.geomspace(min(mn), max(mn), 50)
    for key, feat, dash in (("log_n", np.log2(xs), "dot"), ("log_n_sq", np.log2(xs) ** 2, "dash"),
                            ("n", xs, "dashdot")):
        f = fits[key]
        r2 = "n/a" if f["r2"] is None else f"{f['r2']:.2f}"
        name = {"log_n": "N ~ log n", "log_n_sq": "N ~ (log n)^2", "n": "N ~ n"}[key]
        fig.add_trace(go.Scatter(x=xs, y=f["intercept"] + f["slope"] * feat, mode="lines",
                                 line={"color": color, "dash": dash, "width": 1},
                                 legendgroup=arm, name=f"{label}: {name}, R^2 {r2}"),
                      row=1, col=1)


def probe_attention_figure(ir8: dict[str, dict[str, Any]], seeds: list | None = None):
    """IR-8: per seed ``ir8[seed]["token_dependent"]`` and ``["control"]`` with
    ``mean_probe_pattern`` (L x L, the mean over probes of one shape) and ``probe_shape``
    (offset, period); the first seed's two heatmaps side by side, titled with every seed's
    baseline-subtracted scores."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ks = [k for k in ir8 if ir8[k].get("token_dependent", {}).get("mean_probe_pattern")]
    if not ks:
        return None
    k0 = ks[0]
    tok, ctrl = ir8[k0]["token_dependent"], ir8[k0]["control"]
    o, p = tok.get("probe_shape", (0, 3))

    def scores(key):
        v = [ir8[k][key]["project"]["score_minus_baseline"] for k in ks
             if ir8[k].get(key, {}).get("project")]
        return f"{min(v):.3f}..{max(v):.3f}" if v else "n/a"

    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        f"token-dependent IR head (score - baseline {scores('token_dependent')})",
        f"induction-head control, layer {ctrl.get('layer')} (score - baseline "
        f"{scores('control')})"])
    for j, pat in enumerate((tok["mean_probe_pattern"], ctrl.get("mean_probe_pattern"))):
        if pat is None:
            continue
        fig.add_trace(go.Heatmap(z=pat, zmin=0, zmax=1, colorscale="Viridis",
                                 showscale=(j == 1)), row=1, col=j + 1)
        L = len(pat)
        # induction targets of this shape: destination t >= 1 + o + p attends t - p + 1
        xs = [t - p + 1 for t in range(1 + o + p, L)]
        ys = list(range(1 + o + p, L))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", showlegend=(j == 0),
                                 marker={"symbol": "square-open", "size": 18,
                                         "color": "#ff7f0e"},
                                 name="induction target"), row=1, col=j + 1)
        fig.update_yaxes(autorange="reversed", title_text="destination", row=1, col=j + 1)
        fig.update_xaxes(title_text="source", row=1, col=j + 1)
    fig.update_layout(title=f"IR-8: mean attention on repeated-token probes (offset {o}, "
                            f"period {p})<br><sub>"
                            f"{seeds_caption([k0], seeds, 'heatmaps: one seed drawn')}</sub>",
                      # the legend below the panels: at the right it covers the colour bar
                      legend={"orientation": "h", "y": -0.22, "x": 0.0})
    return fig


def gap_decay_figure(traces: dict[str, list[list[float]]], n: int, seeds: list | None = None):
    """IR-3: the within-pair gap of the step-1 row over steps until the stopping rule, per
    seed (``traces[seed]`` = [[step, gap], ...])."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s, tr in traces.items():
        fig.add_trace(go.Scatter(x=[max(t[0], 0.5) for t in tr], y=[t[1] for t in tr],
                                 mode="lines+markers", name=f"seed {s}"))
    _log_threshold(fig, threshold("IR-3", "within_pair_gap"))
    fig.update_xaxes(type="log", title_text="step (1 = after the large step + perturbation)")
    fig.update_yaxes(type="log", title_text="within-pair gap")
    fig.update_layout(title=f"IR-3: decay of the within-pair gap until the stopping rule "
                            f"(n={n})<br><sub>{seeds_caption(list(traces), seeds)}</sub>")
    return fig


def gap_from_offset_figure(traces: dict[str, dict[str, list[list[float]]]], n: int,
                           seeds: list | None = None):
    """IR-9: the within-pair gap from the imposed offset over the small steps, per seed, at the
    registered learning rate (solid) and at 0 (the control, dotted), with the registered
    converged gap and the control's bound."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    fig = go.Figure()
    for i, (s, tr) in enumerate(traces.items()):
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        for arm, dash in (("learned", "solid"), ("frozen", "dot")):
            pts = tr.get(arm) or []
            fig.add_trace(go.Scatter(
                x=[t[0] + 1 for t in pts], y=[t[1] for t in pts], mode="lines+markers",
                line={"color": colour, "dash": dash}, marker={"size": 5},
                name=f"seed {s}" + ("" if arm == "learned" else " at lr 0 (control)"),
                legendgroup=str(s)))
    _log_threshold(fig, threshold("IR-9", "ir9_final_gap"), "converged at")
    _log_threshold(fig, threshold("IR-9", "ir9_frozen_final_gap", control=True),
                   "the lr-0 control must stay above")
    fig.update_xaxes(type="log", title_text="small steps + 1 (1 = the imposed offset)")
    fig.update_yaxes(type="log", title_text="step-1 within-pair gap")
    fig.update_layout(title=f"IR-9: the within-pair gap from an imposed offset (n={n}); "
                            f"solid: the registered small steps, dotted: learning rate 0"
                            f"<br><sub>{seeds_caption(list(traces), seeds)}</sub>")
    return fig


def row_overwrite_figure(ow_runs: dict[str, list[dict[str, Any]]], n: int, seed: int,
                         seeds: list | None = None):
    """IR-3 / IR-4 causal: ``ow_runs[run]`` are checkpoint rows with ``label`` and ``acc`` /
    ``prob`` ``[row][kind]`` (the first and last ``unequal_*`` rows are drawn)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [nm for nm in OVERWRITE_RUNS if nm in ow_runs]
    first = ow_runs[names[0]][0]["acc"] if names and ow_runs[names[0]] else {}
    unequal = [k for k in first if k.startswith("unequal_")]
    show = [("model", "#000000", "solid"), ("pairwise", "#1f77b4", "solid"),
            ("own_paired", "#17becf", "dot"), ("one_pair", "#ff7f0e", "solid")]
    if unequal:
        show += [(unequal[0], "#d62728", "dash"), (unequal[-1], "#8c564b", "dash")]
    show += [("uniform", "#7f7f7f", "dot"), ("induction", "#9467bd", "dashdot")]
    # the three rows of a column share its checkpoints: labelled and titled once, at the bottom
    fig = make_subplots(rows=3, cols=len(names), shared_yaxes=True, shared_xaxes=True,
                        subplot_titles=names, vertical_spacing=0.06)
    for j, name in enumerate(names):
        rows = ow_runs[name]
        x = [r["label"] for r in rows]
        for i, (kind, key) in enumerate((("swap", "prob"), ("swap", "acc"),
                                         ("single", "acc"))):
            for row, color, dash in show:
                y = [r[key][row][kind] for r in rows]
                fig.add_trace(go.Scatter(x=x, y=y, name=row, mode="lines+markers",
                                         line={"color": color, "dash": dash}, legendgroup=row,
                                         showlegend=(i == 0 and j == 0)),
                              row=i + 1, col=j + 1)
    fig.update_xaxes(title_text="checkpoint", row=3)
    fig.update_yaxes(title_text="swap: P(r*)", row=1, col=1)
    fig.update_yaxes(title_text="swap: step-1 acc", row=2, col=1)
    fig.update_yaxes(title_text="single-pair: step-1 acc", row=3, col=1)
    caption = seeds_caption([seed], seeds, "the HookedTransformer runs of one seed")
    fig.update_layout(title="IR-3/IR-4 causal: step-1 attention row overwritten "
                            f"(n={n}) across checkpoints<br><sub>{caption}</sub>")
    return fig


def write_ir_figures(fig_dir: str | Path, seeds: list[int], *,
                     traj: dict[int, dict[str, list[dict[str, Any]]]],
                     gap_rows: list[dict[str, Any]], sweep_rows: list[dict[str, Any]],
                     sweep_fits: dict[str, dict[str, Any] | None] | None = None,
                     gap_traces: dict[str, list[list[float]]] | None = None,
                     ow_runs: dict[str, list[dict[str, Any]]] | None,
                     n: int, ht_n: int, ir8: dict[str, dict[str, Any]] | None = None,
                     ir9: dict[str, dict[str, list[list[float]]]] | None = None
                     ) -> dict[str, dict[str, str]]:
    """Write every IR figure there are rows for into ``fig_dir``; ``n`` and ``hooked.n`` (the
    sizes of the fast and HookedTransformer runs) go into titles. Returns the paths written
    per figure name (empty without plotly)."""
    try:
        import plotly  # noqa: F401
    except ImportError:  # pragma: no cover
        return {}
    fig_dir = Path(fig_dir)
    figs = {}
    seed = seeds[0]
    if seed in traj:
        figs["ir_4_attention_rows"] = save_figure(attention_rows_figure(traj[seed], n, seed,
                                                                        seeds),
                                                  fig_dir / "ir_4_attention_rows",
                                                  width=1000, height=700)
    if gap_rows:
        figs["ir_3_gap_vs_n"] = save_figure(gap_vs_n_figure(gap_rows, seeds),
                                            fig_dir / "ir_3_gap_vs_n")
    if gap_traces:
        figs["ir_3_gap_decay"] = save_figure(gap_decay_figure(gap_traces, n, seeds),
                                             fig_dir / "ir_3_gap_decay")
    if sweep_rows:
        figs["ir_5_sample_complexity"] = save_figure(sample_complexity_figure(
            sweep_rows, seeds, fits=sweep_fits), fig_dir / "ir_5_sample_complexity",
            width=1300, height=640)
    if ir8 and (fig := probe_attention_figure(ir8, seeds)) is not None:
        figs["ir_8_probe_attention"] = save_figure(fig, fig_dir / "ir_8_probe_attention",
                                                   width=1100, height=520)
    if ir9:
        figs["ir_9_gap_from_offset"] = save_figure(gap_from_offset_figure(ir9, n, seeds),
                                                   fig_dir / "ir_9_gap_from_offset",
                                                   width=1100, height=560)
    if ow_runs:
        figs["ir_causal_row_overwrite"] = save_figure(
            row_overwrite_figure(ow_runs, ht_n, seed, seeds), fig_dir / "ir_causal_row_overwrite",
            width=1400, height=900)
    return figs
