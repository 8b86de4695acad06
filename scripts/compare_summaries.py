"""Compare two reproduction summaries (``summary.json``): every claim's verdict and numbers,
and every table, leaving out what legitimately differs between two runs of the same code
(timings, memory, package versions, git revisions and code states, run paths).

    python scripts/compare_summaries.py BEFORE/summary.json AFTER/summary.json [--tol 0]
        [--claims CR-1,IR-5] [--target cr|ir] [--max-lines 200]

Prints one line per difference (``path: before -> after``) and a count; exits 0 when the
two agree (numbers within ``--tol``, absolute; 0 = exactly equal), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

# keys whose values differ between two runs of the same code
VOLATILE = {"timings_s", "timings_by_target", "peak_memory_mb", "versions", "git_revision",
            "config_by_target",
            "code_state", "code_state_at_write", "code_state_by_target", "seconds",
            "wall_s", "elapsed_s", "CR phase seconds", "run_dir", "path"}
# the tables of the code revision behind each job's result (their name said "task" before
# the unit of work was called a job: both wordings are skipped, so old and new summaries
# compare)
CODE_REVISION_TABLES = ("code revision of each job result", "code revision of each task result")


def differences(a: Any, b: Any, tol: float = 0.0, path: str = "") -> list[str]:
    """Every place where ``a`` and ``b`` differ, as ``path: a -> b`` lines (dict keys in
    :data:`VOLATILE`, keys ending in ``_s`` or ``seconds`` and the tables of the code
    revision behind each job's result, :data:`CODE_REVISION_TABLES`, are skipped)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k in VOLATILE or str(k).endswith(("_s", "seconds", *CODE_REVISION_TABLES)):
                continue
            p = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(f"{p}: {'<absent>' if k not in a else _short(a[k])} -> "
                           f"{'<absent>' if k not in b else _short(b[k])}")
            else:
                out.extend(differences(a[k], b[k], tol, p))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items -> {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in
                differences(x, y, tol, f"{path}[{i}]")]
    if _number(a) and _number(b):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return []
        return [] if abs(fa - fb) <= tol else [f"{path}: {a!r} -> {b!r}"]
    return [] if a == b else [f"{path}: {_short(a)} -> {_short(b)}"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _short(v: Any, n: int = 80) -> str:
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def settings(config: Any) -> dict[str, Any]:
    """A summary's config as ``{dotted key: value}`` under the present key names: the IR keys
    of summaries written before the IR config had sections are renamed
    (``experiments.ir.config.FLAT_KEYS``) and a CR-3 sweep setting in its command-line form
    is read as the ``SweepSetting`` it names, so a summary compares with a newer one."""
    from mechinterp_icr.config import to_dict
    from mechinterp_icr.experiments.cr.config import SweepSetting
    from mechinterp_icr.experiments.ir.config import FLAT_KEYS
    from mechinterp_icr.runner import config_keys

    flat = {FLAT_KEYS.get(k, k): v for k, v in config_keys(config or {})}
    if isinstance(flat.get("sweep"), list):
        flat["sweep"] = [to_dict(SweepSetting.parse(s)) if isinstance(s, str) else s
                         for s in flat["sweep"]]
    return flat


def _target_only(summary: dict, target: str) -> dict:
    """The claims and tables of one target (``cr`` or ``ir``), its config."""
    pre = target.upper() + "-"
    configs = summary.get("config_by_target") or {}
    return {**summary,
            "claims": {k: v for k, v in summary.get("claims", {}).items() if k.startswith(pre)},
            "tables": {k: v for k, v in summary.get("tables", {}).items()
                       if k.upper().startswith(target.upper())},
            "target": target,
            "config": configs.get(target, summary.get("config"))}


def compare(before: dict, after: dict, tol: float = 0.0,
            claims: list[str] | None = None, target: str | None = None) -> list[str]:
    """Differences between two summaries: the verdict table first, then every number (the
    configs compared key by key under the present key names, :func:`settings`); ``target``:
    only that target's claims, tables and config."""
    if target:
        before, after = _target_only(before, target), _target_only(after, target)
    before = {**before, "config": settings(before.get("config"))}
    after = {**after, "config": settings(after.get("config"))}
    if claims:
        before = {**before, "claims": {k: v for k, v in before.get("claims", {}).items()
                                       if k in claims}, "tables": {}}
        after = {**after, "claims": {k: v for k, v in after.get("claims", {}).items()
                                     if k in claims}, "tables": {}}
    verdicts = [f"verdict {cid}: {before['claims'].get(cid, {}).get('verdict')} -> "
                f"{after['claims'].get(cid, {}).get('verdict')}"
                for cid in sorted(set(before.get("claims", {})) | set(after.get("claims", {})))
                if before["claims"].get(cid, {}).get("verdict")
                != after["claims"].get(cid, {}).get("verdict")]
    keep = ("claims", "tables", "seeds", "profile", "target", "config")
    return verdicts + differences({k: before.get(k) for k in keep},
                                  {k: after.get(k) for k in keep}, tol)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--tol", type=float, default=0.0, help="absolute tolerance for numbers")
    ap.add_argument("--claims", default="", help="only these claims (comma-separated)")
    ap.add_argument("--target", choices=("cr", "ir"), default=None,
                    help="only this target's claims, tables and config")
    ap.add_argument("--max-lines", type=int, default=200)
    a = ap.parse_args(argv)
    try:
        before, after = (json.loads(Path(p).read_text()) for p in (a.before, a.after))
    except (OSError, ValueError) as e:
        print(f"error: cannot read a summary: {e}", file=sys.stderr)
        return 2
    diffs = compare(before, after, a.tol, [c for c in a.claims.split(",") if c] or None,
                    a.target)
    for line in diffs[: a.max_lines]:
        print(line)
    if len(diffs) > a.max_lines:
        print(f"... {len(diffs) - a.max_lines} more")
    n_claims = len(set(before.get("claims", {})) | set(after.get("claims", {})))
    print(f"{len(diffs)} differences over {n_claims} claims and "
          f"{len(set(before.get('tables', {})) | set(after.get('tables', {})))} tables "
          f"(tolerance {a.tol:g})")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
