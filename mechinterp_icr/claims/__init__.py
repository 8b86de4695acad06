"""Claims: the decision protocol (SPEC section 0), the pre-registered registry and the
reproduction summary.

- :mod:`.protocol`: conditions, controls and the three verdicts;
- :mod:`.registry`: every claim's conditions, controls and hyperparameters (CR and IR);
- :mod:`.summary`: :class:`Claim`, :class:`Summary` (``summary.json``) and the CIs.
"""

from mechinterp_icr.claims.intervals import ci95
from mechinterp_icr.claims.protocol import (
    HOLDS,
    INCONCLUSIVE,
    NOT_HOLD,
    VERDICTS,
    ClaimSpec,
    Condition,
    ControlResult,
    ControlSpec,
    evaluate_control,
)
from mechinterp_icr.claims.registry import REGISTRY, spec
from mechinterp_icr.claims.summary import Claim, Summary, claim_key, format_claim_table

__all__ = [
    "HOLDS",
    "INCONCLUSIVE",
    "NOT_HOLD",
    "REGISTRY",
    "VERDICTS",
    "Claim",
    "ClaimSpec",
    "Condition",
    "ControlResult",
    "ControlSpec",
    "Summary",
    "ci95",
    "claim_key",
    "evaluate_control",
    "format_claim_table",
    "spec",
]
