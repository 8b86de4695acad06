"""Runs reproduction targets: resolves each target's config (profile + ``--set``), runs its
``reproduce()`` and writes the summary.

Every target is a package under ``mechinterp_icr.experiments`` with the same small interface:

- ``PROFILES``: the profile names it knows (``quick``, ``paper``);
- ``profile(name) -> Config``: a frozen, validated config dataclass holding every setting of
  every stage (the only profile mechanism); an unknown name is a ``ConfigError``;
- ``plan(cfg, out_dir, seeds) -> list[Job]``: every seed, and every sweep setting, as a
  :class:`~mechinterp_icr.jobs.Job` with explicit inputs and outputs;
- ``summarise(cfg, out_dir, seeds, records, summary)``: claims, tables and figures as a pure
  function of the job records;
- ``reproduce(cfg, out_dir, seeds, summary, workers, ray_address, threads)``: runs the plan
  with :func:`mechinterp_icr.jobs.run_jobs` (in-process for one worker, else on Ray) and
  summarises; a rerun skips the jobs whose records exist.

:func:`run_targets` (what ``icr reproduce`` calls) puts the plans of all requested targets in
one pool of jobs, named ``<target>/<job>`` (records in ``OUT/jobs/<target>/<job>.json``,
the same files a single target's ``reproduce`` writes), so the workers never wait for one
target's last jobs before the next target starts; then it summarises each target.

``--set KEY=VALUE`` edits any field of that config (``apply_overrides``). With the target
``all`` a key names its target first (``cr.task.lam=0.5``, ``ir.n=256``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import (
    ConfigError,
    ResourceConfig,
    apply_overrides,
    check_task_size,
    parse_overrides,
    to_dict,
)
from mechinterp_icr.experiments import cr, ir
from mechinterp_icr.jobs import Job, code_states, run_jobs

__all__ = ["TARGETS", "canonical_out", "resolve_config", "split_overrides",
           "run_targets", "pooled_plan", "config_keys", "default_workers"]

TARGETS = {"cr": cr, "ir": ir}


def _module(target: str):
    if target not in TARGETS:
        raise ConfigError(f"target = {target!r} is not allowed; expected one of "
                          f"{sorted(TARGETS)} or 'all'")
    return TARGETS[target]


def split_overrides(targets: list[str], overrides: list[str]) -> dict[str, dict[str, Any]]:
    """Sort ``--set`` items by target. A key may start with its target's name; with more than
    one target it must."""
    parsed = parse_overrides(overrides)
    out: dict[str, dict[str, Any]] = {t: {} for t in targets}
    for key, value in parsed.items():
        head, _, rest = key.partition(".")
        if head in TARGETS and rest:
            if head not in out:
                raise ConfigError(f"--set {key} is not allowed; target {head!r} is not being "
                                  f"run (running {targets})")
            out[head][rest] = value
        elif len(targets) == 1:
            out[targets[0]][key] = value
        else:
            raise ConfigError(f"--set {key} is not allowed; with several targets a key starts "
                              f"with its target, e.g. {targets[0]}.{key}")
    return out


def resolve_config(target: str, profile: str, overrides: dict[str, Any] | list[str] = ()):
    """The target's config for ``profile`` with ``overrides`` applied and validated,
    including that its task's tables fit the default memory ceiling (``resources.max_gib``;
    a reproduction has no ceiling of its own), before any job builds one."""
    cfg = apply_overrides(_module(target).profile(profile), overrides)
    task = getattr(cfg, "task", None)
    if task is not None:
        check_task_size(task, ResourceConfig(),
                        "train a bigger task as one phase: icr train --task "
                        f"{target} --set resources.max_gib=N")
    return cfg


def config_keys(cfg, prefix: str = "") -> list[tuple[str, Any]]:
    """Every settable dotted key of a config with its value (what ``icr config`` prints)."""
    rows: list[tuple[str, Any]] = []

    def walk(node, path):
        if isinstance(node, dict) and node and not path.endswith(".kind"):
            for k, v in node.items():
                if k == "kind" and path:
                    continue
                walk(v, f"{path}.{k}" if path else k)
        else:
            rows.append((path, node))

    walk(to_dict(cfg), prefix)
    return rows


def default_workers() -> int:
    """The machine's cores (what ``--workers`` defaults to)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def pooled_plan(targets: list[tuple[str, Any]], out_dir: Path, seeds: list[int]
                ) -> list[Job]:
    """Every job of every ``(target, config)`` in one list, named ``<target>/<job>`` (their
    dependencies renamed alike). Each target's plan keeps its order (its long training jobs
    first); the targets follow one another, so the other target's many short jobs fill the
    workers while the first one's last jobs run."""
    pool: list[Job] = []
    for target, cfg in targets:
        pool += [replace(t, name=f"{target}/{t.name}",
                         after=tuple(f"{target}/{a}" for a in t.after))
                 for t in _module(target).plan(cfg, Path(out_dir), list(seeds))]
    return pool


def canonical_out(out_dir: str | Path) -> Path:
    """One spelling per output folder: relative to the working directory when it lies inside
    it (``/abs/cwd/out``, ``./out`` and ``out`` all give ``out``), else absolute and resolved.
    Job fingerprints hold paths as text (``jobs.fingerprint``), so without this a resumed
    run given another spelling of the same folder would redo every job. Not used with
    ``--ray-address``: workers on other nodes need the path as given (absolute, shared)."""
    p, cwd = Path(out_dir).resolve(), Path.cwd().resolve()
    return p.relative_to(cwd) if p.is_relative_to(cwd) else p


def run_targets(targets: list[tuple[str, Any]], out_dir: Path, seeds: list[int], profile: str,
                workers: int = 1, ray_address: str | None = None, threads: int = 1,
                prior: dict[str, float] | None = None) -> dict[str, Summary]:
    """Run the jobs of every ``(target, config)`` in one pool (:func:`pooled_plan`; jobs
    with a stored record are skipped), then summarise each target from its records with a
    fresh summary and write it (merging with the claims of other targets already in
    ``out_dir/summary.json``). Raises ``JobFailed`` when a job failed. ``prior``: expected
    job seconds for the ETA (``jobs.run_jobs``)."""
    # on a cluster the folder is used as given: it must be a path every node sees
    out_dir = Path(out_dir) if ray_address else canonical_out(out_dir)
    seeds = list(seeds)
    t0 = time.perf_counter()
    records = run_jobs(pooled_plan(targets, out_dir, seeds), out_dir / "jobs", workers,
                       ray_address, threads, prior=prior)
    wall = time.perf_counter() - t0
    summaries = {}
    for target, cfg in targets:
        prefix = f"{target}/"
        summary = Summary(target, profile, seeds)
        summary.config = to_dict(cfg)
        summary.timings["jobs (wall, all targets)"] = wall
        _module(target).summarise(cfg, out_dir, seeds,
                                  {k[len(prefix):]: v for k, v in records.items()
                                   if k.startswith(prefix)}, summary)
        states = code_states(out_dir / "jobs" / target)
        summary.tables[f"{target}: code revision of each job result"] = [
            {"code": k, "jobs": len(v)} for k, v in sorted(states.items())]
        summary.write(out_dir)
        summaries[target] = summary
    return summaries

