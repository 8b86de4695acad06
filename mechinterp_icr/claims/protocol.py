"""How a claim is decided (SPEC section 0): registered conditions, controls and verdicts.

A claim is a set of **conditions** on per-seed metrics (the first is the headline metric) and
a set of **controls**. Every condition and control names a metric, a comparison, a threshold
and a seed rule; all of them are pre-registered in :mod:`mechinterp_icr.claims.registry`, so
the experiment code only supplies numbers.

- A condition is *met* when its comparison holds on every seed (``every_seed``), on the mean
  over seeds (``mean``), on at least ``min_fraction`` of the seeds (``fraction``) or on one
  number computed from all seeds together (``pooled``: the seed-mean curve's largest drop).
  A condition whose value cannot be read (a seed without a number, or a seed the claim's spec
  or measurement marks unreadable, e.g. no headroom) is ``met: None`` with the reason, never
  ``False``: a readable seed that fails still makes it ``False``.
- A control names the condition the effect would satisfy. A **negative** control (a model,
  state or data where the effect is absent) misbehaves when that condition is met: under
  ``every_seed`` on *any* seed, under ``mean`` by the mean. A **positive** control (the effect
  known to be present) misbehaves when its condition is not met (every seed / mean). A
  control that could not be measured misbehaves too: no number, no evidence.
- Verdict (SPEC 0, "not measurable never hides a failure"): a readable condition not met ->
  ``does not hold``, whatever else cannot be read; else a condition that cannot be read, a
  failed extra check (a measurement-side coverage check: too few values of K measured) or
  ``not_measurable`` set (the claim's quantity cannot be measured in this setting) ->
  ``inconclusive`` with the reason; else a misbehaving control -> ``inconclusive``
  (the report names the control); else ``holds``.

``meets_rule`` in ``summary.json`` is whether the control met the condition it names, so a
negative control with ``meets_rule: true`` (or a positive one with ``false``) keeps a claim
from holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = [
    "VARIANTS", "split_variant", "variant_id",
    "HOLDS",
    "INCONCLUSIVE",
    "NOT_HOLD",
    "MIN_SEEDS",
    "SIGNED_UNIT",
    "UNIT",
    "VERDICTS",
    "ClaimSpec",
    "as_number",
    "Condition",
    "ControlResult",
    "ControlSpec",
    "bound_mean",
    "compare",
    "control_ok",
    "decide",
    "decisive",
    "evaluate_condition",
    "unreadable_reason",
    "evaluate_control",
    "favourable_end",
    "required_seeds",
    "rule_words",
    "spec_controls",
    "stored_control_ok",
]

HOLDS, NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, NOT_HOLD, INCONCLUSIVE)
_OPS = (">=", "<=", ">", "<")
_RULES = ("every_seed", "mean", "fraction", "pooled")
_EPS = 1e-9  # a Spearman of exactly 0.8 over 4 points computes as 0.7999999999999998
MIN_SEEDS = 5  # SPEC 0: at least 5 seeds per claim; fewer can never give ``holds``
# declared ranges of metrics (the registries' ``*_METRIC_RANGES``): an interval over seeds of a
# bounded metric is reported inside its range (``summary.ci95``); no verdict reads an interval
UNIT = (0.0, 1.0)  # accuracies, probabilities, shares, attention masses, 0/1 indicators
SIGNED_UNIT = (-1.0, 1.0)  # differences of two of those, Spearman correlations


# A claim decided in a variant of its task is reported as ``<id> (<label>)``, e.g. ``CR-8
# (shared tokens)``: the variants and their labels, the one place such an id is built or read.
VARIANTS = {"shared": "shared tokens"}


def variant_id(claim_id: str, variant: str = "") -> str:
    """``CR-8`` -> ``CR-8 (shared tokens)`` for variant ``'shared'`` (:data:`VARIANTS`); the id
    itself for the default task (``''``)."""
    return f"{claim_id} ({VARIANTS[variant]})" if variant else claim_id


def split_variant(claim_id: str) -> tuple[str, str]:
    """``(registered id, variant)`` of a reported id: ``CR-8 (shared tokens)`` -> ``("CR-8",
    "shared")``; an id without a variant's suffix -> ``(id, "")``."""
    for key, label in VARIANTS.items():
        if claim_id.endswith(f" ({label})"):
            return claim_id[:-len(label) - 3], key
    return claim_id, ""


def compare(value: Any, op: str, threshold: float) -> bool:
    """``value op threshold``; a missing or NaN value never satisfies a comparison."""
    if value is None:
        return False
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    if math.isnan(v):
        return False
    eps = _EPS * max(1.0, abs(threshold))  # floating-point slack, far below any reported digit
    return {">=": v >= threshold - eps, "<=": v <= threshold + eps, ">": v > threshold + eps,
            "<": v < threshold - eps}[op]


def rule_words(rule: str, min_fraction: float = 1.0) -> str:
    """A seed rule in words: ``every seed``, ``mean over seeds``, ``on >= 0.8 of seeds``; a
    rule that is none of them (a hand-edited summary) as it is written."""
    return {"every_seed": "every seed", "mean": "mean over seeds",
            "fraction": f"on >= {min_fraction:g} of seeds",
            "pooled": "over the seeds together"}.get(rule, str(rule))


@dataclass(frozen=True)
class Condition:
    """``metric op threshold`` over seeds, by ``rule`` (see the module docstring)."""

    metric: str
    op: str
    threshold: float
    rule: str = "every_seed"
    min_fraction: float = 1.0
    text: str = ""

    def __post_init__(self):
        if self.op not in _OPS:
            raise ValueError(f"condition {self.metric}: op {self.op!r} not in {_OPS}")
        if self.rule not in _RULES:
            raise ValueError(f"condition {self.metric}: rule {self.rule!r} not in {_RULES}")

    def describe(self) -> str:
        base = (f"{self.metric} {self.op} {self.threshold:g} "
                f"({rule_words(self.rule, self.min_fraction)})")
        return f"{self.text}: {base}" if self.text else base

    def fields(self) -> dict[str, Any]:
        """The condition's structure as stored in ``summary.json`` beside its description
        (what :mod:`.headline` words the decisive number from)."""
        return {"metric": self.metric, "op": self.op, "threshold": self.threshold,
                "rule": self.rule, "min_fraction": self.min_fraction, "text": self.text}


@dataclass(frozen=True)
class ControlSpec:
    """A registered control: ``condition`` is the condition the effect would satisfy (what a
    negative control must fail, what a positive control must pass)."""

    name: str
    kind: str
    condition: Condition

    def __post_init__(self):
        if self.kind not in ("negative", "positive"):
            raise ValueError(f"control {self.name}: kind {self.kind!r} not negative/positive")
        if self.condition.rule == "pooled":  # a control is read per seed (evaluate_control)
            raise ValueError(f"control {self.name}: rule 'pooled' is for conditions only; "
                             "a control's rule is every_seed, mean or fraction")


@dataclass(frozen=True)
class ClaimSpec:
    """One registered claim: its conditions (the first is the headline metric), controls and
    the hyperparameters its verdict depends on (config key -> value, same in every profile
    unless ``profile_specific`` names the key)."""

    id: str
    statement: str
    conditions: tuple[Condition, ...]
    controls: tuple[ControlSpec, ...]
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    profile_specific: tuple[str, ...] = ()
    # what the spec computes from the stored measurements before deciding (pure functions, so
    # ``icr redecide`` recomputes them): ``derive(claim_id, per_seed)`` -> (per-seed derived
    # metrics {seed: {metric: value}}, pooled metrics {metric: value}); ``unreadable(claim_id,
    # per_seed)`` -> {metric: {seed: reason}} (a seed whose value of that metric cannot be
    # read, e.g. no headroom; seed "*": every seed)
    derive: Callable[[str, Mapping[str, Any]], tuple[dict, dict]] | None = None
    unreadable: Callable[[str, Mapping[str, Any]], dict[str, dict[str, str]]] | None = None
    # the summary tables the spec computes from the same measurements (``tables(claim_id,
    # per_seed)`` -> {table name: entries}), so ``icr redecide`` recomputes them beside the
    # verdict (the entries replace the stored table's)
    tables: Callable[[str, Mapping[str, Any]], dict[str, dict[str, Any]]] | None = None

    @property
    def headline(self) -> Condition:
        return self.conditions[0]


def condition(metric: str, op: str, threshold: float, rule: str = "every_seed", text: str = "",
              min_fraction: float = 1.0) -> Condition:
    """Shorthand for the registries: ``Condition`` with positional metric, op, threshold."""
    return Condition(metric, op, threshold, rule, min_fraction, text)


def negative(name: str, metric: str, op: str, threshold: float,
             rule: str = "every_seed") -> ControlSpec:
    """A negative control whose effect condition is ``metric op threshold``."""
    return ControlSpec(name, "negative", condition(metric, op, threshold, rule))


def positive(name: str, metric: str, op: str, threshold: float,
             rule: str = "every_seed") -> ControlSpec:
    """A positive control that must meet ``metric op threshold``."""
    return ControlSpec(name, "positive", condition(metric, op, threshold, rule))


def _values(per_seed: Mapping[str, Any], metric: str) -> dict[str, Any]:
    return {str(s): (m.get(metric) if isinstance(m, Mapping) else m)
            for s, m in per_seed.items()}


def _mean(vals) -> float:
    v = [float(x) for x in vals if x is not None and not math.isnan(float(x))]
    return sum(v) / len(v) if v else float("nan")


def as_number(v: Any) -> float | None:
    """``v`` as a float, or None when it is missing, not a number or NaN (no number, no
    evidence)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _missing(v: Any) -> bool:
    return as_number(v) is None


def _unreadable_seeds(unreadable: Mapping[str, str] | None, seeds) -> dict[str, str]:
    u = dict(unreadable or {})
    if "*" in u:
        return {s: u["*"] for s in seeds}
    return {str(s): str(r) for s, r in u.items() if str(s) in set(seeds)}


def favourable_end(op: str, value_range: tuple[float, float]) -> float:
    """The end of a metric's declared range that best meets ``op`` (the top for ``>=``)."""
    return value_range[1] if op in (">=", ">") else value_range[0]


def bound_mean(readable: list[float], unread: int, op: str,
               value_range: tuple[float, float] | None) -> float | None:
    """The mean over seeds with the ``unread`` seeds at :func:`favourable_end`: a mean rule
    with unreadable seeds is not met when even this misses it (:func:`evaluate_condition`).
    None without a declared range or a readable seed."""
    if value_range is None or not readable:
        return None
    return (sum(readable) + favourable_end(op, value_range) * unread) / (len(readable) + unread)


def required_seeds(min_seeds: int = MIN_SEEDS) -> int:
    """The seeds a claim needs to hold: its ``min_seeds``, never fewer than ``MIN_SEEDS``."""
    return max(int(min_seeds), MIN_SEEDS)


def evaluate_condition(cond: Condition, per_seed: Mapping[str, Any],
                       unreadable: Mapping[str, str] | None = None,
                       pooled: Any = None,
                       value_range: tuple[float, float] | None = None) -> dict[str, Any]:
    """``{"condition", "value", "met", "per_seed", "missing", "unreadable"}`` for per-seed
    metric dicts (or values). ``unreadable`` maps a seed (``"*"``: every seed) to why its
    value cannot be read; a seed without a number is unreadable too ("no value"). ``met`` is
    True, False, or None when the condition cannot be read: under ``every_seed`` a readable
    seed that fails makes it False, else an unreadable seed None; under ``mean`` any
    unreadable seed makes the mean unreadable; under ``fraction`` it is False when the seeds
    that pass could not reach the fraction even if every unreadable seed passed, True when
    they already do, None between; under ``pooled`` the one number ``pooled`` (None or NaN:
    unreadable) is compared. Under ``mean`` with unreadable seeds and a declared
    ``value_range`` of the metric, the mean is False when even the unreadable seeds at the
    range's most favourable end could not meet it (not measurable never hides a failure), else
    None."""
    vals = _values(per_seed, cond.metric)
    if cond.rule == "pooled":  # one number over the seeds: no per-seed values of its own
        value = None if _missing(pooled) else float(pooled)
        bad = {str(s): str(r) for s, r in (unreadable or {}).items()}
        if value is None:
            bad.setdefault("*", "the pooled value cannot be computed")
        met = None if bad else compare(value, cond.op, cond.threshold)
        return {"condition": cond.describe(), "value": float("nan") if value is None else value,
                "met": met, "per_seed": {}, "missing": [], "unreadable": dict(sorted(bad.items())),
                "pooled_value": value, **cond.fields()}
    missing = sorted(s for s, v in vals.items() if _missing(v))
    bad = {s: "no value" for s in missing}
    bad.update(_unreadable_seeds(unreadable, vals))
    readable = {s: v for s, v in vals.items() if s not in bad}
    ok = {s: compare(v, cond.op, cond.threshold) for s, v in readable.items()}
    mean = _mean([float(v) for v in readable.values()])
    n = len(vals)
    if not vals:
        met, bad = None, {"*": "not measured in this run"}
    elif cond.rule == "fraction":
        need = cond.min_fraction - 1e-12
        passed = sum(ok.values())
        met = True if passed / n >= need else (False if (passed + len(bad)) / n < need
                                               else None)
    elif cond.rule == "mean":
        met = None if bad else compare(mean, cond.op, cond.threshold)
        bound = bound_mean([float(v) for v in readable.values()], len(bad), cond.op,
                           value_range) if bad else None
        if bound is not None and not compare(bound, cond.op, cond.threshold):
            met = False  # no value of the unreadable seeds could rescue the mean
    else:
        met = False if not all(ok.values()) else (None if bad else True)
    out = {"condition": cond.describe(), "value": mean, "met": met,
           "per_seed": {s: (None if s in missing else float(v)) for s, v in vals.items()},
           "missing": missing, "unreadable": dict(sorted(bad.items())), **cond.fields()}
    return out


def unreadable_reason(cond: Mapping[str, Any]) -> str:
    """Why an evaluated condition (``met: None``) cannot be read, in one phrase."""
    bad = cond.get("unreadable") or {}
    reasons: dict[str, list[str]] = {}
    for s, r in bad.items():
        reasons.setdefault(str(r), []).append(str(s))
    parts = [r if seeds == ["*"] else f"{r} on seeds {', '.join(sorted(seeds))}"
             for r, seeds in reasons.items()]
    what = cond.get("metric") or cond.get("condition")
    return f"{what} cannot be read ({'; '.join(parts) or 'no value'})"


def control_ok(kind: str, meets_rule: bool | None) -> bool:
    """Whether a control behaved as expected: a negative one does not meet the condition it
    names, a positive one does; one that could not be measured (None) misbehaves. Every
    reader of a stored control (report, claim table, ``icr check``) asks this, not the
    stored ``as_expected``."""
    if meets_rule is None:
        return False
    return (not meets_rule) if kind == "negative" else bool(meets_rule)


def stored_control_ok(entry: Mapping[str, Any]) -> bool:
    """:func:`control_ok` of a control stored in ``summary.json`` (its ``kind``,
    ``meets_rule``)."""
    return control_ok(str(entry.get("kind")), entry.get("meets_rule"))


@dataclass
class ControlResult:
    """A control measured in this run; ``ok`` says whether it behaved as expected."""

    name: str
    kind: str
    condition: str
    value: float | None
    per_seed: dict[str, Any]
    meets_rule: bool | None
    note: str = ""
    spec: Condition | None = None  # the registered condition it names (None: unknown)

    @property
    def ok(self) -> bool:
        return control_ok(self.kind, self.meets_rule)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "condition": self.condition,
               "value": self.value, "per_seed": self.per_seed, "meets_rule": self.meets_rule,
               "as_expected": self.ok, "note": self.note}
        if self.spec is not None:
            out.update(self.spec.fields())
        return out


def evaluate_control(spec: ControlSpec, per_seed: Mapping[str, Any],
                     note: str = "") -> ControlResult:
    """Measure a control from per-seed values (or per-seed metric dicts holding its metric).
    A negative control under ``every_seed`` meets its condition if *any* seed does; a
    positive one only if every seed does. A missing or NaN value on any seed -> ``meets_rule``
    None (not measured: the control cannot vouch for the claim)."""
    cond = spec.condition
    vals = {str(s): (m.get(cond.metric) if isinstance(m, Mapping) else m)
            for s, m in per_seed.items()}
    missing = sorted(s for s, v in vals.items() if _missing(v))
    shown = {s: (None if s in missing else float(v)) for s, v in vals.items()}
    if not vals or missing:
        why = "not measured in this run" if not vals else f"no value on seeds {missing}"
        mean = _mean([v for v in shown.values() if v is not None]) if vals else None
        return ControlResult(spec.name, spec.kind, cond.describe(), mean, shown, None,
                             "; ".join(x for x in (note, why) if x), cond)
    ok = [compare(v, cond.op, cond.threshold) for v in vals.values()]
    mean = _mean([float(v) for v in vals.values()])
    if cond.rule == "mean":
        meets = compare(mean, cond.op, cond.threshold)
    elif cond.rule == "fraction":
        meets = sum(ok) / len(ok) >= cond.min_fraction - 1e-12
    elif spec.kind == "negative":
        meets = any(ok)
    else:
        meets = all(ok)
    return ControlResult(spec.name, spec.kind, cond.describe(), mean, shown, bool(meets), note,
                         cond)


def spec_controls(spec: "ClaimSpec", per_seed: Mapping[str, Any],
                  notes: Mapping[str, str] | None = None,
                  claim_id: str | None = None) -> list[ControlResult]:
    """Every registered control of ``spec`` evaluated on the per-seed metric dicts that hold
    its metric (``spec.derive``'s per-seed metrics included, derived under ``claim_id``, the
    id the claim is reported under, e.g. ``CR-1 (shared tokens)``; default ``spec.id``):
    controls are the spec's, by id, never looked up by a display label kept elsewhere."""
    cid = spec.id if claim_id is None else claim_id
    derived = spec.derive(cid, per_seed)[0] if spec.derive is not None else {}
    full = {str(s): {**(m if isinstance(m, Mapping) else {}), **derived.get(str(s), {})}
            for s, m in per_seed.items()}
    return [evaluate_control(c, {s: m.get(c.condition.metric) for s, m in full.items()},
                             (notes or {}).get(c.name, "")) for c in spec.controls]


def decisive(conditions: list[dict[str, Any]], extra_checks: Mapping[str, bool],
             controls: list[ControlResult], not_measurable: str = "",
             seeds: list[str] | None = None,
             min_seeds: int = MIN_SEEDS) -> tuple[str, str, Any]:
    """(verdict, what decided it, the deciding item): the one place the order of the verdict
    rule is written (:func:`decide` words its reason from it, :mod:`.headline` its headline).

    What decided it, in the order the rule is checked: ``"no_condition"``, ``"condition"``
    (the first readable condition not met: ``met`` False), ``"not_measurable"`` (a condition
    that cannot be read, ``met`` None, a failed extra check, or the claim's
    ``not_measurable``; item: the reasons), ``"seeds"`` (fewer than ``min_seeds``;
    item: how many), ``"no_control"``, ``"control"`` (the first misbehaving
    :class:`ControlResult`), ``"uncovered"`` (the first control measured on fewer seeds than
    the claim), ``"primary"`` (holds; item: the first condition, the registered primary)."""
    if not conditions:
        return NOT_HOLD, "no_condition", None
    unmet = [c for c in conditions if c["met"] is False]
    if unmet:  # SPEC 0: a readable failing condition decides, whatever cannot be read
        return NOT_HOLD, "condition", unmet[0]
    # an extra check is a measurement-side coverage check (enough values of K or lam were
    # measured): failed, the rule cannot be read at its registered resolution
    failed = [f"extra check failed: {name}" for name, ok in extra_checks.items() if not ok]
    unread = [unreadable_reason(c) for c in conditions if c["met"] is None]
    if not_measurable or unread or failed:
        return INCONCLUSIVE, "not_measurable", "; ".join(
            x for x in [not_measurable, *failed, *unread] if x)
    seeds = sorted({str(s) for s in (seeds or [])})
    if len(seeds) < required_seeds(min_seeds):  # a claim may ask for more seeds, never fewer
        return INCONCLUSIVE, "seeds", len(seeds)
    if not controls:
        return INCONCLUSIVE, "no_control", None
    bad = [c for c in controls if not c.ok]
    if bad:
        return INCONCLUSIVE, "control", bad[0]
    uncovered = [c for c in controls if not set(seeds) <= set(c.per_seed)]
    if uncovered:
        return INCONCLUSIVE, "uncovered", uncovered[0]
    return HOLDS, "primary", conditions[0]


def decide(conditions: list[dict[str, Any]], extra_checks: Mapping[str, bool],
           controls: list[ControlResult], not_measurable: str = "",
           seeds: list[str] | None = None, min_seeds: int = MIN_SEEDS) -> tuple[str, str]:
    """(verdict, reason) from evaluated conditions, extra checks and controls (the verdict is
    :func:`decisive`'s; the reason lists every failure of the step that decided it).

    ``seeds`` are the claim's seeds: with fewer than ``min_seeds`` the claim cannot hold
    (SPEC 0: at least 5 seeds), and a control must have a value on every one of them."""
    verdict, kind, item = decisive(conditions, extra_checks, controls, not_measurable, seeds,
                                   min_seeds)
    if kind == "not_measurable":
        return verdict, f"not measurable: {item}"
    if kind == "no_condition":
        return verdict, "no condition evaluated"
    if kind == "condition":
        return verdict, "not met: " + "; ".join(
            c["condition"] for c in conditions if c["met"] is False)
    seeds = sorted({str(s) for s in (seeds or [])})
    if kind == "seeds":
        return verdict, (f"rule met on {len(seeds)} seeds; at least "
                         f"{required_seeds(min_seeds)} needed")
    if kind == "no_control":
        return verdict, "no control measured in this run"
    if kind in ("control", "uncovered"):
        bad = [c for c in controls if not c.ok]
        uncovered = [c for c in controls if c.ok and not set(seeds) <= set(c.per_seed)]
        return verdict, "control misbehaved: " + "; ".join(
            [f"{c.kind} control {c.name!r} ({c.condition}) "
             + ("not measured" + (f" ({c.note})" if c.note else "") if c.meets_rule is None
                else f"{'met' if c.meets_rule else 'missed'} its condition "
                     f"(value {c.value:.4g})") for c in bad]
            + [f"{c.kind} control {c.name!r} measured on seeds {sorted(c.per_seed)} only, "
               f"claim seeds {seeds}" for c in uncovered])
    return verdict, "rule met and every control as expected"
