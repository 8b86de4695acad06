"""The reproduction report: one self-contained ``report.html`` built from ``summary.json``.

One section per claim (statement, the number, the threshold, the verdict, the 95% CI over
seeds, per-seed values, extra checks, the figure), the summary tables, links to the
interactive figures, the circuitsvis attention views and the run directories, stage timings
and package versions. PNG figures are embedded as data URIs, so the file opens by
double-click, offline, and stays readable when moved; the interactive plotly/circuitsvis files
are linked relative to it (they work offline too: their JavaScript is written next to them).
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

__all__ = ["write_report", "render_report"]

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


def _figure_html(fig: str | None, out_dir: Path) -> str:
    if not fig:
        return '<p class="muted">No figure for this claim.</p>'
    p = Path(fig)
    if not p.is_absolute():
        p = out_dir / p
    stem = p.with_suffix("") if p.suffix in (".png", ".html") else p
    parts = []
    png = stem.with_suffix(".png")
    if png.exists():
        data = base64.b64encode(png.read_bytes()).decode()
        parts.append(f'<img alt="figure {html.escape(stem.name)}" '
                     f'src="data:image/png;base64,{data}">')
    htm = stem.with_suffix(".html")
    if htm.exists():
        parts.append(f'<p><a href="{html.escape(_rel(htm, out_dir))}">interactive figure '
                     f'({html.escape(htm.name)})</a></p>')
    if not parts:
        return f'<p class="muted">Figure {html.escape(str(fig))} was not produced.</p>'
    return "\n".join(parts)


def _table_html(rows: Any) -> str:
    if isinstance(rows, dict) and "rows" in rows:
        rows = rows["rows"]
    if not isinstance(rows, list) or not rows:
        return f"<pre>{html.escape(json.dumps(rows, indent=1, default=str)[:4000])}</pre>"
    if isinstance(rows[0], dict):
        cols: list[str] = []
        for r in rows:
            cols.extend(k for k in r if k not in cols)
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(
            f'<td class="{"num" if isinstance(r.get(c), (int, float)) else ""}">'
            f'{_f(r.get(c))}</td>' for c in cols) + "</tr>" for r in rows)
        return f"<table><tr>{head}</tr>{body}</table>"
    body = "".join("<tr>" + "".join(f"<td>{_f(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{body}</table>"


def _verdict(c: dict[str, Any]) -> tuple[str, str]:
    v = c.get("verdict") or ("holds" if c.get("holds") else "does not hold")
    return v, {"holds": "holds", "inconclusive": "inconclusive"}.get(v, "fails")


def render_report(summary: dict[str, Any], out_dir: Path) -> str:
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
{_figure_html(c.get("figure"), out_dir)}
</section>""")

    tables = summary.get("tables", {})
    tables_html = "".join(f"<h3>{html.escape(name)}</h3><div class=\"scroll\">"
                          f"{_table_html(t)}</div>"
                          for name, t in tables.items() if name != "attention views")
    views = sorted((out_dir / "views").glob("*.html")) if (out_dir / "views").is_dir() else []
    views_html = ("<ul>" + "".join(
        f'<li><a href="{html.escape(_rel(v, out_dir))}">{html.escape(v.name)}</a></li>'
        for v in views) + "</ul>") if views else "<p class=\"muted\">No attention views.</p>"
    runs = sorted(p for p in (out_dir / "runs").glob("*/*") if p.is_dir()) \
        if (out_dir / "runs").is_dir() else []
    runs_html = ("<ul>" + "".join(
        f'<li><a href="{html.escape(_rel(r, out_dir))}/">{html.escape(_rel(r, out_dir))}</a>'
        "</li>" for r in runs) + "</ul>") if runs else "<p class=\"muted\">No run directories.</p>"
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
<title>mechinterp_icr reproduction report</title><style>{_CSS}</style></head>
<body><main>
<h1>mechinterp_icr: reproduction report</h1>
<p class="muted">Profile <b>{html.escape(str(summary.get("profile")))}</b>, seeds
{html.escape(str(summary.get("seeds")))}, git {html.escape(str(summary.get("git_revision")))}.
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


def write_report(out_dir: str | Path) -> Path:
    """Render ``out_dir/summary.json`` into ``out_dir/report.html`` (atomic write)."""
    out_dir = Path(out_dir)
    summary = json.loads((out_dir / "summary.json").read_text())
    path = out_dir / "report.html"
    atomic_write_text(path, render_report(summary, out_dir))
    return path
