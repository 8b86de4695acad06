"""CR-9's figure: the type code (eta^2 at the CR-4 hook) and held-out ICL against the
pretraining grammar separation lam, with what the registered rule reads drawn (lam_s, the
registered rise, the drop tolerance); drawn by the reproduction and redrawn by ``icr
redecide`` (the rule's numbers come from the registered spec's ``derive``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims.registry import threshold
from mechinterp_icr.viz.figures import SEED_COLORS, curve_points, save_figure, seeds_caption

__all__ = ["cr9_figure", "write_cr9_figure"]


def cr9_figure(per_seed: dict[str, dict[str, Any]]):
    """CR-9: eta^2 at the CR-4 hook and held-out ICL exact accuracy against lam, one thin line
    per seed and the seed mean in black (the mixed-type control's seed mean dashed grey), with
    what the registered rule reads drawn: lam_s (the first lam whose seed-mean ICL reaches
    0.80, dotted), the registered rise above the curve's value at lam_s, and the drop
    tolerance hanging below each seed-mean point (a drop to the next lam within
    it is retraining noise). None without per-lam curves."""
    if not per_seed or not any(m.get("ft_eta2_by_lam") for m in per_seed.values()):
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from mechinterp_icr.claims.derive import CR9_ICL_WORKS
    from mechinterp_icr.claims.registry import spec

    pooled = spec("CR-9").derive("CR-9", per_seed)[1]
    lam_s, tol = pooled["cr9_lam_s"], pooled["cr9_drop_tolerance"]
    rise = threshold("CR-9", "ft_rise_from_lam_s")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "eta^2 of type at the CR-4 hook (bars: the drop tolerance)",
        "held-out ICL exact accuracy"])
    seeds = sorted(per_seed, key=str)
    for col, key in ((1, "ft_eta2_by_lam"), (2, "ft_icl_exact_by_lam")):
        curves = []
        for i, seed in enumerate(seeds):
            x, y = curve_points(per_seed[seed].get(key))
            curves.append(dict(zip(x, y)))
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"seed {seed}",
                                     legendgroup=str(seed), showlegend=col == 1, opacity=0.6,
                                     line=dict(color=SEED_COLORS[i % len(SEED_COLORS)],
                                               width=1)), 1, col)
        xs = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        mean = [float(np.mean([c[x] for c in curves])) for x in xs]
        fig.add_trace(go.Scatter(x=xs, y=mean, mode="lines+markers", name="seed mean",
                                 legendgroup="mean", showlegend=col == 1,
                                 line=dict(color="black", width=3)), 1, col)
        if col == 1 and not math.isnan(tol):  # the drop rule reads every consecutive pair
            on = list(zip(xs, mean))
            fig.add_trace(go.Scatter(
                x=[p[0] for p in on], y=[p[1] for p in on], mode="markers",
                marker=dict(color="black", size=1), name=f"drop tolerance {tol:.3f}",
                error_y=dict(type="data", symmetric=False, array=[0.0] * len(on),
                             arrayminus=[tol] * len(on), color="black", width=6)), 1, 1)
        if col == 1 and not math.isnan(lam_s) and lam_s in xs:
            base = mean[xs.index(lam_s)]
            fig.add_trace(go.Scatter(x=[lam_s, xs[-1]], y=[base + rise] * 2, mode="lines",
                                     name=f"rule: lam_s value + {rise:g}",
                                     line=dict(color="#d62728", dash="dot")), 1, 1)
    mixed = [dict(zip(*c)) for c in (curve_points(per_seed[s].get("mixed_eta2_by_lam"))
                                     for s in seeds) if c[0]]
    if mixed:
        xs = sorted(set.intersection(*(set(c) for c in mixed)))
        fig.add_trace(go.Scatter(x=xs, y=[float(np.mean([c[x] for c in mixed])) for x in xs],
                                 mode="lines+markers", name="mixed-type finetune (control)",
                                 line=dict(color="#888888", dash="dash", width=2)), 1, 1)
    fig.add_hline(y=CR9_ICL_WORKS, line=dict(color="#d62728", dash="dot"), row=1, col=2,
                  annotation_text=f"{CR9_ICL_WORKS:g}: the task works",
                  annotation_position="bottom right")
    if not math.isnan(lam_s):
        fig.add_vline(x=lam_s, line=dict(color="#555555", dash="dot"), row=1, col="all")
    fig.update_xaxes(title_text="pretraining grammar separation lam")
    fig.update_yaxes(title_text="between-type / total variance", row=1, col=1, range=[0, 1.02])
    fig.update_yaxes(title_text="accuracy", row=1, col=2, range=[0, 1.02])
    ls = (f"lam_s = {lam_s:g} (dotted), tolerance {tol:.3f}" if not math.isnan(lam_s)
          else f"no lam reaches seed-mean ICL {CR9_ICL_WORKS:g}: not measurable")
    fig.update_layout(title=f"CR-9: the type code against the grammar separation of "
                            f"pretraining ({ls})<br><sub>{seeds_caption(seeds)}</sub>")
    fig.update_layout(height=480)
    return fig


def write_cr9_figure(per_seed: dict[str, dict[str, Any]], fig_dir: Path) -> dict | None:
    """:func:`cr9_figure` saved as ``fig_dir/cr9_by_lam`` (HTML and PNG); None without
    per-lam curves."""
    fig = cr9_figure(per_seed)
    return None if fig is None else save_figure(fig, Path(fig_dir) / "cr9_by_lam", width=1300,
                                                height=480)
