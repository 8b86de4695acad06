"""Shared handling of the analysis scripts (thin: parsing, opening the run, printing).

Every script opens its run with :func:`open_run`, which checks up front that the run's task
kind is one the script supports and that ``--checkpoints`` selects something; otherwise it
prints one line (``error: ...``) and exits with code 2, before any model is loaded. Scripts
call only public functions of the package.
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

CR = ("cr",)
IR = ("ir",)


def parser(doc: str) -> argparse.ArgumentParser:
    """The common flags: the run directory, ``--checkpoints``, ``--n``, ``--seed``,
    ``--threads``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--checkpoints", default="last",
                    help="all | last | first | phase:NAME | phase:NAME:last | steps:A-B | name")
    ap.add_argument("--n", type=int, default=128, help="prompts per checkpoint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def setup(a) -> None:
    """Apply ``--threads``."""
    import torch

    torch.set_num_threads(a.threads)


def fail(message: str) -> None:
    """Print ``error: message`` on one line to stderr and exit with code 2."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)
    raise SystemExit(2)


def run_main(main) -> None:
    """Run a script's ``main``; an expected error met on the way (a damaged checkpoint, a bad
    value, I/O, disk full) ends it with one line and exit code 2 (the CLI's
    :func:`mechinterp_icr.cli.error_line`), a bug keeps its traceback."""
    try:
        rc = main()
    except Exception as e:  # noqa: BLE001 - re-raised unless it is an expected error
        from mechinterp_icr.cli import error_line

        line = error_line(e)
        if line is None:
            raise
        fail(line)
    raise SystemExit(rc or 0)


def open_run(path, kinds: tuple[str, ...], selection: str | None = None):
    """``(run directory, config, task)`` of the run at ``path``.

    Exits with code 2 and a one-line message (:func:`fail`) when the directory is not a run,
    when its task kind is not in ``kinds`` (the message names both), or when ``selection``
    (a ``--checkpoints`` value) matches no checkpoint."""
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.store.rundir import RunDir, RunError

    script = Path(sys.argv[0]).name or "this analysis"
    try:
        run = RunDir(path)
        kind = getattr(type(run.read_config().task), "kind", None)
        if kind not in kinds:
            fail(f"{script} supports {' and '.join(kinds)} runs only; {path} has task kind "
                 f"{kind!r}")
        if selection is not None:
            run.select(selection)
        from mechinterp_icr.pipeline import load_run_model  # models: imported once it applies

        cfg, task, _ = load_run_model(run)
    except (RunError, ConfigError, ValueError) as e:
        fail(str(e))
    return run, cfg, task


def write_table(run: str, name: str, rows: list[dict], cols: list[str]) -> Path:
    """Write ``rows`` to ``RUN/analyses/<name>.json`` and print the columns ``cols``."""
    from mechinterp_icr.store.io import atomic_write_text
    from mechinterp_icr.store.rundir import RunDir

    out = RunDir(run).analyses_dir / f"{name}.json"
    atomic_write_text(out, json.dumps(rows, indent=2, default=str))
    print("  ".join(c[:16].ljust(16) for c in cols))
    for r in rows:
        print("  ".join((f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")))
                        [:16].ljust(16) for c in cols))
    print(f"wrote {out}")
    return out
