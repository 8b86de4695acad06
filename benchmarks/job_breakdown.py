"""Where the time goes inside jobs: one seed's jobs run in this process, each sampled to
say how much of it is forward computation, backward, optimizer, evaluation, data and I/O.

    python benchmarks/job_breakdown.py --jobs 'ir/sample/n1024/seed0' 'ir/seed0/ir6'
    python benchmarks/job_breakdown.py --jobs 'cr/cr4-lam/0.3/seed0' --profile quick --seed 0
    python benchmarks/job_breakdown.py --jobs 'ir/sample/n*' --markdown   # fnmatch patterns

The jobs are those of ``icr reproduce all`` for one seed (the registered settings of the
profile); a selected job's dependencies run first (reported too, marked ``dep``). Records go
to a temporary folder (``--out`` keeps them, e.g. to compare two code versions' records). A
sampler thread reads the job's Python stack every ``--interval`` seconds (torch releases
the GIL inside its kernels, so a sample lands in the Python frame that called the kernel)
and files the sample under a category (:func:`classify`):

- backward: torch.autograd (``loss.backward()``);
- optimizer: torch.optim (``opt.step()``, the schedulers);
- I/O: safetensors, json, the package's store;
- evaluation: a function of this package named like an evaluation (eval, metric, accuracy,
  retrieval, probe, score, ceiling, ...) below the innermost training loop, or a
  TransformerLens cache run inside one (a stage named like an evaluation that trains first
  does not make its training steps evaluation);
- data: a sampler of the package's tasks (``sample*``: drawing sequences);
- forward: everything else (the model, the loss, the training loop's own work).

Each job runs with one torch thread, as a reproduction worker does. Timings on these
machines are noisy: compare shares, and compare two code versions in one run of this script
each on an idle machine (``stage_profile.py`` gives the whole run's stage totals).
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

CATEGORIES = ("forward", "backward", "optimizer", "evaluation", "data", "I/O")
_EVAL = re.compile(r"(^|_)(eval\w*|evaluate|metrics?|accuracy|accuracies|retrieval|probes?|"
                   r"scores?|ceiling|expected|heldout|held_out)($|_)")

# the training loops of mechinterp_icr/training/: what they run between evaluations is training
_LOOPS = frozenset({"train_phase", "_train_steps", "pgd_fast", "pgd_hooked"})


def classify(frames: list[tuple[str, str]]) -> str:
    """The category of one stack sample, ``frames`` = (filename, function) innermost first.

    Backward and optimizer anywhere in the stack win, then safetensors / json (I/O). Otherwise
    the package's frames are read from the innermost out, up to the first frame of a training
    loop (:data:`_LOOPS` in ``mechinterp_icr/training/``: a training step's own work is
    forward, whatever called the loop): an evaluation-named function there is evaluation (a
    model run inside an evaluation callback), a task sampler data, the store I/O. A function
    named like an evaluation *above* the training loop (a stage ``..._metrics`` that trains
    and then reads numbers) does not make its training evaluation."""
    files = [f.replace("\\", "/") for f, _ in frames]
    if any("/torch/autograd/" in f for f in files):
        return "backward"
    if any("/torch/optim/" in f for f in files):
        return "optimizer"
    if any("/safetensors/" in f or f.endswith("/json/__init__.py") for f in files):
        return "I/O"
    for f, fn in ((f, fn) for f, (_, fn) in zip(files, frames) if "/mechinterp_icr/" in f):
        if _EVAL.search(fn):
            return "evaluation"
        if "/mechinterp_icr/tasks/" in f and fn.lstrip("_").startswith("sample"):
            return "data"
        if "/mechinterp_icr/store/" in f:
            return "I/O"
        if "/mechinterp_icr/training/" in f and fn in _LOOPS:
            break
    return "forward"


class Sampler:
    """Samples one thread's stack every ``interval`` seconds into category counts."""

    def __init__(self, thread_id: int, interval: float):
        self.tid, self.interval = thread_id, interval
        self.counts = dict.fromkeys(CATEGORIES, 0.0)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self.tid)
            stack = []
            while frame is not None:
                stack.append((frame.f_code.co_filename, frame.f_code.co_name))
                frame = frame.f_back
            # weighted by the time since the last sample: while the job runs Python code the
            # sampler waits for the GIL, and the wait belongs to what it then sees
            now = time.perf_counter()
            self.counts[classify(stack)] += now - last
            last = now

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def select(jobs, patterns: list[str]):
    """The jobs matching any pattern, with every job they depend on, in plan order."""
    by = {t.name: t for t in jobs}
    want = {t.name for t in jobs if any(fnmatch.fnmatch(t.name, p) for p in patterns)}
    need, stack = set(want), list(want)
    while stack:
        for a in by[stack.pop()].after:
            if a not in need:
                need.add(a)
                stack.append(a)
    order = [t for t in jobs if t.name in need]
    done: list = []
    while order:  # dependencies first, else plan order
        t = next(t for t in order if all(a in {d.name for d in done} for a in t.after))
        order.remove(t)
        done.append(t)
    return done, want


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", required=True, help="job names or fnmatch patterns")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interval", type=float, default=0.005, help="sampling period, seconds")
    ap.add_argument("--out", default=None, help="keep the job records here")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)

    from mechinterp_icr import runner
    from mechinterp_icr.jobs import record_path, set_threads
    from mechinterp_icr.store.io import atomic_write_json

    set_threads(1)
    sys.setswitchinterval(0.001)  # the sampler gets the GIL within a millisecond
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="job-breakdown-"))
    plan = runner.pooled_plan([(t, runner.resolve_config(t, a.profile)) for t in ("cr", "ir")],
                              out, [a.seed])
    jobs, want = select(plan, a.jobs)
    if not want:
        print(f"error: no job of seed {a.seed} matches {a.jobs}; names look like "
              f"{', '.join(t.name for t in plan[:3])}", file=sys.stderr)
        return 2
    rows = []
    for t in jobs:
        with Sampler(threading.get_ident(), a.interval) as s:
            t0 = time.perf_counter()
            rec = t.fn(**t.kwargs)
            secs = time.perf_counter() - t0
        atomic_write_json(record_path(out / "jobs", t.name), {"name": t.name, "seconds": secs,
                                                       "record": rec})
        total = sum(s.counts.values()) or 1
        rows.append((t.name, t.name not in want, secs,
                     {c: s.counts[c] / total for c in CATEGORIES}))
    head = ["job", "seconds", *CATEGORIES]
    if a.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, dep, secs, share in rows:
        label = name + (" (dep)" if dep else "")
        cells = [f"{share[c]:.0%}" for c in CATEGORIES]
        if a.markdown:
            print(f"| {label} | {secs:.1f} | " + " | ".join(cells) + " |")
        else:
            print(f"{label:40s} {secs:8.1f} s  " + "  ".join(
                f"{c} {v}" for c, v in zip(CATEGORIES, cells)))
    print(f"records in {out / 'jobs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
