"""How a claim is decided (SPEC section 0): registered conditions, controls and verdicts.

A claim is a set of **conditions** on per-seed metrics (the first is the headline metric) and
a set of **controls**. Every condition and control names a metric, a comparison, a threshold
and a seed rule; all of them are pre-registered in :mod:`mechinterp_icr.claims.registry`, so
the experiment code only supplies numbers.

- A condition is *met* when its comparison holds on every seed (``every_seed``), on the mean
  over seeds (``mean``) or on at least ``min_fraction`` of the seeds (``fraction``).
- A control names the condition the effect would satisfy. A **negative** control (a model,
  state or data where the effect is absent) misbehaves when that condition is met: under
  ``every_seed`` on *any* seed, under ``mean`` by the mean. A **positive** control (the effect
  known to be present) misbehaves when its condition is not met (every seed / mean). A
  control that could not be measured misbehaves too: no number, no evidence.
- Verdict: ``not_measurable`` set (the claim's quantity cannot be measured in this setting,
  e.g. IR-5 when N does not grow) -> ``inconclusive`` with the reason; else the rule (all
  conditions) not met -> ``does not hold``; met with a misbehaving
  control -> ``inconclusive`` (the report names the control); met with every control as
  expected -> ``holds``.

``meets_rule`` in ``summary.json`` is whether the control met the condition it names, so a
negative control with ``meets_rule: true`` (or a positive one with ``false``) keeps a claim
from holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "HOLDS",
    "INCONCLUSIVE",
    "NOT_HOLD",
    "MIN_SEEDS",
    "SIGNED_UNIT",
    "UNIT",
    "VERDICTS",
    "ClaimSpec",
    "Condition",
    "ControlResult",
    "ControlSpec",
    "compare",
    "decide",
    "decisive",
    "evaluate_condition",
    "evaluate_control",
    "rule_words",
]

HOLDS, NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
VERDICTS = (HOLDS, NOT_HOLD, INCONCLUSIVE)
_OPS = (">=", "<=", ">", "<")
_RULES = ("every_seed", "mean", "fraction")
_EPS = 1e-9  # a Spearman of exactly 0.8 over 4 points computes as 0.7999999999999998
MIN_SEEDS = 5  # SPEC 0: at least 5 seeds per claim; fewer can never give ``holds``
# declared ranges of metrics (the registries' ``*_METRIC_RANGES``): an interval over seeds of a
# bounded metric is reported inside its range (``summary.ci95``); no verdict reads an interval
UNIT = (0.0, 1.0)  # accuracies, probabilities, shares, attention masses, 0/1 indicators
SIGNED_UNIT = (-1.0, 1.0)  # differences of two of those, Spearman correlations


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
    """A seed rule in words: ``every seed``, ``mean over seeds``, ``on >= 0.8 of seeds``."""
    return {"every_seed": "every seed", "mean": "mean over seeds",
            "fraction": f"on >= {min_fraction:g} of seeds"}[rule]


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

    @property
    def headline(self) -> Condition:
        return self.conditions[0]

    def control(self, name: str) -> ControlSpec:
        for c in self.controls:
            if c.name == name:
                return c
        raise KeyError(f"{self.id} has no control {name!r}; registered: "
                       f"{[c.name for c in self.controls]}")


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


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def evaluate_condition(cond: Condition, per_seed: Mapping[str, Any]) -> dict[str, Any]:
    """``{"condition", "value", "met", "per_seed", "missing"}`` for per-seed metric dicts (or
    values). A seed whose value is missing or NaN makes the condition unmet under the
    ``every_seed`` and ``mean`` rules (no number, no evidence); under ``fraction`` it counts as
    one of the seeds that fail (a rule of "4 of 5 seeds" tolerates one such seed)."""
    vals = _values(per_seed, cond.metric)
    missing = sorted(s for s, v in vals.items() if _missing(v))
    ok = {s: compare(v, cond.op, cond.threshold) for s, v in vals.items()}
    mean = _mean([float(v) for s, v in vals.items() if s not in missing])
    if not vals:
        met = False
    elif cond.rule == "fraction":  # a seed without a number is one of the failing seeds
        met = sum(ok.values()) / len(ok) >= cond.min_fraction - 1e-12
    elif missing:
        met = False
    elif cond.rule == "mean":
        met = compare(mean, cond.op, cond.threshold)
    else:
        met = all(ok.values())
    return {"condition": cond.describe(), "value": mean, "met": bool(met),
            "per_seed": {s: (None if s in missing else float(v)) for s, v in vals.items()},
            "missing": missing, **cond.fields()}


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
        if self.meets_rule is None:
            return False
        return (not self.meets_rule) if self.kind == "negative" else bool(self.meets_rule)

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


def decisive(conditions: list[dict[str, Any]], extra_checks: Mapping[str, bool],
             controls: list[ControlResult], not_measurable: str = "",
             seeds: list[str] | None = None,
             min_seeds: int = MIN_SEEDS) -> tuple[str, str, Any]:
    """(verdict, what decided it, the deciding item): the one place the order of the verdict
    rule is written (:func:`decide` words its reason from it, :mod:`.headline` its headline).

    What decided it, in the order the rule is checked: ``"not_measurable"`` (item: the
    reason), ``"no_condition"``, ``"condition"`` (the first unmet evaluated condition),
    ``"check"`` (the first failed extra check's name), ``"seeds"`` (fewer than ``min_seeds``;
    item: how many), ``"no_control"``, ``"control"`` (the first misbehaving
    :class:`ControlResult`), ``"uncovered"`` (the first control measured on fewer seeds than
    the claim), ``"primary"`` (holds; item: the first condition, the registered primary)."""
    if not_measurable:  # SPEC: the quantity cannot be measured here, whatever the rule says
        return INCONCLUSIVE, "not_measurable", not_measurable
    if not conditions:
        return NOT_HOLD, "no_condition", None
    unmet = [c for c in conditions if not c["met"]]
    if unmet:
        return NOT_HOLD, "condition", unmet[0]
    failed = [name for name, ok in extra_checks.items() if not ok]
    if failed:
        return NOT_HOLD, "check", failed[0]
    seeds = sorted({str(s) for s in (seeds or [])})
    if len(seeds) < min_seeds:
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
    if kind in ("condition", "check"):
        failed = [c["condition"] + (f" (no value on seeds {c['missing']})" if c.get("missing")
                                    else "") for c in conditions if not c["met"]]
        failed += [name for name, ok in extra_checks.items() if not ok]
        return verdict, "not met: " + "; ".join(failed)
    seeds = sorted({str(s) for s in (seeds or [])})
    if kind == "seeds":
        return verdict, f"rule met on {len(seeds)} seeds; at least {min_seeds} needed"
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
