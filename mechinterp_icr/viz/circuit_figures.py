"""Figures of the circuit tools (``analyses/logit_lens.py``, ``dla.py``,
``patching_heatmap.py``, ``path_patching.py``), drawn from their result rows.

- :func:`lens_figure`: answer probability and top-1 accuracy by layer, one line per
  checkpoint (colour = training order).
- :func:`dla_figure`: one bar per component and checkpoint (grouped), or a component x
  checkpoint heatmap when there are more checkpoints than bars fit.
- :func:`checkpoint_heatmaps`: one matrix per checkpoint (head x position recoveries, sender x
  receiver recoveries) as a static figure of stacked panels (the PNG) and an interactive
  figure with a slider over every checkpoint (the HTML); :func:`save_heatmaps` writes both.
- :func:`checkpoint_slider` puts per-checkpoint figures of one layout (e.g. one head's OV/QK
  blocks, :func:`circuit_figure`) behind one slider.
"""

from __future__ import annotations

import math
from pathlib import Path

from mechinterp_icr.viz.figures import save_figure

__all__ = ["checkpoint_colours", "checkpoint_heatmaps", "checkpoint_slider", "circuit_figure",
           "ci_note", "dla_figure", "gap_note", "lens_figure", "lens_height", "recovery_panels",
           "save_heatmaps", "shown_panels"]

MAX_BAR_CHECKPOINTS = 6  # grouped bars up to this many checkpoints, a heatmap above


def checkpoint_colours(n: int) -> list[str]:
    """``n`` colours from Viridis, dark (first checkpoint) to yellow (last)."""
    from plotly.colors import sample_colorscale

    return sample_colorscale("Viridis", [i / max(n - 1, 1) for i in range(n)])


def _order(rows) -> list[str]:
    return list(dict.fromkeys(r["checkpoint"] for r in rows))


def lens_figure(rows: list[dict], title: str, final_norm: bool = True):
    """Rows ``{"checkpoint", "layer", "layer_index", "answer_prob", "top1_acc"}``: two panels
    (answer probability, top-1 accuracy) against the residual-stream point, one line per
    checkpoint; the axis names the final norm only for a model that has one
    (``final_norm``)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = _order(rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "answer probability (mean over prompts)", "top-1 accuracy (answer strictly largest)"])
    for name, colour in zip(names, checkpoint_colours(len(names))):
        sel = sorted((r for r in rows if r["checkpoint"] == name), key=lambda r: r["layer_index"])
        for col, key in ((1, "answer_prob"), (2, "top1_acc")):
            fig.add_trace(go.Scatter(x=[r["layer"] for r in sel], y=[r[key] for r in sel],
                                     mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=col == 1, line={"color": colour}),
                          row=1, col=col)
    for col in (1, 2):
        through = "final norm + unembedding" if final_norm else "unembedding; no final norm"
        fig.update_xaxes(title_text=f"residual stream point ({through})",
                         type="category", row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    fig.update_yaxes(title_text="answer probability", row=1, col=1)
    fig.update_yaxes(title_text="top-1 accuracy", row=1, col=2)
    fig.update_layout(title=title, legend_title_text="checkpoint (colour: training order)",
                      legend={"font": {"size": 11}, "tracegroupgap": 0})
    return fig


def lens_height(n_checkpoints: int) -> int:
    """A height at which :func:`lens_figure`'s legend lists every checkpoint."""
    return max(520, 200 + 19 * n_checkpoints)


def dla_figure(rows: list[dict], key: str, title: str, y_title: str):
    """Rows ``{"checkpoint", "step", "component", key}``: bars per component, one colour per
    checkpoint (at most :data:`MAX_BAR_CHECKPOINTS`), else a heatmap component x checkpoint."""
    import plotly.graph_objects as go

    names = _order(rows)
    comps = list(dict.fromkeys(r["component"] for r in rows))
    val = {(r["checkpoint"], r["component"]): r[key] for r in rows}
    fig = go.Figure()
    if len(names) <= MAX_BAR_CHECKPOINTS:
        for name, colour in zip(names, checkpoint_colours(len(names))):
            fig.add_bar(x=comps, y=[val.get((name, c)) for c in comps], name=name,
                        marker_color=colour)
        fig.update_layout(barmode="group", yaxis_title=y_title,
                          legend_title_text="checkpoint (colour: training order)")
    else:
        z = [[val.get((n, c)) for c in comps] for n in names]
        lim = max([abs(v) for row in z for v in row if v is not None] + [1e-9])
        fig.add_heatmap(z=z, x=comps, y=names, colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim,
                        colorbar={"title": {"text": y_title, "side": "right"}})
        fig.update_yaxes(title_text="checkpoint (training order, top = first)",
                         autorange="reversed", type="category")
    fig.update_xaxes(title_text="component (direct path to the unembedding)", type="category")
    fig.update_layout(title=title)
    return fig


def shown_panels(n: int, most: int) -> list[int]:
    """Indices of at most ``most`` of ``n`` panels, evenly spaced, first and last included."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def gap_note(gap: float, min_gap: float) -> str:
    """A panel's caption: the clean - corrupted metric gap, or why nothing is shown."""
    if gap >= min_gap:
        return f"LD gap (clean - corrupted logit difference) {gap:.2f}"
    return (f"LD gap (clean - corrupted logit difference) {gap:.2f} < --min-gap {min_gap:g}: "
            "recovery not shown")


def recovery_panels(rows: list[dict], y_of, x_of, min_gap: float):
    """``(panels, y labels, x labels)`` for :func:`checkpoint_heatmaps` from rows with
    ``checkpoint``, ``gap`` and ``recovery``: one panel per checkpoint (in row order), cell
    ``(y_of(row), x_of(row))`` = the recovery, None where a cell has no row or the
    checkpoint's gap is below ``min_gap`` (:func:`gap_note` says so). Rows with ``lo``,
    ``hi`` (the recovery's interval) and ``p_sign`` give each panel ``ci``: per cell ``[lo,
    hi, p]`` (None where the recovery is not shown), the hover data of the HTML."""
    ys = list(dict.fromkeys(y_of(r) for r in rows))
    xs = list(dict.fromkeys(x_of(r) for r in rows))
    panels = []
    for name in dict.fromkeys(r["checkpoint"] for r in rows):
        sel = {(y_of(r), x_of(r)): r for r in rows if r["checkpoint"] == name}
        gap = next(iter(sel.values()))["gap"]
        shown = {k: r for k, r in sel.items() if gap >= min_gap}
        z = [[shown[(y, x)]["recovery"] if (y, x) in shown else None for x in xs] for y in ys]
        panel = {"checkpoint": name, "z": z, "note": gap_note(gap, min_gap)}
        if all("lo" in r for r in sel.values()):
            panel["ci"] = [[[shown[(y, x)][k] for k in ("lo", "hi", "p_sign")]
                            if (y, x) in shown else None for x in xs] for y in ys]
        panels.append(panel)
    return panels, ys, xs


def ci_note(n_resamples: int, seed: int) -> str:
    """What the hover's interval and p-value are (the caption of :func:`checkpoint_heatmaps`'s
    ``ci_note``)."""
    return (f"hover: 95% bootstrap interval over prompt pairs ({n_resamples} resamples, seed "
            f"{seed}) and sign-flip p-value")


def _has_values(panel: dict) -> bool:
    return any(v is not None and not (isinstance(v, float) and math.isnan(v))
               for row in panel["z"] for v in row)


def _heatmap(panel: dict, x, y, lim: float, colorbar_title: str, visible: bool = True,
             text: bool = True):
    import plotly.graph_objects as go

    z = [[None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row]
         for row in panel["z"]]
    hover, custom = "%{y} @ %{x}: %{z:.3f}", None
    if "ci" in panel:  # [lo, hi, p] per cell; a cell not shown has no hover data
        custom = [[c if c is not None else [None] * 3 for c in row] for row in panel["ci"]]
        hover += ("<br>95% interval [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                  "<br>sign-flip p = %{customdata[2]:.3g}")
    return go.Heatmap(z=z, x=x, y=y, colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim,
                      visible=visible, texttemplate="%{z:.2f}" if text else None,
                      customdata=custom, hovertemplate=hover + "<extra></extra>",
                      colorbar={"title": {"text": colorbar_title, "side": "right"}})


def checkpoint_heatmaps(panels: list[dict], x: list[str], y: list[str], title: str,
                        colorbar_title: str, x_title: str, y_title: str, max_panels: int = 6,
                        ci_note: str | None = None):
    """``panels``: ``[{"checkpoint", "z" (len(y) x len(x), None or NaN = not shown),
    "note"}]`` in training order, optionally ``"ci"`` (per cell ``[lo, hi, p]``, the hover
    of both figures; :func:`recovery_panels`). Returns ``(static, slider)``: ``static``
    stacks at most ``max_panels`` panels (evenly chosen, first and last included), each
    titled with its checkpoint and note; ``slider`` shows one checkpoint at a time with a
    slider over all of them. Both share one colour scale, [-1, 1] around 0 (white).
    ``ci_note`` (:func:`ci_note`) says under the HTML's title what the hover's interval is;
    the PNG's title then names where the intervals are (the HTML's hover, the table)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    vals = [abs(v) for p in panels for row in p["z"] for v in row
            if v is not None and not (isinstance(v, float) and math.isnan(v))]
    lim = 1.0  # the colour saturates beyond +-1 (the cells hold the numbers)
    if any(v > lim for v in vals):
        colorbar_title += "<br>(colour saturates beyond ±1)"
    text = len(x) * len(y) <= 160  # cell values written in the cells when they fit
    idx = shown_panels(len(panels), max_panels)
    heads = [f"{panels[i]['checkpoint']}: {panels[i]['note']}" for i in idx]
    # pixel heights: a panel with values gets a row per y label, one without a thin strip
    px = [34 * len(y) + 10 if _has_values(panels[i]) else 24 for i in idx]
    gap, top, bottom = 70, 130, 140
    inner = sum(px) + gap * (len(idx) - 1)
    static = make_subplots(rows=len(idx), cols=1, subplot_titles=heads, shared_xaxes=True,
                           row_heights=px, vertical_spacing=gap / inner if len(idx) > 1 else 0)
    for k, i in enumerate(idx):
        static.add_trace(_heatmap(panels[i], x, y, lim, colorbar_title, text=text),
                         row=k + 1, col=1)
        static.update_yaxes(title_text=y_title if _has_values(panels[i]) else "",
                            autorange="reversed", type="category", row=k + 1, col=1)
    width = max(950, min(1800, 260 + 46 * len(x)))
    static.update_layout(width=width, height=inner + top + bottom,
                         margin={"t": top, "b": bottom})
    static.update_xaxes(type="category", tickangle=-45)
    static.update_xaxes(title_text=x_title, row=len(idx), col=1)
    shown = ("every checkpoint" if len(idx) == len(panels) else
             f"{len(idx)} of {len(panels)} checkpoints, evenly chosen")
    # the PNG has no hover: it says where the intervals are
    where = ("<br><sup>each cell's 95% bootstrap interval over prompt pairs and sign-flip "
             "p-value: the HTML's hover, the table's lo, hi, p</sup>" if ci_note else "")
    static.update_layout(title=f"{title}<br><sup>{shown}; colour: {colorbar_title}</sup>"
                         .replace("<br>(", " (") + where)

    slider = go.Figure([_heatmap(p, x, y, lim, colorbar_title, visible=i == len(panels) - 1,
                                 text=text) for i, p in enumerate(panels)])
    hover_note = f"<br><sup>{ci_note}</sup>" if ci_note else ""
    steps = [{"method": "update", "label": p["checkpoint"],
              "args": [{"visible": [j == i for j in range(len(panels))]},
                       {"title": f"{title}<br><sup>{p['checkpoint']}: {p['note']}</sup>"
                                 + hover_note}]}
             for i, p in enumerate(panels)]
    last = panels[-1]
    slider.update_layout(width=width, height=max(440, 330 + 34 * len(y)),
                         title=f"{title}<br><sup>{last['checkpoint']}: {last['note']}</sup>"
                         + hover_note,
                         sliders=[{"active": len(panels) - 1, "steps": steps, "pad": {"t": 90},
                                   "currentvalue": {"prefix": "checkpoint: "}}],
                         xaxis={"title": x_title, "type": "category", "tickangle": -45},
                         yaxis={"title": y_title, "type": "category", "autorange": "reversed"})
    return static, slider


def save_heatmaps(static, slider, stem: str | Path) -> dict[str, str]:
    """``stem.png`` from ``static`` and ``stem.html`` from ``slider`` (``save_figure`` writes
    the static figure's HTML first; the slider's replaces it), at the sizes
    :func:`checkpoint_heatmaps` chose."""
    out = save_figure(static, stem, width=static.layout.width, height=static.layout.height)
    out.update(save_figure(slider, stem, png=False, width=slider.layout.width,
                           height=slider.layout.height))
    return out


def circuit_figure(blocks: list[dict], title: str):
    """One head's OV and QK circuit blocks (:func:`mechinterp_icr.interp.circuits.
    circuit_blocks`) as heatmaps, two per row. Each panel is divided by its own largest
    |value| (named in its title), so one diverging scale serves all (blue negative, red
    positive, white 0); token groups are separated by black lines and named at their centre;
    masked cells (keys after the query) are blank."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n = len(blocks)
    cols = 1 if n == 1 else 2
    rows = math.ceil(n / cols)
    scales = []
    for b in blocks:
        vals = [abs(v) for row in b["z"] for v in row
                if v is not None and not (isinstance(v, float) and math.isnan(v))]
        scales.append(max(vals) if vals and max(vals) > 0 else 1.0)
    titles = [f"{b['name']}<br><sup>{b['what']}; largest |value| {s:.3g}</sup>"
              for b, s in zip(blocks, scales)]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=0.16 if rows > 1 else 0.1)
    for k, (b, s) in enumerate(zip(blocks, scales)):
        r, c = k // cols + 1, k % cols + 1
        z = [[None if v is None or (isinstance(v, float) and math.isnan(v)) else v / s
              for v in row] for row in b["z"]]
        fig.add_trace(go.Heatmap(
            z=z, coloraxis="coloraxis", customdata=[[f"{y} -> {x}" for x in b["cols"]]
                                                    for y in b["rows"]],
            hovertemplate="%{customdata}: %{z:.3f} of the largest<extra></extra>"),
            row=r, col=c)
        for axis, groups, labels in (("x", b["col_groups"], b["cols"]),
                                     ("y", b["row_groups"], b["rows"])):
            if len(groups) > 1:
                vals = [(lo + hi) / 2 for _, lo, hi in groups]
                text = [g for g, _, _ in groups]
            else:  # one group (positions, a whole vocabulary): every few labels
                step = max(1, len(labels) // 12)
                vals = list(range(0, len(labels), step))
                text = [labels[i] for i in vals]
            upd = dict(tickvals=vals, ticktext=text, row=r, col=c)
            if axis == "x":
                fig.update_xaxes(**upd, title_text="key" if "QK" in b["name"] else "output")
            else:
                fig.update_yaxes(**upd, autorange="reversed",
                                 title_text="query" if "QK" in b["name"] else "input")
            for _, lo, _ in groups[1:]:
                line = dict(line_color="black", line_width=1, row=r, col=c)
                (fig.add_vline if axis == "x" else fig.add_hline)(lo - 0.5, **line)
    fig.update_layout(title=title, coloraxis={
        "colorscale": "RdBu_r", "cmin": -1, "cmax": 1,
        "colorbar": {"title": {"text": "value / largest |value|<br>of its panel",
                               "side": "right"}}},
        margin={"t": 130})
    return fig, 1300 if cols == 2 else 760, 150 + 560 * rows


def checkpoint_slider(figs: list, labels: list[str]):
    """One figure with a slider over checkpoints from ``figs`` (one per checkpoint, in
    training order, all with the same subplots, e.g. :func:`circuit_figure`'s): every
    checkpoint's traces, only the chosen one's visible; each step also sets that
    checkpoint's title and subplot titles. Opens on the last checkpoint."""
    import plotly.graph_objects as go

    if not figs or len(figs) != len(labels):
        raise ValueError(f"checkpoint_slider needs one label per figure (got {len(figs)} "
                         f"figures and {len(labels)} labels)")
    owner = [i for i, f in enumerate(figs) for _ in f.data]
    out = go.Figure(layout=figs[-1].layout)
    for i, f in enumerate(figs):
        for t in f.data:
            out.add_trace(t.update(visible=i == len(figs) - 1))
    steps = [{"method": "update", "label": lab,
              "args": [{"visible": [o == i for o in owner]},
                       {"title": f.layout.title.to_plotly_json(),
                        "annotations": [a.to_plotly_json() for a in f.layout.annotations]}]}
             for i, (f, lab) in enumerate(zip(figs, labels))]
    out.update_layout(sliders=[{"active": len(figs) - 1, "steps": steps, "pad": {"t": 40},
                                "currentvalue": {"prefix": "checkpoint: "}}])
    if figs[-1].layout.height:  # room for the slider under the panels
        out.update_layout(height=figs[-1].layout.height + 120)
    return out
