"""``icr``: the command line. Thin: parses, validates, calls the library.

    icr train --task induction --out runs/demo --set train.steps=300
    icr eval runs/demo
    icr checkpoints runs/demo
    icr explore runs/demo --checkpoints all --out demo.html
    icr reproduce cr --profile quick --out out/ --seeds 0,1,2
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import click

from mechinterp_icr.cli.group import (
    _fail,
    error_line,  # noqa: F401 (the package's API)
    main,
    parse_seeds,
    profile_option,
    set_option,
)
from mechinterp_icr.config import ConfigError
from mechinterp_icr.config.rounding import ROUNDINGS, rounding_callback

warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="transformer_lens")




_ROUNDING = click.option(  # re-executes the command with the setting's variables if needed
    "--rounding", default=None, is_eager=True, expose_value=False, callback=rounding_callback,
    type=click.Choice(list(ROUNDINGS)), help="A kernel setting that changes float rounding "
    "(docs/reproduce.md), stamped on checkpoints and the summary. Default: the environment.")
_PROFILE_TRAIN = click.option(
    "--profile", default="quick", show_default=True,
    help="cr and ir: the reproduction profile whose settings the phase uses (quick, paper).")


@main.command()
@click.option("--task", "task_kind", default="induction", show_default=True,
              help="Task kind (registered task config), e.g. induction, cr, ir.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Run directory to create (or resume).")
@click.option("--seed", default=None, type=int,
              help="Seed of the task and the model [default: 0; a finetuning phase takes the "
                   "seed of the run it starts from].")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Dotted override, e.g. --set model.d_model=64 --set train.steps=500; for cr "
                   "and ir the keys of `icr config TARGET` (train.KEY: the phase's own "
                   "section); resource ceilings: --set resources.max_gib=16.")
@click.option("--phase", default=None,
              help="cr and ir: the paper's phase to train (`icr phases --task T` lists them; "
                   "default: the first). Other tasks: a name for the phase's checkpoints (a "
                   "letter, then letters, digits, _ or -) [default: train].")
@click.option("--init", "init", default=None, metavar="RUN[:CHECKPOINT]",
              help="Start the phase from a checkpoint of another run (same model shapes), "
                   "e.g. runs/pt:phase:pretrain:last; default CHECKPOINT: the last of the "
                   "phase it starts from (cr), else last.")
@_PROFILE_TRAIN
@_ROUNDING
@click.option("--preset", default=None, type=click.Choice(["tiny"]),
              help="tiny: small sizes and step counts (seconds to a minute per phase on one "
                   "CPU thread) for trying the workflow; --set items win over it. Without it "
                   "the phase uses the full settings of --profile.")
@click.option("--track", type=click.Choice(["none", "wandb"]), default="none",
              show_default=True,
              help="Also log the training metrics to Weights & Biases: offline into "
                   "OUT/wandb/ unless WANDB_MODE=online or WANDB_API_KEY is set.")
def train(task_kind: str, out: str, seed: int | None, overrides: tuple[str, ...],
          phase: str | None, init: str | None, profile: str, preset: str | None,
          track: str) -> None:
    """Train one phase of a model on a task, with checkpoints and metrics in OUT.

    For cr and ir, --phase names a phase of the papers (pretraining, each finetuning branch
    and control, the mechanism model, the IR PGD runs), trained with the data, subject
    subset, trainable set and settings the reproduction uses for it:

        icr train --task cr --out runs/cr --phase pretrain
        icr train --task cr --out runs/cr --phase ft-icl      # from runs/cr's pretraining

    Re-running the same command resumes from the last intact checkpoint (also in a copied or
    renamed directory); a finished phase is reported, not retrained. The same command with a
    larger --set train.steps=N extends a finished run from its last checkpoint. --init starts
    a new phase from another run's checkpoint (e.g. finetuning a pretrained model).
    Everything is checked before anything is written, including an estimate of memory and
    disk against resources.max_gib / resources.max_disk_gib; a bad setting is one line on
    stderr and exit code 2.
    """
    from mechinterp_icr.experiments.phases import train as train_phase  # checks --init first

    res = train_phase(task_kind, out, phase, seed, overrides, init=init, profile=profile,
                      preset=preset, track=track)
    phase = res.name
    for w in res.warnings:
        click.echo(f"warning: {w}", err=True)
    if res.started_from and not (res.phase is not None and (res.phase.finished or
                                                            res.phase.resumed_from is not None)):
        click.echo(f"started from {res.started_from}")
    if res.phase is not None:
        _report_phase(res.phase, phase, out)
    if res.row is not None:
        shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in res.row.items() if k != "run")
        click.echo(f"{phase!r} in {out} (a rerun resumes it or reports it finished): {shown}")


def _check_run_path(run: str, config: bool = True) -> None:
    """RUN is a directory (with a config.json when ``config``): refused in a fraction of a
    second, before torch is imported (``store.rundir.RunDir`` checks the same, later)."""
    import os

    p = Path(run)
    if not p.is_dir():
        what = "is not a directory" if os.path.lexists(p) else "does not exist"
        raise ConfigError(f"run directory {p} {what}; train one with `icr train` or `icr "
                          "reproduce`, or check the path")
    if config and not os.path.lexists(p / "config.json"):
        raise ConfigError(f"run directory {p} has no config.json")


def _report_phase(res, phase: str, out: str) -> None:
    for s in res.skipped:
        click.echo(f"skipped damaged checkpoint {s}", err=True)
    if res.removed_temp_files:
        click.echo(f"removed {len(res.removed_temp_files)} temporary file(s) left by an "
                   "interrupted run", err=True)
    where = Path(out) / "checkpoints"
    if res.finished:
        click.echo(f"phase {phase!r} of {out} is already finished ({res.steps} steps); final "
                   f"loss {res.final_loss:.4f}; nothing to do (checkpoints in {where})")
        return
    resumed = f" (resumed from step {res.resumed_from})" if res.resumed_from is not None else ""
    click.echo(f"trained {res.steps} steps of {phase!r}{resumed} in {res.seconds:.1f}s; "
               f"final loss {res.final_loss:.4f}; {len(res.checkpoints)} checkpoints written "
               f"to {where}")


@main.command()
@click.option("--task", "task_kind", required=True,
              help="Task kind: cr or ir (the tasks with the papers' phases).")
def phases(task_kind: str) -> None:
    """List the phases `icr train --task T --phase NAME` trains, one line each: what it
    trains and what it starts from."""
    from mechinterp_icr.experiments.phases import RECIPE_TASKS, recipes

    if task_kind not in RECIPE_TASKS:
        raise ConfigError(f"--task = {task_kind!r} is not allowed; the tasks with phase "
                          f"recipes are {', '.join(RECIPE_TASKS)} (other tasks train one "
                          "phase of any name on their own data)")
    rows = recipes(task_kind)
    width = max(len(r.name) for r in rows) + 2
    for r in rows:
        start = f"  [from {r.start}]" if r.start else ""
        click.echo(f"{r.name.ljust(width)}{r.summary}{start}")


@main.command(name="eval")
@click.argument("run", type=click.Path())
@click.option("--checkpoints", "selection", default=None,
              help="Which checkpoints: all, last, first, phase:NAME[:first|:last], steps:A-B, "
                   "a name, or several joined by commas. Default: the last checkpoint of "
                   "every phase except all-weights arms; a bare last/first is the main "
                   "phase's (ft-icl on a CR run).")
@click.option("--batches", default=4, show_default=True, type=int,
              help="Held-out batches (of train.eval_batch_size prompts) per number "
                   "(1 to 10000).")
def eval_cmd(run: str, selection: str | None, batches: int) -> None:
    """Evaluate checkpoints of RUN with the task's own held-out metrics, one block per phase
    (CR: held-out ICL exact / type / restricted accuracy for every number of demos K, and
    PT recall; IR: step-1 and step-2 accuracy; other tasks: held-out loss and accuracy).
    Writes RUN/analyses/eval.json (only when every selected checkpoint was evaluated)."""
    _check_run_path(run)
    from mechinterp_icr.pipeline import evaluate_run, format_eval

    rows, path = evaluate_run(Path(run), selection, batches, progress=True)
    for line in format_eval(rows):
        click.echo(line)
    click.echo(f"wrote {path}")


@main.command()
@click.argument("run", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--verify", is_flag=True,
              help="Also read every weights file and check its SHA-256 (slower).")
@click.option("--metrics", "shown", default=None, metavar="all|NAME,...",
              help="Metrics shown: all, or names joined by commas [default: the first 4, and "
                   "how many more there are].")
def checkpoints(run: str, as_json: bool, verify: bool, shown: str | None) -> None:
    """List the checkpoints of RUN (phase, step, metrics at that step); a damaged one (bad
    sidecar, weights missing, of the wrong size, not a regular file; with --verify also a
    wrong hash) is listed with its problem instead of its metrics."""
    _check_run_path(run, config=False)  # listing checkpoints needs no config
    from mechinterp_icr.store.checkpoint import CheckpointError, verify_checkpoint
    from mechinterp_icr.store.rundir import RunDir, RunError

    rows = []
    for c in RunDir(run).checkpoints():
        row = {"name": c.name, "phase": c.phase, "step": c.step, "metrics": {}}
        try:
            row["metrics"] = verify_checkpoint(c.stem, full=verify).get("metrics", {})
        except CheckpointError as e:
            row["problem"] = str(e)
        rows.append(row)
    if not rows:  # exit 2 like every other command given a run without checkpoints
        raise RunError(f"run directory {run} has no checkpoints")
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from mechinterp_icr.pipeline import metric_lines

    lines = metric_lines([r["metrics"] for r in rows], shown)
    click.echo(f"{'name':28} {'phase':18} {'step':>8}  metrics")
    for r, m in zip(rows, lines):
        if "problem" in r:
            m = "DAMAGED: " + " ".join(r["problem"].split())
        click.echo(f"{r['name']:28} {r['phase']:18} {r['step']:>8}  {m}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                "help_option_names": []})
@click.argument("name", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def analyse(name: str | None, args: tuple[str, ...]) -> None:
    """Run the analysis NAME (a script of analyses/ or probes/) with ARGS, from any directory:
    `icr analyse logit_lens runs/cr --checkpoints all` is `python analyses/logit_lens.py
    runs/cr --checkpoints all`. Without NAME (or with --help) lists the analyses;
    `icr analyse NAME --help` prints the script's own options."""
    from mechinterp_icr.experiments.scripts import find_script, run_script, scripts

    if name in (None, "-h", "--help", "--list"):
        click.echo("Usage: icr analyse NAME [ARGS]...  (icr analyse NAME --help: its options)")
        for n, p in scripts().items():
            click.echo(f"  {n:22} {p.parent.name}/{p.name}")
        return
    rc = run_script(find_script(name), args)
    if rc:
        raise SystemExit(rc)


_TARGETS = ("cr", "ir")  # the runner's targets (tests check the two lists agree)


def _resolve_targets(target: str, profile: str, overrides: tuple[str, ...]):
    """[(target, config)] for ``target`` (or both for ``all``), validated before any work."""
    from mechinterp_icr.runner import resolve_config, split_overrides

    targets = list(_TARGETS) if target == "all" else [target]
    by_target = split_overrides(targets, list(overrides))
    return [(t, resolve_config(t, profile, by_target[t])) for t in targets]


_PROFILE = profile_option("target's config")
_SET = set_option("target's config", " (see `icr config TARGET`); with `all`, prefix the "
                  "target: cr.task.lam=0.5")


@main.command()
@click.argument("target", type=click.Choice(_TARGETS + ("all",)))
@_PROFILE
@click.option("--out", "out", default="out", show_default=True, type=click.Path(file_okay=False),
              help="Output directory: summary.json, runs/, figures.")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, help="Comma-separated seeds.")
@_SET
@click.option("--workers", type=int, default=None,
              help="Jobs run at once: 1 runs them one after another in this process (no Ray); "
                   "more starts a local Ray with that many CPUs. Default: the machine's cores.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Submit the jobs to an existing Ray cluster (e.g. auto or HOST:6379) "
                   "instead of starting a local one.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="Torch intra-op threads per job (never more workers x threads than cores).")
@_ROUNDING
@click.option("--eta-from", "eta_from", default=None, metavar="FILE",
              help="Expected job durations for the progress line's ETA where OUT/jobs holds no "
                   "record of a job: a job_seconds.json of a published reproduction "
                   "(`make reproduce` passes figures/job_seconds.json). Only the ETA uses it.")
def reproduce(target: str, profile: str, out: str, seeds: str, overrides: tuple[str, ...],
              workers: int | None, ray_address: str | None, threads: int,
              eta_from: str | None) -> None:
    """Reproduce the claims of a paper (cr, ir) or of both (all); writes OUT/summary.json
    with one entry per claim (statement, per-seed metrics, mean, 95% CI, threshold, verdict)
    and prints the claim table. `icr config TARGET` lists every setting.

    Seeds and sweep settings run as jobs (in parallel with --workers > 1); each finished job's
    record is kept under OUT/jobs/, so the same command after a failure or kill resumes."""
    from mechinterp_icr.config import check_range
    from mechinterp_icr.runner import default_workers
    from mechinterp_icr.store.job_seconds import read_job_seconds

    try:
        seed_list = parse_seeds(seeds)
        resolved = _resolve_targets(target, profile, overrides)
        workers = default_workers() if workers is None else workers
        check_range("--workers", workers, 1, 1024, integer=True)
        check_range("--threads", threads, 1, 1024, integer=True)
        prior = read_job_seconds(eta_from) if eta_from else None
    except ConfigError as e:
        _fail(str(e))
    from mechinterp_icr.claims import format_claim_table
    from mechinterp_icr.jobs import JobFailed
    from mechinterp_icr.runner import run_targets
    from mechinterp_icr.viz.report import write_report

    out_dir = Path(out)
    if target == "all" and (out_dir / "summary.json").exists():
        (out_dir / "summary.json").unlink()  # a full run starts a fresh summary
    t0 = time.perf_counter()
    try:
        run_targets(resolved, out_dir, seed_list, profile, workers=workers,
                    ray_address=ray_address, threads=threads, prior=prior)
    except JobFailed as e:
        _fail(f"{e} -- finished jobs are kept in {out_dir / 'jobs'}; rerun the same "
              "command to run only the rest")
    data = json.loads((out_dir / "summary.json").read_text())
    report = write_report(out_dir)
    click.echo("\n" + format_claim_table(data["claims"]))
    click.echo("\nstage timings (s):\n" + "\n".join(
        f"  {tname:4} {k:40} {v:8.1f}" for tname, stages in
        data.get("timings_by_target", {}).items() for k, v in stages.items()))
    click.echo(f"wall time {time.perf_counter() - t0:.1f}s; peak memory "
               f"{data.get('peak_memory_mb', float('nan')):.0f} MiB")
    click.echo(f"\nsummary: {out_dir / 'summary.json'}\nreport:  {report}")
    from mechinterp_icr.cli.compare import against_published, published_summary

    published = published_summary()
    if published is not None and published.resolve() != (out_dir / "summary.json").resolve():
        for line in against_published(data, published):
            click.echo(line)


@main.command("config")
@click.argument("target", type=click.Choice(_TARGETS + ("all",)))
@_PROFILE
@_SET
@click.option("--json", "as_json", is_flag=True, help="Print the config as JSON instead.")
def config_cmd(target: str, profile: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Print every setting of a reproduction target's config (one KEY = VALUE per line, each
    settable with `icr reproduce TARGET --set KEY=VALUE`) for a profile, after overrides."""
    from mechinterp_icr.config import to_dict
    from mechinterp_icr.runner import config_keys

    try:
        resolved = _resolve_targets(target, profile, overrides)
    except ConfigError as e:
        _fail(str(e))
    if as_json:
        click.echo(json.dumps({t: to_dict(c) for t, c in resolved}, indent=2))
        return
    for t, cfg in resolved:
        prefix = t if target == "all" else ""
        click.echo(f"# {t} ({profile} profile)")
        for key, value in config_keys(cfg, prefix):
            click.echo(f"{key} = {json.dumps(value)}")


@main.command()
@click.argument("run", type=click.Path())
@click.option("--checkpoint", "checkpoint", default="last", show_default=True,
              help="One checkpoint: last, phase:NAME:last, or a name like ft-icl-0000010.")
@click.option("--prompt", default=None,
              help='Space-separated tokens, e.g. "[BOS] S1 A0_3 [SEP] S2".')
@click.option("--example", type=int, default=None,
              help="Index of a task example (CR: held-out ICL prompts) instead of --prompt.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="HTML file to write (default RUN/analyses/views/<checkpoint>-<example>.html).")
def view(run: str, checkpoint: str, prompt: str | None, example: int | None,
         out: str | None) -> None:
    """Write an offline circuitsvis attention view of one checkpoint of RUN and print its path
    (the JS bundle is written once next to it as circuitsvis.js; no network needed)."""
    _check_run_path(run)
    from mechinterp_icr.viz.views import view_run

    path = view_run(Path(run), checkpoint, prompt=prompt, example=example, out=out)
    click.echo(str(path))


@main.command()
@click.argument("run", type=click.Path())
@click.option("--checkpoints", "selection", default="all", show_default=True,
              help="Checkpoints on the slider: all, last, first, phase:NAME[:first|:last], "
                   "steps:A-B, a name, or several joined by commas (at most 400).")
@click.option("--prompt-seed", default=0, show_default=True, type=int,
              help="The held-out prompt shown: N is the prompt `icr view --example N` shows "
                   "(CR: an ICL prompt on held-out subjects); also the role-table batch's seed.")
@click.option("--prompt", default=None,
              help='Space-separated tokens instead of a drawn prompt, e.g. "[BOS] S1 A0_3 '
                   '[SEP] S2".')
@click.option("--head", "heads", default="all", show_default=True,
              help="Heads whose attention and roles are shown: all, or LxHy joined by "
                   "commas (e.g. L1H0,L1H1).")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False),
              help="HTML file to write (default RUN/analyses/explore.html).")
def explore(run: str, selection: str, prompt_seed: int, prompt: str | None, heads: str,
            out: str | None) -> None:
    """Write one offline HTML page with a slider over checkpoints of RUN: the attention of
    every head on one prompt (circuitsvis), the prediction beside the correct answer, the
    head-role table and the training curves (CR-7 probes, IR-4 attention row, or the run's
    own metrics) with the current checkpoint marked. Prints the page's path."""
    _check_run_path(run)
    from mechinterp_icr.viz.explore import explore_run

    path = explore_run(Path(run), selection, out=out, prompt_seed=prompt_seed, prompt=prompt,
                       heads=heads)
    click.echo(str(path))


# the commands on summaries (check, redecide, compare) and icr calibrate (the CR calibrations
# behind registered values) register themselves on main
from mechinterp_icr.cli import calibrate as _calibrate  # noqa: E402,F401
from mechinterp_icr.cli import summaries as _summaries  # noqa: E402,F401

if __name__ == "__main__":  # pragma: no cover
    main()
