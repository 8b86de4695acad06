"""Jobs: the units a reproduction is cut into, run in-process or on Ray.

A :class:`Job` is a module-level function, its keyword arguments (config, seed, paths) and
the names of the jobs whose outputs (run directories) it reads. It returns a JSON-able
*result record*. :func:`run_jobs` runs a list of jobs in dependency order:

- ``workers=1`` runs them one after another in this process, without Ray;
- ``workers>1`` starts a local Ray with that many CPUs (or joins ``ray_address``) and runs
  each job as a Ray task with ``num_cpus=1``; every worker sets its own torch threads
  (``threads``, 1 by default), so the machine is never oversubscribed. Where the local Ray
  has GPUs, each task also asks for an equal share of them (:func:`gpu_share`): Ray hides
  every GPU from a task that asks for none, so without a share the jobs would run on the CPU.
  On a cluster (``ray_address``) no GPU is asked for.

Each finished job's record is written atomically to ``<records>/<name>.json`` with a
fingerprint of its function and inputs; a rerun of the same command skips the jobs whose
record exists with the same fingerprint (resume at job level) and reruns the rest, so a
changed setting never reuses an old result. A failed job is reported by name with its
error; the jobs that do not depend on it still run, then :class:`JobFailed` names every
failure. Because a job's result depends only on its inputs, the records, and every summary
computed from them, are the same whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mechinterp_icr.config import ConfigError, check, check_range
from mechinterp_icr.store.io import JSONFileError, atomic_write_json, json_default, read_json_file
from mechinterp_icr.store.job_seconds import record_seconds
from mechinterp_icr.store.provenance import code_state

_code_state = functools.lru_cache(maxsize=1)(code_state)

__all__ = ["Job", "JobFailed", "Progress", "Record", "RecordError", "expected_seconds",
           "fingerprint", "gpu_share", "job_kind", "job_twin", "record_field", "record_path",
           "run_jobs", "set_threads"]


@dataclass(frozen=True)
class Job:
    """One unit of work: ``fn(**kwargs) -> record`` after the jobs named in ``after``."""

    name: str  # unique within a run, path-like: "seed0", "sweep/sga/seed1"
    fn: Callable[..., dict[str, Any]]
    kwargs: dict[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        ok = (isinstance(self.name, str) and self.name != "" and ".." not in self.name
              and not self.name.startswith("/") and all(c.isalnum() or c in "-_./ "
                                                         for c in self.name))
        check(ok, "job.name", self.name, "a relative path of letters, digits, - _ . / and spaces")
        check(callable(self.fn), "job.fn", self.fn, "a module-level function")


class JobFailed(RuntimeError):
    """One or more jobs raised; ``failures`` maps job name -> error text."""

    def __init__(self, failures: dict[str, str]):
        self.failures = failures
        lines = [f"{len(failures)} job(s) failed:"]
        lines += [f"  {name}: {err.strip().splitlines()[-1] if err.strip() else err}"
                  for name, err in failures.items()]
        super().__init__("\n".join(lines))


def record_path(records_dir: Path, name: str) -> Path:
    return Path(records_dir) / f"{name}.json"


def set_threads(n: int) -> None:
    """Set this process's torch intra-op threads (0 leaves them as they are)."""
    if n:
        import torch

        torch.set_num_threads(n)


def _execute(fn: Callable[..., dict[str, Any]], kwargs: dict[str, Any], threads: int
             ) -> tuple[dict[str, Any] | None, str | None, float]:
    """Run one job in the current process: (record, error text, seconds)."""
    set_threads(threads)
    t0 = time.perf_counter()
    try:
        rec = fn(**kwargs)
        json.dumps(rec, default=str)  # records must be JSON-able
        return rec, None, time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - reported by job name, not raised here
        return None, traceback.format_exc(), time.perf_counter() - t0


def _check_plan(jobs: list[Job]) -> None:
    names = [t.name for t in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    check(not dup, "jobs", dup, "unique job names")
    known = set(names)
    for t in jobs:
        missing = [a for a in t.after if a not in known]
        check(not missing, f"job {t.name}.after", missing, "names of jobs in the plan")


def code_states(records_dir: str | Path) -> dict[str, list[str]]:
    """``{code state: [job names]}`` of the stored records under ``records_dir``: which
    revision (``+dirty`` when uncommitted) computed each result. A resumed run keeps the
    records of earlier code (the fingerprint covers inputs, not code, so that a paper run
    survives a commit); the summary lists the states so a mix is visible."""
    out: dict[str, list[str]] = {}
    for path in sorted(Path(records_dir).rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "record" in data:
            out.setdefault(str(data.get("code")), []).append(str(data.get("name")))
    return out


def fingerprint(t: Job) -> str:
    """SHA-256 of the job's function and inputs (configs by value, paths as text): a stored
    record counts as done only for the same fingerprint, so changed settings rerun."""
    from mechinterp_icr.config import to_dict

    def plain(x):
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {"__type__": type(x).__qualname__, **to_dict(x)}
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, (str, int, float, bool)) or x is None:
            return x
        return str(x)

    text = json.dumps({"fn": f"{t.fn.__module__}.{t.fn.__qualname__}",
                       "kwargs": plain(t.kwargs)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_stored(path: Path) -> dict[str, Any] | None:
    """A stored record file's JSON, or None when it is absent or damaged."""
    try:  # never a FIFO or a device, bounded size and depth
        data = read_json_file(path)
    except JSONFileError:
        return None
    return data if isinstance(data, dict) else None


def run_jobs(jobs: list[Job], records_dir: str | Path, workers: int = 1,
             ray_address: str | None = None, threads: int = 1,
             log: Callable[[str], None] | None = None,
             prior: dict[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` (skipping those with a stored record); return ``{name: record}`` in plan
    order. Raises :class:`JobFailed` after every runnable job has run when any failed.
    ``prior``: expected seconds of jobs from a reference run
    (``store.job_seconds.read_job_seconds``), used for the progress line's ETA where
    ``records_dir`` holds no record of a job."""
    check_range("--workers", workers, 1, 1024, integer=True)
    check_range("threads", threads, 0, 1024, integer=True)
    _check_plan(jobs)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    records_dir = Path(records_dir)
    done: dict[str, dict[str, Any]] = {}
    stored = {t.name: _read_stored(record_path(records_dir, t.name)) for t in jobs}
    for t in jobs:
        data = stored[t.name]
        # absent, damaged or under other inputs (a changed --set): the job runs again
        if data is not None and "record" in data and data.get("fingerprint") == fingerprint(t):
            done[t.name] = data["record"]
    todo = [t for t in jobs if t.name not in done]
    if done:
        log(f"[jobs] {len(done)} of {len(jobs)} already done (records in {records_dir}); "
            f"running {len(todo)}")
    failures: dict[str, str] = {}
    if todo:
        runner = _run_local if workers == 1 and ray_address is None else _run_ray
        # the stored seconds of the jobs to run (an earlier run's, under other inputs), else
        # the reference run's (all of its jobs: other seeds' inform the twins and kinds)
        known = dict(prior or {})
        known.update({t.name: s for t in todo
                      if (s := record_seconds(stored[t.name])) is not None})
        progress = Progress(todo, expected_seconds(todo, known),
                            1 if runner is _run_local else workers,
                            measured={t.name for t in todo if t.name in known})
        runner(todo, done, failures, records_dir, workers, ray_address, threads, log, progress)
    if failures:
        raise JobFailed(failures)
    return {t.name: done[t.name] for t in jobs}


def _finish(t: Job, rec, err, secs, done, failures, records_dir, log, progress) -> None:
    if err is None:
        atomic_write_json(record_path(records_dir, t.name),
                          {"name": t.name, "fingerprint": fingerprint(t), "seconds": secs,
                           "code": _code_state(), "record": rec})
        done[t.name] = rec
        status = f"done in {secs:.1f}s"
    else:
        failures[t.name] = err
        last = err.strip().splitlines()[-1] if err.strip() else "error"
        status = f"FAILED after {secs:.1f}s: {last}"
    progress.finish(t.name, secs)
    log(f"[job] {t.name}: {status}  ({progress.status()})")


def _ready(t: Job, done, failures) -> str:
    """'run', 'wait' or 'skip' (a dependency failed)."""
    if any(a in failures for a in t.after):
        return "skip"
    return "run" if all(a in done for a in t.after) else "wait"


def _run_local(todo, done, failures, records_dir, workers, ray_address, threads, log,
               progress: Progress) -> None:
    import torch

    prev = torch.get_num_threads()
    try:
        pending = list(todo)
        while pending:
            progressed = False
            for t in list(pending):
                state = _ready(t, done, failures)
                if state == "wait":
                    continue
                pending.remove(t)
                progressed = True
                if state == "skip":
                    failures[t.name] = "not run: a job it depends on failed"
                    log(f"[job] {t.name}: not run (a job it depends on failed)")
                    continue
                progress.start(t.name)
                rec, err, secs = _execute(t.fn, t.kwargs, threads)
                _finish(t, rec, err, secs, done, failures, records_dir, log, progress)
            if not progressed:  # a cycle: cannot happen with names checked, but never hang
                raise ConfigError(f"jobs {[t.name for t in pending]} wait on each other")
    finally:
        progress.close()
        torch.set_num_threads(prev)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--workers > 1 or --ray-address needs the `ray` package; install "
                          "the project (pip install -e .) or run with --workers 1") from None
    return ray


def _start_ray(workers: int, ray_address: str | None) -> bool:
    """Start (or join) Ray unless it runs already; True when this call started it."""
    import os

    from mechinterp_icr.config.rounding import ROUNDING_VARS

    ray = _import_ray()
    if ray.is_initialized():
        return False
    # the workers round like this process (--rounding): set before they load torch
    env = {k: os.environ[k] for k in ROUNDING_VARS if os.environ.get(k)}
    extra = {"runtime_env": {"env_vars": env}} if env else {}
    if ray_address:
        ray.init(address=ray_address, log_to_driver=False, **extra)
    else:
        # address="local": always a new local instance, never a cluster that an earlier
        # `ray start` left recorded in Ray's temp folder
        ray.init(address="local", num_cpus=workers, include_dashboard=False,
                 log_to_driver=False, **extra)
    return True


def _killed_for_memory(e: BaseException) -> bool:
    """A Ray task ended by Ray's memory monitor (``ray.exceptions.OutOfMemoryError``)."""
    return any(c.__name__ == "OutOfMemoryError" and "ray" in c.__module__
               for c in type(e).__mro__)


def _ray_error_line(name: str, e: BaseException, retried: bool) -> str:
    """One line for a job that Ray could not finish (its messages span many lines)."""
    if _killed_for_memory(e):
        again = " again after one retry" if retried else ""
        return (f"job {name} was killed by Ray's memory monitor{again} (the machine ran out "
                "of memory); rerun with fewer --workers")
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first[:300]}"


def gpu_share(n_gpus: float, slots: int) -> float:
    """The GPUs each of ``slots`` concurrent Ray tasks asks for so that all of them fit on
    ``n_gpus`` whole GPUs at once: Ray serves a fractional request from one GPU, so each GPU
    takes ``ceil(slots / n_gpus)`` tasks, each asking ``1 / ceil(slots / n_gpus)`` (rounded
    down to Ray's resource precision, 1e-4; at most one whole GPU: a job uses one device);
    0 without GPUs. One GPU and two workers: 0.5 each; two GPUs and three workers: 0.5."""
    gpus = int(n_gpus)
    if gpus <= 0 or slots <= 0:
        return 0.0
    per_gpu = -(-int(slots) // gpus)  # ceil
    return int(10_000 / per_gpu) / 10_000


def _run_ray(todo, done, failures, records_dir, workers, ray_address, threads, log,
             progress: Progress) -> None:
    ray = _import_ray()
    started = _start_ray(workers, ray_address)
    try:
        pending = list(todo)
        running: dict[Any, Job] = {}
        # at most as many jobs in flight as there are CPUs to run them: the rest wait here
        # in plan order (the longest first), and "running" on the progress line is true
        resources = ray.cluster_resources()
        slots = workers if ray_address is None else max(
            1, int(resources.get("CPU", workers)))
        # the local Ray's GPUs are shared by the workers; on a cluster none are asked for (a
        # GPU share would keep every job off the nodes without a GPU)
        share = gpu_share(resources.get("GPU", 0), slots) if ray_address is None else 0.0
        remote = ray.remote(num_cpus=1, num_gpus=share, max_retries=0)(_execute)
        retried: set[str] = set()  # jobs resubmitted once after Ray's memory monitor
        while pending or running:
            for t in list(pending):
                if len(running) >= slots:
                    break
                state = _ready(t, done, failures)
                if state == "wait":
                    continue
                pending.remove(t)
                if state == "skip":
                    failures[t.name] = "not run: a job it depends on failed"
                    log(f"[job] {t.name}: not run (a job it depends on failed)")
                    continue
                running[remote.remote(t.fn, t.kwargs, threads)] = t
                progress.start(t.name)
            if not running:
                if pending:
                    raise ConfigError(f"jobs {[t.name for t in pending]} wait on each other")
                break
            ready = []
            while not ready:  # the progress line ticks while the jobs run
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                progress.tick()
            for ref in ready:
                t = running.pop(ref)
                try:
                    rec, err, secs = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a killed worker, lost node
                    if _killed_for_memory(e) and t.name not in retried:
                        # jobs are idempotent (a record is written only at the end)
                        retried.add(t.name)
                        log(f"[job] {t.name}: killed by Ray's memory monitor; retrying it "
                            "once")
                        running[remote.remote(t.fn, t.kwargs, threads)] = t
                        continue
                    rec, err, secs = None, _ray_error_line(t.name, e, t.name in retried), 0.0
                _finish(t, rec, err, secs, done, failures, records_dir, log, progress)
    finally:
        progress.close()
        if started:
            ray.shutdown()


# --------------------------------------------------------------------------------------------
# Progress: jobs done / total, the running jobs and an ETA
# --------------------------------------------------------------------------------------------
DEFAULT_JOB_SECONDS = 60.0  # the estimate of a job nothing is known about


def job_kind(name: str) -> str:
    """A job name with its numbers replaced by ``#`` (``ir/sample/n128/seed3`` ->
    ``ir/sample/n#/seed#``): jobs of one kind take roughly as long as each other."""
    return re.sub(r"\d+(\.\d+)?", "#", name)


def job_twin(name: str) -> str:
    """A job name with its seed replaced by ``#`` (``ir/sample/n128/seed3`` ->
    ``ir/sample/n128/seed#``): the same job on another seed, which takes about as long
    (IR-5 at n = 4096 takes 30 times its n = 128 job, so the kind alone misleads)."""
    return re.sub(r"seed\d+", "seed#", name)


def expected_seconds(jobs: list[Job], known: dict[str, float]) -> dict[str, float]:
    """Each job's expected duration: ``known[name]`` (the seconds its stored record took in
    an earlier run, even under other inputs; :func:`run_jobs` reads them with the records),
    else the mean of the known jobs that differ from it only in the seed (:func:`job_twin`),
    else of the known jobs of its kind (:func:`job_kind`), else of every known job, else
    :data:`DEFAULT_JOB_SECONDS`."""
    by_twin: dict[str, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    for name, secs in known.items():
        by_twin.setdefault(job_twin(name), []).append(secs)
        by_kind.setdefault(job_kind(name), []).append(secs)
    overall = (sum(known.values()) / len(known)) if known else DEFAULT_JOB_SECONDS
    return {t.name: known.get(t.name, _mean(by_twin.get(job_twin(t.name)), _mean(
        by_kind.get(job_kind(t.name)), overall))) for t in jobs}


def _mean(values: list[float] | None, default: float) -> float:
    return sum(values) / len(values) if values else default


def _clock(secs: float) -> str:
    secs = max(0, int(round(secs)))
    h, rem = divmod(secs, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class Progress:
    """The progress of a run of jobs: done / total, the running jobs with how long each has
    run, and an ETA from the jobs' expected durations (:func:`expected_seconds`; a finished
    job's kind updates the estimate of the others of its kind that have no record). On a
    terminal one line updates in place; elsewhere the status rides on each job's log line."""

    def __init__(self, todo: list[Job], expected: dict[str, float], workers: int,
                 stream=None, clock: Callable[[], float] = time.monotonic,
                 measured: set[str] | frozenset[str] = frozenset()):
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock, self.workers = clock, max(1, int(workers))
        self.expected = dict(expected)
        self.pending = [t.name for t in todo]
        self.total, self.n_done = len(todo), 0
        self.running: dict[str, float] = {}
        self.took: dict[str, list[float]] = {}
        # jobs whose expected duration is their own measurement (a stored record, the
        # reference run): only the same job finishing on another seed in this run updates it
        self.measured = frozenset(measured)
        self._width = 0

    def start(self, name: str) -> None:
        if name in self.pending:
            self.pending.remove(name)
        self.running[name] = self.clock()
        self.tick()

    def finish(self, name: str, seconds: float) -> None:
        self.running.pop(name, None)
        self.n_done += 1
        twin, kind = job_twin(name), job_kind(name)
        self.took.setdefault(twin, []).append(float(seconds))
        self.took.setdefault(kind, []).append(float(seconds))
        for other in self.pending:  # what this run measured beats an estimate: the same
            # job on other seeds first, else the kind while none of its twins has finished
            if job_twin(other) == twin:
                self.expected[other] = _mean(self.took[twin], DEFAULT_JOB_SECONDS)
            elif (job_kind(other) == kind and job_twin(other) not in self.took
                  and other not in self.measured):
                self.expected[other] = _mean(self.took[kind], DEFAULT_JOB_SECONDS)
        self._clear()

    def eta(self) -> float:
        """Seconds left: the expected work still to do spread over the workers, and at least
        the longest expected remainder of a running job."""
        now = self.clock()
        left_running = [max(0.0, self.expected.get(n, DEFAULT_JOB_SECONDS) - (now - t0))
                        for n, t0 in self.running.items()]
        work = sum(self.expected.get(n, DEFAULT_JOB_SECONDS) for n in self.pending)
        return max((work + sum(left_running)) / self.workers, max(left_running, default=0.0))

    def status(self) -> str:
        """``12/189 done, 2 running, ETA 23m10s``."""
        return (f"{self.n_done}/{self.total} done, {len(self.running)} running, "
                f"ETA {_clock(self.eta())}")

    def line(self) -> str:
        """The terminal line: the status and the running jobs with their times."""
        now = self.clock()
        run = ", ".join(f"{n} {_clock(now - t0)}" for n, t0 in self.running.items())
        return f"[jobs] {self.status()}" + (f" | {run}" if run else "")

    def tick(self) -> None:
        if not self.tty:
            return
        text = self.line()
        cols = shutil.get_terminal_size((120, 20)).columns - 1
        text = text[:cols]
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def _clear(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def close(self) -> None:
        self._clear()


# --------------------------------------------------------------------------------------------
# Typed job records
# --------------------------------------------------------------------------------------------
class RecordError(ValueError):
    """A stored job record does not have its kind's keys."""


def record_field(name: str, key: str | None = None, **kw):
    """A :class:`Record` field stored under ``key`` (default: the field's name); with a
    ``default`` the key may be absent from a stored record."""
    return field(metadata={"key": key or name}, **kw)


@dataclass(frozen=True)
class Record:
    """Base of the typed job records: a frozen dataclass per kind of job (subclasses declare
    ``KIND`` and their fields with :func:`record_field`), written as plain JSON by the job
    (:meth:`to_json`) and read back by the summary (:meth:`read`), so a renamed key fails
    where the record is read, naming the kind and the keys."""

    KIND: ClassVar[str] = ""

    @classmethod
    def _keys(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("key", f.name) for f in dataclasses.fields(cls)}

    @classmethod
    def _required(cls) -> set[str]:
        return {f.metadata.get("key", f.name) for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}

    @classmethod
    def read(cls, data: dict[str, Any]):
        """The record from its stored JSON; a RecordError naming the keys when a required
        key is missing or an unknown one is present."""
        keys = cls._keys()
        if not isinstance(data, dict) or not cls._required() <= set(data) or \
                not set(data) <= set(keys.values()):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise RecordError(f"a {cls.KIND!r} job record must have the keys "
                              f"{sorted(cls._required())} (optional: "
                              f"{sorted(set(keys.values()) - cls._required())}), it has {got}")
        return cls(**{name: data[key] for name, key in keys.items() if key in data})

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types, exactly as it reads back from its stored file (a
        summary from the returned record, a Ray worker's, or a resumed run's file is the
        same); an optional field left at None is not written."""
        opt = set(self._keys().values()) - self._required()
        raw = {key: getattr(self, name) for name, key in self._keys().items()
               if not (key in opt and getattr(self, name) is None)}
        return json.loads(json.dumps(raw, default=json_default))
