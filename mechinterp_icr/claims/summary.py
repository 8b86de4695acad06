"""The reproduction summary shared by every claim (CR-*, IR-*).

``summary.json`` has a top-level ``claims`` object keyed by claim id; each claim has a
``statement``, ``per_seed`` metrics, the ``metric`` that carries the verdict, its ``mean`` and
``ci95`` over seeds, the ``threshold`` (with its comparison) and the verdict ``holds``.
Stage timings, peak memory and package versions sit beside it. Writes are atomic.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechinterp_icr.claims.headline import claim_headline, control_phrase, stored_condition
from mechinterp_icr.claims.intervals import CI_METHOD, interval
from mechinterp_icr.claims.protocol import (
    HOLDS,
    MIN_SEEDS,
    ClaimSpec,
    Condition,
    ControlResult,
    decide,
    evaluate_condition,
    stored_control_ok,
)
from mechinterp_icr.store.io import atomic_write_json
from mechinterp_icr.store.provenance import (
    code_state,
    git_revision,
    package_versions,
    peak_memory_mb,
)

__all__ = ["Claim", "Summary", "claim_key", "format_claim_table"]

@dataclass
class Claim:
    """One paper claim checked by numbers against registered conditions, over several seeds.

    Build it with :meth:`from_spec` from the registry (:mod:`.registry`): the spec's conditions
    are the rule (the first one is the headline ``metric``), ``controls`` are the measured
    controls (:func:`.protocol.evaluate_control`). ``extra_checks`` are further conditions
    (name -> bool) computed by the experiment; they count as part of the rule and are
    reported beside it. The verdict follows :func:`.protocol.decide`; ``holds`` is true only
    for the verdict ``holds``.

    The low-level constructor (``metric``/``op``/``threshold``/``rule``) is kept for claims
    that are not registered (tests, ad-hoc analyses); such a claim has no control and can at
    best be ``inconclusive``.
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
    controls: list[ControlResult] = field(default_factory=list)
    conditions: tuple[Condition, ...] = ()
    not_measurable: str = ""
    registered: bool = False
    min_seeds: int = MIN_SEEDS
    # measured: {metric: {seed ("*": every seed): why its value cannot be read}}
    unreadable: dict[str, dict[str, str]] = field(default_factory=dict)
    spec: ClaimSpec | None = None  # the registered spec (its derive / unreadable hooks)

    @classmethod
    def from_spec(cls, spec: ClaimSpec, per_seed: dict[str, dict[str, Any]], *,
                  controls: list[ControlResult] = (), extra_checks: dict[str, bool] | None = None,
                  statement: str | None = None, **kw) -> "Claim":
        h = spec.headline
        return cls(spec.id, statement or spec.statement, h.metric, h.op, h.threshold,
                   per_seed=per_seed, rule="all_seeds" if h.rule == "every_seed" else h.rule,
                   extra_checks=dict(extra_checks or {}), controls=list(controls),
                   conditions=tuple(spec.conditions), registered=True, spec=spec, **kw)

    def values(self, derived: dict[str, dict[str, Any]] | None = None) -> list[float]:
        """The headline metric per seed (a derived metric from the spec's ``derive``;
        ``derived``: :meth:`derived`'s per-seed metrics when the caller has them)."""
        derived = self.derived()[0] if derived is None else derived
        full = [{**m, **derived.get(str(s), {})} for s, m in self.per_seed.items()]
        return [m[self.metric] for m in full if self.metric in m]

    def _conditions(self) -> tuple[Condition, ...]:
        if self.conditions:
            return self.conditions
        rule = "every_seed" if self.rule == "all_seeds" else self.rule
        return (Condition(self.metric, self.op, self.threshold, rule),)

    def derived(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any],
                               dict[str, dict[str, str]]]:
        """(per-seed derived metrics, pooled metrics, unreadable seeds per metric): what the
        spec computes from the stored measurements (:class:`.protocol.ClaimSpec`'s ``derive``
        and ``unreadable``) merged with the measured ``unreadable``."""
        per, pooled = {}, {}
        unread = {m: dict(v) for m, v in self.unreadable.items()}
        if self.spec is not None and self.spec.derive is not None:
            per, pooled = self.spec.derive(self.id, self.per_seed)
        if self.spec is not None and self.spec.unreadable is not None:
            full = {s: {**m, **per.get(s, {})} for s, m in self.per_seed.items()}
            for m, seeds in self.spec.unreadable(self.id, full).items():
                unread.setdefault(m, {}).update(seeds)
        return per, pooled, unread

    def evaluate(self, seeds=None, derived=None) -> tuple[str, str, list[dict[str, Any]]]:
        """Verdict over ``seeds`` (the seeds the run asked for; default: those in
        ``per_seed``). A requested seed without a ``per_seed`` entry (its job failed or was
        skipped) has no value in any condition: it can never be dropped silently.
        ``derived``: :meth:`derived`'s result when the caller has it."""
        want = [str(s) for s in (seeds if seeds is not None else self.per_seed)]
        derived, pooled, unread = self.derived() if derived is None else derived
        full = {**{s: {} for s in want},
                **{str(k): {**v, **derived.get(str(k), {})} for k, v in self.per_seed.items()}}
        from mechinterp_icr.claims.registry import metric_range

        conds = [evaluate_condition(c, full, unread.get(c.metric), pooled.get(c.metric),
                                    metric_range(c.metric)) for c in self._conditions()]
        verdict, reason = decide(conds, self.extra_checks, self.controls, self.not_measurable,
                                 seeds=list(full), min_seeds=self.min_seeds)
        return verdict, reason, conds

    def to_dict(self, seeds=None) -> dict[str, Any]:
        from mechinterp_icr.claims.registry import metric_range

        dr = self.derived()  # once: the values, the verdict and the stored entry share it
        derived, pooled, _ = dr
        vals = [float(v) for v in self.values(derived) if v is not None]
        mean = sum(vals) / len(vals) if vals else float("nan")
        bounds = metric_range(self.metric)
        lo, hi, clipped = interval(vals, bounds)
        verdict, reason, conds = self.evaluate(seeds, dr)
        out = {
            "statement": self.statement,
            "metric": self.metric,
            "per_seed": self.per_seed,
            "mean": mean,
            "ci95": [lo, hi],
            "ci95_method": CI_METHOD,
            "metric_range": list(bounds) if bounds else None,
            "ci95_clipped": clipped,
            "threshold": {"op": self.op, "value": self.threshold, "rule": self.rule},
            "conditions": conds,
            "extra_checks": self.extra_checks,
            "controls": [c.to_dict() for c in self.controls],
            "verdict": verdict,
            "verdict_reason": reason,
            "not_measurable": self.not_measurable,
            "unreadable": self.unreadable,
            "derived": derived,
            "pooled": pooled,
            "min_seeds": self.min_seeds,
            "holds": verdict == HOLDS,
            "registered": self.registered,
            "n_seeds": len(self.per_seed),
            "notes": self.notes,
            "figure": self.figure,
            "details": self.details,
        }
        out["headline"] = claim_headline(self.id, out).text
        return out


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
        self.code_state = code_state()  # the code the run started with (see code_state_at_write)
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
        versions = package_versions()
        return {
            "target": self.target,
            "profile": self.profile,
            "seeds": self.seeds,
            "claims": {k: c.to_dict(self.seeds) for k, c in sorted(self.claims.items(),
                                                                    key=claim_key)},
            "tables": self.tables,
            "config": self.config,
            "timings_s": {**self.timings, "total": time.perf_counter() - self._t0},
            "peak_memory_mb": peak_memory_mb(),
            "versions": versions,
            "rounding": versions["rounding"],
            "git_revision": git_revision(),
            "code_state": self.code_state,
            "code_state_at_write": code_state(),
        }

    def write(self, out_dir: str | Path, merge: bool = True) -> Path:
        """Write ``out_dir/summary.json``; claims of other targets already there are kept, with
        the code state each target was reproduced at (``code_state_by_target``) and its config
        (``config_by_target``; ``config`` is the config of the target written last)."""
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
            configs = dict(old.get("config_by_target", {}))
            configs[self.target] = data["config"]
            data["config_by_target"] = configs
            data["target"] = ",".join(sorted(set(old.get("target", "").split(",") +
                                                  [self.target]) - {""}))
            # each target's claims keep the code state they were reproduced at
            states = dict(old.get("code_state_by_target") or {
                t: old.get("code_state") for t in old.get("target", "").split(",") if t})
            states[self.target] = data["code_state"]
            data["code_state_by_target"] = states
        else:
            data["timings_by_target"] = {self.target: data["timings_s"]}
            data["config_by_target"] = {self.target: data["config"]}
            data["code_state_by_target"] = {self.target: data["code_state"]}
        atomic_write_json(out, data)
        return out


def claim_key(item):
    """Sort key of a ``(claim id, ...)`` item: by prefix, then number, a variant (``CR-8
    (shared tokens)``) right after its default claim."""
    cid = item[0]
    prefix, _, rest = cid.partition("-")
    digits = "".join(itertools.takewhile(str.isdigit, rest))
    return (prefix, int(digits) if digits else 0, cid)


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    return f"{v:.4g}"


def format_claim_table(claims: dict[str, dict]) -> str:
    """Readable claim table: id, verdict, seeds and the headline (:func:`.headline.
    claim_headline`: the condition or control that decided the verdict, with its seed rule;
    the same text as the report's); each claim's extra checks and controls follow it as
    indented lines (they do not widen the columns)."""
    head = ("claim", "verdict", "seeds", "decided by")
    rows: list[tuple[tuple[str, ...], list[str]]] = []
    for cid, c in sorted(claims.items(), key=claim_key):
        verdict = c.get("verdict") or ("holds" if c["holds"] else "does not hold")
        verdict = verdict.upper()
        main = (cid, verdict, str(c.get("n_seeds", "")), claim_headline(cid, c).text)
        checks = [f"    [{'ok' if ok else 'FAILED'}] {name}"
                  for name, ok in c.get("extra_checks", {}).items()]
        checks += [f"    [{'ok' if stored_control_ok(k) else 'MISBEHAVED'}] "
                   + control_phrase(str(k.get("kind")), str(k.get("name")),
                                    stored_condition(k), k.get("per_seed") or {},
                                    k.get("meets_rule"), str(k.get("note") or ""))
                   for k in c.get("controls", [])]
        if c.get("verdict") == "inconclusive":
            checks.append(f"    ({c.get('verdict_reason', '')})")
        rows.append((main, checks))
    widths = [max([len(head[i])] + [len(r[0][i]) for r in rows]) for i in range(len(head))]

    def line(cells):
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths[:-1]) + "  " + "-" * len(head[-1])]
    for main, checks in rows:
        out.append(line(main))
        out.extend(checks)
    return "\n".join(out)
