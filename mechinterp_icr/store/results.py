"""Analysis results kept per selection and options, the latest one easy to find.

An analysis writes ``RUN/analyses/<name>.json`` (and its figures ``<name>.png`` /
``<name>.html``): that is always the latest result. Each result is also kept under a name
that carries what it was computed on, ``<name>--<selection>-<hash>.<ext>``: ``<selection>``
the ``--checkpoints`` value made file-safe, ``<hash>`` the first 8 hex digits of the SHA-256
of every option (selection, prompt count, seed, flags; not the run, ``--csv`` nor
``--threads``, which do not change the result), so a result of another selection or other
options never replaces it, and the same command run again replaces its own.
``RUN/analyses/index.json`` lists, per analysis, the latest kept name and every kept result
with its options, files and time (:func:`kept_results`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from mechinterp_icr.store.io import (
    JSONFileError,
    atomic_write_bytes,
    atomic_write_json,
    read_json_file,
    read_regular_file,
)

__all__ = ["INDEX", "IGNORED_OPTIONS", "result_options", "result_tag", "keep_result",
           "kept_results"]

INDEX = "index.json"
IGNORED_OPTIONS = frozenset({"run", "csv", "threads", "out"})
_MAX_FIGURE_BYTES = 512 * 2**20


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def result_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options that change a result (:data:`IGNORED_OPTIONS` left out), JSON-plain."""
    return {k: _plain(v) for k, v in sorted(options.items()) if k not in IGNORED_OPTIONS}


def result_tag(options: dict[str, Any]) -> str:
    """``<selection>-<hash>`` of an analysis's options (the module docstring)."""
    opts = result_options(options)
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:8]
    sel = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(opts.get("checkpoints", "run"))).strip("_.")
    return f"{sel[:40] or 'run'}-{digest}"


def kept_results(analyses_dir: str | Path) -> dict[str, Any]:
    """The index: ``{name: {"latest": file, "results": [{"tag", "options", "files",
    "written"}]}}`` ({} when there is none or it cannot be read)."""
    try:
        data = read_json_file(Path(analyses_dir) / INDEX)
    except (OSError, JSONFileError):
        return {}
    return data if isinstance(data, dict) else {}


def keep_result(analyses_dir: str | Path, name: str, options: dict[str, Any],
                files: list[str | Path]) -> list[Path]:
    """Copy each latest file ``<name>.<ext>`` of ``files`` to its kept name (the module
    docstring) and record it in the index; returns the kept paths. A kept result of the same
    tag is replaced (the same analysis run again), another tag's never."""
    folder = Path(analyses_dir)
    tag = result_tag(options)
    kept = []
    for f in files:
        f = Path(f)
        if not f.is_file():
            continue
        dest = folder / f"{name}--{tag}{''.join(f.suffixes[-1:])}"
        atomic_write_bytes(dest, read_regular_file(f, _MAX_FIGURE_BYTES))
        kept.append(dest)
    index = kept_results(folder)
    entry = index.setdefault(name, {"latest": None, "results": []})
    results = [r for r in entry.get("results", []) if r.get("tag") != tag]
    old = next((r for r in entry.get("results", []) if r.get("tag") == tag), None)
    names = sorted({*(old or {}).get("files", []), *(p.name for p in kept)})
    results.append({"tag": tag, "options": result_options(options), "files": names,
                    "written": time.strftime("%Y-%m-%dT%H:%M:%S")})
    json_name = f"{name}--{tag}.json"
    if any(p.name == json_name for p in kept):
        entry["latest"] = json_name
    entry["results"] = results
    atomic_write_json(folder / INDEX, index)
    return kept

