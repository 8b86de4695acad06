"""Each job's seconds from a reproduction's records: what the next run's ETA starts from.

``python -m mechinterp_icr.viz.publish`` writes ``figures/job_seconds.json`` from the published
run's ``out/jobs`` records (:func:`write_job_seconds`); ``icr reproduce --eta-from FILE``
(``make reproduce`` passes the published file) reads it (:func:`read_job_seconds`) so that a
fresh output folder, which holds no records yet, starts its ETA from the jobs' measured
durations instead of a default. Only the ETA reads it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mechinterp_icr.config import ConfigError
from mechinterp_icr.store.io import JSONFileError, atomic_write_json, read_json_file

__all__ = ["job_seconds", "read_job_seconds", "record_seconds", "write_job_seconds"]

MAX_SECONDS_BYTES = 16 * 1024**2  # a published file of a few hundred jobs is a few KiB


def record_seconds(data: Any) -> float | None:
    """The ``seconds`` a job record (``jobs.run_jobs`` writes them) took: a finite,
    non-negative float, else None (no record, a damaged one, or no such field)."""
    try:
        secs = float(data["seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    return secs if math.isfinite(secs) and secs >= 0 else None


def job_seconds(records_dir: str | Path) -> dict[str, float]:
    """``{job name: seconds}`` of every stored record under ``records_dir`` (damaged or
    foreign files are left out)."""
    out = {}
    for path in sorted(Path(records_dir).rglob("*.json")):
        try:
            data = read_json_file(path)
        except JSONFileError:
            continue
        secs = record_seconds(data)
        if secs is not None and isinstance(data.get("name"), str):
            out[data["name"]] = secs
    return out


def write_job_seconds(records_dir: str | Path, path: str | Path,
                      source: str | None = None) -> Path:
    """Write :func:`job_seconds` of ``records_dir`` to ``path`` as
    ``{"source": ..., "seconds": {name: seconds}}`` (what ``icr reproduce --eta-from`` reads)."""
    secs = job_seconds(records_dir)
    atomic_write_json(Path(path), {"source": source, "seconds": secs})
    return Path(path)


def read_job_seconds(path: str | Path) -> dict[str, float]:
    """The ``seconds`` of a file :func:`write_job_seconds` wrote; ``ConfigError`` naming the
    file and what is wrong otherwise."""
    try:  # a regular file of bounded size and depth (never /dev/zero or a FIFO)
        data = read_json_file(path, MAX_SECONDS_BYTES)
    except JSONFileError as e:
        raise ConfigError(f"--eta-from = {str(path)!r} is not allowed: it is not a readable "
                          f"JSON file ({e}); expected a job_seconds.json written by "
                          "publishing a reproduction (figures/job_seconds.json)") from None
    secs = data.get("seconds") if isinstance(data, dict) else None
    ok = isinstance(secs, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
        and math.isfinite(v) and v >= 0 for k, v in secs.items())
    if not ok:
        raise ConfigError(f"--eta-from = {str(path)!r} is not allowed: its field 'seconds' "
                          "must map job names to finite non-negative seconds "
                          "({\"cr/seed0/train\": 120.5, ...})")
    return {k: float(v) for k, v in secs.items()}
