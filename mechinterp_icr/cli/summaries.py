"""``icr check``, ``icr redecide`` and ``icr compare``: the commands that read reproduction
summaries (``summary.json``) rather than runs. Registered on the ``icr`` group
(:data:`mechinterp_icr.cli.group.main`) when :mod:`mechinterp_icr.cli` loads."""

from __future__ import annotations

import click

from mechinterp_icr.cli.group import main

__all__ = ["check", "compare_cmd", "redecide"]


@main.command()
@click.argument("summary", type=click.Path())
@click.option("--min-seeds", default=5, show_default=True, type=click.IntRange(1, None),
              help="Per-seed values every claim must have.")
@click.option("--protocol-only", is_flag=True,
              help="Only the protocol checks, not the registry's (thresholds, rules, stored "
                   "met flags recomputed from the per-seed values).")
def check(summary: str, min_seeds: int, protocol_only: bool) -> None:
    """Check a reproduction's SUMMARY (summary.json) against the claim protocol: verdicts,
    controls, seeds, and no `holds` beside a failing control; and against the registry:
    every registered condition and control present with its registered rule, and each stored
    `met` what the rule gives on the stored per-seed values. Prints one line per problem and
    a count; exits 0 when there is none, 1 when there are problems, 2 when SUMMARY cannot be
    read as a summary (not a regular file, too big, not JSON, nested too deep, or fields of
    the wrong type)."""
    from mechinterp_icr.claims.check import check_summary, read_summary

    data = read_summary(summary)
    problems = check_summary(data, min_seeds=min_seeds, registry=not protocol_only)
    if isinstance(data, dict) and isinstance(data.get("rerun"), dict):  # the rerun itself
        from pathlib import Path

        from mechinterp_icr.claims.check import rerun_file_problems
        from mechinterp_icr.claims.rerun import rerun_summary_path
        from mechinterp_icr.config import ConfigError

        try:
            where = rerun_summary_path(Path(summary), data)
            if where is not None:
                problems += rerun_file_problems(data, read_summary(where))
        except ConfigError as e:
            problems.append(f"summary: its rounding rerun cannot be read ({e})")
    for line in problems:
        click.echo(line)
    n = len(data.get("claims", {})) if isinstance(data, dict) else 0
    click.echo(f"{len(problems)} protocol problems over {n} claims")
    if problems:
        raise SystemExit(1)


@main.command()
@click.argument("out", type=click.Path())
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when a stored decision (or, with --readme, the README's "
                   "claim table) is not what the registered specs give.")
@click.option("--readme", default=None, type=click.Path(dir_okay=False),
              help="Also rewrite (with --check: check) this README's claim table.")
@click.option("--rerun", default=None, type=click.Path(),
              help="Attach this reproduction (same seeds and profile, another --rounding) as "
                   "OUT's rounding rerun: its summary is copied to OUT/rerun/summary.json and "
                   "every claim gets its rerun verdict and `fragile`.")
def redecide(out: str, check: bool, readme: str | None, rerun: str | None) -> None:
    """Recompute every verdict, headline, interval, verdict figure and the report of the
    reproduction in OUT (a folder with summary.json, or the file) from the measurements it
    stored, under the registered claim specs, without training. A rule change is an edit of the
    registry and this command; a rerun is needed only when what is measured changes.
    A rounding rerun attached to OUT (--rerun) is redecided with it, and each claim's
    `fragile` flag recomputed. Prints each verdict that changes; exits 0, or 1 with --check
    when anything is stale."""
    import time

    from mechinterp_icr.viz.redecide import redecide_outputs

    t0 = time.perf_counter()
    res = redecide_outputs(out, check=check, readme=readme, rerun=rerun)
    took = f"{time.perf_counter() - t0:.1f} s"  # the bar: seconds, not a rerun
    for cid, missing in res.unmeasured.items():
        click.echo(f"warning: {cid}: not measured in this run (a rerun is needed): "
                   + ", ".join(missing), err=True)
    for cid, (old, new) in res.changed.items():
        click.echo(f"{cid}: {old} -> {new}")
    if check:
        for line in res.problems:
            click.echo(line)
        click.echo(f"{len(res.problems)} stale decisions over {len(res.after)} claims in "
                   f"{res.summary} ({took})")
        if res.problems:
            raise SystemExit(1)
        return
    click.echo(f"{len(res.after)} claims redecided ({len(res.changed)} verdicts changed) in "
               f"{took}; wrote " + ", ".join(str(p) for p in res.written))


@main.command("compare")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--tol", default=1e-9, show_default=True, type=click.FloatRange(0, None),
              help="Numbers further apart than this (absolute) differ.")
@click.option("--claims", "claims", default="", help="Only these claims (comma-separated).")
@click.option("--target", type=click.Choice(["cr", "ir"]), default=None,
              help="Only this paper's claims, tables and config.")
@click.option("--max-lines", default=40, show_default=True, type=click.IntRange(0, None),
              help="Differences listed (the largest numbers first).")
@click.option("--noise", is_flag=True,
              help="Also the machine noise of every rule: how far each seed rule's deciding "
                   "number moves between A and B against its margin in A (A and B: one "
                   "reproduction under two roundings).")
@click.option("--strict", is_flag=True, help="Exit 1 on any difference, not only a verdict.")
def compare_cmd(a: str, b: str, tol: float, claims: str, target: str | None, max_lines: int,
                noise: bool, strict: bool) -> None:
    """Compare two reproductions (folders with summary.json, or the files): the verdicts that
    differ, then every number that differs beyond --tol, largest first, with a count per
    claim; timings, versions, revisions and paths are left out. Exits 1 when a verdict
    differs (with --strict: when anything does), 0 otherwise, 2 when a summary cannot be
    read."""
    from mechinterp_icr.claims.check import read_summary
    from mechinterp_icr.cli.compare import compare, report_lines
    from mechinterp_icr.viz.redecide import summary_path

    sa, sb = read_summary(summary_path(a)), read_summary(summary_path(b))
    only = [c.strip() for c in claims.split(",") if c.strip()] or None
    if only:
        known = set(sa.get("claims") or {}) | set(sb.get("claims") or {})
        unknown = [c for c in only if c not in known]
        if unknown:
            from mechinterp_icr.config import ConfigError

            raise ConfigError(f"--claims names {unknown}, in neither summary; claims: "
                              f"{sorted(known)}")
    changed, diffs = compare(sa, sb, tol, only, target)
    for line in report_lines(changed, diffs, tol, max_lines, names=(a, b)):
        click.echo(line)
    if noise:
        for line in noise_lines(sa, sb):
            click.echo(line)
    if changed or (strict and diffs):
        raise SystemExit(1)


def noise_lines(a, b) -> list[str]:
    """The machine-noise table of ``icr compare --noise``: per claim and rule, the deciding
    number in A and B, its noise (per seed for a rule on a tail of the seeds, of the number
    itself for a mean or pooled rule) and its margin to the threshold in A; ``TIGHT`` where the
    noise is more than half the margin."""
    from mechinterp_icr.claims.rerun import machine_noise

    def f(v):
        return "-" if v is None else f"{v:.4g}"

    rows = machine_noise(a, b)
    out = [f"machine noise of {len(rows)} rules (noise: per seed for every-seed and fraction "
           "rules, of the statistic for mean and pooled ones):",
           f"  {'claim':24} {'rule':11} {'A':>9} {'B':>9} {'noise':>8} {'margin':>8}  what"]
    for r in rows:
        out.append(f"  {r.claim:24} {r.rule:11} {f(r.stat_a):>9} {f(r.stat_b):>9} "
                   f"{f(r.noise):>8} {f(r.margin):>8}  {r.what}{'  TIGHT' if r.tight else ''}")
    out.append(f"{sum(r.tight for r in rows)} rules whose noise is more than half their margin")
    return out
