"""Figures of the IR reproduction, drawn from its result rows.

- :func:`attention_rows_figure` (IR-4): the step-1 attention row over steps for the four
  fast runs (pair-symmetric / raw data, PGD / GD) of one seed;
- :func:`gap_vs_n_figure` (IR-3): the converged within-pair gap against n per seed;
- :func:`gap_decay_figure` (IR-3): the within-pair gap over steps until the stopping rule;
- :func:`sample_complexity_figure` (IR-5): the fitted N against n per seed (random
  embeddings);
- :func:`row_overwrite_figure` (IR-3 / IR-4 causal): P(r*) and step-1 accuracy with the
  step-1 row overwritten, across the checkpoints of the HookedTransformer runs;
- :func:`write_ir_figures`: all of them, returning the paths written by figure name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.viz.figures import save_figure, seeds_caption

__all__ = [
    "attention_rows_figure",
    "gap_decay_figure",
    "gap_vs_n_figure",
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


def _log_threshold(fig, y: float) -> None:
    """A dashed threshold line at ``y`` on a log y axis, labelled at the line (``add_hline``'s
    own annotation takes ``y`` as log10 on a log axis and lands at the top)."""
    import math

    fig.add_hline(y=y, line_dash="dash")
    fig.add_annotation(x=1, xref="paper", y=math.log10(y), yref="y", text=f"threshold {y:g}",
                       showarrow=False, xanchor="right", yanchor="bottom")


def gap_vs_n_figure(gap_rows: list[dict[str, Any]], seeds: list[int]):
    """IR-3: rows with ``seed``, ``n`` and ``within_pair_gap``."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in seeds:
        rr = [r for r in gap_rows if r["seed"] == s]
        fig.add_trace(go.Scatter(x=[r["n"] for r in rr], y=[r["within_pair_gap"] for r in rr],
                                 mode="lines+markers", name=f"seed {s}"))
    _log_threshold(fig, 0.02)
    fig.update_xaxes(type="log", title_text="n (subjects)")
    fig.update_yaxes(type="log", title_text="within-pair gap")
    fig.update_layout(title="IR-3: within-pair gap of the converged step-1 row vs n<br><sub>"
                            f"{seeds_caption(seeds)}</sub>")
    return fig


def sample_complexity_figure(rows: list[dict[str, Any]], seeds: list | None = None):
    """IR-5: sweep rows with ``seed``, ``n``, ``d_embed`` and the fitted ``N`` (None: not
    reached), random embeddings."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in sorted({r["seed"] for r in rows}):
        rr = sorted((r for r in rows if r["seed"] == s), key=lambda r: r["n"])
        fig.add_trace(go.Scatter(x=[r["n"] for r in rr], y=[r["N"] for r in rr],
                                 mode="lines+markers", name=f"seed {s}"))
    d = ", ".join(f"{r['n']}:{r['d_embed']}" for r in rows if r["seed"] == rows[0]["seed"])
    fig.update_xaxes(type="log", title_text="n (subjects)")
    fig.update_yaxes(type="log", title_text="N reaching 0.99 x ceiling (logistic crossing)")
    shown = sorted({r["seed"] for r in rows})
    fig.update_layout(title=f"IR-5: sample complexity, random embeddings (n:d = {d})<br><sub>"
                            f"{seeds_caption(shown, seeds)}</sub>")
    return fig


def gap_decay_figure(traces: dict[str, list[list[float]]], n: int, seeds: list | None = None):
    """IR-3: the within-pair gap of the step-1 row over steps until the stopping rule, per
    seed (``traces[seed]`` = [[step, gap], ...])."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s, tr in traces.items():
        fig.add_trace(go.Scatter(x=[max(t[0], 0.5) for t in tr], y=[t[1] for t in tr],
                                 mode="lines+markers", name=f"seed {s}"))
    _log_threshold(fig, 0.02)
    fig.update_xaxes(type="log", title_text="step (1 = after the large step + perturbation)")
    fig.update_yaxes(type="log", title_text="within-pair gap")
    fig.update_layout(title=f"IR-3: decay of the within-pair gap until the stopping rule "
                            f"(n={n})<br><sub>{seeds_caption(list(traces), seeds)}</sub>")
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
                     gap_traces: dict[str, list[list[float]]] | None = None,
                     ow_runs: dict[str, list[dict[str, Any]]] | None,
                     n: int, ht_n: int) -> dict[str, dict[str, str]]:
    """Write every IR figure there are rows for into ``fig_dir``; ``n`` and ``ht_n`` (the
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
        figs["ir_5_sample_complexity"] = save_figure(sample_complexity_figure(sweep_rows, seeds),
                                                     fig_dir / "ir_5_sample_complexity")
    if ow_runs:
        figs["ir_causal_row_overwrite"] = save_figure(
            row_overwrite_figure(ow_runs, ht_n, seed, seeds), fig_dir / "ir_causal_row_overwrite",
            width=1400, height=900)
    return figs
