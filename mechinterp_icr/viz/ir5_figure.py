"""IR-5's figure: N(n) against n for both arms at the registered gain fraction q, the
convention fractions as thin lines, and the growth the rule allows (s_poly) and the control
needs (slope 0.8) drawn as reference slopes; beside it the seed-mean accuracy against N per n
with each arm's target. Drawn from the stored runs (``ir5_by_n``) through the registered
spec's rule, by the reproduction and again by ``icr redecide``."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from mechinterp_icr.claims.registry import threshold
from mechinterp_icr.viz.figures import seeds_caption

__all__ = ["ir5_figure"]

_ARMS = {"memory": ("#1f77b4", "memory (constructed)"),
         "learned": ("#d62728", "positive control (learned memory)")}


def _rule() -> tuple[float, tuple[float, ...], dict[str, float]]:
    from mechinterp_icr.claims.ir_registry import IR5, ir5_rule_kwargs

    return (IR5["sample_complexity.q"], tuple(IR5["sample_complexity.conventions"]),
            ir5_rule_kwargs())


def _geo_mean(v: list[float]) -> float:
    return float(np.exp(np.mean(np.log(v))))


def ir5_figure(per_seed: Mapping[str, Any]):
    """IR-5, two panels, from every seed's stored ``ir5_by_n`` (None without any). Left: N(n)
    per seed (markers; x = right-censored, drawn at the arm's largest N) and the geometric
    seed mean at q (thick), at the convention fractions (thin, dotted), with reference slopes
    s_poly and 0.8 through the arms' first points. Right: the seed-mean accuracy against N
    per n (memory solid, learned dashed, darker for larger n) with the targets at q marked."""
    from mechinterp_icr.claims.ir5_rule import ir5_seed

    raw = {str(s): m for s, m in per_seed.items()
           if isinstance(m, Mapping) and m.get("ir5_by_n")}
    if not raw:
        return None
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    q, conv, kw = _rule()
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        f"N(n) at gain fraction q = {q:g} (thin: {', '.join(f'{c:g}' for c in conv)})",
        "seed-mean expected step-1 accuracy against N (marks: target at q)"))
    seeds = sorted(raw, key=str)
    res = {c: {s: ir5_seed(raw[s], c, **kw) for s in seeds} for c in (q, *conv)}
    ns = sorted({float(n) for s in seeds for n in res[q][s]["by_n"]})
    s_poly = next((r["s_poly"] for r in res[q].values() if "s_poly" in r), math.nan)
    for arm, (color, _) in _ARMS.items():
        _N_panel(fig, go, raw, res, seeds, ns, arm, (q, *conv), s_poly)
        _accuracy_panel(fig, go, raw, res[q], seeds, ns, arm, color)
    fig.update_xaxes(type="log", title_text="n (subjects)", tickvals=ns,
                     ticktext=[f"{n:g}" for n in ns], row=1, col=1)
    # every fourth power of two up to the largest N run, written out (a log axis's own minor
    # tick labels read "2" for 2000)
    top = max([1.0] + [float(N) for m in raw.values() for r in m["ir5_by_n"].values()
                       if isinstance(r, Mapping) for arm in _ARMS
                       for N in ((r.get(arm) or {}).get("acc") or {})])
    ticks = [4 ** k for k in range(int(math.log(top, 4) + 1e-9) + 1)]
    fig.update_yaxes(type="log", title_text="N (finetuning sequences)", tickvals=ticks,
                     ticktext=[str(t) for t in ticks], row=1, col=1)
    fig.update_xaxes(type="log", title_text="N (finetuning sequences)", tickvals=ticks,
                     ticktext=[str(t) for t in ticks], row=1, col=2)
    fig.update_yaxes(title_text="expected step-1 accuracy", row=1, col=2)
    d = ", ".join(f"{int(float(n))}:{(raw[seeds[0]]['ir5_by_n'].get(n) or {}).get('d')}"
                  for n in sorted(raw[seeds[0]]["ir5_by_n"], key=float))
    fig.update_layout(title="IR-5: sample complexity, random embeddings (n:d = "
                            f"{d})<br><sub>{seeds_caption(seeds)}</sub>", width=1500,
                      height=680, legend={"font": {"size": 10}, "orientation": "h",
                                          "y": -0.16, "x": 0})
    return fig


def _N_panel(fig, go, raw, res, seeds, ns, arm, fractions, s_poly) -> None:
    """The left panel's traces of one arm: N(n) per seed, the geometric seed mean at each
    gain fraction (the first, registered, thick) and the reference slope through its first
    point."""
    color, label = _ARMS[arm]
    q = fractions[0]
    conv = fractions[1:]
    key = f"N_{arm}"
    for s in seeds:
        by = res[q][s]["by_n"]
        xs = [float(n) for n in by]
        ys = [by[n][key] for n in by]
        # a right-censored N is drawn at the largest N that arm ran at that n
        tops = [max([1.0] + [float(N) for N in (((raw[s]["ir5_by_n"].get(n) or {}).get(arm)
                                                  or {}).get("acc") or {})]) for n in by]
        fig.add_trace(go.Scatter(
            x=xs, y=[t if y is None else y for t, y in zip(tops, ys)], mode="markers",
            marker={"color": color, "size": 7, "opacity": 0.45,
                    "symbol": ["x" if y is None else "circle" for y in ys]},
            name=f"{label}, per seed (x: not reached)", legendgroup=arm,
            showlegend=s == seeds[0]), 1, 1)
    for c in (q, *conv):
        mean = {}
        for n in ns:
            v = [res[c][s]["by_n"].get(_key(res[c][s], n), {}).get(key) for s in seeds]
            if v and all(isinstance(x, float) and x > 0 and not math.isnan(x) for x in v):
                mean[n] = _geo_mean(v)
        if not mean:
            continue
        fig.add_trace(go.Scatter(
            x=list(mean), y=list(mean.values()), mode="lines+markers",
            line={"color": color, "width": 3 if c == q else 1,
                  "dash": "solid" if c == q else "dot"}, marker={"size": 5},
            name=f"{label}: seed mean, q = {c:g}", legendgroup=arm,
            showlegend=c == q), 1, 1)
        if c == q:
            x0, y0 = next(iter(mean.items()))
            slope = (s_poly if arm == "memory" else
                     threshold("IR-5", "learned_slope", control=True))
            fig.add_trace(go.Scatter(
                x=[x0, ns[-1]], y=[y0, y0 * (ns[-1] / x0) ** slope], mode="lines",
                line={"color": color, "width": 1.5, "dash": "dash"},
                name=(f"slope s_poly = {slope:.3f} (the most the bound allows)"
                      if arm == "memory" else f"slope {slope:g} (the control's least growth)"),
                legendgroup=arm), 1, 1)


def _key(r: Mapping[str, Any], n: float) -> str:
    """The stored key of size ``n`` in an :func:`ir5_seed` result."""
    return next((k for k in r["by_n"] if float(k) == n), "")


def _accuracy_panel(fig, go, raw, res, seeds, ns, arm, color) -> None:
    """The right panel's curves of one arm: seed-mean accuracy against N per n (over the N
    every seed has), and the seed-mean target at q on each curve."""
    shades = np.linspace(0.35, 1.0, len(ns))
    for shade, n in zip(shades, ns):
        curves = []
        for s in seeds:
            e = (raw[s]["ir5_by_n"].get(_key(res[s], n)) or {}).get(arm) or {}
            curves.append({float(N): float(np.mean(v)) for N, v in (e.get("acc") or {}).items()
                           if v})
        Ns = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if not Ns:
            continue
        y = [float(np.mean([c[N] for c in curves])) for N in Ns]
        fig.add_trace(go.Scatter(
            x=Ns, y=y, mode="lines", opacity=float(shade),
            line={"color": color, "width": 1.5, "dash": "solid" if arm == "memory" else "dash"},
            name=f"{arm}, n = {n:g}", legendgroup=arm, showlegend=False,
            hovertemplate=f"{arm}, n = {n:g}<br>N %{{x}}<br>acc %{{y:.3f}}"), 1, 2)
        taus = [res[s]["by_n"].get(_key(res[s], n), {}).get(f"tau_{arm}") for s in seeds]
        taus = [t for t in taus if isinstance(t, float) and not math.isnan(t)]
        if taus:
            tau = float(np.mean(taus))
            at = next((N for N, v in zip(Ns, y) if v >= tau), Ns[-1])
            fig.add_trace(go.Scatter(
                # the memory arm's targets sit on one another: only the learned arm's named
                x=[at], y=[tau], mode="markers+text" if arm == "learned" else "markers",
                text=[f"{n:g}"],
                textposition="middle left", textfont={"size": 9, "color": color},
                marker={"color": color, "symbol": "line-ew-open", "size": 14,
                        "line": {"width": 2}},
                name=f"target, {arm}, n = {n:g}", legendgroup=arm, showlegend=False), 1, 2)
