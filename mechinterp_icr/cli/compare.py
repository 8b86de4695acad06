"""Two reproduction summaries compared (``icr compare A B``): the verdicts that differ, then
every number that differs beyond a tolerance, largest first, per claim and seed.

What legitimately differs between two runs of the same code is left out: timings, memory,
package versions, git revisions and code states, run paths, the tables of the code revision
behind each job's result, and the rerun a published summary carries (``rerun``, ``fragile``:
what one summary says about another run). Configs compare key by key under the present key
names (:func:`settings`), so a summary compares with an older one.

The same comparison ends every ``icr reproduce``: a fresh run against the committed
``figures/summary.json`` (:func:`against_published`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = ["Difference", "against_published", "compare", "differences", "published_summary",
           "report_lines", "settings", "verdict_changes"]

# keys whose values differ between two runs of the same code
VOLATILE = {"timings_s", "timings_by_target", "peak_memory_mb", "versions", "git_revision",
            "config_by_target", "rounding", "rerun", "fragile",
            "code_state", "code_state_at_write", "code_state_by_target", "seconds",
            "wall_s", "elapsed_s", "CR phase seconds", "run_dir", "path"}
# the tables of the code revision behind each job's result (their name said "task" before
# the unit of work was called a job: both wordings are skipped, so old and new summaries
# compare)
CODE_REVISION_TABLES = ("code revision of each job result", "code revision of each task result")


# the fields of a claim entry, which end its id in a path (an id may hold dots or spaces)
_CLAIM_FIELDS = (".per_seed", ".conditions", ".controls", ".derived", ".pooled", ".details",
                 ".mean", ".ci95", ".unreadable", ".headline", ".verdict", ".notes",
                 ".not_measurable", ".metric", ".threshold", ".registered", ".statement",
                 ".extra_checks", ".holds", ".n_seeds", ".figure", ".min_seeds")


@dataclass(frozen=True)
class Difference:
    """One place where two summaries differ: its dotted ``path``, the two values, and for two
    numbers their absolute difference ``size`` (None otherwise)."""

    path: str
    before: Any
    after: Any
    size: float | None = None

    def __str__(self) -> str:
        if self.size is None:
            return f"{self.path}: {_short(self.before)} -> {_short(self.after)}"
        return f"{self.path}: {self.before!r} -> {self.after!r}"

    @property
    def claim(self) -> str | None:
        """The claim id when the difference is inside ``claims.<id>``."""
        if not self.path.startswith("claims."):
            return None
        rest = self.path[len("claims."):]
        cuts = [rest.index(k) for k in _CLAIM_FIELDS if k in rest]
        return rest[: min(cuts)] if cuts else rest.split(".")[0]


def _walk(a: Any, b: Any, tol: float, path: str, out: list[Difference]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k in VOLATILE or str(k).endswith(("_s", "seconds", *CODE_REVISION_TABLES)):
                continue
            p = f"{path}.{k}" if path else str(k)
            if k not in a or k not in b:
                out.append(Difference(p, a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                _walk(a[k], b[k], tol, p, out)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(Difference(path, f"{len(a)} items", f"{len(b)} items"))
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, tol, f"{path}[{i}]", out)
        return
    if _number(a) and _number(b):
        fa, fb = float(a), float(b)
        if (math.isnan(fa) and math.isnan(fb)) or (math.isinf(fa) and fa == fb):
            return
        size = abs(fa - fb)
        if not size <= tol:  # NaN against a number differs
            out.append(Difference(path, a, b, size if math.isfinite(size) else math.inf))
        return
    if a != b:
        out.append(Difference(path, a, b))


def differences(a: Any, b: Any, tol: float = 0.0, path: str = "") -> list[Difference]:
    """Every place where ``a`` and ``b`` differ (keys in :data:`VOLATILE`, keys ending in
    ``_s`` or ``seconds`` and the tables of :data:`CODE_REVISION_TABLES` skipped); numbers
    differ when they are more than ``tol`` apart."""
    out: list[Difference] = []
    _walk(a, b, tol, path, out)
    return out


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


def _target_only(summary: Mapping[str, Any], target: str) -> dict[str, Any]:
    """The claims and tables of one target (``cr`` or ``ir``), its config."""
    pre = target.upper() + "-"
    configs = summary.get("config_by_target") or {}
    return {**summary,
            "claims": {k: v for k, v in (summary.get("claims") or {}).items()
                       if k.startswith(pre)},
            "tables": {k: v for k, v in (summary.get("tables") or {}).items()
                       if k.upper().startswith(target.upper())},
            "target": target,
            "config": configs.get(target, summary.get("config"))}


def _verdict(summary: Mapping[str, Any], cid: str) -> Any:
    c = (summary.get("claims") or {}).get(cid)
    return c.get("verdict") if isinstance(c, Mapping) else None


def verdict_changes(before: Mapping[str, Any], after: Mapping[str, Any]
                    ) -> list[tuple[str, Any, Any]]:
    """(claim id, verdict before, verdict after) of every claim whose verdict differs (a
    claim in one summary only has verdict None in the other)."""
    from mechinterp_icr.claims import claim_key

    ids = set(before.get("claims") or {}) | set(after.get("claims") or {})
    return [(cid, _verdict(before, cid), _verdict(after, cid))
            for cid in sorted(ids, key=lambda c: claim_key((c,)))
            if _verdict(before, cid) != _verdict(after, cid)]


def _by_id(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` with its claims keyed by id (an old summary stores a list of claims)."""
    claims = summary.get("claims")
    if isinstance(claims, list):
        claims = {str(c.get("id")): c for c in claims if isinstance(c, Mapping)}
    return {**summary, "claims": claims if isinstance(claims, Mapping) else {}}


def _select(summary: Mapping[str, Any], claims: list[str] | None, target: str | None
            ) -> dict[str, Any]:
    summary = _by_id(summary)
    s = _target_only(summary, target) if target else dict(summary)
    s["config"] = settings(s.get("config"))
    if claims:
        s["claims"] = {k: v for k, v in (s.get("claims") or {}).items() if k in claims}
        s["tables"] = {}
    return s


def compare(before: Mapping[str, Any], after: Mapping[str, Any], tol: float = 0.0,
            claims: list[str] | None = None, target: str | None = None
            ) -> tuple[list[tuple[str, Any, Any]], list[Difference]]:
    """(the verdict changes, every other difference with numeric ones largest first) between
    two summaries; ``claims``: only those claims (no tables); ``target``: only that target's
    claims, tables and config."""
    a, b = _select(before, claims, target), _select(after, claims, target)
    keep = ("claims", "tables", "seeds", "profile", "target", "config")
    diffs = differences({k: a.get(k) for k in keep}, {k: b.get(k) for k in keep}, tol)
    diffs = [d for d in diffs if not (d.path.startswith("claims.") and
                                      d.path.endswith(".verdict"))]
    diffs.sort(key=lambda d: (d.size is not None, -(d.size or 0.0)))
    return verdict_changes(a, b), diffs


def report_lines(changed: list[tuple[str, Any, Any]], diffs: list[Difference],
                 tol: float = 0.0, max_lines: int = 40,
                 names: tuple[str, str] = ("A", "B")) -> list[str]:
    """What ``icr compare`` prints from :func:`compare`'s result: the verdicts that differ,
    the differences that are not numbers, the numbers that differ (largest first, at most
    ``max_lines``), and a count per claim with its largest difference."""
    lines = [f"verdicts that differ: {len(changed)}"]
    lines += [f"  {cid}: {v0} ({names[0]}) -> {v1} ({names[1]})" for cid, v0, v1 in changed]
    other = [d for d in diffs if d.size is None]
    numbers = [d for d in diffs if d.size is not None]
    if other:
        lines.append(f"other differences: {len(other)}")
        lines += [f"  {d}" for d in other[:max_lines]]
        if len(other) > max_lines:
            lines.append(f"  ... {len(other) - max_lines} more")
    lines.append(f"numbers that differ by more than {tol:g}: {len(numbers)}"
                 + (", largest first:" if numbers else ""))
    lines += [f"  {d} (by {d.size:.4g})" for d in numbers[:max_lines]]
    if len(numbers) > max_lines:
        lines.append(f"  ... {len(numbers) - max_lines} more")
    per_claim: dict[str, list[Difference]] = {}
    for d in numbers:
        if d.claim is not None:
            per_claim.setdefault(d.claim, []).append(d)
    if per_claim:
        lines.append("per claim (numbers that differ, the largest):")
        for cid, ds in sorted(per_claim.items(), key=lambda kv: -kv[1][0].size):
            lines.append(f"  {cid}: {len(ds)}, largest {ds[0].size:.4g} at {ds[0].path}")
    return lines


def published_summary() -> Path | None:
    """The committed ``figures/summary.json`` of the checkout this package runs from (an
    editable install), or None when there is none (an installed package)."""
    path = Path(__file__).resolve().parents[2] / "figures" / "summary.json"
    return path if path.is_file() else None


def against_published(summary: Mapping[str, Any], published: str | Path,
                      tol: float = 1e-9) -> list[str]:
    """The end of ``icr reproduce``: one line per claim whose verdict differs from the
    published summary (``figures/summary.json``) and one line counting the numbers that
    differ; nothing when the published summary is absent, unreadable or of another profile
    or seed set (then the two are not the same reproduction)."""
    from mechinterp_icr.claims.check import read_summary
    from mechinterp_icr.config import ConfigError

    path = Path(published)
    if not path.is_file():
        return []
    try:
        pub = read_summary(path)
    except ConfigError:
        return []
    if (pub.get("profile") != summary.get("profile")
            or [str(s) for s in pub.get("seeds") or []]
            != [str(s) for s in summary.get("seeds") or []]):
        return []
    mine, theirs = str(summary.get("target") or ""), str(pub.get("target") or "")
    if mine == theirs:
        target = None
    elif mine in ("cr", "ir") and mine in theirs.split(","):  # one paper of a full run
        target = mine
    else:
        return []
    changed, diffs = compare(pub, summary, tol, target=target)
    # what else differs between the two runs: only where nothing does is the machine to blame
    other = [f"{what} {a!r} there, {b!r} here" for what, a, b in (
        ("code state", _state(pub, target), _state(summary, target)),
        ("rounding", pub.get("rounding"), summary.get("rounding")))
        if a != b and a is not None]
    if any(d.path.startswith("config") for d in diffs):
        other.append("the config")
    cause = ("on this machine" if not other else "here; the runs also differ in "
             + ", ".join(other))
    lines = [f"{cid}: {v1 or 'absent'} here; {path}: {v0 or 'absent'} (the verdict differs "
             f"{cause})" for cid, v0, v1 in changed]
    n = sum(1 for d in diffs if d.size is not None)
    lines.append(f"{n} numbers and {len(diffs) - n} other values differ from {path} (numbers "
                 f"by more than {tol:g}); {len(changed)} verdicts differ")
    return lines


def _state(summary: Mapping[str, Any], target: str | None) -> Any:
    by = summary.get("code_state_by_target") or {}
    return by.get(target) if target and target in by else summary.get("code_state")
