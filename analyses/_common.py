"""Shared handling of the analysis scripts (thin: parsing, opening the run, printing).

Every script opens its run with :func:`open_run`, which checks up front that the run's task
kind is one the script supports and that ``--checkpoints`` selects something; otherwise it
prints one line (``error: ...``) and exits with code 2, before any model is loaded. Scripts
call only public functions of the package, import it after parsing the arguments (so
``--help`` is fast), walk the checkpoints with a progress bar on stderr
(:func:`checkpoints`), and print tables with full column names (:func:`write_table`, which
also writes ``--csv PATH``). A bare ``last`` / ``first`` selection means the run's main phase
(``ft-icl`` on a CR run, never an all-weights arm).
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

CR = ("cr",)
IR = ("ir",)


SELECTION_HELP = ("all | last | first | phase:NAME | phase:NAME:last | steps:A-B | a name, "
                  "or several joined by commas (last/first: the main phase's)")


MAX_PROMPTS = 1_000_000  # mechinterp_icr.config.MAX_PROMPTS (not imported: --help stays fast)
PROMPT_FLAGS = ("n", "n_eval", "n_each")  # the flags that count prompts per checkpoint
_parsed: list = []  # the namespace the last Parser parsed (open_run checks its prompt counts)


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (``error: ...``) and exit code 2, like every
    other refusal of the scripts, and which remembers what it parsed (:func:`open_run` checks
    the prompt counts against the run's memory ceiling)."""

    def error(self, message: str):
        fail(f"{Path(sys.argv[0]).name}: {message}")

    def parse_args(self, *args, **kwargs):
        ns = super().parse_args(*args, **kwargs)
        _parsed[:] = [ns]
        return ns


def bounded_int(lo: int, hi: int):
    """An argparse ``type``: an integer in [lo, hi] (a negative, zero or huge count or seed is
    refused in one line before anything is loaded)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is not allowed; expected an integer in "
                                             f"[{lo}, {hi:,}]")
        return v

    parse.__name__ = "integer"
    return parse


def finite_float(text: str) -> float:
    """An argparse ``type``: a finite number."""
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


# mechinterp_icr.interp.uncertainty's N_RESAMPLES, MAX_RESAMPLES and SEED (not imported:
# --help stays fast; tests/unit/test_patching_uncertainty.py checks they agree)
N_RESAMPLES, MAX_RESAMPLES, BOOTSTRAP_SEED = 1000, 100_000, 0
COUNT = bounded_int(1, MAX_PROMPTS)  # prompts per checkpoint
SEED = bounded_int(0, 2**31 - 1)
THREADS = bounded_int(1, 1024)


def parser(doc: str) -> argparse.ArgumentParser:
    """The common flags: the run directory, ``--checkpoints``, ``--n``, ``--seed``,
    ``--threads``, ``--csv``."""
    ap = Parser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--checkpoints", default="last", help=SELECTION_HELP)
    ap.add_argument("--n", type=COUNT, default=128,
                    help=f"prompts per checkpoint (1 to {MAX_PROMPTS:,}, and within the run's "
                         "resources.max_gib)")
    ap.add_argument("--seed", type=SEED, default=0, help="seed of the prompts")
    ap.add_argument("--threads", type=THREADS, default=1, help="torch threads")
    add_csv(ap)
    return ap


def add_config_args(ap: argparse.ArgumentParser, config: str) -> None:
    """``--profile`` and ``--set KEY=VALUE`` (repeatable): the reproduction's config of
    ``config`` (e.g. "IR") a script builds its runs from, as ``icr reproduce`` takes them."""
    ap.add_argument("--profile", default="quick", choices=("quick", "paper"))
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="KEY=VALUE", help=f"override a field of the {config} config "
                                              "(repeatable)")


def add_csv(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--csv", default=None, metavar="PATH",
                    help="also write the printed table as CSV to PATH")


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
        from mechinterp_icr.pipeline import load_run_model, resolve_selection

        if selection is not None:
            run.select(resolve_selection(run, selection))
        cfg, task, _ = load_run_model(run)
        _check_prompt_counts(cfg, task)
    except (RunError, ConfigError, ValueError) as e:
        fail(str(e))
    return run, cfg, task


def _check_prompt_counts(cfg, task) -> None:
    """Refuse a prompt count (``--n``, ``--n-eval``, ``--n-each``) whose forward pass would
    not fit the run's ``resources.max_gib``, before anything is allocated."""
    from dataclasses import replace

    from mechinterp_icr.config import check_prompt_batch

    model = replace(cfg.model, d_vocab=cfg.model.d_vocab or task.d_vocab,
                    n_ctx=cfg.model.n_ctx or task.n_ctx)
    for name in PROMPT_FLAGS:
        n = getattr(_parsed[0], name, None) if _parsed else None
        if isinstance(n, int):
            check_prompt_batch(model, n, cfg.resources, "--" + name.replace("_", "-"))


def checkpoints(run, selection: str, desc: str | None = None) -> list[str]:
    """The names of the checkpoints ``selection`` names (a bare last / first: the main
    phase's), wrapped in a progress bar on stderr when there are several."""
    from tqdm.auto import tqdm

    from mechinterp_icr.pipeline import resolve_selection

    names = [c.name for c in run.select(resolve_selection(run, selection))]
    if len(names) < 2:
        return names
    return tqdm(names, desc=desc or Path(sys.argv[0]).stem, file=sys.stderr, leave=False,
                unit="checkpoint", disable=None)  # shown on a terminal


def _text(v) -> str:
    if isinstance(v, float):
        return "n/a" if v != v else f"{v:.3f}"
    return "" if v is None else str(v)


def _options() -> dict:
    """The options the script parsed (the kept results' names carry them)."""
    return dict(vars(_parsed[0])) if _parsed else {}


def keep(folder: Path, name: str, files) -> list[Path]:
    """Keep the latest ``files`` of analysis ``name`` under the name of this selection and
    these options (``store.results.keep_result``; RUN/analyses/index.json lists them)."""
    from mechinterp_icr.store.results import keep_result

    return keep_result(folder, name, _options(), files)


def save_json(run, name: str, rows: list[dict]) -> Path:
    """Write ``rows`` to ``RUN/analyses/<name>.json`` (the latest result) and keep a copy
    named after the selection and options (:func:`keep`): another selection's table is never
    replaced."""
    from mechinterp_icr.store.io import atomic_write_text
    from mechinterp_icr.store.rundir import RunDir

    run = run if hasattr(run, "analyses_dir") else RunDir(run)
    out = run.analyses_dir / f"{name}.json"
    if not rows:  # never replace a result by an empty one
        fail(f"nothing to write: no rows for {out}; the previous file is unchanged")
    atomic_write_text(out, json.dumps(strict_json(rows), indent=2, default=str,
                                      allow_nan=False))
    _kept[:] = keep(out.parent, name, [out])
    return out


_kept: list = []  # the kept copy of the table save_json wrote last


def _wrote(out: Path) -> str:
    kept = f"; kept as {_kept[0].name} (index.json lists every result)" if _kept else ""
    return f"wrote {out}{kept}"


def strict_json(x):
    """``x`` with every NaN or infinite float replaced by None (null), so what is written is
    strict JSON (no bare ``NaN``), whatever reads it."""
    import math

    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:  # numpy / torch scalars
        return strict_json(x.item())
    return x


def print_table(rows: list[dict], cols: list[str], labels: dict[str, str] | None = None,
                csv: str | None = None) -> None:
    """Print the columns ``cols`` of ``rows`` with full names (``labels`` renames headers)
    and, with ``csv``, write them (full precision) to that CSV file."""
    heads = [(labels or {}).get(c, c) for c in cols]
    cells = [[_text(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    if csv:
        from mechinterp_icr.store.io import atomic_write_csv

        atomic_write_csv(csv, rows, cols, heads)
        print(f"wrote {csv}")


def write_table(run, name: str, rows: list[dict], cols: list[str], csv: str | None = None,
                labels: dict[str, str] | None = None) -> Path:
    """:func:`save_json` then :func:`print_table`."""
    out = save_json(run, name, rows)
    print_table(rows, cols, labels, csv)
    print(_wrote(out))
    return out


def checkpoint_rows(run, selection: str, fn) -> list[dict]:
    """``fn(checkpoint, model) -> list of row dicts``, over the checkpoints ``selection``
    names (:func:`checkpoints`, one model at a time), each row prefixed with the checkpoint's
    ``checkpoint``, ``phase`` and ``step``."""
    from mechinterp_icr.interp.cache import map_checkpoints

    rows = []
    for name in checkpoints(run, selection):
        for r in map_checkpoints(run, name, lambda ck, model: {"rows": fn(ck, model)}):
            rows += [{"checkpoint": r["checkpoint"], "phase": r["phase"], "step": r["step"],
                      **x} for x in r["rows"]]
    return rows


def add_heatmap_args(ap: argparse.ArgumentParser) -> None:
    """``--min-gap`` (the smallest clean - corrupted metric gap a recovery is shown for) and
    ``--max-panels`` (how many checkpoints the PNG of a per-checkpoint heatmap stacks)."""
    ap.add_argument("--min-gap", type=finite_float, default=0.5,
                    help="smallest clean - corrupted logit difference for which recoveries "
                         "are shown (default 0.5)")
    ap.add_argument("--max-panels", type=bounded_int(1, 100), default=6,
                    help="checkpoints shown in the PNG (evenly chosen, first and last "
                         "included; the HTML has a slider over all); default 6")


def add_bootstrap_args(ap: argparse.ArgumentParser) -> None:
    """``--n-resamples`` and ``--bootstrap-seed``: the bootstrap over prompt pairs behind each
    cell's 95% interval and sign-flip p-value (``interp.uncertainty``)."""
    ap.add_argument("--n-resamples", type=bounded_int(1, MAX_RESAMPLES), default=N_RESAMPLES,
                    help="bootstrap resamples of the prompt pairs per cell (and sign flips "
                         f"per p-value), 1 to {MAX_RESAMPLES:,}; default {N_RESAMPLES}")
    ap.add_argument("--bootstrap-seed", type=SEED, default=BOOTSTRAP_SEED,
                    help=f"seed of the resamples and sign flips; default {BOOTSTRAP_SEED}")


def open_prompts(a, kinds: tuple[str, ...]):
    """:func:`setup`, :func:`open_run` of ``a.run`` / ``a.checkpoints``, and ``a.n`` answer
    prompt pairs of its task (``interp.lens.answer_prompts``, seed ``a.seed``): ``(run,
    config, task, prompts)``."""
    setup(a)
    run, cfg, task = open_run(a.run, kinds, a.checkpoints)
    from mechinterp_icr.interp.lens import answer_prompts

    return run, cfg, task, answer_prompts(task, a.n, a.seed)


def write_guarded_table(run, name: str, rows: list[dict], labels: dict[str, str],
                        min_gap: float, csv: str | None = None,
                        keys: tuple[str, ...] = ("recovery",)) -> Path:
    """:func:`save_json` of the raw ``rows``, then :func:`print_table` of the columns
    ``labels`` names, the ``keys`` printed as ``n/a`` where the row's ``gap`` is below
    ``min_gap`` (or negative: no recovery to measure)."""
    out = save_json(run, name, rows)
    shown = [r if r["gap"] >= min_gap else dict(r, **{k: "n/a" for k in keys}) for r in rows]
    print_table(shown, list(labels), labels, csv)
    print(f"recoveries where the LD gap (clean LD - corrupted LD) is below {min_gap:g} are "
          f"shown as n/a; {_wrote(out)}")
    return out


def print_figures(paths: dict[str, str]) -> None:
    """One line naming the figure files ``viz.figures.save_figure`` wrote (and why there is
    no PNG, when kaleido failed)."""
    print("figures: " + ", ".join(paths[k] for k in ("png", "html") if k in paths))
    for k in ("png", "html"):
        if k in paths:
            keep(Path(paths[k]).parent, Path(paths[k]).stem, [paths[k]])
    if "png_error" in paths:  # named, never silent
        print(f"warning: {paths['png_error']}", file=sys.stderr)


def run_caption(run, selection: str, rows: list[dict] | None = None) -> str:
    """What a figure shows, for its title: the run's folder name and the checkpoint (its name
    when ``rows`` hold one checkpoint, else the selection and how many)."""
    names = list(dict.fromkeys(r["checkpoint"] for r in rows or []))
    what = names[0] if len(names) == 1 else f"{selection} ({len(names)} checkpoints)"
    return f"run {Path(run.path).name}, {what}"


def save_step_figure(run, name: str, rows: list[dict], series: dict[str, str], title: str,
                     y_title: str, group: str | None = None, y_range=None,
                     band: tuple[str, str] | None = None) -> None:
    """When ``rows`` span two checkpoints or more: the metric(s) against training step, phases
    in sequence (``viz.step_figures.step_figure``), written as ``RUN/analyses/<name>_steps``
    (.png, .html; kept like the table) and named on stdout."""
    if len({r["checkpoint"] for r in rows}) < 2:
        return
    from mechinterp_icr.viz.figures import save_figure
    from mechinterp_icr.viz.step_figures import step_figure

    fig = step_figure(rows, series, title, y_title, group=group, y_range=y_range, band=band)
    print_figures(save_figure(fig, run.analyses_dir / f"{name}_steps", width=1100, height=560))
