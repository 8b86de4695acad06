"""The README's claim table, generated from a reproduction's ``summary.json``.

The table sits in README.md between the markers ``<!-- claim-table:begin -->`` and
``<!-- claim-table:end -->``; one row per claim: its id, its verdict, the number that decided
it (the mean over seeds of the deciding metric of
:func:`mechinterp_icr.claims.headline.claim_headline`, with its 95% interval) and that
metric's registered rule, each cell at most 25 words (the report and the ``icr`` claim tables
give the full headline). ``tests/unit/test_readme_table.py`` fails when the committed README's
table is not the one ``figures/summary.json`` gives.

    python -m mechinterp_icr.viz.readme figures/summary.json README.md          # rewrite
    python -m mechinterp_icr.viz.readme figures/summary.json README.md --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping

from mechinterp_icr.claims import claim_key
from mechinterp_icr.claims.document import md_cell
from mechinterp_icr.claims.headline import claim_headline, deciding_entry
from mechinterp_icr.claims.intervals import interval
from mechinterp_icr.claims.protocol import rule_words
from mechinterp_icr.claims.registry import metric_range
from mechinterp_icr.claims.rerun import rerun_cell, shown_verdict
from mechinterp_icr.store.io import write_or_check

__all__ = ["BEGIN", "END", "MAX_WORDS", "claim_row", "claim_table", "replace_table"]

BEGIN, END = "<!-- claim-table:begin -->", "<!-- claim-table:end -->"


MAX_WORDS = 25  # words per cell (tests/unit/test_readme_table.py)
_OP = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}


def _short(text: str, words: int = MAX_WORDS) -> str:
    """``text`` cut to at most ``words`` words, at a clause boundary when there is one."""
    w = str(text).split()
    if len(w) <= words:
        return " ".join(w)
    cut = " ".join(w[:words - 1])
    for sep in ("; ", " (", ", "):
        i = cut.rfind(sep)
        if i > len(cut) // 2:
            cut = cut[:i]
            break
    return cut.rstrip(" ,;:(") + " …"


def _num(v: Any) -> str:
    return "—" if v is None else f"{float(v):.4g}"


def _readable(e: Mapping[str, Any]) -> dict[str, float]:
    """The seeds a stored entry's rule reads: a value, and not stored as unreadable."""
    bad = e.get("unreadable") if isinstance(e.get("unreadable"), Mapping) else {}
    return {str(k): float(v) for k, v in (e.get("per_seed") or {}).items()
            if v is not None and str(k) not in bad}


def _worst(e: Mapping[str, Any], vals: dict[str, float]) -> str:
    """Under the every-seed rule, the seed furthest on the failing side of the threshold."""
    if not vals or e.get("rule", "every_seed") != "every_seed":
        return ""
    high_fails = e.get("op") in ("<=", "<")
    if e.get("kind") == "negative":  # a negative control misbehaves on the meeting side
        high_fails = not high_fails
    seed = (max if high_fails else min)(vals, key=lambda k: vals[k])
    return f"; worst {_num(vals[seed])} (seed {seed})"


def _rule(e: dict[str, Any], kind: str) -> str:
    words = rule_words(e.get("rule", "every_seed"), float(e.get("min_fraction", 1.0)))
    test = f"`{e.get('metric')}` {_OP.get(e.get('op'), e.get('op'))} {e.get('threshold'):g}"
    if kind in ("condition", "primary", "seeds", "no_control"):
        return f"{test}, {words}"
    role = "must fail" if e.get("kind") == "negative" else "must meet"
    return f"{e.get('kind')} control {role} {test}, {words}"


def claim_row(cid: str, c: dict[str, Any]) -> tuple[str, str, str, str]:
    """(claim, verdict, number [95% interval], rule) of one claim: the number is the mean over
    seeds of the metric that decided the verdict (:func:`claim_headline`), the rule is that
    metric's registered test and seed rule, or the reason the claim is not measurable. Under the
    every-seed rule the number also names the worst seed (the one that decides that rule)."""
    h = claim_headline(cid, c)
    verdict = c.get("verdict") or ("holds" if c.get("holds") else "does not hold")
    e = deciding_entry(c, h)
    if e is None:
        return cid, verdict, "—", _short(h.text)
    read = _readable(e)  # the seeds the rule reads, as the headline and the rerun column do
    vals = list(read.values())
    number = "—"
    if vals:
        lo, hi, _ = interval(vals, metric_range(str(e.get("metric"))))
        number = f"{_num(sum(vals) / len(vals))} [{_num(lo)}, {_num(hi)}]{_worst(e, read)}"
    return cid, verdict, number, _short(_rule(e, h.kind))


def claim_table(summary: dict[str, Any]) -> str:
    """The markdown table of every claim in ``summary`` (sorted by id, a variant after its
    default claim): claim | verdict | number [95% interval] | rule, each cell at most
    :data:`MAX_WORDS` words. With a rounding rerun attached (``summary["rerun"]``) the verdict
    of a fragile claim says so (:func:`mechinterp_icr.claims.rerun.shown_verdict`) and a last
    column gives the rerun's verdict and its deciding number (the seed rule's statistic)."""
    rerun = summary.get("rerun") if isinstance(summary.get("rerun"), dict) else None
    head = ["claim", "verdict", "number [95% interval]", "rule"]
    if rerun:
        head.append(f"rerun under {rerun.get('rounding') or 'another'} rounding (its "
                    "deciding number)")
    rows = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for cid, c in sorted((summary.get("claims") or {}).items(), key=claim_key):
        cells = list(claim_row(cid, c))
        if rerun:
            cells[1] = shown_verdict(c)
            cells.append(rerun_cell(c))
        rows.append("| " + " | ".join(md_cell(x) for x in cells) + " |")
    return "\n".join(rows)


def replace_table(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table`` (ValueError when
    the markers are missing or out of order)."""
    a, b = readme.find(BEGIN), readme.find(END)
    if a < 0 or b < a:
        raise ValueError(f"README has no {BEGIN} ... {END} block")
    return readme[:a + len(BEGIN)] + "\n" + table + "\n" + readme[b:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write (or check) README.md's claim table from "
                                             "a summary.json.")
    ap.add_argument("summary", type=Path)
    ap.add_argument("readme", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    args = ap.parse_args(argv)
    try:
        summary = json.loads(args.summary.read_text())
        readme = args.readme.read_text()
        new = replace_table(readme, claim_table(summary))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return write_or_check(args.readme, new, args.check,
                          f"{args.readme}: the claim table is not the one {args.summary} "
                          f"gives; run python -m mechinterp_icr.viz.readme {args.summary} "
                          f"{args.readme}")


if __name__ == "__main__":
    sys.exit(main())
