"""A claim's headline: the condition that decided its verdict, in words, with its seed rule.

One function (:func:`claim_headline`) words it for the report (``viz.report``) and the claim
table (:func:`.summary.format_claim_table`), from the structure the protocol stores in
``summary.json`` (each condition's and control's metric, comparison, threshold and seed
rule, and its per-seed values), so the headline cannot disagree with the verdict:

- the claim holds -> its registered primary condition (the first);
- it does not hold -> the first unmet condition (or the first failed extra check);
- it is inconclusive -> the misbehaving (or unmeasured) control, the missing seeds, or the
  reason it is not measurable.

The decision order is :func:`.protocol.decisive`'s, the same the verdict is computed with; the
headline's ``verdict`` is recomputed from the stored results and ``agrees`` says whether it is
the stored verdict. A seed rule is worded as it is decided:

- every seed: the worst seed (the smallest value for ``>=``, the largest for ``<=``), e.g.
  ``every seed: max 0.054 on seed 0 > 0.02 (fails on 1 of 5 seeds: 0)``;
- mean: the mean with its 95% interval (:func:`.summary.interval`, inside the metric's
  declared range), e.g. ``mean over 5 seeds 0.957 [0.905, 1] >= 0.8``;
- fraction: how many seeds meet it, e.g. ``on >= 80% of seeds: 3 of 5 seeds >= 1, 4 needed
  (fails on seeds 1, 3)``.

A negative control misbehaves when it meets the condition it names (on any seed under the
every-seed rule): its headline names the seeds where it does, with the value furthest past the
threshold. A claim stored without conditions (an unregistered one) is read through its
``metric`` and ``threshold``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from mechinterp_icr.claims.protocol import (
    HOLDS,
    MIN_SEEDS,
    NOT_HOLD,
    Condition,
    ControlResult,
    bound_mean,
    compare,
    decisive,
    favourable_end,
    required_seeds,
)
from mechinterp_icr.claims.protocol import as_number as _num

__all__ = ["Headline", "claim_headline", "condition_phrase", "condition_text", "control_phrase",
           "deciding_entry", "stored_condition"]

_NEG_OP = {">=": "<", ">": "<=", "<=": ">", "<": ">="}
_RULE_WORDS = {"all_seeds": "every_seed", "every_seed": "every_seed", "mean": "mean",
               "fraction": "fraction", "pooled": "pooled"}


@dataclass(frozen=True)
class Headline:
    """``text``: the deciding condition or control in words; ``verdict``: the verdict the
    stored results give (``agrees``: it is the stored verdict); ``kind``: what decided it
    (:func:`.protocol.decisive`'s names); ``metric``: the deciding metric (None for a check,
    a seed count or a reason); ``control``: the deciding control's name when a control
    decided."""

    text: str
    verdict: str
    kind: str
    metric: str | None = None
    agrees: bool = True
    control: str | None = None  # the deciding control's name (two may share a metric)


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _seed_key(s: str):
    return (0, int(s), s) if str(s).lstrip("-").isdigit() else (1, 0, str(s))


def _seeds(seeds) -> str:
    return ", ".join(str(s) for s in sorted(seeds, key=_seed_key))


def _label(cond: Condition) -> str:
    return f"{cond.text} ({cond.metric})" if cond.text else cond.metric


def _values(per_seed: Mapping[str, Any]) -> dict[str, float | None]:
    return {str(s): _num(v) for s, v in sorted(per_seed.items(), key=lambda kv: _seed_key(kv[0]))}


def _extreme(vals: dict[str, float], largest: bool) -> tuple[str, float]:
    """(seed, value) of the largest (or smallest) value; the first seed on a tie."""
    best = None
    for s, v in vals.items():
        if best is None or (v > best[1] if largest else v < best[1]):
            best = (s, v)
    return best


def _interval(values: list[float], metric: str) -> tuple[float, float, bool]:
    from mechinterp_icr.claims.intervals import interval
    from mechinterp_icr.claims.registry import metric_range

    return interval(values, metric_range(metric))


def condition_phrase(cond: Condition, per_seed: Mapping[str, Any], *,
                     negative: bool = False, unreadable: Mapping[str, Any] | None = None,
                     pooled: Any = None) -> str:
    """``cond``'s seed rule applied to ``per_seed`` (seed -> value), in words, with the
    number that decides it. ``negative``: worded for a negative control, which misbehaves
    when it meets ``cond`` (under the every-seed rule: on any seed). ``unreadable`` (seed ->
    why; ``"*"``: every seed) names seeds that cannot be read: they are neither the deciding
    value nor counted as failing. ``pooled``: the one number of a ``pooled`` rule."""
    op, thr = cond.op, cond.threshold
    if cond.rule == "pooled":
        v = _num(pooled)
        if v is None:
            return "over the seeds together: cannot be computed"
        met = compare(v, op, thr)
        return (f"over the seeds together: {_f(v)} {op if met else _NEG_OP[op]} {thr:g}"
                + ("" if met else f" (needs {op} {thr:g})"))
    bad = {str(s): str(r) for s, r in (unreadable or {}).items()}
    if "*" in bad:
        return f"cannot be read ({bad['*']})"
    n_seeds, tail = len(per_seed), ""  # a fraction counts every seed, readable or not
    if bad:
        reasons = sorted(set(bad.values()))
        tail = (f"; cannot be read on seed{'s' if len(bad) > 1 else ''} {_seeds(list(bad))} "
                f"({'; '.join(reasons)})")
        per_seed = {s: v for s, v in per_seed.items() if str(s) not in bad}
        if not per_seed:
            return tail[2:]
    return _seed_rule_phrase(cond, per_seed, negative, n_seeds) + tail


def _seed_rule_phrase(cond: Condition, per_seed: Mapping[str, Any], negative: bool,
                      n_seeds: int | None = None) -> str:
    vals = _values(per_seed)
    n = len(vals)
    missing = [s for s, v in vals.items() if v is None]
    got = {s: v for s, v in vals.items() if v is not None}
    op, thr = cond.op, cond.threshold
    if not vals:
        return "no value on any seed"
    miss = f"no value on seed{'s' if len(missing) > 1 else ''} {_seeds(missing)}"
    ok = {s: compare(v, op, thr) for s, v in got.items()}
    if cond.rule == "mean":
        if missing:
            return f"mean over seeds: {miss}"
        mean = sum(got.values()) / len(got)
        lo, hi, _ = _interval(list(got.values()), cond.metric)
        met = compare(mean, op, thr)
        shown = op if met else _NEG_OP[op]
        tail = "" if met else f" (needs {op} {thr:g})"
        unread = (n_seeds or n) - n
        if unread and not met:  # decided at the unread seeds' best (protocol.evaluate_condition)
            from mechinterp_icr.claims.registry import metric_range

            span = metric_range(cond.metric)
            bound = bound_mean(list(got.values()), unread, op, span)
            if bound is not None:
                tail += (f"; {_f(bound)} even with the unread seed{'s' if unread > 1 else ''}"
                         f" at {favourable_end(op, span):g}")
        return f"mean over {n} seeds {_f(mean)} [{_f(lo)}, {_f(hi)}] {shown} {thr:g}{tail}"
    if cond.rule == "fraction":
        k, n = sum(ok.values()), max(n, n_seeds or 0)
        need = max(0, math.ceil(cond.min_fraction * n - 1e-9))
        fails = [s for s in got if not ok[s]]
        fail = (f"; fails on seed{'s' if len(fails) > 1 else ''} {_seeds(fails)}"
                if fails and k < need else "")
        return (f"on >= {cond.min_fraction:.0%} of seeds: {k} of {n} seeds {op} {thr:g} "
                f"({need} needed{fail})")
    # every seed
    if negative:  # misbehaves where it meets the condition
        hits = {s: v for s, v in got.items() if ok[s]}
        if missing:
            return f"every seed: {miss}"
        if not hits:
            s, v = _extreme(got, largest=op in (">=", ">"))
            word = "max" if op in (">=", ">") else "min"
            return (f"every seed must fail it: {word} {_f(v)} on seed {s} {_NEG_OP[op]} "
                    f"{thr:g}")
        s, v = _extreme(hits, largest=op in (">=", ">"))
        return (f"every seed must fail it, but {_f(v)} on seed {s} {op} {thr:g} (meets it on "
                f"{len(hits)} of {n} seeds: {_seeds(hits)})")
    if missing:
        return f"every seed: {miss}"
    low = op in (">=", ">")
    s, v = _extreme(got, largest=not low)
    word = "min" if low else "max"
    fails = [x for x in got if not ok[x]]
    if not fails:
        if len(set(got.values())) == 1:
            return f"every seed: {_f(v)} on all {n} seeds {op} {thr:g}"
        return f"every seed: {word} {_f(v)} on seed {s} {op} {thr:g}"
    return (f"every seed: {word} {_f(v)} on seed {s} {_NEG_OP[op]} {thr:g} (fails on "
            f"{len(fails)} of {n} seeds: {_seeds(fails)})")


def control_phrase(kind: str, name: str, cond: Condition | None, per_seed: Mapping[str, Any],
                   meets_rule: bool | None, note: str = "", *, with_name: bool = True) -> str:
    """A control's result in words: what it showed against the condition it names."""
    head = f"{kind} control '{name}'" if with_name else ""
    if meets_rule is None:
        body = "not measured" + (f" ({note})" if note else "")
        return f"{head} {body}".strip()
    if cond is None:
        return f"{head} {'met' if meets_rule else 'missed'} its condition".strip()
    phrase = condition_phrase(cond, per_seed, negative=kind == "negative")
    ok = (not meets_rule) if kind == "negative" else bool(meets_rule)
    verb = "as expected" if ok else ("shows the effect" if kind == "negative"
                                     else "misses its condition")
    return f"{head + ' ' if head else ''}{verb}: {cond.metric}, {phrase}"


def stored_condition(entry: Mapping[str, Any]) -> Condition | None:
    """The :class:`Condition` a stored condition or control entry names (its ``metric``,
    ``op``, ``threshold`` and ``rule`` fields); None when they are missing or bad (the
    headline then shows the entry's stored description)."""
    try:
        if {"metric", "op", "threshold", "rule"} <= set(entry):
            return Condition(str(entry["metric"]), str(entry["op"]), float(entry["threshold"]),
                             _RULE_WORDS.get(entry["rule"], entry["rule"]),
                             float(entry.get("min_fraction", 1.0)), str(entry.get("text", "")))
    except (TypeError, ValueError):
        pass
    return None


def _unregistered(claim: Mapping[str, Any]) -> tuple[Condition | None, dict[str, Any]]:
    """A claim without stored conditions: its ``metric`` against its ``threshold``."""
    th = claim.get("threshold") or {}
    metric = str(claim.get("metric"))
    per = {str(s): (m.get(metric) if isinstance(m, Mapping) else m)
           for s, m in (claim.get("per_seed") or {}).items()}
    try:
        cond = Condition(metric, str(th.get("op")), float(th.get("value")),
                         _RULE_WORDS.get(th.get("rule", "mean"), "mean"))
    except (TypeError, ValueError):
        return None, per
    return cond, per


def condition_text(cond: Condition | None, entry: Mapping[str, Any]) -> str:
    """A stored condition (``entry``, with its ``per_seed``) as the headline words it: its
    label, seed rule and deciding number."""
    if cond is None:
        return str(entry.get("condition", "?"))
    return f"{_label(cond)}, " + condition_phrase(
        cond, entry.get("per_seed") or {}, unreadable=entry.get("unreadable"),
        pooled=entry.get("pooled_value"))


def claim_headline(claim_id: str, claim: Mapping[str, Any]) -> Headline:
    """The headline of one claim of ``summary.json`` (see the module docstring)."""
    stored = claim.get("verdict") or (HOLDS if claim.get("holds") else NOT_HOLD)
    conds = [c for c in (claim.get("conditions") or []) if isinstance(c, Mapping)]
    if not conds:  # an unregistered claim (or one written before conditions were stored)
        cond, per = _unregistered(claim)
        if cond is None:
            th = claim.get("threshold") or {}
            return Headline(f"{claim.get('metric')} {th.get('op', '')} {th.get('value', '')}",
                            stored, "primary", str(claim.get("metric")))
        text = f"{_label(cond)}, {condition_phrase(cond, per)}"
        if stored != HOLDS and not claim.get("controls"):
            text += "; no control measured"
        return Headline(text, stored, "primary", cond.metric)
    controls = []
    for k in claim.get("controls") or []:
        if not isinstance(k, Mapping):
            continue
        controls.append((ControlResult(str(k.get("name")), str(k.get("kind")),
                                       str(k.get("condition", "")), _num(k.get("value")),
                                       dict(k.get("per_seed") or {}), k.get("meets_rule"),
                                       str(k.get("note") or "")), k))
    # the stored claim-level reason (the reasons of unreadable conditions are added by decisive)
    not_measurable = str(claim.get("not_measurable") or "")
    min_seeds = required_seeds(claim.get("min_seeds", MIN_SEEDS))
    seeds = sorted({str(s) for c in conds for s in (c.get("per_seed") or {})} |
                   {str(s) for s in (claim.get("per_seed") or {})})
    verdict, kind, item = decisive(
        [{**c, "met": None if c.get("met") is None else bool(c.get("met"))} for c in conds],
        {str(k): bool(v) for k, v in (claim.get("extra_checks") or {}).items()},
        [c for c, _ in controls], not_measurable, seeds,
        min_seeds)
    metric, control = None, None
    if kind in ("condition", "primary"):
        cond = stored_condition(item)
        metric = cond.metric if cond else None
        text = condition_text(cond, item)
    elif kind == "not_measurable":
        text = f"not measurable: {item}"
    elif kind == "seeds":
        first = conds[0]
        text = (f"rule met on {item} seeds, at least {min_seeds} needed; "
                f"{condition_text(stored_condition(first), first)}")
    elif kind == "no_control":
        first = conds[0]
        text = (f"no control measured; {condition_text(stored_condition(first), first)}")
    elif kind == "no_condition":
        text = "no condition evaluated"
    else:  # a control decided it
        entry = next(k for c, k in controls if c is item)
        cond = stored_condition(entry)
        metric, control = (cond.metric if cond else None), item.name
        if kind == "uncovered":
            text = (f"{item.kind} control '{item.name}' measured on seeds "
                    f"{_seeds(item.per_seed)} only, claim seeds {_seeds(seeds)}")
        else:
            text = control_phrase(item.kind, item.name, cond, item.per_seed, item.meets_rule,
                                  item.note)
    agrees = verdict == stored
    if not agrees:
        text = f"[the stored verdict {stored!r} disagrees with its results: {verdict!r}] {text}"
    return Headline(text, verdict, kind, metric, agrees, control)


def deciding_entry(claim: Mapping[str, Any], h: Headline) -> Mapping[str, Any] | None:
    """The stored condition or control whose rule decided ``claim`` as its headline ``h``
    says: a control by its name (two controls may read one metric, CR-5's pooled and
    every-seed bounds), a condition by its metric; None when a reason decided (too few seeds,
    not measurable as a whole) or the entry's condition cannot be read."""
    if h.metric is None:
        return None
    if h.control is not None:
        pool, field, want = claim.get("controls"), "name", h.control
    else:
        pool, field, want = claim.get("conditions"), "metric", h.metric
    return next((e for e in pool or [] if isinstance(e, Mapping) and e.get(field) == want),
                None)
