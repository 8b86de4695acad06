"""Each rule's registered machine noise (SPEC 0, "robust to the machine"): how far the number a
rule's seed rule compares moves when the same code and seeds run under another float rounding.

Measured once on the published pair (``figures/summary.json``, the decision run, against
``figures/rerun/summary.json``, its rerun under another kernel setting) with
``icr compare figures figures/rerun --noise`` (:func:`mechinterp_icr.claims.rerun.
machine_noise`): per seed for a rule on a tail of the seeds (every seed, a fraction: the
largest per-seed difference), of the statistic itself for a mean or pooled rule. A rule whose
noise is more than half its margin to the threshold in the decision run may not rest on a
tail statistic (docs/registry.md, change log); ``docs/claims.md`` lists every value.

Keys: the claim id as ``summary.json`` names it (a variant such as ``CR-2 (shared tokens)``
has its own noise) -> ``"condition METRIC"`` or ``"control NAME"`` -> noise. Rules a run could
not read on both sides have no entry.
"""

from __future__ import annotations

__all__ = ["MACHINE_NOISE", "MEASURED"]

# what the values below were measured on (a dated change-log entry in docs/registry.md)
MEASURED = ""

MACHINE_NOISE: dict[str, dict[str, float]] = {}
