"""Copy the default reproduction's report, summary and PNG figures into ``figures/``.

    python -m mechinterp_icr.viz.publish out figures     (what `make figures` runs)

The repository's ``figures/`` holds these outputs so the README can show them inline; the
interactive HTML figures (4.8 MB of plotly.js per folder) stay in the output directory. The
report is rendered anew for ``figures/`` (not copied): its PNGs are embedded, it links only
to files inside ``figures/``, and it records the git revision it was written at (marked
dirty when the checkout had uncommitted changes).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def publish(out_dir: Path, dest: Path) -> list[Path]:
    if not (out_dir / "summary.json").exists():
        raise SystemExit(f"{out_dir}/summary.json does not exist; run `make reproduce` first")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.png"):
        old.unlink()
    from mechinterp_icr.viz.report import write_report

    shutil.copy2(out_dir / "summary.json", dest / "summary.json")
    copied = [dest / "summary.json"]
    for png in sorted((out_dir / "figures").glob("*.png")):
        shutil.copy2(png, dest / png.name)
        copied.append(dest / png.name)
    copied.append(write_report(out_dir, report_dir=dest))
    return copied


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0] if argv else "out")
    dest = Path(argv[1] if len(argv) > 1 else "figures")
    for p in publish(out_dir, dest):
        print(p)


if __name__ == "__main__":
    main()
