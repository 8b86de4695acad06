"""Measure once, decide many times: every verdict recomputed from the measurements a
reproduction stored, under the registered specs, without training (``icr redecide``).

A claim in ``summary.json`` keeps what was *measured*: its per-seed metrics (``per_seed``),
each control's per-seed values (``controls[].per_seed``), the measurement-side checks
(``extra_checks``: enough values of K or lam were measured), the values the measurement could
not read (``unreadable``: metric -> seed -> why) and, where the quantity could not be measured
at all, the reason (``not_measurable``). What a claim's spec computes from those before
deciding (``derived`` per-seed metrics, ``pooled`` metrics over all seeds, seeds a registered
rule makes unreadable such as CR-8's headroom) is recomputed too. Everything *decided* (each
condition's ``met``, each control's ``meets_rule`` / ``as_expected``, the verdict, its reason,
the headline, the mean and interval of the headline metric) is a pure function of those
measurements and the claim's spec in the registry (:mod:`.registry`), and this module
recomputes it.

So a rule change (a threshold, an operator, a seed rule, a control added or dropped) is one
edit of the registry and ``icr redecide OUT``: the conditions and controls are the registry's,
evaluated on the stored values. A condition or control on a metric the run did not store is
evaluated as missing (no number, no evidence: the claim cannot hold) and
:func:`redecide_summary` lists it in ``unmeasured``, so a new metric says plainly that it needs
a rerun. What a rule change cannot reach without a rerun: a registered *setting* inside a
measurement (a sample size, a training budget, a target a metric is computed against); those
change what is measured.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Mapping

from mechinterp_icr.claims.protocol import MIN_SEEDS, ClaimSpec, evaluate_control
from mechinterp_icr.claims.registry import REGISTRY, registered_id
from mechinterp_icr.claims.summary import Claim, claim_key

__all__ = ["DECIDED", "differences", "rebuild_claim", "redecide_claim", "redecide_summary"]

# what a claim entry holds that is decided (recomputed here) rather than measured
DECIDED = ("statement", "verdict", "holds", "verdict_reason", "headline", "conditions",
           "controls", "mean",
           "ci95", "ci95_clipped", "metric", "metric_range", "threshold", "registered",
           "derived", "pooled", "rerun", "fragile")
# what a published summary says about its rounding rerun (claims.rerun.attach_rerun): attached
# again from the rerun's own summary, never carried over from the stored entry
RERUN_FIELDS = ("rerun", "fragile")

# the reason evaluate_control appends to a control's note when it has no value on some seed;
# stripped before the control is evaluated again so the note is not repeated
_WHY = re.compile(r"(?:; )?(?:not measured in this run|no value on seeds \[[^\]]*\])$")


def _control_values(cs, stored: Mapping[str, Any], spec: ClaimSpec, claim_id: str
                    ) -> tuple[dict[str, Any], str] | None:
    """(per-seed values, note) of the registered control ``cs`` from what the run stored: the
    stored control of the same name and metric, else one of the same metric under another name
    (a control renamed or split), else the metric in the claim's per-seed (or derived)
    metrics; None when the run has no value of the control's metric anywhere. Derived metrics
    are derived under ``claim_id`` (a variant such as ``CR-1 (shared tokens)`` may derive
    them by its own rule)."""
    metric = cs.condition.metric
    ctrls = [k for k in stored.get("controls") or [] if isinstance(k, dict)]
    per_seed = stored.get("per_seed") if isinstance(stored.get("per_seed"), Mapping) else {}
    derived = spec.derive(claim_id, per_seed)[0] if spec.derive is not None else {}
    if any(metric in d for d in derived.values()):  # the spec computes it: recompute
        named = [k for k in ctrls if k.get("name") == cs.name]
        note = _WHY.sub("", str(named[0].get("note") or "")) if named else ""
        return {str(s): derived.get(str(s), {}).get(metric) for s in per_seed}, note
    same = [k for k in ctrls if k.get("name") == cs.name and k.get("metric") in (None, metric)]
    same = same or [k for k in ctrls if k.get("metric") == metric]
    if same:
        k = same[0]
        per_seed = k.get("per_seed") if isinstance(k.get("per_seed"), Mapping) else {}
        note = _WHY.sub("", str(k.get("note") or "")) if k.get("name") == cs.name else ""
        return dict(per_seed), note
    vals = {str(s): ({**m, **derived.get(str(s), {})} if isinstance(m, Mapping) else {}
                     ).get(metric) for s, m in per_seed.items()}
    if all(v is None for v in vals.values()):
        return None
    return vals, ""


def _controls(spec: ClaimSpec, stored: Mapping[str, Any], claim_id: str):
    """The spec's controls evaluated on the stored values of each (:func:`_control_values`;
    a control the run did not measure is evaluated on no values: not measured)."""
    out = []
    for cs in spec.controls:
        got = _control_values(cs, stored, spec, claim_id)
        per_seed, note = got if got is not None else ({}, "")
        out.append(evaluate_control(cs, per_seed, note))
    return out


def rebuild_claim(claim_id: str, stored: Mapping[str, Any],
                  registry: Mapping[str, ClaimSpec] = REGISTRY) -> Claim | None:
    """The :class:`Claim` of the stored entry under ``registry``: its measurements with the
    spec's conditions and controls (None for an unregistered claim)."""
    rid = registered_id(claim_id, registry)
    if rid is None:
        return None
    spec = registry[rid]
    per_seed = stored.get("per_seed") if isinstance(stored.get("per_seed"), Mapping) else {}
    claim = Claim.from_spec(
        spec, copy.deepcopy(dict(per_seed)), controls=_controls(spec, stored, str(claim_id)),
        extra_checks={str(k): bool(v) for k, v in (stored.get("extra_checks") or {}).items()},
        statement=spec.statement,  # the statement words the registered rule
        notes=str(stored.get("notes") or ""), figure=stored.get("figure"),
        details=copy.deepcopy(stored.get("details") or {}),
        not_measurable=str(stored.get("not_measurable") or ""),
        unreadable={str(m): {str(s): str(r) for s, r in v.items()}
                    for m, v in (stored.get("unreadable") or {}).items() if isinstance(v, Mapping)},
        min_seeds=int(stored.get("min_seeds") or MIN_SEEDS))
    claim.id = str(claim_id)
    return claim


def redecide_claim(claim_id: str, stored: Mapping[str, Any], seeds,
                   registry: Mapping[str, ClaimSpec] = REGISTRY) -> dict[str, Any]:
    """The claim entry ``stored`` with everything decided recomputed under ``registry`` from
    its measurements over ``seeds`` (the run's seeds). An unregistered claim is returned
    unchanged."""
    claim = rebuild_claim(claim_id, stored, registry)
    kept = {k: v for k, v in stored.items() if k not in RERUN_FIELDS}
    if claim is None:
        return kept
    return {**kept, **claim.to_dict(seeds)}


def _unmeasured(claim_id: str, stored: Mapping[str, Any],
                registry: Mapping[str, ClaimSpec]) -> list[str]:
    """The registered metrics of ``claim_id`` that its stored measurements do not have on any
    seed (a rule on a new metric: it needs a rerun)."""
    rid = registered_id(claim_id, registry)
    if rid is None:
        return []
    spec = registry[rid]
    per_seed = stored.get("per_seed") if isinstance(stored.get("per_seed"), Mapping) else {}
    have = {m for v in per_seed.values() if isinstance(v, Mapping) for m in v}
    if spec.derive is not None:
        derived, pooled = spec.derive(claim_id, per_seed)
        have |= {m for v in derived.values() for m in v} | set(pooled)
    out = [c.metric for c in spec.conditions if c.metric not in have]
    for cs in spec.controls:
        if _control_values(cs, stored, spec, claim_id) is None:
            out.append(f"control {cs.name!r} ({cs.condition.metric})")
    return out


def redecide_summary(summary: Mapping[str, Any], registry: Mapping[str, ClaimSpec] = REGISTRY
                     ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """(the summary with every registered claim redecided, {claim id: registered metrics or
    controls the stored run did not measure}). The measurements, tables, configs, timings and
    provenance are kept as stored."""
    seeds = [str(s) for s in summary.get("seeds") or []]
    claims = summary.get("claims") or {}
    new_claims, unmeasured = {}, {}
    for cid, c in sorted(claims.items(), key=claim_key):
        if not isinstance(c, Mapping):
            new_claims[cid] = c
            continue
        new_claims[cid] = redecide_claim(cid, c, seeds or None, registry)
        missing = _unmeasured(cid, c, registry)
        if missing:
            unmeasured[cid] = missing
    kept = {k: v for k, v in summary.items() if k != "rerun"}
    return {**kept, "claims": new_claims, "tables": _tables(summary, registry)}, unmeasured


def _tables(summary: Mapping[str, Any], registry: Mapping[str, ClaimSpec]) -> Any:
    """The stored tables with every table a spec computes (``ClaimSpec.tables``) recomputed
    from its claim's stored per-seed measurements; the others as stored."""
    tables = summary.get("tables")
    if not isinstance(tables, Mapping):
        return tables
    out = dict(tables)
    for cid, c in (summary.get("claims") or {}).items():
        rid = registered_id(str(cid), registry) if isinstance(c, Mapping) else None
        spec = registry.get(rid) if rid is not None else None
        per_seed = c.get("per_seed") if isinstance(c, Mapping) else None
        if spec is None or spec.tables is None or not isinstance(per_seed, Mapping):
            continue
        for name, entries in spec.tables(str(cid), per_seed).items():
            if isinstance(out.get(name), Mapping):
                out[name] = {**out[name], **entries}
    return out


def _same(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return True
        return math.isclose(fa, fb, rel_tol=tol, abs_tol=tol)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b))
    return a == b


def differences(stored: Mapping[str, Any], redecided: Mapping[str, Any],
                tol: float = 1e-12) -> list[str]:
    """One line per decided field of a claim whose stored value is not the redecided one
    (``icr redecide --check``); numbers compare within ``tol``."""
    out = []
    if not _same(stored.get("rerun"), redecided.get("rerun"), tol):
        out.append("summary: its rerun record is not what the attached rerun gives")
    t_old, t_new = stored.get("tables") or {}, redecided.get("tables") or {}
    for name in sorted(set(t_old) | set(t_new)):
        if not _same(t_old.get(name), t_new.get(name), tol):
            out.append(f"summary: table {name!r} differs from what the specs give")
    old, new = stored.get("claims") or {}, redecided.get("claims") or {}
    for cid in sorted(set(old) | set(new), key=lambda c: claim_key((c,))):
        a, b = old.get(cid), new.get(cid)
        if not isinstance(a, Mapping) or not isinstance(b, Mapping):
            if a != b:
                out.append(f"{cid}: not a claim entry")
            continue
        for key in DECIDED:
            if not _same(a.get(key), b.get(key), tol):
                if key in ("verdict", "holds", "headline", "verdict_reason"):
                    out.append(f"{cid}: {key} stored {a.get(key)!r}, the specs give "
                               f"{b.get(key)!r}")
                else:
                    out.append(f"{cid}: {key} differs from what the specs give")
    return out
