"""A metric against training step across phases: the over-checkpoint line plots of the
analyses (probe accuracy and eta^2, head roles, logit lens, direct logit attribution).

:func:`step_figure` puts the phases in sequence, in the order the run trained them (its
checkpoints' order: pretraining, then finetuning): a finetuning checkpoint at step ``s`` of its
phase is drawn at ``s`` plus the last step of the phases before it, a dotted line marks where
each phase starts, and the hover names the checkpoint, its phase and its own step. One line
per series (a row key) and, with ``group``, per value of that key (a layer, a component).
"""

from __future__ import annotations

__all__ = ["phase_offsets", "step_figure", "wrap_title"]


def wrap_title(title: str, width: int = 90) -> str:
    """A title longer than ``width`` characters with its first parenthesis on a second,
    smaller line (plotly does not wrap titles; a long one is cut at the figure's edge)."""
    head, sep, rest = title.partition(" (")
    if len(title) <= width or not sep:
        return title
    return f"{head}<br><sup>({rest}</sup>"


def phase_offsets(rows: list[dict]) -> dict[str, int]:
    """``{phase: the step its checkpoints are shifted by}``: phases in the order of ``rows``,
    each starting where the one before ended (its largest step)."""
    offsets: dict[str, int] = {}
    end = 0
    for phase in dict.fromkeys(r.get("phase", "") for r in rows):
        offsets[phase] = end
        end += max(int(r["step"]) for r in rows if r.get("phase", "") == phase)
    return offsets


def _add_band(fig, pts: list[dict], off: dict[str, int], band: tuple[str, str], colour: str,
              name: str) -> None:
    """A shaded band from ``band[0]`` to ``band[1]`` of the rows that hold both as numbers."""
    ok = [r for r in pts if all(isinstance(r.get(k), (int, float)) and r[k] == r[k]
                                for k in band)]
    if not ok:
        return
    x = [off[r.get("phase", "")] + int(r["step"]) for r in ok]
    fig.add_scatter(x=x + x[::-1], y=[r[band[1]] for r in ok] + [r[band[0]] for r in ok][::-1],
                    fill="toself", fillcolor=colour, opacity=0.18, line={"width": 0},
                    hoverinfo="skip", showlegend=False, legendgroup=name)


def step_figure(rows: list[dict], series: dict[str, str], title: str, y_title: str,
                group: str | None = None, y_range=None, band: tuple[str, str] | None = None):
    """Rows with ``checkpoint``, ``phase`` and ``step`` (several rows per checkpoint when
    ``group`` tells them apart): one line per series label (-> row key) and group value,
    against the step in phase order (the module docstring). Rows whose value is missing or
    not a number are left out of their line. ``band``: the row keys of a low and a high
    bound (an interval) drawn as a shaded band around each line."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    seen: set = set()
    rows = [r for r in rows if (key := (r["checkpoint"], r.get(group) if group else None))
            not in seen and not seen.add(key)]  # a checkpoint selected twice: drawn once
    off = phase_offsets(rows)
    fig = go.Figure()
    groups = list(dict.fromkeys(r.get(group) for r in rows)) if group else [None]
    colours = qualitative.Plotly + qualitative.D3
    i = 0
    for g in groups:
        sel = [r for r in rows if group is None or r.get(group) == g]
        for label, key in series.items():
            pts = [r for r in sel if isinstance(r.get(key), (int, float))
                   and not isinstance(r.get(key), bool) and r[key] == r[key]]
            if not pts:
                continue
            pts.sort(key=lambda r: off[r.get("phase", "")] + int(r["step"]))
            name = " ".join(str(x) for x in (g, label) if x not in (None, ""))
            colour = colours[i % len(colours)]
            if band is not None:
                _add_band(fig, pts, off, band, colour, name)
            fig.add_scatter(
                x=[off[r.get("phase", "")] + int(r["step"]) for r in pts],
                y=[r[key] for r in pts], mode="lines+markers", name=name, legendgroup=name,
                line={"color": colour},
                customdata=[[r["checkpoint"], r.get("phase", ""), r["step"]] for r in pts],
                hovertemplate="%{customdata[0]} (phase %{customdata[1]}, step "
                              "%{customdata[2]})<br>%{y:.4g}<extra>" + name + "</extra>")
            i += 1
    for phase, x0 in off.items():
        fig.add_vline(x=x0, line={"dash": "dot", "color": "grey", "width": 1})
        fig.add_annotation(x=x0, y=1.0, yref="paper", text=f"{phase} →", showarrow=False,
                           xanchor="left", yanchor="bottom", font={"size": 11})
    parts = [f"{p} from {x0}" for p, x0 in off.items()]
    fig.update_layout(title=wrap_title(title), yaxis_title=y_title,
                      xaxis_title="training step, phases in sequence (" + ", ".join(parts) + ")",
                      legend={"font": {"size": 11}}, margin={"t": 90})
    if y_range is not None:
        fig.update_yaxes(range=list(y_range))
    return fig
