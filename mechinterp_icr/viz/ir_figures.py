"""Figures of the IR reproduction, drawn from its result rows.

- :func:`attention_rows_figure` (IR-4): the step-1 attention row over steps for the four
  fast runs (pair-symmetric / raw data, PGD / GD) of one seed;
- :func:`gap_vs_n_figure` (IR-3): the converged within-pair gap against n per seed;
- :func:`gap_decay_figure` (IR-3): the within-pair gap over steps until the stopping rule;
- IR-5's figure is :func:`mechinterp_icr.viz.ir5_figure.ir5_figure` (redrawn by ``icr
  redecide``);
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

from mechinterp_icr.claims.registry import threshold
from mechinterp_icr.viz.figures import save_figure, seeds_caption
from mechinterp_icr.viz.ir5_figure import ir5_figure

__all__ = [
    "attention_rows_figure",
    "gap_decay_figure",
    "gap_vs_n_figure",
    "probe_attention_figure",
    "row_overwrite_figure",
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


def probe_attention_figure(ir8: dict[str, dict[str, Any]], seeds: list | None = None):
    """IR-8: per seed ``ir8[seed]["token_dependent"]`` and ``["control"]`` with
    ``mean_probe_pattern`` (L x L, the mean over probes of one shape) and ``probe_shape``
    (offset, period); two heatmaps side by side of the first seed IR-8's rule reads (its
    token-dependent model solves the task and no query token occurs earlier in the context:
    ``claims.derive.ir8_unreadable``; the first seed when none is read), titled with the
    baseline-subtracted scores of the seeds read."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ks = [k for k in ir8 if ir8[k].get("token_dependent", {}).get("mean_probe_pattern")]
    if not ks:
        return None
    from mechinterp_icr.claims.derive import ir8_unreadable  # the rule's own test

    bad = ir8_unreadable("IR-8", {k: {"tok_solved": ir8[k]["token_dependent"].get("solved"),
                                      "tok_query_seen_before": ir8[k]["token_dependent"].get(
                                          "query_seen_before")} for k in ks})
    bad = next(iter(bad.values()), {})
    solved = [k for k in ks if k not in bad]
    k0 = (solved or ks)[0]
    tok, ctrl = ir8[k0]["token_dependent"], ir8[k0]["control"]
    o, p = tok.get("probe_shape", (0, 3))

    def scores(key, among):
        v = [ir8[k][key]["project"]["score_minus_baseline"] for k in among
             if ir8[k].get(key, {}).get("project")]
        return f"{min(v):.3f}..{max(v):.3f}" if v else "n/a"

    caption = seeds_caption([k0], seeds, "heatmaps: one seed drawn")
    if bad:  # IR-8's rule does not read them (claims.derive.ir8_unreadable)
        by_why: dict[str, list[str]] = {}
        for k, why in bad.items():
            by_why.setdefault(why, []).append(str(k))
        caption += "<br>not read by the rule: " + "; ".join(
            f"seed{'s' if len(ks) > 1 else ''} {', '.join(ks)} ({why})"
            for why, ks in by_why.items())

    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        f"token-dependent IR head (score - baseline {scores('token_dependent', solved or ks)})",
        f"induction-head control, layer {ctrl.get('layer')} (score - baseline "
        f"{scores('control', ks)})"])
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
                            f"period {p})<br><sub>{caption}</sub>",
                      # the legend below the panels: at the right it covers the colour bar
                      legend={"orientation": "h", "y": -0.22, "x": 0.0},
                      margin={"t": 150 if bad else 110})  # room for the caption's lines
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
                     gap_rows: list[dict[str, Any]],
                     ir5: dict[str, dict[str, Any]] | None = None,
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
    if ir5 and (fig := ir5_figure(ir5)) is not None:
        figs["ir_5_sample_complexity"] = save_figure(fig, fig_dir / "ir_5_sample_complexity",
                                                     width=1500, height=680)
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
