"""``docs/claims.md``: the specification every verdict is checked against, generated from the
registry code, so the document and the code cannot disagree.

    python -m mechinterp_icr.claims.document docs/claims.md          # rewrite
    python -m mechinterp_icr.claims.document docs/claims.md --check  # exit 1 when stale

One section per registered claim (its statement; every condition with its metric, test and
seed rule; every control with its kind and the condition it names; the hyperparameters its
verdict depends on), then the analysis constants, the config keys no verdict reads and the
metrics' declared ranges. ``tests/unit/test_claims_document.py`` fails when the committed file
is not the one this module writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mechinterp_icr.claims.cr_registry import ANALYSIS_CONSTANTS
from mechinterp_icr.claims.ir_registry import IR_ANALYSIS_CONSTANTS
from mechinterp_icr.claims.protocol import MIN_SEEDS, ClaimSpec, Condition, rule_words
from mechinterp_icr.claims.registry import METRIC_RANGES, NOT_READ, REGISTRY, REPORT_ONLY
from mechinterp_icr.store.io import write_or_check

__all__ = ["main", "md_cell", "render"]

_HEAD = f"""# Claims: what each verdict is decided by

Generated from the registry code (`mechinterp_icr/claims/`) by
`python -m mechinterp_icr.claims.document docs/claims.md`; do not edit by hand
(`tests/unit/test_claims_document.py` fails when this file is stale). A change to anything
listed here is a dated entry in the change log of `docs/registry.md`.

## How a claim is decided

- A claim is a set of **conditions** on per-seed metrics (the first is its headline) and a set
  of **controls**, measured in the same run. Each names a metric, a comparison, a threshold
  and a seed rule: *every seed*, the *mean over seeds*, or *on at least a fraction of seeds*.
  A seed without a number fails the every-seed and mean rules and counts as a failing seed
  under a fraction rule.
- A **negative** control (a model, state or data where the effect is absent) must fail the
  condition it names: under the every-seed rule on every seed. A **positive** control (the
  effect known to be present) must meet it. A control without a number cannot vouch for the
  claim.
- Verdicts: **inconclusive** when the claim's quantity is not measurable in the setting (the
  reason is named) or when the rule is met but a control misbehaves (the control is named);
  **does not hold** when a condition is not met; **holds** when every condition is met with
  every control as expected, on at least {MIN_SEEDS} seeds.
- The 95% interval beside a mean is a Student-t interval over seeds, clipped to the metric's
  declared range (below); no verdict reads it.
- `icr check out/summary.json` checks a summary against all of this: the protocol, and every
  stored condition and control against the rules listed here, recomputed from the stored
  per-seed values.
- A claim id with a suffix, such as `CR-2 (shared tokens)`, is the same registered claim
  decided on a variant of the task.
"""

def _rule(c: Condition) -> str:
    return rule_words(c.rule, c.min_fraction)


def _value(v: Any) -> str:
    if isinstance(v, tuple):
        v = list(v)
    return f"`{json.dumps(v)}`"


def md_cell(text: Any) -> str:
    """``text`` as one cell of a Markdown table (pipes escaped, on one line)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _claim(s: ClaimSpec) -> list[str]:
    out = [f"## {s.id}", "", md_cell(s.statement), "", "| condition | metric | test | seed rule |",
           "| --- | --- | --- | --- |"]
    for c in s.conditions:
        out.append(f"| {md_cell(c.text or '-')} | `{c.metric}` | {c.op} {c.threshold:g} | "
                   f"{_rule(c)} |")
    out += ["", "| control | kind | condition it names | expected |", "| --- | --- | --- | --- |"]
    for k in s.controls:
        c = k.condition
        want = "fails it" if k.kind == "negative" else "meets it"
        out.append(f"| {md_cell(k.name)} | {k.kind} | `{c.metric}` {c.op} {c.threshold:g}, "
                   f"{_rule(c)} | {want} |")
    if s.hyperparameters:
        out += ["", f"Its verdict depends on {len(s.hyperparameters)} registered config keys "
                "(listed under [Registered hyperparameters](#registered-hyperparameters))."]
    if s.profile_specific:
        out += ["", "May differ between the quick and paper profiles: "
                + ", ".join(f"`{k}`" for k in s.profile_specific) + "."]
    return out + [""]


def _hyperparameters() -> list[str]:
    out = ["## Registered hyperparameters", "",
           "Every config key a verdict depends on, with its registered value (the same in the "
           "quick and paper profiles unless a claim names it profile-specific; "
           "`icr config cr` / `icr config ir` print a profile's values) and the claims that "
           "read it.", "", "| target | key | value | claims |", "| --- | --- | --- | --- |"]
    rows: dict[tuple[str, str], tuple[Any, list[str]]] = {}
    for s in REGISTRY.values():
        for k, v in s.hyperparameters.items():
            rows.setdefault((s.id.split("-")[0].lower(), k), (v, []))[1].append(s.id)
    for (target, k), (v, ids) in sorted(rows.items()):
        out.append(f"| {target} | `{k}` | {_value(v)} | {', '.join(ids)} |")
    return out + [""]


def _constants() -> list[str]:
    out = ["## Analysis constants", "",
           "Values a verdict reads that are not config keys, pinned to the module constant "
           "the code uses (`tests/unit/test_registry.py`).", "",
           "| constant | value |", "| --- | --- |"]
    for path, v in {**ANALYSIS_CONSTANTS, **IR_ANALYSIS_CONSTANTS}.items():
        out.append(f"| `{path}` | {_value(v)} |")
    return out + [""]


def _unread() -> list[str]:
    out = ["## Config keys no verdict reads", "",
           "Every config key is a registered hyperparameter of a claim above, or one of these "
           "(a test fails on a key that is neither). Report-only keys may differ between the "
           "profiles.", "", "| target | key | kind | why |", "| --- | --- | --- | --- |"]
    for kind, table in (("report only", REPORT_ONLY), ("not read", NOT_READ)):
        for target, keys in table.items():
            for key, why in keys.items():
                out.append(f"| {target} | `{key}` | {kind} | {md_cell(why)} |")
    return out + [""]


def _ranges() -> list[str]:
    out = ["## Declared metric ranges", "",
           "A 95% interval of a bounded metric is reported inside its range.", "",
           "| metric | range |", "| --- | --- |"]
    for m, r in sorted(METRIC_RANGES.items()):
        out.append(f"| `{m}` | {'unbounded' if r is None else f'[{r[0]:g}, {r[1]:g}]'} |")
    return out + [""]


def _noise() -> list[str]:
    from mechinterp_icr.claims.noise import MACHINE_NOISE, MEASURED

    out = ["## Machine noise", "",
           "How far the number each rule's seed rule compares moves when the same code and "
           "seeds run under another float rounding (`mechinterp_icr/claims/noise.py`; per seed "
           "for a rule on a tail of the seeds, of the statistic for a mean or pooled rule). "
           + (f"Measured {MEASURED}." if MEASURED else "Not measured yet."), ""]
    if not MACHINE_NOISE:
        return out
    out += ["| claim | rule | machine noise |", "| --- | --- | --- |"]
    for cid, rules in MACHINE_NOISE.items():
        for what, v in rules.items():
            out.append(f"| {md_cell(cid)} | {md_cell(what)} | {v:.3g} |")
    return out + [""]


def render() -> str:
    """The text of ``docs/claims.md``."""
    lines = [_HEAD]
    for s in REGISTRY.values():
        lines += _claim(s)
    lines += _noise() + _hyperparameters() + _constants() + _unread() + _ranges()
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write (or check) docs/claims.md from the registry.")
    ap.add_argument("path", type=Path)
    ap.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = ap.parse_args(argv)
    return write_or_check(args.path, render(), args.check,
                          f"{args.path} is not the one the registry gives; run python -m "
                          f"mechinterp_icr.claims.document {args.path}")


if __name__ == "__main__":
    sys.exit(main())
