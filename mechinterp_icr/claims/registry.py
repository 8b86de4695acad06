"""The pre-registered registry of every claim (SPEC section 0): conditions, thresholds, seed
rules, controls and the hyperparameters a verdict depends on.

One entry per claim id, from :mod:`.cr_registry` (CR-1..7) and :mod:`.ir_registry`
(IR-1..8). The experiment code reads thresholds from here and never writes its own; a test
(``tests/unit/test_registry.py``) pins every number to SPEC and checks that the quick and
paper profiles use the registered hyperparameters. A change to anything here is a dated
entry in ``docs/registry.md`` with its reason, the old verdict kept visible there.
"""

from __future__ import annotations

from mechinterp_icr.claims.cr_registry import CR_SPECS
from mechinterp_icr.claims.ir_registry import IR_SPECS
from mechinterp_icr.claims.protocol import ClaimSpec

__all__ = ["REGISTRY", "spec"]

REGISTRY: dict[str, ClaimSpec] = {s.id: s for s in (*CR_SPECS, *IR_SPECS)}


def spec(claim_id: str) -> ClaimSpec:
    """The registered spec of ``claim_id`` (``KeyError`` naming the registered ids)."""
    try:
        return REGISTRY[claim_id]
    except KeyError:
        raise KeyError(f"claim {claim_id!r} is not registered; registered: "
                       f"{sorted(REGISTRY)}") from None
