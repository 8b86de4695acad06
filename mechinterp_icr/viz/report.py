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
or to the working directory the reproduction ran in (``out/figures/x.png``); both resolve.
The header records the git revision the reproduction ran at and the one the report was
written at, marked ``dirty`` when the working tree had uncommitted changes.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import claim_key
from mechinterp_icr.store.io import atomic_write_text

__all__ = ["write_report", "render_report", "resolve_figure"]

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
.inconclusive{background:#fff3cd;color:#7a5200;font-weight:600}
.claim{border:1px solid #dde1e6;border-radius:8px;padding:12px 18px;margin:18px 0}
.claim img{max-width:100%;border:1px solid #e3e6ea;margin-top:8px}
.statement{font-size:15px;margin:4px 0 10px} .muted{color:#5b6570;font-size:13px}
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
    ``out_dir/figures``; the first whose PNG or HTML exists."""
    p = Path(fig)
    stem = p.with_suffix("") if p.suffix in (".png", ".html") else p
    cands = [stem] if stem.is_absolute() else [out_dir / stem, stem]
    cands.append(out_dir / "figures" / stem.name)
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
            lo, hi = (accs.get("ci95") or [float("nan")] * 2)[:2]
            extra.append(f"<p>{html.escape(str(row).replace('_', ' '))}: "
                         f"<b>{_f(accs.get('mean'), 3)}</b> [{_f(lo, 3)}, {_f(hi, 3)}] "
                         "(mean over seeds [95% CI])</p>")
            continue
        cells = []
        for k in kinds:
            m = accs.get(k, {}) if isinstance(accs, dict) else {}
            lo, hi = (m.get("ci95") or [float("nan")] * 2)[:2]
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
            + "<p>Step-1 accuracy, mean over seeds [95% CI]:</p>" + table + "".join(extra)
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


def _git_state(cwd: Path | None = None) -> str | None:
    """``<revision>`` of the checkout the report is written from, ``<revision> (dirty)`` when
    tracked files have uncommitted changes; None outside a git checkout."""
    import subprocess

    where = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=where, timeout=5)
        if rev.returncode != 0 or not rev.stdout.strip():
            return None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, cwd=where, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    dirty = st.returncode != 0 or bool(st.stdout.strip())
    return rev.stdout.strip() + (" (dirty)" if dirty else "")


def _verdict(c: dict[str, Any]) -> tuple[str, str]:
    v = c.get("verdict") or ("holds" if c.get("holds") else "does not hold")
    return v, {"holds": "holds", "inconclusive": "inconclusive"}.get(v, "fails")


def render_report(summary: dict[str, Any], out_dir: Path, report_dir: Path | None = None,
                  git_state: str | None = None) -> str:
    """The report's HTML. ``out_dir``: where the reproduction wrote its outputs (figures are
    read from there); ``report_dir``: the folder the report is written to (links only to
    files inside it; default ``out_dir``); ``git_state``: the revision the report is written
    at (see :func:`write_report`)."""
    out_dir = Path(out_dir)
    report_dir = out_dir if report_dir is None else Path(report_dir)
    claims = summary.get("claims", {})
    items = sorted(claims.items(), key=claim_key)
    n_hold = sum(1 for _, c in items if c.get("holds"))
    rows = []
    for cid, c in items:
        lo, hi = c.get("ci95", [float("nan")] * 2)
        th = c.get("threshold", {})
        verdict, cls = _verdict(c)
        eid = html.escape(str(cid))
        n_ok = sum(1 for k in c.get("controls", []) if k.get("as_expected"))
        rows.append(
            f'<tr><td><a href="#{eid}">{eid}</a></td><td class="{cls}">'
            f'{verdict}</td><td class="num">{n_ok}/{len(c.get("controls", []))}</td>'
            f'<td><code>{html.escape(str(c.get("metric")))}</code></td>'
            f'<td class="num">{_f(c.get("mean"))}</td><td class="num">[{_f(lo)}, {_f(hi)}]</td>'
            f'<td>{html.escape(str(th.get("op", "")))} {_f(th.get("value"))}</td>'
            f'<td class="num">{html.escape(str(c.get("n_seeds", "")))}</td></tr>')
    table = ("<table id=\"claim-table\"><tr><th>claim</th><th>verdict</th>"
             "<th>controls as expected</th><th>metric</th>"
             "<th>mean over seeds</th><th>95% CI</th><th>threshold</th><th>seeds</th></tr>"
             + "".join(rows) + "</table>")

    sections = []
    for cid, c in items:
        lo, hi = c.get("ci95", [float("nan")] * 2)
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
        conds = c.get("conditions", [])
        conds_html = ("<p><b>Rule</b> (every condition must be met):</p><ul>" + "".join(
            f'<li class="{"holds" if k.get("met") else "fails"}">{html.escape(k["condition"])}'
            f': value {_f(k.get("value"))} &mdash; {"met" if k.get("met") else "not met"}</li>'
            for k in conds) + "</ul>" if conds else "")
        ctrls = c.get("controls", [])
        ctrls_html = ("<p><b>Controls</b> (computed in this run):</p><table><tr><th>control</th>"
                      "<th>kind</th><th>condition it names</th><th>value</th><th>meets it</th>"
                      "<th>as expected</th></tr>" + "".join(
                          f'<tr><td>{html.escape(k["name"])}</td><td>{html.escape(k["kind"])}'
                          f'</td><td>{html.escape(str(k.get("condition", "")))}</td>'
                          f'<td class="num">{_f(k.get("value"))}</td>'
                          f'<td>{_f(k.get("meets_rule"))}</td><td class="'
                          f'{"holds" if k.get("as_expected") else "fails"}">'
                          f'{"yes" if k.get("as_expected") else "no"}</td></tr>'
                          for k in ctrls) + "</table>" if ctrls else
                      '<p class="fails">No control was measured for this claim.</p>')
        reason = c.get("verdict_reason") or ""
        notes = c.get("notes") or ""
        eid = html.escape(str(cid))
        sections.append(f"""
<section class="claim" id="{eid}">
<h2>{eid} <span class="{cls}">&nbsp;{verdict}&nbsp;</span></h2>
<p class="statement">{html.escape(str(c.get("statement", "")))}</p>
<p><b>Number:</b> <code>{html.escape(str(c.get("metric")))}</code> = <b>{_f(c.get("mean"))}</b>
(mean over {html.escape(str(c.get("n_seeds", "?")))} seeds; 95% CI [{_f(lo)}, {_f(hi)}]) &nbsp;
<b>Threshold:</b> {html.escape(str(th.get("op", "")))} {_f(th.get("value"))}
{"(every seed)" if th.get("rule") == "all_seeds" else "(mean over seeds)"}</p>
<p class="muted">Verdict: {html.escape(reason)}</p>
{conds_html}
{checks_html}
{ctrls_html}
{f'<p class="muted">{html.escape(notes)}</p>' if notes else ""}
<h3>Per seed</h3><div class="scroll">{ps_table}</div>
{_figure_html(c.get("figure"), out_dir, report_dir)}
</section>""")

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
    views = sorted((out_dir / "views").glob("*.html")) if (out_dir / "views").is_dir() else []
    views_html = ("<ul>" + "".join(
        f"<li>{_link(v, report_dir, _rel(v, out_dir))}</li>" for v in views) + "</ul>") \
        if views else "<p class=\"muted\">No attention views.</p>"
    runs = sorted(p for p in (out_dir / "runs").glob("*/*") if p.is_dir()) \
        if (out_dir / "runs").is_dir() else []
    runs_html = ("<ul>" + "".join(
        f"<li>{_link(r, report_dir, _rel(r, out_dir) + '/')}</li>" for r in runs) + "</ul>") \
        if runs else "<p class=\"muted\">No run directories.</p>"
    timings = summary.get("timings_by_target") or {"all": summary.get("timings_s", {})}
    trows = "".join(
        f"<tr><td>{html.escape(t)}</td><td>{html.escape(k)}</td>"
        f'<td class="num">{_f(v, 3)}</td></tr>'
        for t, d in timings.items() for k, v in d.items())
    versions = summary.get("versions", {})
    vrows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                    for k, v in versions.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="git-revision" content="{html.escape(str(git_state or summary.get("git_revision")))}">
<title>mechinterp_icr reproduction report</title><style>{_CSS}</style></head>
<body><main>
<h1>mechinterp_icr: reproduction report</h1>
<p class="muted">Profile <b>{html.escape(str(summary.get("profile")))}</b>, seeds
{html.escape(str(summary.get("seeds")))}; reproduced at git
<code>{html.escape(str(summary.get("git_revision")))}</code>{_written_at(git_state, summary)}.
Each claim of the two papers is checked by one number against a threshold, with the mean and a
95% Student-t interval over seeds. {n_hold} of {len(items)} claims hold.</p>
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


def _written_at(git_state: str | None, summary: dict[str, Any]) -> str:
    if not git_state or git_state == summary.get("git_revision"):
        return ""
    return f"; report written at git <code>{html.escape(git_state)}</code>"


def write_report(out_dir: str | Path, report_dir: str | Path | None = None) -> Path:
    """Render ``out_dir/summary.json`` into ``report_dir/report.html`` (default ``out_dir``;
    atomic write), recording the git revision it is written at (marked dirty when the
    checkout has uncommitted changes to tracked files)."""
    out_dir = Path(out_dir)
    report_dir = out_dir if report_dir is None else Path(report_dir)
    summary = json.loads((out_dir / "summary.json").read_text())
    path = report_dir / "report.html"
    atomic_write_text(path, render_report(summary, out_dir, report_dir, _git_state()))
    return path
