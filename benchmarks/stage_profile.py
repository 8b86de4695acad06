"""Where a reproduction's time goes: every stage's job-seconds (summed over seeds and jobs)
and its share of the whole, per target, from a summary's ``timings_by_target``.

    python benchmarks/stage_profile.py [figures/summary.json] [--top 3] [--markdown]

Job-seconds are what the jobs measured around each stage (``summary.stage`` and the
jobs' own stage timers), so they add up to the work done, not to the wall time (two workers
halve the wall time of the same job-seconds). The run's wall time and the summary's own
bookkeeping entries (``total``, ``jobs (wall, all targets)``; ``tasks (wall, all targets)``
in summaries written before jobs were called jobs) are reported apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BOOKKEEPING = ("total", "jobs (wall, all targets)", "tasks (wall, all targets)")


def stage_table(summary: dict) -> list[dict]:
    """Rows ``{target, stage, seconds, share}`` sorted by seconds, largest first; ``share``
    is of every stage's job-seconds over both targets."""
    timings = summary.get("timings_by_target") or {"all": summary.get("timings_s", {})}
    rows = [{"target": t, "stage": k, "seconds": float(v)}
            for t, d in timings.items() for k, v in d.items() if k not in BOOKKEEPING]
    total = sum(r["seconds"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["seconds"] / total
    return sorted(rows, key=lambda r: -r["seconds"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", nargs="?", default="figures/summary.json")
    ap.add_argument("--top", type=int, default=3, help="name the heaviest N stages")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args(argv)
    try:
        summary = json.loads(Path(a.summary).read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read summary {a.summary}: {e}", file=sys.stderr)
        return 2
    rows = stage_table(summary)
    total = sum(r["seconds"] for r in rows)
    if a.markdown:
        print("| target | stage | job-seconds | share |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['target']} | {r['stage']} | {r['seconds']:.0f} | {r['share']:.1%} |")
    else:
        for r in rows:
            print(f"{r['target']:4s} {r['stage']:45s} {r['seconds']:9.1f} s {r['share']:7.1%}")
    print(f"all stages: {total:.0f} job-seconds; the heaviest {a.top}: " + ", ".join(
        f"{r['target']} {r['stage']} ({r['share']:.0%})" for r in rows[:a.top]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
