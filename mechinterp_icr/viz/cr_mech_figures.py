"""Figures of the CR mechanism claims (CR-5 .. CR-7), drawn from their records: the head
roles of the 1-layer attention-only model, the construction's accuracies, and the cascade's
OV and KQ probes per finetuning arm with the placebo schedules. Written with
:func:`mechinterp_icr.viz.figures.save_figure`; plotly is imported when a figure is drawn.
Re-exported by :mod:`mechinterp_icr.viz.cr_figures`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from mechinterp_icr.claims.registry import threshold
from mechinterp_icr.viz.figures import save_figure, seeds_caption

__all__ = ["write_cr5_figure", "write_cr6_figure", "write_cr7_figure"]


# ------------------------------------------------------------------------------------------------
# CR-5 .. CR-7
# ------------------------------------------------------------------------------------------------
def _save_quietly(fig, out_dir: Path, stem: str, **size) -> str | None:
    """Write ``<out_dir>/figures/<stem>`` (``size``: ``save_figure``'s width / height); its
    path relative to ``out_dir`` (``figures/<stem>.html``, as every other claim's figure), or
    None when writing fails (a figure must never cost a claim)."""
    try:
        save_figure(fig, Path(out_dir) / "figures" / stem, **size)
        return f"figures/{stem}.html"
    except Exception:  # noqa: BLE001 - a figure must never cost a claim
        return None


def write_cr5_figure(per_seed: dict, out_dir: Path) -> str | None:
    """CR-5: per seed, the Relation and Subject role scores of the mechanism model's role
    heads and of the other head, the PT-only Relation role and the 2-layer model beside."""
    import plotly.graph_objects as go

    seeds = list(per_seed)
    fig = go.Figure()
    for key, name in (("relation_role", "Relation role (role head)"),
                      ("relation_other_head", "Relation role (other head)"),
                      ("subject_role", "Subject role (role head)"),
                      ("subject_other_head", "Subject role (other head)"),
                      ("pt_relation_role", "Relation role, PT-only (reported)"),
                      ("two_layer_subject_moved", "2-layer model: Subject moved (beside)")):
        fig.add_bar(name=name, x=[f"seed {s}" for s in seeds],
                    y=[per_seed[s].get(key) for s in seeds])
    role = threshold("CR-5", "relation_role")
    fig.add_hline(y=role, line_dash="dash")
    fig.update_layout(barmode="group", title="CR-5: head roles, 1-layer 2-head attention-only "
                      "model<br><sub>share of prompts moved to the target (chance-corrected); "
                      f"dashed {role:g} (roles); the PT-only role is reported, not a control "
                      f"(the PT model does no ICL); {seeds_caption(seeds)}</sub>",
                      xaxis_title="seed",
                      yaxis_title="role score", yaxis_range=[-0.1, 1.05])
    return _save_quietly(fig, out_dir, "cr5_head_roles")


def write_cr6_figure(cr6: dict, out_dir: Path) -> str | None:
    """CR-6: exact accuracy of the constructed models in each format, and the control."""
    import plotly.graph_objects as go

    keys = ["pt_construction_pt_exact", "pt_construction_icl_heldout_exact",
            "icl_construction_icl_heldout_exact", "icl_construction_pt_exact",
            "zeroed_relation_ov_icl_exact"]
    fig = go.Figure()
    for s, r in cr6.items():
        fig.add_bar(name=f"seed {s}", x=[k.replace("_", " ") for k in keys],
                    y=[r.get(k) for k in keys])
    fig.add_hline(y=threshold("CR-6", "own_format_min"), line_dash="dash")
    fig.update_layout(barmode="group", title="CR-6: constructed models, exact accuracy"
                      f"<br><sub>{seeds_caption(list(cr6))}</sub>",
                      xaxis_title="model and format", yaxis_title="exact accuracy",
                      yaxis_range=[0, 1.05])
    return _save_quietly(fig, out_dir, "cr6_construction")


def _progress(v) -> list[float]:
    """A probe curve as the share of its total gain (plateau = mean of the last 10%)."""
    v = np.asarray(v, dtype=float)
    k = min(len(v), max(3, int(math.ceil(0.1 * len(v)))))
    gain = v[-k:].mean() - v[0]
    return ((v - v[0]) / gain).tolist() if gain > 1e-9 else [0.0] * len(v)


def _share_of(v, ref) -> list[float]:
    """Curve ``v`` as the share of the gain of curve ``ref`` (the normal run's: its start = 0,
    its plateau = 1, as :func:`_progress`), so that an arm is drawn against the normal run."""
    r = np.asarray(ref, dtype=float)
    k = min(len(r), max(3, int(math.ceil(0.1 * len(r)))))
    gain = r[-k:].mean() - r[0]
    v = np.asarray(v, dtype=float)
    return ((v - r[0]) / gain).tolist() if gain > 1e-9 else [float("nan")] * len(v)


# CR-7 figure: the arms drawn per learning rate, and the onset-fraction marker symbols
_CR7_ARMS = (("normal", "normal finetuning"), ("ov_preset", "OV preset (end-of-run OV)"),
             ("ov_frozen", "OV frozen (PT OV)"), ("kq_preset", "KQ preset (end-of-run KQ)"),
             ("kq_frozen", "KQ frozen (PT KQ)"))
_CR7_SYMBOLS = ("circle-open", "circle", "diamond", "square", "triangle-up", "star")
_CR7_PLACEBO_PANELS = (
    ("placebo: linear ramps", (("ov_first", "OV first", "#1f77b4"),
                               ("kq_first", "KQ first", "#d62728"))),
    ("placebo: negatives", (("simultaneous", "simultaneous", "#2ca02c"),
                            ("kq_leads", "KQ one point ahead", "#9467bd"))),
    ("placebo: shapes swapped (OV cubic, KQ linear)",
     (("swapped_ov_first", "swapped, OV first", "#ff7f0e"),
      ("swapped_kq_first", "swapped, KQ first", "#8c564b"))),
    ("placebo: same start, OV linear, KQ convex", (("same_start", "same start", "#17becf"),)),
)


def _lr_label(lr) -> str:
    """'0.003' -> '3e-3' (the learning rate as the CR-7 metric names write it)."""
    mant, exp = f"{float(lr):e}".split("e")
    return f"{float(mant):g}e{int(exp)}"


def _cr7_onsets(v: dict) -> list[tuple[float, float, float]]:
    """(fraction, OV onset, KQ onset) of a timing record: the claim's fraction and every
    reported one, sorted by fraction."""
    out = {float(v.get("onset_fraction", 0.1)): (v.get("t_onset_ov"), v.get("t_onset_kq"))}
    for o in (v.get("onsets") or {}).values():
        out[float(o["fraction"])] = (o.get("t_onset_ov"), o.get("t_onset_kq"))
    return sorted((f, a, b) for f, (a, b) in out.items())


def _cr7_mark_onsets(fig, x, y, v: dict, key: str, fracs: list[float], colour: str,
                     label: str, xoff: float, row: int, col: int) -> None:
    """Markers on curve (x, y) at its onset steps (``_cr7_onsets``), one symbol per
    fraction (the order of ``fracs``)."""
    for f, t_ov, t_kq in _cr7_onsets(v):
        t = t_ov if key == "ov" else t_kq
        if t is None or (isinstance(t, float) and math.isnan(t)):
            continue
        xs = [a - xoff for a in x]
        i = int(np.argmin(np.abs(np.asarray(xs, dtype=float) - float(t))))
        fig.add_scatter(x=[x[i]], y=[y[i]], mode="markers", showlegend=False,
                        marker={"color": colour, "size": 8,
                                "symbol": _CR7_SYMBOLS[fracs.index(f) % len(_CR7_SYMBOLS)]},
                        hovertext=f"{label} {key.upper()} onset at {100 * f:g}% of its gain: "
                                  f"step {t:g}", hoverinfo="text", row=row, col=col)


def _cr7_arm_panels(fig, cr7: dict, lrs: list, arms: list, fracs: list, log_x: bool,
                    level: float) -> None:
    """The grid's arm panels: row per lr, column per arm, every seed's OV (solid) and KQ
    (dotted) probes of the Relation head as shares of the normal run's gain, onsets marked,
    the other head's probes in thin grey on the same scale, and the normal run's onset level
    (``level`` of its gain, what the arm statistics read) as a dashed line."""
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
    xoff = 1 if log_x else 0  # step + 1 on a log axis (step 0 is the PT state)
    for i, lr in enumerate(lrs):
        for j, (arm, _) in enumerate(arms):
            for k, (s, r) in enumerate(cr7.items()):
                normal = r["by_lr"].get(lr)
                if normal is None:
                    continue
                v = normal if arm == "normal" else (normal.get("arms") or {}).get(arm)
                if v is None:
                    continue
                c = colours[k % len(colours)]
                x = [t + xoff for t in v["steps"]]
                for key, dash in (("ov", "solid"), ("kq", "dot")):
                    y = _share_of(v[key], normal[key])
                    # one legend entry per seed (OV solid / KQ dotted is in the title)
                    fig.add_scatter(x=x, y=y, mode="lines", line={"color": c, "dash": dash},
                                    legendgroup=f"s{s}", name=f"seed {s}",
                                    showlegend=i == 0 and j == 0 and key == "ov",
                                    row=i + 1, col=j + 1)
                    _cr7_mark_onsets(fig, x, y, v, key, fracs, c, f"seed {s}", xoff, i + 1,
                                     j + 1)
                    if f"other_{key}" in v:  # the other head (a frozen role may move to it)
                        fig.add_scatter(x=x, y=_share_of(v[f"other_{key}"], normal[key]),
                                        mode="lines", line={"color": "#bbbbbb", "width": 1,
                                                            "dash": dash},
                                        legendgroup="other", name="other head",
                                        showlegend=i == 0 and j == 1 and k == 0
                                        and key == "ov",
                                        row=i + 1, col=j + 1)
            fig.add_hline(y=level, line={"color": "#444", "dash": "dash", "width": 1},
                          row=i + 1, col=j + 1)
            fig.update_xaxes(title_text="finetuning step + 1 (log)" if log_x
                             else "finetuning step", type="log" if log_x else "linear",
                             row=i + 1, col=j + 1)
            fig.update_yaxes(title_text="share of the normal run's gain", row=i + 1,
                             col=j + 1)


def _cr7_placebo_row(fig, placebo: dict, row: int, fracs: list) -> None:
    """The grid's last row: one seed's placebo schedules, each as a share of its own gain."""
    sch_all = placebo[next(iter(placebo))]["schedules"]
    for j, (_, entries) in enumerate(_CR7_PLACEBO_PANELS):
        drawn = False
        for order, label, c in entries:
            sch = sch_all.get(order)
            if sch is None:
                continue
            drawn = True
            x = list(range(len(sch["ov"])))
            for key, dash in (("ov", "solid"), ("kq", "dot")):
                y = _progress(sch[key])
                fig.add_scatter(x=x, y=y, mode="lines", line={"color": c, "dash": dash},
                                name=f"placebo {label}", legendgroup=f"p-{order}",
                                showlegend=key == "ov", row=row, col=j + 1)
                _cr7_mark_onsets(fig, x, y, sch, key, fracs, c, f"placebo {label}", 0, row,
                                 j + 1)
        if drawn:
            fig.update_xaxes(title_text="schedule point", row=row, col=j + 1)
            fig.update_yaxes(title_text="share of total gain", row=row, col=j + 1)


def write_cr7_figure(cr7: dict, out_dir: Path, placebo: dict | None = None) -> str | None:
    """CR-7 as a grid: one row per finetuning lr, one column per arm (normal finetuning, OV
    preset, OV frozen, KQ preset, KQ frozen; only the arms present), each panel the Relation
    head's OV (solid) and KQ (dotted) probes of every seed as shares of the normal run's gain at
    that lr and seed (so an arm reads against the normal run: preset OV starts near 1, frozen
    KQ stays low; the normal onset level dashed, the other head grey), with each curve's onsets
    (against its own gain) marked at the claim's fraction and at every reported fraction, one
    symbol per fraction; a last row the placebo schedules of one seed (shares of their own
    gain)."""
    from plotly.subplots import make_subplots

    lrs = sorted({lr for r in cr7.values() for lr in r["by_lr"]}, key=float)
    present = {"normal"} | {a for r in cr7.values() for v in r["by_lr"].values()
                            for a in (v.get("arms") or {})}
    arms = [(a, t) for a, t in _CR7_ARMS if a in present]
    n_cols = max(len(arms), len(_CR7_PLACEBO_PANELS) if placebo else 1)
    titles = []
    for lr in lrs:
        titles += [f"lr {_lr_label(lr)}: {t}" for _, t in arms] + [""] * (n_cols - len(arms))
    if placebo:
        titles += [t for t, _ in _CR7_PLACEBO_PANELS] + [""] * (
            n_cols - len(_CR7_PLACEBO_PANELS))
    n_rows = len(lrs) + (1 if placebo else 0)
    fig = make_subplots(rows=max(n_rows, 1), cols=n_cols, subplot_titles=titles,
                        vertical_spacing=0.12 if n_rows > 1 else 0.2, horizontal_spacing=0.06)
    steps = next((v["steps"] for r in cr7.values() for v in r["by_lr"].values()), [])
    gaps = np.diff(steps) if len(steps) > 2 else np.array([1])
    log_x = bool(len(gaps) > 2 and gaps[-1] > 2 * gaps[0])  # log-spaced checkpoints
    timings = [v for r in cr7.values() for v in r["by_lr"].values()]
    timings += [a for v in list(timings) for a in (v.get("arms") or {}).values()]
    if placebo:
        timings += list(placebo[next(iter(placebo))]["schedules"].values())
    fracs = sorted({f for v in timings for f, _, _ in _cr7_onsets(v)})
    level = float(next((v.get("onset_fraction", 0.1) for v in timings), 0.1))
    _cr7_arm_panels(fig, cr7, lrs, arms, fracs, log_x, level)
    for f in fracs:  # the marker legend: one entry per onset fraction
        fig.add_scatter(x=[None], y=[None], mode="markers", name=f"onset at {100 * f:g}%",
                        legendgroup="onsets",
                        marker={"color": "#444", "size": 8,
                                "symbol": _CR7_SYMBOLS[fracs.index(f) % len(_CR7_SYMBOLS)]},
                        row=1, col=1)
    caption = seeds_caption(list(cr7))
    if placebo:
        _cr7_placebo_row(fig, placebo, n_rows, fracs)
        caption += ("; placebo row: " + seeds_caption(
            [next(iter(placebo))], list(placebo),
            "one seed's schedules; the placebo controls read every seed"))
    marks = ", ".join(f"{_CR7_SYMBOLS[i % len(_CR7_SYMBOLS)]} {100 * f:g}%"
                      for i, f in enumerate(fracs))
    fig.update_layout(title="CR-7: Relation-head OV (solid) and KQ (dotted) probes during ICL "
                      "finetuning, normal run and causal arms<br><sub>dashed: the normal run's "
                      f"onset level ({100 * level:g}% of its gain), which each arm's speed-up "
                      "is read at; grey: the other head; markers: each curve's onsets at a "
                      f"share of its own total gain ({marks or 'none'})</sub>"
                      f"<br><sub>{caption}</sub>",
                      legend={"tracegroupgap": 2}, margin={"t": 170})
    fig.update_yaxes(range=[-0.5, 1.6])
    # a grid needs more room than save_figure's default size
    return _save_quietly(fig, out_dir, "cr7_cascade", width=max(900, 400 * n_cols),
                         height=220 + 320 * max(n_rows, 1))
