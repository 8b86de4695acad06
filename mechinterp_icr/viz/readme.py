"""The README's claim table, generated from a reproduction's ``summary.json``.

The table sits in README.md between the markers ``<!-- claim-table:begin -->`` and
``<!-- claim-table:end -->``; one row per claim: its id, its verdict, how many seeds, and the
headline that decided it (:func:`mechinterp_icr.claims.headline.claim_headline`, the same words
as the report and ``icr`` claim tables). ``tests/unit/test_readme_table.py`` fails when the
committed README's table is not the one ``figures/summary.json`` gives.

    python -m mechinterp_icr.viz.readme figures/summary.json README.md          # rewrite
    python -m mechinterp_icr.viz.readme figures/summary.json README.md --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import claim_key
from mechinterp_icr.claims.headline import claim_headline

__all__ = ["BEGIN", "END", "claim_table", "replace_table"]

BEGIN, END = "<!-- claim-table:begin -->", "<!-- claim-table:end -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claim_table(summary: dict[str, Any]) -> str:
    """The markdown table of every claim in ``summary`` (sorted by id, a variant after its
    default claim)."""
    rows = ["| claim | verdict | seeds | decided by |", "| --- | --- | --- | --- |"]
    for cid, c in sorted((summary.get("claims") or {}).items(), key=claim_key):
        h = claim_headline(cid, c)
        verdict = c.get("verdict") or ("holds" if c.get("holds") else "does not hold")
        n = c.get("n_seeds", len(c.get("per_seed") or {}))
        rows.append(f"| {_cell(cid)} | {_cell(verdict)} | {n} | {_cell(h.text)} |")
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
    if args.check:
        if new != readme:
            print(f"{args.readme}: the claim table is not the one {args.summary} gives; run "
                  f"python -m mechinterp_icr.viz.readme {args.summary} {args.readme}",
                  file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
