"""Copy the default reproduction's report, summary and PNG figures into ``figures/``, with
``job_seconds.json`` (each job's seconds, which the next fresh run's ETA starts from).

    python -m mechinterp_icr.viz.publish out figures     (what `make figures` runs)
    python -m mechinterp_icr.viz.publish figures figures (re-render the published report)

The repository's ``figures/`` holds these outputs so the README can show them inline; the
interactive HTML figures (4.8 MB of plotly.js per folder) stay in the output directory. The
report is rendered anew for ``figures/`` (not copied): its PNGs are embedded, it links only
to files inside ``figures/``, and it records the commit it was written at.

A committed report must name one commit: publishing **refuses** (exit status 1, nothing
written) when the checkout has files not committed outside the destination folder (tracked
changes or untracked files git does not ignore; the destination itself is excluded, since
publishing changes it), when it is not a git checkout, or when the summary says the
reproduction ran on uncommitted code (``code_state`` ending in ``+dirty``). With
``--allow-dirty`` (``make figures ALLOW_DIRTY=1``) it publishes anyway, warns on stderr and the
report carries a red banner naming the files. The check runs before anything is copied.
Publishing a folder onto itself (``figures figures``) only re-renders its report from its
``summary.json`` and PNGs.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from mechinterp_icr.claims.rerun import RERUN_DIR
from mechinterp_icr.store.provenance import tree_state

__all__ = ["publish", "main"]


def publish(out_dir: Path, dest: Path, allow_dirty: bool = False) -> list[Path]:
    """Publish ``out_dir`` into ``dest`` (see the module docstring); the paths written."""
    from mechinterp_icr.store.job_seconds import write_job_seconds
    from mechinterp_icr.viz.report import provenance_problems, write_report

    out_dir, dest = Path(out_dir), Path(dest)
    if not (out_dir / "summary.json").exists():
        raise SystemExit(f"{out_dir}/summary.json does not exist; run `make reproduce` first")
    tree = tree_state(exclude=[dest])
    summary = json.loads((out_dir / "summary.json").read_text())
    problems = provenance_problems(summary, tree)
    if problems and not allow_dirty:
        raise SystemExit("refusing to publish: " + "; ".join(problems) + ". Commit (or stash) "
                         "first, or pass --allow-dirty to publish a report marked as such.")
    for p in problems:
        print(f"WARNING: publishing anyway (--allow-dirty): {p}; the report is marked",
              file=sys.stderr)
    dest.mkdir(parents=True, exist_ok=True)
    same = out_dir.resolve() == dest.resolve()
    copied = []
    if not same:
        # the PNGs this publish replaces: the top level and the source's own subfolders (a
        # published folder's other subfolders, e.g. figures/paper, are another report's)
        subs = [p.name for p in (out_dir / "figures").glob("*") if p.is_dir()]
        for old in [*dest.glob("*.png"), *(q for sub in subs for q in dest.glob(f"{sub}/*.png"))]:
            old.unlink()
        shutil.copy2(out_dir / "summary.json", dest / "summary.json")
        copied.append(dest / "summary.json")
        # a rounding rerun pairs with the decision run it reran: a new decision run drops it
        # (`make robustness` attaches a rerun of the new one)
        stale = dest / RERUN_DIR / "summary.json"
        if stale.exists():
            stale.unlink()
            print(f"removed {stale}: it reran the previous decision run; `make robustness` "
                  "attaches a rerun of this one", file=sys.stderr)
        # every job's seconds: the next fresh run's ETA (`icr reproduce --eta-from`)
        copied.append(write_job_seconds(out_dir / "jobs", dest / "job_seconds.json",
                                        source=summary.get("code_state")))
        # the figures folder's PNGs and those of its subfolders (the shared-token variant's)
        for png in sorted((out_dir / "figures").glob("*.png")) + sorted(
                (out_dir / "figures").glob("*/*.png")):
            rel = png.relative_to(out_dir / "figures")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(png, dest / rel)
            copied.append(dest / rel)
    copied.append(write_report(out_dir, report_dir=dest, tree=tree))
    return copied


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    allow = "--allow-dirty" in argv
    argv = [a for a in argv if a != "--allow-dirty"]
    out_dir = Path(argv[0] if argv else "out")
    dest = Path(argv[1] if len(argv) > 1 else "figures")
    for p in publish(out_dir, dest, allow_dirty=allow):
        print(p)


if __name__ == "__main__":
    main()
