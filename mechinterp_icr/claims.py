"""The reproduction summary shared by every claim (CR-*, IR-*).

``summary.json`` has a top-level ``claims`` object keyed by claim id; each claim has a
``statement``, ``per_seed`` metrics, the ``metric`` that carries the verdict, its ``mean`` and
``ci95`` over seeds, the ``threshold`` (with its comparison) and the verdict ``holds``.
Stage timings, peak memory and package versions sit beside it. Writes are atomic.
"""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechinterp_icr.store.io import atomic_write_json
from mechinterp_icr.store.provenance import git_revision, package_versions, peak_memory_mb

__all__ = ["Claim", "Summary", "ci95", "claim_key", "format_claim_table"]


def ci95(values) -> tuple[float, float]:
    """Two-sided 95% Student-t interval of the mean over seeds ((v, v) for a single value)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return (float("nan"), float("nan"))
    n = len(vals)
    mean = sum(vals) / n
    if n == 1:
        return (mean, mean)
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return (mean - half, mean + half)


def _cmp(value: float, op: str, threshold: float) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return {">=": value >= threshold, "<=": value <= threshold, ">": value > threshold,
            "<": value < threshold}[op]


@dataclass
class Claim:
    """One paper claim checked by a number against a threshold, over several seeds.

    ``per_seed`` maps seed -> dict of metrics; ``metric`` names the metric that decides the
    verdict. The default verdict is that the *mean over seeds* passes the threshold; with
    ``rule='all_seeds'`` every seed must pass. ``extra_checks`` are further conditions
    (name -> bool) that must also be true for the claim to hold (e.g. the second half of a
    two-part claim); they are reported beside the verdict.
    """

    id: str
    statement: str
    metric: str
    op: str
    threshold: float
    per_seed: dict[str, dict[str, Any]] = field(default_factory=dict)
    rule: str = "mean"
    extra_checks: dict[str, bool] = field(default_factory=dict)
    notes: str = ""
    figure: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def values(self) -> list[float]:
        return [m[self.metric] for m in self.per_seed.values() if self.metric in m]

    def to_dict(self) -> dict[str, Any]:
        vals = self.values()
        mean = sum(vals) / len(vals) if vals else float("nan")
        lo, hi = ci95(vals)
        if self.rule == "all_seeds":
            main_ok = bool(vals) and all(_cmp(v, self.op, self.threshold) for v in vals)
        else:
            main_ok = _cmp(mean, self.op, self.threshold)
        holds = bool(main_ok and all(self.extra_checks.values()))
        return {
            "statement": self.statement,
            "metric": self.metric,
            "per_seed": self.per_seed,
            "mean": mean,
            "ci95": [lo, hi],
            "threshold": {"op": self.op, "value": self.threshold, "rule": self.rule},
            "extra_checks": self.extra_checks,
            "holds": holds,
            "n_seeds": len(vals),
            "notes": self.notes,
            "figure": self.figure,
            "details": self.details,
        }


class Summary:
    """Collects claims, stage timings and tables; writes ``summary.json`` (merging by claim id)."""

    def __init__(self, target: str, profile: str, seeds: list[int]):
        self.target = target
        self.profile = profile
        self.seeds = list(seeds)
        self.claims: dict[str, Claim] = {}
        self.timings: dict[str, float] = {}
        self.tables: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self._t0 = time.perf_counter()
        self.echo = True

    def add(self, claim: Claim) -> Claim:
        self.claims[claim.id] = claim
        return claim

    @contextmanager
    def stage(self, name: str):
        """Time a stage (accumulating over repeats) and print a progress line when it ends."""
        t = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t
            self.timings[name] = self.timings.get(name, 0.0) + dt
            if self.echo:
                print(f"[{self.target} {time.perf_counter() - self._t0:6.0f}s] {name}: "
                      f"{dt:.1f}s", file=sys.stderr, flush=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "profile": self.profile,
            "seeds": self.seeds,
            "claims": {k: c.to_dict() for k, c in sorted(self.claims.items(), key=claim_key)},
            "tables": self.tables,
            "config": self.config,
            "timings_s": {**self.timings, "total": time.perf_counter() - self._t0},
            "peak_memory_mb": peak_memory_mb(),
            "versions": package_versions(),
            "git_revision": git_revision(),
        }

    def write(self, out_dir: str | Path, merge: bool = True) -> Path:
        """Write ``out_dir/summary.json``; claims of other targets already there are kept."""
        out = Path(out_dir) / "summary.json"
        data = self.to_dict()
        if merge and out.exists():
            try:
                old = json.loads(out.read_text())
            except (OSError, json.JSONDecodeError):
                old = {}
            claims = {**old.get("claims", {}), **data["claims"]}
            data["claims"] = dict(sorted(claims.items(), key=claim_key))
            data["tables"] = {**old.get("tables", {}), **data["tables"]}
            timings = dict(old.get("timings_by_target", {}))
            timings[self.target] = data["timings_s"]
            data["timings_by_target"] = timings
            data["target"] = ",".join(sorted(set(old.get("target", "").split(",") +
                                                  [self.target]) - {""}))
        else:
            data["timings_by_target"] = {self.target: data["timings_s"]}
        atomic_write_json(out, data)
        return out

    def table(self) -> str:
        return format_claim_table({k: c.to_dict() for k, c in self.claims.items()})


def claim_key(item):
    cid = item[0]
    prefix, _, num = cid.partition("-")
    return (prefix, int(num) if num.isdigit() else 0, cid)


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    return f"{v:.4g}"


def format_claim_table(claims: dict[str, dict]) -> str:
    """Readable claim table: id, verdict, metric, mean [ci95], threshold, seeds; each claim's
    extra checks follow it as indented lines (they do not widen the columns)."""
    head = ("claim", "verdict", "metric", "mean [95% CI]", "threshold", "seeds")
    rows: list[tuple[tuple[str, ...], list[str]]] = []
    for cid, c in sorted(claims.items(), key=claim_key):
        lo, hi = c["ci95"]
        verdict = "HOLDS" if c["holds"] else "DOES NOT HOLD"
        th = c["threshold"]
        every = " (every seed)" if th.get("rule") == "all_seeds" else ""
        main = (cid, verdict, c["metric"], f"{_fmt(c['mean'])} [{_fmt(lo)}, {_fmt(hi)}]",
                f"{th['op']} {_fmt(th['value'])}{every}", str(c["n_seeds"]))
        checks = [f"    [{'ok' if ok else 'FAILED'}] {name}"
                  for name, ok in c.get("extra_checks", {}).items()]
        rows.append((main, checks))
    widths = [max([len(head[i])] + [len(r[0][i]) for r in rows]) for i in range(len(head))]

    def line(cells):
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    for main, checks in rows:
        out.append(line(main))
        out.extend(checks)
    return "\n".join(out)
