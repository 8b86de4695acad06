"""The pre-registered registry of every claim (SPEC section 0): conditions, thresholds, seed
rules, controls and the hyperparameters a verdict depends on.

One entry per claim id, from :mod:`.cr_registry` (CR-1..7) and :mod:`.ir_registry`
(IR-1..8). The experiment code reads thresholds from here and never writes its own; a test
(``tests/unit/test_registry.py``) pins every number to SPEC and checks that the quick and
paper profiles use the registered hyperparameters. A change to anything here is a dated
entry in ``docs/registry.md`` with its reason, the old verdict kept visible there.
"""

from __future__ import annotations

from collections.abc import Mapping

from mechinterp_icr.claims.cr_registry import CR_METRIC_RANGES, CR_SPECS
from mechinterp_icr.claims.ir_registry import IR_METRIC_RANGES, IR_SPECS
from mechinterp_icr.claims.protocol import ClaimSpec, split_variant

__all__ = ["METRIC_RANGES", "NOT_READ", "REGISTRY", "REPORT_ONLY", "metric_range",
           "registered_id", "setting", "spec", "threshold"]

REGISTRY: dict[str, ClaimSpec] = {s.id: s for s in (*CR_SPECS, *IR_SPECS)}

# metric -> its declared range (lo, hi), None = unbounded; every metric a registered condition
# or control reads is declared (tests/unit/test_registry.py). CR and IR metrics of the same
# name would have to agree (a test checks it).
METRIC_RANGES: dict[str, tuple[float, float] | None] = {**IR_METRIC_RANGES,
                                                          **CR_METRIC_RANGES}


def metric_range(metric: str) -> tuple[float, float] | None:
    """The declared range of ``metric`` (None: unbounded or not declared)."""
    return METRIC_RANGES.get(metric)

# Config keys that may differ between the quick and the paper profile because no verdict reads
# them (SPEC 0: everything a verdict depends on is identical in both profiles unless SPEC says
# otherwise). Key -> what it feeds. tests/unit/test_registry.py fails on any other difference.
REPORT_ONLY: dict[str, dict[str, str]] = {
    "cr": {
        "allweights_arm": "the all-weights ICL arm, reported beside CR-2",
        "allweights_trainable": "the all-weights arms' trainable set (reported beside CR-2/3)",
        "allweights_iclgrm": "the all-weights ICL+Grm arm, reported beside CR-3",
        "sweep_seeds": "how many seeds the CR-3 design-space sweep runs on",
        **{f"{ph}.{k}": "checkpoint spacing and logging (training is the same without them)"
           for ph in ("pretrain", "finetune")
           for k in ("eval_every", "eval_batch_size", "checkpoint_schedule",
                     "checkpoint_every", "checkpoint_dense_until", "progress")},
        "sweep": "the CR-3 design-space variants, reported beside CR-3",
        "ckpt_eval_n": "held-out accuracy curves during finetuning (figures)",
        "mechanism.role_checkpoints": "the CR-5 head-role trajectory figure",
        "taskvec.curve_max_checkpoints": "the CR-4 probe-over-checkpoints figure",
    },
    "ir": {
        "hooked.N": "HookedTransformer runs: causal row-overwrite table and attention views",
        "hooked.dense": "HookedTransformer runs: checkpoint density for the views",
        "hooked.eval": "HookedTransformer runs: evaluation size of the overwrite table",
        "hooked.steps": "HookedTransformer runs: training length for the overwrite table",
        "overwrite_n": "sequences per row in the causal row-overwrite table (IR-3/IR-4 details)",
        "escape_spread": "the pair-mass spread drawn in the IR-4 figure",
    },
}

# Config keys no verdict can read under the registered settings (key -> why): they exist for
# other settings of a knob that is registered. tests/unit/test_registry.py fails on a config
# key that is neither registered by a claim, REPORT_ONLY nor here.
NOT_READ: dict[str, dict[str, str]] = {
    "cr": {
        **{f"taskvec.{k}": "the 'small' lam runs only; taskvec.lam_model is 'main'"
           for k in ("lam_d_model", "lam_d_mlp", "lam_pt_steps", "lam_pt_lr",
                     "lam_ft_steps")},
        "cascade.d_model": "unused with cascade.embedding 'orthonormal' (d_model = 2 d_vocab)",
        "model.d_vocab": "0: derived from the task's vocabulary",
    },
    "ir": {},
}


def registered_id(claim_id: str, registry: Mapping[str, ClaimSpec] | None = None) -> str | None:
    """The registry id a summary claim id names (``"CR-2 (shared tokens)"`` -> ``"CR-2"``),
    None when it names none."""
    base = split_variant(str(claim_id))[0]
    return base if base in (REGISTRY if registry is None else registry) else None


def threshold(claim_id: str, metric: str, control: bool = False) -> float:
    """The registered threshold of ``claim_id``'s condition on ``metric`` (with ``control``,
    of its control on ``metric``): what a figure draws its threshold line at, so that the line
    moves with the spec."""
    s = spec(claim_id)
    pool = [c.condition for c in s.controls] if control else list(s.conditions)
    for c in pool:
        if c.metric == metric:
            return c.threshold
    kind = "control" if control else "condition"
    raise KeyError(f"{claim_id} has no registered {kind} on {metric!r}")


def setting(claim_id: str, key: str):
    """A registered setting (hyperparameter) of ``claim_id``, e.g.
    ``setting("IR-5", "sample_complexity.q")``."""
    return spec(claim_id).hyperparameters[key]


def spec(claim_id: str) -> ClaimSpec:
    """The registered spec of ``claim_id`` (``KeyError`` naming the registered ids)."""
    try:
        return REGISTRY[claim_id]
    except KeyError:
        raise KeyError(f"claim {claim_id!r} is not registered; registered: "
                       f"{sorted(REGISTRY)}") from None
