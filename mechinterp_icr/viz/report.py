"""The reproduction report: one self-contained ``report.html`` built from ``summary.json``.

One section per claim (statement, the number, the threshold, the verdict, the 95% CI over
seeds, per-seed values, extra checks, the figure), the summary tables (the IR causal row
overwrite as a compact table beside its figure, figure lists as embedded images), the
circuitsvis attention views and the run directories, stage timings and package versions. PNG
figures are embedded as data URIs, so the file opens by double-click, offline, and stays
readable when moved. Links go only to files inside the report's own folder (the interactive
plotly/circuitsvis files when the report sits in the output directory); anything else is
named, not linked, so a published copy (``viz.publish``) never links out of its folder.

A figure path in the summary may be relative to the output directory (``figures/x.html``)
or to the working directory the reproduction ran in (``out/figures/x.png``), or name a PNG
beside ``summary.json`` (a published folder such as ``figures/``); all resolve.

Each claim's headline ("decided by") is :func:`mechinterp_icr.claims.headline.claim_headline`:
the condition or control that decided its verdict, with its seed rule in words (the same text
as the CLI's claim table). Intervals are 95% Student-t intervals of the mean over seeds,
clipped to the metric's declared range (``claims.registry.METRIC_RANGES``).

The header records the commit the reproduction ran at (``code_state``) and the commit the
report was written at (:func:`mechinterp_icr.store.provenance.tree_state`, the report's own
folder excluded); a report written from a dirty tree, or from a reproduction of uncommitted
code, carries a red banner naming the files. ``viz.publish`` refuses to publish such a report
unless told to (``--allow-dirty``).

    python -m mechinterp_icr.viz.report DIR [REPORT_DIR]

re-renders ``DIR/summary.json`` into ``REPORT_DIR/report.html`` (default ``DIR``) without
rerunning anything.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import claim_key
from mechinterp_icr.claims.headline import (
    claim_headline,
    condition_text,
    control_phrase,
    stored_condition,
)
from mechinterp_icr.claims.intervals import clip_interval, interval
from mechinterp_icr.claims.protocol import stored_control_ok, unreadable_reason
from mechinterp_icr.claims.registry import metric_range
from mechinterp_icr.claims.rerun import rerun_cell, shown_verdict
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.store.provenance import TreeState, tree_state

__all__ = ["provenance_problems", "render_report", "resolve_figure", "write_report"]

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1d232a;
background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px 28px 60px;background:#fff}
h1{font-size:28px;margin:8px 0 4px} h2{font-size:21px;margin:34px 0 8px;border-bottom:1px solid
#dde1e6;padding-bottom:4px} h3{font-size:17px;margin:18px 0 6px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:14px}
th,td{border:1px solid #d5d9de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#eef1f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.holds{background:#d8f3dc;color:#0b5d1e;font-weight:600}
.fails{background:#fde2e1;color:#8a1c14;font-weight:600}
.unread{background:#eeeeee;color:#444;font-weight:600}
.inconclusive{background:#fff3cd;color:#7a5200;font-weight:600}
.claim{border:1px solid #dde1e6;border-radius:8px;padding:12px 18px;margin:18px 0}
.claim img{max-width:100%;border:1px solid #e3e6ea;margin-top:8px}
.statement{font-size:15px;margin:4px 0 10px} .muted{color:#5b6570;font-size:13px}
.decided{font-size:15px;margin:6px 0 8px}
.banner{background:#fde2e1;color:#8a1c14;border:2px solid #c0392b;border-radius:6px;
padding:10px 14px;margin:10px 0;font-weight:600}
code{background:#f0f2f4;padding:1px 4px;border-radius:3px} .scroll{overflow-x:auto}
h4{font-size:15px;margin:14px 0 4px} img{max-width:100%}
"""


def _f(v: Any, digits: int = 4) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and math.isnan(v):
            return "n/a"
        return f"{v:.{digits}g}"
    if v is None:
        return "n/a"
    return html.escape(str(v))


def _rel(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _link(path: Path, report_dir: Path, text: str) -> str:
    """A relative link when ``path`` exists inside the report's folder; else the name only."""
    if path.exists() and _inside(path, report_dir):
        return f'<a href="{html.escape(_rel(path, report_dir))}">{html.escape(text)}</a>'
    return f"<code>{html.escape(text)}</code> (in the output directory, not copied here)"


def resolve_figure(fig: str | Path, out_dir: Path) -> Path:
    """The figure's stem (no suffix): ``fig`` relative to ``out_dir``, or to the working
    directory (a path that already starts with the output directory), or by name in
    ``out_dir/figures`` or in ``out_dir`` itself (a published folder); the first whose PNG or
    HTML exists."""
    p = Path(fig)
    stem = p.with_suffix("") if p.suffix in (".png", ".html") else p
    cands = [stem] if stem.is_absolute() else [out_dir / stem, stem]
    if not stem.is_absolute() and stem.parts[:1] == ("figures",) and len(stem.parts) > 1:
        cands.append(out_dir.joinpath(*stem.parts[1:]))  # a published folder's subfolder
    cands += [out_dir / "figures" / stem.name, out_dir / stem.name]
    for c in cands:
        if c.with_suffix(".png").exists() or c.with_suffix(".html").exists():
            return c
    return cands[0]


def _png_html(stem: Path) -> str:
    png = stem.with_suffix(".png")
    if not png.exists():
        return ""
    data = base64.b64encode(png.read_bytes()).decode()
    return (f'<img alt="figure {html.escape(stem.name)}" '
            f'src="data:image/png;base64,{data}">')


def _figure_html(fig: str | None, out_dir: Path, report_dir: Path | None = None) -> str:
    if not fig:
        return '<p class="muted">No figure for this claim.</p>'
    report_dir = out_dir if report_dir is None else report_dir
    stem = resolve_figure(fig, out_dir)
    parts = [_png_html(stem)] if stem.with_suffix(".png").exists() else []
    htm = stem.with_suffix(".html")
    if htm.exists():
        parts.append(f"<p>interactive figure: {_link(htm, report_dir, htm.name)}</p>")
    if not parts:
        return f'<p class="muted">Figure {html.escape(str(fig))} was not produced.</p>'
    return "\n".join(parts)


def _cell(v: Any) -> str:
    if isinstance(v, dict):  # one level of nesting: "k v, k v"
        return ", ".join(f"{html.escape(str(k))}: {_f(x, 3)}" for k, x in v.items())
    if isinstance(v, list) and len(v) <= 12 and all(isinstance(x, (int, float)) for x in v):
        return "[" + ", ".join(_f(x, 3) for x in v) + "]"
    if isinstance(v, (list, dict)):
        return html.escape(json.dumps(v, default=str)[:200])
    return _f(v)


def _table_html(rows: Any) -> str:
    note = ""
    if isinstance(rows, dict) and isinstance(rows.get("note"), str):
        note = f'<p class="muted">{html.escape(rows["note"])}</p>'
        rows = {k: v for k, v in rows.items() if k != "note"}
    if isinstance(rows, dict) and "rows" in rows:
        rows = rows["rows"]
    if isinstance(rows, dict) and rows and all(isinstance(v, dict) for v in rows.values()):
        rows = [{"": k, **v} for k, v in rows.items()]  # keyed rows: the key is a column
    if not isinstance(rows, list) or not rows:
        return note + f"<pre>{html.escape(json.dumps(rows, indent=1, default=str)[:4000])}</pre>"
    if isinstance(rows[0], dict):
        cols: list[str] = []
        for r in rows:
            cols.extend(k for k in r if k not in cols)
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(
            f'<td class="{"num" if isinstance(r.get(c), (int, float)) else ""}">'
            f'{_cell(r.get(c))}</td>' for c in cols) + "</tr>" for r in rows)
        return f"{note}<table><tr>{head}</tr>{body}</table>"
    body = "".join("<tr>" + "".join(f"<td>{_f(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{body}</table>"


OVERWRITE_FIGURE = "ir_causal_row_overwrite"


def _unit(ci) -> tuple[float, float]:
    """A stored interval of accuracies or attention-mass gaps (in [0, 1]; None or short:
    nan) clipped to [0, 1] (``claims.summary.clip_interval``)."""
    lo, hi = (list(ci or []) + [float("nan")] * 2)[:2]
    try:
        return clip_interval(float(lo), float(hi), (0.0, 1.0))[:2]
    except (TypeError, ValueError):
        return float("nan"), float("nan")


def _overwrite_html(t: dict[str, Any], out_dir: Path) -> str:
    """The IR-3/IR-4 causal row overwrite: step-1 accuracy per overwritten row and sequence
    kind (mean over seeds with the 95% CI), the learned a and critical gap per seed, and the
    figure."""
    means = t.get("fixed_rows_mean") or {}
    kinds = ["clean", "single", "swap"]
    rows = []
    extra = []
    for row, accs in means.items():
        if isinstance(accs, dict) and "mean" in accs:  # a summary number, not a row
            lo, hi = _unit(accs.get("ci95"))
            extra.append(f"<p>{html.escape(str(row).replace('_', ' '))}: "
                         f"<b>{_f(accs.get('mean'), 3)}</b> [{_f(lo, 3)}, {_f(hi, 3)}] "
                         "(mean over seeds [95% CI])</p>")
            continue
        cells = []
        for k in kinds:
            m = accs.get(k, {}) if isinstance(accs, dict) else {}
            lo, hi = _unit(m.get("ci95"))
            cells.append(f'<td class="num">{_f(m.get("mean"), 3)} '
                         f'<span class="muted">[{_f(lo, 3)}, {_f(hi, 3)}]</span></td>')
        rows.append(f"<tr><td><code>{html.escape(str(row))}</code></td>{''.join(cells)}</tr>")
    table = ("<table><tr><th>step-1 row written</th>" + "".join(
        f"<th>{k} sequences</th>" for k in kinds) + "</tr>" + "".join(rows) + "</table>"
        if rows else "")
    seeds = t.get("per_seed_fixed_rows") or {}
    seed_rows = "".join(
        f"<tr><td>{html.escape(str(sd))}</td><td class=\"num\">{_f(v.get('a'), 3)}</td>"
        f"<td class=\"num\">{_f(v.get('critical_gap'), 3)}</td></tr>"
        for sd, v in seeds.items() if isinstance(v, dict))
    seed_table = ("<table><tr><th>seed</th><th>learned a</th><th>critical within-pair gap"
                  "</th></tr>" + seed_rows + "</table>") if seed_rows else ""
    note = t.get("note")
    fig = resolve_figure(OVERWRITE_FIGURE, out_dir)
    return ((f'<p class="muted">{html.escape(note)}</p>' if isinstance(note, str) else "")
            + "<p>Step-1 accuracy, mean over seeds [95% CI, clipped to [0, 1]]:</p>" + table
            + "".join(extra)
            + seed_table
            + _png_html(fig))


def _figures_html(t: dict[str, Any], out_dir: Path, shown: set[str]) -> str:
    """A figure list (name -> {html, png}): each PNG not shown with a claim, embedded."""
    parts = []
    for name in t:
        stem = resolve_figure(name, out_dir)
        if stem.name in shown or not stem.with_suffix(".png").exists():
            continue
        shown.add(stem.name)
        parts.append(f"<h4>{html.escape(str(name))}</h4>{_png_html(stem)}")
    return "".join(parts) or '<p class="muted">Every figure is shown with its claim.</p>'


def _is_figure_list(t: Any) -> bool:
    return isinstance(t, dict) and bool(t) and all(
        isinstance(v, dict) and set(v) <= {"html", "png", "png_error"} for v in t.values())


def provenance_problems(summary: dict[str, Any], tree: TreeState | None) -> list[str]:
    """Why a report of ``summary`` written from ``tree`` cannot be traced to one commit: the
    tree is unknown (not a git checkout) or dirty, or the reproduction ran on uncommitted
    code (its ``code_state`` / ``code_state_at_write`` end in ``+dirty``). Empty: clean."""
    out = []
    if tree is None:
        out.append("the report is not written from a git checkout (no commit to name)")
    elif tree.dirty:
        shown = ", ".join(tree.dirty_files[:8]) + (", ..." if len(tree.dirty_files) > 8 else "")
        out.append(f"the report is written from a working tree with {len(tree.dirty_files)} "
                   f"file(s) not committed at {tree.revision[:12]}: {shown}")
    for key in ("code_state", "code_state_at_write"):
        st = summary.get(key)
        if isinstance(st, str) and st.endswith("+dirty"):
            out.append(f"the reproduction ran on uncommitted code ({key} {st})")
    return out


def _per_target(summary: dict[str, Any]) -> str:
    """' (per target: cr at X, ir at Y)' when the targets' claims were reproduced at different
    code states (a summary merged from separate runs), else ''."""
    states = summary.get("code_state_by_target") or {}
    if len(set(states.values())) <= 1:
        return ""
    return " (per target: " + ", ".join(
        f"{html.escape(str(t))} at <code>{html.escape(str(v))}</code>"
        for t, v in sorted(states.items())) + ")"


def _verdict(c: dict[str, Any]) -> tuple[str, str]:
    """(the verdict as shown, its CSS class); a fragile verdict is shown as such, in the
    inconclusive colour: never as settled (``claims.rerun.shown_verdict``)."""
    v = c.get("verdict") or ("holds" if c.get("holds") else "does not hold")
    cls = {"holds": "holds", "inconclusive": "inconclusive"}.get(v, "fails")
    return shown_verdict(c), "inconclusive" if c.get("fragile") else cls


def render_report(summary: dict[str, Any], out_dir: Path, report_dir: Path | None = None,
                  git_state: TreeState | str | None = None) -> str:
    """The report's HTML. ``out_dir``: where the reproduction wrote its outputs (figures are
    read from there); ``report_dir``: the folder the report is written to (links only to
    files inside it; default ``out_dir``); ``git_state``: the checkout the report is written
    from (:func:`mechinterp_icr.store.provenance.tree_state`; a plain string is taken as a
    clean revision; None: unknown, which the banner says)."""
    out_dir = Path(out_dir)
    report_dir = out_dir if report_dir is None else Path(report_dir)
    tree = git_state
    claims = summary.get("claims", {})
    items = sorted(claims.items(), key=claim_key)
    n_hold = sum(1 for _, c in items if c.get("holds") and not c.get("fragile"))
    heads = {cid: claim_headline(cid, c) for cid, c in items}
    rerun = summary.get("rerun") if isinstance(summary.get("rerun"), dict) else None
    table = _claim_table(items, heads, rerun)
    sections = [_claim_section(cid, c, heads[cid].text, out_dir, report_dir)
                for cid, c in items]
    tables_html = _tables_html(summary, items, out_dir)
    views_html, runs_html = _links_html(out_dir, report_dir)
    trows, vrows = _timing_version_rows(summary)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="git-revision" content="{html.escape(_tree_label(tree))}">
<title>mechinterp_icr reproduction report</title><style>{_CSS}</style></head>
<body><main>
<h1>mechinterp_icr: reproduction report</h1>
{_banner(summary, tree)}
<p class="muted">Profile <b>{html.escape(str(summary.get("profile")))}</b>, seeds
{html.escape(str(summary.get("seeds")))}; reproduced at git
<code>{html.escape(str(summary.get("code_state") or summary.get("git_revision")))}</code>{
    _per_target(summary)};
report written at git <code>{html.escape(_tree_label(tree))}</code>.
Each claim of the two papers is decided by its registered rule (conditions with seed rules,
and controls); "decided by" names the condition that decided the verdict (for a claim that
holds, its primary condition; otherwise the first unmet condition or the misbehaving control),
with its seed rule. Brackets are 95% Student-t intervals of the mean over seeds, clipped to the
metric's declared range (e.g. [0, 1] for an accuracy). {n_hold} of {len(items)} claims
hold{" and are not fragile" if rerun else ""}.{_rerun_words(rerun, items)}</p>
<h2 id="claims">Claims</h2>
{table}
{"".join(sections)}
<h2 id="tables">Tables</h2>
{tables_html or '<p class="muted">No tables.</p>'}
<h2 id="views">Interactive attention views</h2>
{views_html}
<h2 id="runs">Run directories</h2>
{runs_html}
<h2 id="timings">Stage timings (seconds) and memory</h2>
<table><tr><th>target</th><th>stage</th><th>seconds</th></tr>{trows}</table>
<p>Peak memory: {_f(summary.get("peak_memory_mb"))} MiB.</p>
<h2 id="versions">Package versions</h2>
<table>{vrows}</table>
</main></body></html>
"""


def _rerun_words(rerun: Any, items) -> str:
    if not rerun:
        return ""
    fragile = [str(cid) for cid, c in items if c.get("fragile")]
    return (f" Every claim was decided again on a rerun of the same code and seeds under "
            f"{html.escape(str(rerun.get('rounding')))} rounding (another machine's float "
            f"rounding, SPEC 0); {len(fragile)} verdicts differ there and are marked fragile"
            + (f" ({html.escape(', '.join(fragile))})" if fragile else "") + ".")


def _claim_table(items, heads, rerun: Any = None) -> str:
    """The claim table at the top: claim, verdict, what decided it, controls, seeds, and with
    a rounding rerun attached its verdict and deciding number there."""
    rows = []
    for cid, c in items:
        verdict, cls = _verdict(c)
        eid = html.escape(str(cid))
        n_ok = sum(1 for k in c.get("controls", []) if stored_control_ok(k))
        cell = f'<td>{html.escape(rerun_cell(c))}</td>' if rerun else ""
        rows.append(
            f'<tr><td><a href="#{eid}">{eid}</a></td><td class="{cls}">'
            f'{html.escape(verdict)}</td><td>{html.escape(heads[cid].text)}</td>'
            f'<td class="num">{n_ok}/{len(c.get("controls", []))}</td>'
            f'<td class="num">{html.escape(str(c.get("n_seeds", "")))}</td>{cell}</tr>')
    head = (f"<th>rerun under {html.escape(str(rerun.get('rounding')))} rounding (its deciding "
            "number)</th>" if rerun else "")
    return ("<table id=\"claim-table\"><tr><th>claim</th><th>verdict</th>"
            "<th>decided by (the deciding condition or control, with its seed rule)</th>"
            f"<th>controls as expected</th><th>seeds</th>{head}</tr>" + "".join(rows)
            + "</table>")


def _met_class(met) -> str:
    return "unread" if met is None else ("holds" if met else "fails")


def _met_word(cond: dict) -> str:
    """met / not met / cannot be read (with why: SPEC 0, a condition that cannot be read is
    never reported as failing)."""
    if cond.get("met") is None:
        why = unreadable_reason(cond).rsplit(" cannot be read ", 1)[-1]
        return html.escape(f"cannot be read {why}")
    return "met" if cond.get("met") else "not met"


def _claim_section(cid: str, c: dict[str, Any], head: str, out_dir: Path,
                   report_dir: Path) -> str:
    """One claim's section: verdict, rule, controls, primary metric, per-seed table, figure."""
    lo, hi, clipped = _primary_interval(c)
    th = c.get("threshold", {})
    verdict, cls = _verdict(c)
    per_seed = c.get("per_seed", {})
    keys: list[str] = []
    for m in per_seed.values():
        keys.extend(k for k in m if k not in keys and isinstance(m[k], (int, float, bool)))
    ps_rows = "".join(
        f"<tr><td>{html.escape(str(s))}</td>" + "".join(
            f'<td class="num">{_f(m.get(k))}</td>' for k in keys) + "</tr>"
        for s, m in per_seed.items())
    ps_table = ("<table><tr><th>seed</th>" + "".join(
        f"<th>{html.escape(k)}</th>" for k in keys) + "</tr>" + ps_rows + "</table>"
        if per_seed else "")
    checks = c.get("extra_checks", {})
    checks_html = ("<ul>" + "".join(
        f'<li class="{"holds" if ok else "fails"}">{html.escape(name)}: '
        f'{"ok" if ok else "failed"}</li>' for name, ok in checks.items()) + "</ul>"
        if checks else "")
    conds = [k for k in c.get("conditions", []) if isinstance(k, dict)]
    conds_html = ("<p><b>Rule</b> (every condition must be met):</p><ul>" + "".join(
        f'<li class="{_met_class(k.get("met"))}">'
        f'{html.escape(_condition_line(k))} &mdash; '
        f'{_met_word(k)}</li>' for k in conds) + "</ul>"
        if conds else "")
    ctrls = [k for k in c.get("controls", []) if isinstance(k, dict)]
    ctrls_html = ("<p><b>Controls</b> (computed in this run):</p><table><tr><th>control</th>"
                  "<th>kind</th><th>condition it names</th><th>what it showed</th>"
                  "<th>meets it</th><th>as expected</th></tr>" + "".join(
                      f'<tr><td>{html.escape(str(k.get("name")))}</td>'
                      f'<td>{html.escape(str(k.get("kind")))}</td>'
                      f'<td>{html.escape(str(k.get("condition", "")))}</td>'
                      f'<td>{html.escape(_control_line(k))}</td>'
                      f'<td>{_f(k.get("meets_rule"))}</td><td class="'
                      f'{"holds" if stored_control_ok(k) else "fails"}">'
                      f'{"yes" if stored_control_ok(k) else "no"}</td></tr>'
                      for k in ctrls) + "</table>" if ctrls else
                  '<p class="fails">No control was measured for this claim.</p>')
    reason = c.get("verdict_reason") or ""
    notes = c.get("notes") or ""
    eid = html.escape(str(cid))
    return f"""
<section class="claim" id="{eid}">
<h2>{eid} <span class="{cls}">&nbsp;{html.escape(verdict)}&nbsp;</span></h2>
<p class="statement">{html.escape(str(c.get("statement", "")))}</p>
<p class="decided"><b>Decided by:</b> {html.escape(head)}</p>
<p class="muted">Verdict: {html.escape(reason)}</p>
{conds_html}
{checks_html}
<p class="muted">Primary metric <code>{html.escape(str(c.get("metric")))}</code> over seeds
(descriptive; the verdict reads the rule above with its seed rules): mean {_f(c.get("mean"))}
over {html.escape(str(c.get("n_seeds", "?")))} seeds, 95% CI [{_f(lo)},
{_f(hi)}]{_clip_note(c, clipped)}; threshold {html.escape(str(th.get("op", "")))}
{_f(th.get("value"))}
({"every seed" if th.get("rule") == "all_seeds" else html.escape(str(th.get("rule", "")))}).</p>
{ctrls_html}
{f'<p class="muted">{html.escape(notes)}</p>' if notes else ""}
<h3>Per seed</h3><div class="scroll">{ps_table}</div>
{_figure_html(c.get("figure"), out_dir, report_dir)}
</section>"""


def _tables_html(summary: dict[str, Any], items, out_dir: Path) -> str:
    """The summary's tables (and the figures they list that no claim section shows)."""
    tables = summary.get("tables", {})
    shown = {resolve_figure(c["figure"], out_dir).name for _, c in items if c.get("figure")}
    tparts = []
    for name, t in tables.items():
        if name.endswith("attention views"):  # listed below, from views/
            continue
        if isinstance(t, dict) and "fixed_rows_mean" in t:
            body = _overwrite_html(t, out_dir)
            shown.add(OVERWRITE_FIGURE)
        elif _is_figure_list(t):
            body = _figures_html(t, out_dir, shown)
        else:
            body = _table_html(t)
        tparts.append(f"<h3>{html.escape(name)}</h3><div class=\"scroll\">{body}</div>")
    tables_html = "".join(tparts)
    return tables_html


def _links_html(out_dir: Path, report_dir: Path) -> tuple[str, str]:
    """(attention views list, run directories list), linked relative to ``report_dir``."""
    views = sorted((out_dir / "views").glob("*.html")) if (out_dir / "views").is_dir() else []
    views_html = ("<ul>" + "".join(
        f"<li>{_link(v, report_dir, _rel(v, out_dir))}</li>" for v in views) + "</ul>") \
        if views else "<p class=\"muted\">No attention views.</p>"
    runs = sorted(p for p in (out_dir / "runs").glob("*/*") if p.is_dir()) \
        if (out_dir / "runs").is_dir() else []
    runs_html = ("<ul>" + "".join(
        f"<li>{_link(r, report_dir, _rel(r, out_dir) + '/')}</li>" for r in runs) + "</ul>") \
        if runs else "<p class=\"muted\">No run directories.</p>"
    return views_html, runs_html


def _timing_version_rows(summary: dict[str, Any]) -> tuple[str, str]:
    """Table rows of the stage timings and of the package versions."""
    timings = summary.get("timings_by_target") or {"all": summary.get("timings_s", {})}
    trows = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{html.escape(k)}</td>"
        f'<td class="num">{_f(v, 3)}</td></tr>'
        for t, d in timings.items() for k, v in d.items())
    versions = summary.get("versions", {})
    vrows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                    for k, v in versions.items())
    return trows, vrows


def _as_tree(git_state: TreeState | str | None) -> TreeState | None:
    if isinstance(git_state, str):
        return TreeState(git_state)
    return git_state


def _tree_label(tree: TreeState | str | None) -> str:
    tree = _as_tree(tree)
    return "unknown (not a git checkout)" if tree is None else tree.label


def _banner(summary: dict[str, Any], tree: TreeState | str | None) -> str:
    problems = provenance_problems(summary, _as_tree(tree))
    if not problems:
        return ""
    return ('<div class="banner" id="provenance-warning">Not traceable to one commit: '
            + "; ".join(html.escape(p) for p in problems)
            + ". The numbers and text below may not be what that commit produces.</div>")


def _primary_interval(c: dict[str, Any]) -> tuple[float, float, bool]:
    """The primary metric's 95% interval from its per-seed values, inside its declared range
    (recomputed, so a summary written before the ranges were declared is shown clipped too);
    the stored ``ci95`` when no per-seed value is there."""
    metric = str(c.get("metric"))
    vals = [m.get(metric) for m in (c.get("per_seed") or {}).values() if isinstance(m, dict)]
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if vals:
        return interval(vals, metric_range(metric))
    lo, hi = (list(c.get("ci95") or []) + [float("nan")] * 2)[:2]
    return lo, hi, False


def _clip_note(c: dict[str, Any], clipped: bool) -> str:
    r = metric_range(str(c.get("metric")))
    if not clipped or r is None:
        return ""
    return f", clipped to its range [{r[0]:g}, {r[1]:g}]"


def _condition_line(k: dict[str, Any]) -> str:
    return condition_text(stored_condition(k), k)


def _control_line(k: dict[str, Any]) -> str:
    return control_phrase(str(k.get("kind")), str(k.get("name")),
                          stored_condition(k), k.get("per_seed") or {},
                          k.get("meets_rule"), str(k.get("note") or ""), with_name=False)


def write_report(out_dir: str | Path, report_dir: str | Path | None = None,
                 tree: TreeState | None | str = "auto") -> Path:
    """Render ``out_dir/summary.json`` into ``report_dir/report.html`` (default ``out_dir``;
    atomic write), recording the commit it is written at (``tree``; default: this checkout's
    :func:`~mechinterp_icr.store.provenance.tree_state` with the report's folder excluded) and
    a banner when that tree or the reproduction's code was not committed."""
    out_dir = Path(out_dir)
    report_dir = out_dir if report_dir is None else Path(report_dir)
    summary = json.loads((out_dir / "summary.json").read_text())
    if tree == "auto":
        tree = tree_state(exclude=[report_dir, out_dir])
    path = report_dir / "report.html"
    atomic_write_text(path, render_report(summary, out_dir, report_dir, tree))
    return path


def main(argv: list[str] | None = None) -> None:
    """``python -m mechinterp_icr.viz.report DIR [REPORT_DIR]``: re-render a report from an
    existing ``DIR/summary.json`` (nothing is rerun); prints its path and any provenance
    problem (see :mod:`mechinterp_icr.viz.publish` for the committed ``figures/``)."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        raise SystemExit("usage: python -m mechinterp_icr.viz.report DIR [REPORT_DIR]")
    out_dir = Path(argv[0])
    report_dir = Path(argv[1]) if len(argv) > 1 else out_dir
    tree = tree_state(exclude=[report_dir, out_dir])
    path = write_report(out_dir, report_dir, tree)
    summary = json.loads((out_dir / "summary.json").read_text())
    for p in provenance_problems(summary, tree):
        print(f"warning: {p}", file=sys.stderr)
    print(path)


if __name__ == "__main__":
    main()
