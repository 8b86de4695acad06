"""The verdict figure of a claim: every registered condition and control, per seed, against
its threshold.

A claim whose experiment draws no figure of its own (IR-1, IR-2, IR-6, IR-7, IR-8) gets this
one, so that every claim in a reproduction has a figure that shows what decided it: one panel
per condition (dots = seeds, dashed line = the registered threshold, title "met" / "NOT met")
and one per control (title "as expected" / "MISBEHAVES" / "not measured"). A seed without a
number is drawn as an open marker at the panel's floor (hover: "no value"), never left out
silently; a seed the rule cannot read (no headroom, unsolved) is grey. Under a rule over all
seeds (mean, fraction) the dots take the panel's colour: one seed decides nothing there.
Extra checks and a "not measurable" reason are not drawn; the report shows them beside the
figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import Claim
from mechinterp_icr.claims.protocol import as_number as _num
from mechinterp_icr.claims.protocol import compare
from mechinterp_icr.viz.figures import save_figure, seeds_caption

__all__ = ["verdict_figure", "verdict_panels", "write_verdict_figures"]


def verdict_panels(claim: Claim, seeds: list | None = None) -> list[dict[str, Any]]:
    """One dict per panel: ``title``, ``values`` (seed -> float or None; a seed of ``seeds``
    without a ``per_seed`` entry is None), ``threshold``, ``op``, ``rule``, ``ok`` (met /
    behaved as expected; None = not measured) and ``kind`` ("condition", "negative control"
    or "positive control")."""
    want = [str(s) for s in (seeds if seeds is not None else claim.per_seed)]
    panels = []
    for c, ev in zip(claim.conditions, claim.evaluate(want)[2]):
        values = {s: _num(v) for s, v in ev["per_seed"].items()}
        if c.rule == "pooled":  # one number over the seeds together
            values = {"pooled": _num(ev.get("pooled_value"))}
        panels.append({"title": c.text or c.metric, "metric": c.metric, "op": c.op,
                       "threshold": c.threshold, "rule": c.rule, "kind": "condition",
                       "ok": ev["met"], "values": values,
                       "unreadable": {str(k): str(r) for k, r in ev["unreadable"].items()
                                      if r != "no value"}})
    for cr in claim.controls:
        cs = cr.spec  # the registered condition the control was evaluated against
        if cs is None:
            continue
        vals = {s: None for s in want}
        vals.update({str(s): _num(v) for s, v in cr.per_seed.items()})
        panels.append({"title": cr.name, "metric": cs.metric, "op": cs.op,
                       "threshold": cs.threshold, "rule": cs.rule,
                       "kind": f"{cr.kind} control",
                       "ok": None if cr.meets_rule is None else cr.ok, "values": vals})
    return panels


def _status(p: dict[str, Any]) -> str:
    if p["kind"] == "condition":
        return "cannot be read" if p["ok"] is None else ("met" if p["ok"] else "NOT met")
    if p["ok"] is None:
        return "not measured (the claim cannot hold)"
    return "as expected" if p["ok"] else "MISBEHAVES"


def _seed_color(p: dict[str, Any], v: float | None, seed: str | None = None) -> str:
    """Green where the seed meets the condition (a positive control: passes; a negative
    control: fails the condition it names, as expected), red elsewhere, grey without a value
    or where the rule cannot read it (``unreadable``: the rule reads neither side of it).
    Under a rule over all seeds (mean, fraction) a single seed decides nothing: every dot takes
    the panel's colour."""
    bad = p.get("unreadable") or {}
    if v is None or seed in bad or "*" in bad:
        return "#7f7f7f"
    if p.get("rule", "every_seed") != "every_seed":
        return {True: "#2ca02c", False: "#d62728", None: "#7f7f7f"}[p["ok"]]
    good = compare(v, p["op"], p["threshold"])
    if p["kind"] == "negative control":
        good = not good
    return "#2ca02c" if good else "#d62728"


def _wrap(text: str, width: int = 46) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    lines.append(cur)
    return "<br>".join(lines[:3])


_RULE = {"every_seed": "every seed", "mean": "mean over seeds", "fraction": "share of seeds"}


def verdict_figure(claim: Claim, cols: int = 3, seeds: list | None = None):
    """The plotly figure of :func:`verdict_panels` for ``claim`` (None without panels), its
    layout height sized to its rows of panels."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = verdict_panels(claim, seeds)
    if not panels:
        return None
    cols = min(cols, len(panels))
    rows = math.ceil(len(panels) / cols)
    titles = [f"{_wrap(p['kind'] + ': ' + p['title'])}<br><b>{p['metric']} {p['op']} "
              f"{p['threshold']:g} ({_RULE.get(p['rule'], p['rule'])}): {_status(p)}</b>"
              for p in panels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles,
                        vertical_spacing=min(0.3, 0.9 / rows), horizontal_spacing=0.09)
    for i, p in enumerate(panels):
        r, c = i // cols + 1, i % cols + 1
        seeds = list(p["values"])
        got = [v for v in p["values"].values() if v is not None]
        lo = min(got + [p["threshold"]])
        hi = max(got + [p["threshold"]])
        pad = 0.1 * (hi - lo) if hi > lo else max(0.05, 0.1 * abs(hi))
        bad = p.get("unreadable") or {}
        color = [_seed_color(p, v, s) for s, v in p["values"].items()]
        fig.add_trace(go.Scatter(
            x=[f"seed {s}" for s in seeds],
            y=[v if v is not None else lo - pad for v in p["values"].values()],
            mode="markers", showlegend=False,
            customdata=[("no value" if v is None else f"{v:.4g}")
                        + (f" (cannot be read: {bad.get(s, bad.get('*'))})"
                           if s in bad or "*" in bad else "")
                        for s, v in p["values"].items()],
            marker={"size": 11, "color": color,
                    "symbol": ["circle" if v is not None else "circle-open"
                               for v in p["values"].values()]},
            hovertemplate="%{x}: %{customdata}<extra></extra>"), row=r, col=c)
        fig.add_hline(y=p["threshold"], line_dash="dash", line_color="#444", row=r, col=c)
        fig.update_yaxes(range=[lo - 2 * pad, hi + 2 * pad], title_text=p["metric"],
                         title_font_size=11, row=r, col=c)
        fig.update_xaxes(title_text="seed", title_font_size=11, row=r, col=c)
    verdict = claim.evaluate(seeds)[0]
    shown = list(dict.fromkeys(s for p in panels for s in p["values"]))
    fig.update_layout(title=f"{claim.id}: {verdict} ({seeds_caption(shown)})<br><sup>dots = "
                            "seeds; dashed = "
                            "registered threshold; green = the seed meets the condition, "
                            "or the control behaves as expected there; grey = not read"
                            "</sup>",
                      margin={"t": 150 if rows == 1 else 130}, height=170 + 300 * rows)
    fig.update_annotations(font_size=11)
    return fig


def write_verdict_figures(claims: list[Claim], fig_dir: str | Path,
                          seeds: list | None = None) -> dict[str, str]:
    """Give every claim without a figure its verdict figure ``<fig_dir>/<id>_verdict``
    (``claim.figure`` set to ``figures/<stem>.html``) over the run's ``seeds``; returns the
    stems written by claim id. A figure that fails to draw leaves the claim without one (a
    figure never costs a claim)."""
    try:
        import plotly  # noqa: F401
    except ImportError:  # pragma: no cover
        return {}
    out = {}
    for claim in claims:
        if claim.figure:
            continue
        stem = claim.id.lower().replace("-", "_") + "_verdict"
        try:
            fig = verdict_figure(claim, seeds=seeds)
            if fig is None:
                continue
            save_figure(fig, Path(fig_dir) / stem, width=1200, height=fig.layout.height)
        except Exception:  # noqa: BLE001 - a figure must never cost a claim
            continue
        claim.figure = f"figures/{stem}.html"
        out[claim.id] = stem
    return out
