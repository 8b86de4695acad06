"""Check a reproduction's ``summary.json`` against the claim protocol (``icr check``).

The protocol checks (the project specification's checker, SPEC section 0): every claim has a
verdict in {holds, does not hold, inconclusive}, at least one control, per-seed values for at
least ``min_seeds`` seeds, a ``holds`` flag agreeing with the verdict, and no ``holds`` while a
negative control meets its condition, a positive control misses it or a control could not be
measured; each control's stored ``as_expected`` is what its kind and ``meets_rule`` give.

The registry checks (this project's, beyond the protocol): a claim whose id names a registered
claim (``CR-2`` and its variant ``CR-2 (shared tokens)`` both name ``CR-2``) carries every
registered condition and control with the registered metric, operator, threshold and seed rule;
each stored ``met`` / ``meets_rule`` is what the rule gives on the stored per-seed values; and
``holds`` has every condition met and every control as expected. A summary edited by hand, or
written by code whose thresholds drifted from the registry, fails here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mechinterp_icr.claims.protocol import (
    VARIANTS,
    Condition,
    evaluate_condition,
    evaluate_control,
    stored_control_ok,
)
from mechinterp_icr.claims.registry import REGISTRY, metric_range, registered_id

__all__ = ["VERDICTS", "check_summary", "registered_id", "summary_shape_problem"]

VERDICTS = ("holds", "does not hold", "inconclusive")


def _protocol(cid: str, c: Mapping[str, Any], min_seeds: int) -> list[str]:
    """The protocol checks of one claim (SPEC section 0)."""
    out = []
    v = c.get("verdict")
    if v not in VERDICTS:
        out.append(f"{cid}: verdict {v!r}")
    if (v == "holds") != (c.get("holds") is True):
        out.append(f"{cid}: `holds` disagrees with verdict {v!r}")
    per_seed = c.get("per_seed") or {}
    if len(per_seed) < min_seeds:
        out.append(f"{cid}: {len(per_seed)} seeds (< {min_seeds})")
    ctrls = c.get("controls")
    if not isinstance(ctrls, list) or not ctrls:
        return out + [f"{cid}: no controls"]
    for k in ctrls:
        if not isinstance(k, dict) or not {"name", "kind", "meets_rule"} <= set(k):
            out.append(f"{cid}: control without name/kind/meets_rule: {str(k)[:80]}")
            continue
        ok = stored_control_ok(k)  # unmeasured (meets_rule None) misbehaves
        if not ok and v == "holds":
            out.append(f"{cid}: holds although {k['kind']} control {k['name']!r} has "
                       f"meets_rule={k['meets_rule']}")
        if "as_expected" in k and k["as_expected"] is not ok:
            out.append(f"{cid}: control {k['name']!r} stores as_expected="
                       f"{k['as_expected']!r}, its kind and meets_rule give {ok}")
    return out


def _same_rule(stored: Mapping[str, Any], cond: Condition) -> bool:
    try:
        return (stored.get("metric") == cond.metric and stored.get("op") == cond.op
                and math.isclose(float(stored.get("threshold")), cond.threshold)
                and stored.get("rule") == cond.rule
                and math.isclose(float(stored.get("min_fraction", 1.0)), cond.min_fraction))
    except (TypeError, ValueError):
        return False


def _recomputed(stored: Mapping[str, Any], cond: Condition) -> bool | None:
    """What the registered rule gives on the stored per-seed values, the seeds stored as
    unreadable and (a pooled rule) the stored pooled value: True, False or None."""
    unread = stored.get("unreadable") if isinstance(stored.get("unreadable"), Mapping) else {}
    unread = {s: r for s, r in unread.items() if r != "no value"}
    return evaluate_condition(cond, stored.get("per_seed") or {}, unread,
                              stored.get("pooled_value"), metric_range(cond.metric))["met"]


def _registry(cid: str, c: Mapping[str, Any]) -> list[str]:
    """The registry checks of one claim whose id names a registered claim."""
    spec = REGISTRY[registered_id(cid)]
    out = []
    stored = {s.get("metric"): s for s in c.get("conditions") or [] if isinstance(s, dict)}
    all_met = True
    for cond in spec.conditions:
        s = stored.get(cond.metric)
        if s is None:
            out.append(f"{cid}: registered condition {cond.describe()!r} is missing")
            all_met = False
            continue
        if not _same_rule(s, cond):
            out.append(f"{cid}: condition on {cond.metric} is stored as {s.get('op')} "
                       f"{s.get('threshold')} ({s.get('rule')}); registered: {cond.describe()}")
        met = _recomputed(s, cond)
        if s.get("met") is not met:
            out.append(f"{cid}: condition on {cond.metric} stored met={s.get('met')}, its "
                       f"per-seed values give met={met}")
        all_met = all_met and met is True
    ctrls = {k.get("name"): k for k in c.get("controls") or [] if isinstance(k, dict)}
    all_expected = True
    for spec_c in spec.controls:
        k = ctrls.get(spec_c.name)
        if k is None:
            out.append(f"{cid}: registered {spec_c.kind} control {spec_c.name!r} is missing")
            all_expected = False
            continue
        if k.get("kind") != spec_c.kind or not _same_rule(k, spec_c.condition):
            out.append(f"{cid}: control {spec_c.name!r} is stored as {k.get('kind')} "
                       f"{k.get('metric')} {k.get('op')} {k.get('threshold')}; registered: "
                       f"{spec_c.kind} {spec_c.condition.describe()}")
        res = evaluate_control(spec_c, k.get("per_seed") or {})
        if k.get("meets_rule") != res.meets_rule:
            out.append(f"{cid}: control {spec_c.name!r} stored meets_rule="
                       f"{k.get('meets_rule')}, its per-seed values give {res.meets_rule}")
        all_expected = all_expected and res.ok
    if c.get("verdict") == "holds" and not (all_met and all_expected):
        out.append(f"{cid}: holds although the registered rule is not met on the stored "
                   "values (a condition unmet or a control not as expected)")
    return out


def _field_problem(where: str, entry: Mapping[str, Any], key: str, kind, what: str):
    v = entry.get(key)
    return None if v is None or isinstance(v, kind) else f"{where}: {key!r} is not {what}"


SUMMARY_EXPECTED = "expected the summary.json that `icr reproduce` writes"


def read_summary(path: str | Path) -> dict[str, Any]:
    """The summary.json at ``path``, read with the bounded reader (a regular file, at most
    64 MiB, nested at most 100 levels) and of the shape :func:`check_summary` and the redecide
    read. Raises ``ConfigError`` with one line naming the file and the reason otherwise."""
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.store.io import JSONFileError, read_json_file

    try:
        data = read_json_file(path)
    except JSONFileError as e:
        raise ConfigError(f"summary {e}; {SUMMARY_EXPECTED}") from None
    shape = summary_shape_problem(data)
    if shape:
        raise ConfigError(f"summary {path} cannot be read: {shape}; {SUMMARY_EXPECTED}")
    return data


def summary_shape_problem(summary: Any) -> str | None:
    """Why ``summary`` (parsed JSON) does not have the shape :func:`check_summary` reads
    (None: it has): a mapping whose ``claims`` is a mapping of claim entries or a list of
    entries with an ``id``; each entry a mapping whose ``per_seed`` is a mapping, whose
    ``controls`` and ``conditions`` are lists, and each of those a mapping with a mapping
    ``per_seed``. What ``icr check`` refuses as "cannot be read" (exit 2) rather than report
    as protocol problems (exit 1)."""
    if not isinstance(summary, Mapping):
        return f"it is a JSON {type(summary).__name__}, not a mapping"
    claims = summary.get("claims")
    if isinstance(claims, list):
        if not all(isinstance(c, Mapping) and isinstance(c.get("id"), str) for c in claims):
            return "'claims' is a list whose entries are not all mappings with an 'id'"
        claims = {c["id"]: c for c in claims}
    if not isinstance(claims, Mapping):
        return f"'claims' is {type(claims).__name__ if 'claims' in summary else 'missing'}, " \
               "not a mapping of claims"
    for cid, c in claims.items():
        if not isinstance(c, Mapping):
            continue  # reported by check_summary as "not a claim entry"
        where = f"claim {str(cid)[:40]!r}"
        bad = _field_problem(where, c, "per_seed", Mapping, "a mapping")
        for key in ("controls", "conditions"):
            bad = bad or _field_problem(where, c, key, list, "a list")
            for i, k in enumerate(c.get(key) if isinstance(c.get(key), list) else []):
                if isinstance(k, Mapping):
                    bad = bad or _field_problem(f"{where} {key}[{i}]", k, "per_seed", Mapping,
                                                "a mapping")
        if bad:
            return bad
    return None


def check_summary(summary: Mapping[str, Any], min_seeds: int = 5,
                  registry: bool = True) -> list[str]:
    """Every protocol problem of ``summary`` (a parsed ``summary.json``), one line each; with
    ``registry`` also the registry checks of the registered claims."""
    claims = summary.get("claims", {}) if isinstance(summary, Mapping) else {}
    if isinstance(claims, list):
        claims = {c.get("id"): c for c in claims}
    if not claims:
        return ["no claims in the summary"]
    problems = []
    rec = summary.get("rerun") if isinstance(summary, Mapping) else None
    if isinstance(rec, Mapping):
        flagged = sorted(str(cid) for cid, c in claims.items()
                         if isinstance(c, Mapping) and c.get("fragile") is True)
        if sorted(str(x) for x in rec.get("fragile") or []) != flagged:
            problems.append(f"summary: its rerun record lists fragile {rec.get('fragile')!r}, "
                            f"the claims flag {flagged!r}")
    for cid, c in sorted(claims.items(), key=lambda kv: str(kv[0])):
        if not isinstance(c, Mapping):
            problems.append(f"{cid}: not a claim entry")
            continue
        problems += _protocol(cid, c, min_seeds)
        if isinstance(rec, Mapping):
            problems += _rerun(cid, c)
        elif "rerun" in c or "fragile" in c:
            problems.append(f"{cid}: carries a rerun verdict or fragile flag but the summary "
                            "names no rounding rerun (its 'rerun' record is missing)")
        base = str(cid).partition(" (")[0]  # a misspelt variant still names its claim
        if registry and registered_id(cid):
            problems += _registry(cid, c)
            problems += _decided(cid, c, summary.get("seeds"))
        elif registry and registered_id(base):
            problems.append(f"{cid}: names registered claim {base} "
                            "with a suffix that is no variant's (variants: "
                            + ", ".join(f"({v})" for v in VARIANTS.values())
                            + "), so its registered rules would not be checked")
    return problems


def _decided(cid: str, c: Mapping[str, Any], seeds) -> list[str]:
    """The stored verdict against what the claim's stored measurements give under its
    registered spec (``icr redecide``: derived statistics, unreadable seeds, extra checks and
    the not-measurable reason included), so a hand-edited curve, value or verdict is found
    whatever its verdict."""
    from mechinterp_icr.claims.redecide import redecide_claim

    try:
        new = redecide_claim(cid, c, [str(s) for s in seeds] if isinstance(seeds, list)
                             else None)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        return [f"{cid}: its measurements cannot be redecided ({type(e).__name__}: {e})"]
    if new.get("verdict") != c.get("verdict"):
        return [f"{cid}: stored verdict {c.get('verdict')!r}, its stored measurements under "
                f"the registered spec give {new.get('verdict')!r} (icr redecide)"]
    return []


def _rerun(cid: str, c: Mapping[str, Any]) -> list[str]:
    """A summary with a rounding rerun attached: the claim carries the rerun's verdict and a
    ``fragile`` flag that says whether the two verdicts differ (``claims.rerun``)."""
    r = c.get("rerun")
    if not isinstance(r, Mapping) or "verdict" not in r or not isinstance(c.get("fragile"), bool):
        return [f"{cid}: the summary has a rounding rerun but the claim has no rerun verdict "
                "or fragile flag (icr redecide attaches them)"]
    if c["fragile"] != (r.get("verdict") != c.get("verdict")):
        return [f"{cid}: fragile is {c['fragile']} but the verdict is {c.get('verdict')!r} "
                f"and the rerun's {r.get('verdict')!r}"]
    return []


def rerun_file_problems(summary: Mapping[str, Any], rerun: Mapping[str, Any]) -> list[str]:
    """The attached rerun's own summary against what ``summary`` says of it: a rerun of the
    same profile and seeds under another rounding (:func:`.rerun.pairing_problem`), and each
    claim's stored rerun verdict the rerun's verdict."""
    from mechinterp_icr.claims.rerun import pairing_problem

    out = []
    why = pairing_problem(summary, rerun)
    if why:
        out.append(f"summary: {why}")
    other = rerun.get("claims") if isinstance(rerun.get("claims"), Mapping) else {}
    for cid, c in (summary.get("claims") or {}).items():
        if not isinstance(c, Mapping) or not isinstance(c.get("rerun"), Mapping):
            continue
        want = other.get(cid, {}).get("verdict") if isinstance(other.get(cid), Mapping) else None
        if c["rerun"].get("verdict") != want:
            out.append(f"{cid}: stored rerun verdict {c['rerun'].get('verdict')!r}, the "
                       f"attached rerun's summary says {want!r}")
    return out
