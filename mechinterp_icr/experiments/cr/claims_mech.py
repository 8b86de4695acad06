"""The CR mechanism claims CR-5, CR-6, CR-7: pure functions from per-seed numbers to
:class:`~mechinterp_icr.claims.Claim` objects decided by the registry
(``claims.cr_registry``). Re-exported by ``experiments.cr.claims``.

- CR-5 from ``mechanism.mechanism_roles`` of the 1-layer 2-head mechanism model (the 2-layer
  main model's head roles are reported beside it, not deciding);
- CR-6 from ``mechanism.construction_numbers``;
- CR-7 from the causal arms per finetuning learning rate (OV and KQ each preset and
  frozen), the onset timings (reported) and the synthetic placebos.

Nothing here trains, reads a run directory or draws a figure.
"""

from __future__ import annotations

import re
from typing import Any

from mechinterp_icr.claims import Claim, spec
from mechinterp_icr.claims.cr_registry import CR7_LRS
from mechinterp_icr.claims.protocol import condition, evaluate_condition, spec_controls
from mechinterp_icr.interp.ovkq import (
    ARM_STATISTICS,
    ONSET_FRACTION,
    PLATEAU_TAIL,
    arm_speedups,
    fraction_name,
    synthetic_arm_speedups,
)

__all__ = ["CR7_PLACEBO_METRICS", "cr5_claim", "cr5_claim_from_metrics",
           "cr5_seed_metrics", "cr5_table", "cr6_claim", "cr7_claim", "cr7_claim_from_metrics",
           "cr7_convention_notes", "cr7_seed_metrics", "lr_name"]


# ------------------------------------------------------------------------------------------
# CR-5
# ------------------------------------------------------------------------------------------
def cr5_seed_metrics(mech: dict[str, Any], two_layer: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """One seed's CR-5 metrics from ``mechanism.mechanism_roles`` (and, beside it, the 2-layer
    model's ``head_roles`` at the end of ft-icl)."""
    ft, pt, con = mech["ft"], mech["pt"], mech["construction"]
    m = {"relation_role": ft["relation_score"], "subject_role": ft["subject_score"],
         "relation_margin": ft["relation_margin"], "subject_margin": ft["subject_margin"],
         "distinct_heads": float(ft["distinct"]),
         "relation_head": ft["relation_head"], "subject_head": ft["subject_head"],
         "relation_other_head": ft["relation_other"], "subject_other_head": ft["subject_other"],
         "relation_recovery": ft["recovery"]["relation_score"],
         "subject_recovery": ft["recovery"]["subject_score"],
         "pt_relation_role": pt["relation_score"],
         "pt_relation_recovery": pt["recovery"]["relation_score"],
         "subject_same_query_changed": mech["subject_same_query_changed"],
         "construction_relation": con["relation_score"],
         "construction_subject": con["subject_score"],
         "icl_heldout_exact": mech.get("icl_heldout_exact")}
    v = (two_layer or {}).get("ft-icl")
    if v:
        m.update({"two_layer_relation_head": v["relation_head"],
                  "two_layer_subject_head": v["subject_head"],
                  "two_layer_relation_recovery": v["relation_recovery"],
                  "two_layer_subject_recovery": v["subject_recovery"],
                  "two_layer_relation_moved": v["relation_moved"],
                  "two_layer_subject_moved": v["subject_moved"]})
    return m


def cr5_claim_from_metrics(per_seed: dict[str, dict[str, Any]], figure: str | None = None,
                           details: dict | None = None) -> Claim:
    """CR-5 from per-seed metrics (:func:`cr5_seed_metrics`)."""
    return Claim.from_spec(
        spec("CR-5"), per_seed, controls=spec_controls(spec("CR-5"), per_seed),
        notes="Role score = share of held-out prompts whose answer the head's patch (all "
              "positions, from the source prompt) moves to the target, minus the share that "
              "already gave it (chance-corrected; the normalised logit-difference recovery "
              "is reported beside it as relation_recovery / subject_recovery). Margin = the "
              "role head's score / max(the other head's, 0.05). The 2-layer model's roles "
              "(two_layer_*) are reported beside, not deciding. The mechanism model's "
              "embeddings are construction-matched and frozen; the variant with learned "
              "embeddings (not run here: it needs its own PT per seed) has the Subject role "
              "split with the direct path W_E W_U (moved 0.39-0.62 on seeds 0-2, below 0.5 "
              "on seed 2; docs/interp.md).",
        figure=figure, details=dict(details or {}))


def cr5_claim(mech5: dict, two_layer: dict, figure: str | None) -> Claim:
    """CR-5 from ``mechanism_roles`` records per seed (``mech5``) and the 2-layer model's
    ``head_roles`` per seed (``two_layer``)."""
    per = {str(s): cr5_seed_metrics(r, two_layer.get(s)) for s, r in mech5.items()}
    details = {str(s): {"mechanism_model": {k: r[k] for k in ("ft", "pt", "construction")},
                        "two_layer": {k: (two_layer.get(s) or {}).get(k)
                                      for k in ("ft-icl", "ft-iclgrm", "pretrain",
                                                "trajectory")}}
               for s, r in mech5.items()}
    return cr5_claim_from_metrics(per, figure, details)


def cr5_table(two_layer: dict) -> list[dict[str, Any]]:
    """The 2-layer model's head roles across the ft-icl checkpoints, one row per (seed,
    checkpoint)."""
    return [{"seed": s, **row} for s, r in two_layer.items() for row in r.get("trajectory", [])]


# ------------------------------------------------------------------------------------------
# CR-6
# ------------------------------------------------------------------------------------------
def cr6_claim(cr6: dict, figure: str | None) -> Claim:
    """CR-6 from the construction numbers per seed (``mechanism.construction_numbers``)."""
    per = {str(s): r for s, r in cr6.items()}
    return Claim.from_spec(
        spec("CR-6"), per,
        controls=spec_controls(spec("CR-6"), per),
        notes="Constructed weights loaded into a real 1-layer 2-head HookedTransformer "
              "(orthonormal one-hot embeddings, separate output block); own format = the "
              "one-token-relation PT format for the PT construction, held-out ICL for the ICL "
              "construction; see docs/interp.md. ICL accuracies share ties at the top logit "
              "(a prompt scores 1/n when the answer is one of n tied tokens): with the "
              "Relation OV zeroed, and for the PT construction on ICL, about 83 tokens tie "
              "at the top and a plain argmax picks [PAD]; the plain argmax "
              "(*_exact_argmax), attribute-restricted accuracy (*_restricted, chance 1/L) "
              "and the tie count (*_n_top) are reported beside.",
        figure=figure)


# ------------------------------------------------------------------------------------------
# CR-7
# ------------------------------------------------------------------------------------------
def lr_name(lr: float) -> str:
    """3e-3 -> '3e-3' (the metric suffix of a learning rate)."""
    mant, exp = f"{float(lr):e}".split("e")
    return f"{float(mant):g}e{int(exp)}"


def _derived(s) -> set[str]:
    """The metrics spec ``s`` derives from the stored ones when it decides (``derive``): not
    a job's measurement, so never stored per seed."""
    if s.derive is None:
        return set()
    per, pooled = s.derive(s.id, {"0": {}})
    return {k for m in per.values() for k in m} | set(pooled)


# the placebo readings of CR-7's controls (the registered controls' metrics) that
# ``placebo_orders`` measures on the synthetic schedules; the arm placebos are computed here,
# the mutual-coupling verdict is derived from them when the claim is decided
_CR7_DERIVED = _derived(spec("CR-7"))
CR7_PLACEBO_METRICS = tuple(c.condition.metric for c in spec("CR-7").controls
                            if not c.condition.metric.endswith("_speedup")
                            and c.condition.metric not in _CR7_DERIVED)
_AT = re.compile(r"^ov_first_at_(\d+)_lr_(.+)$")


def cr7_seed_metrics(cascade: dict[str, Any], placebo: dict[str, Any]) -> dict[str, Any]:
    """One seed's CR-7 metrics from a ``run_cascade`` record and ``placebo_orders``: the
    schedule placebo readings and the arm statistics on the synthetic arm curves
    (``interp.ovkq.synthetic_arm_speedups``); per finetuning lr ``<n>`` (:func:`lr_name`)
    the onset order ``ov_first_lr_<n>`` and onsets (reported, not deciding; also at each
    reported fraction ``<p>``, ``ov_first_at_<p>_lr_<n>``), and with the causal arms each
    arm's speed-up ``<arm>_<probe>_speedup_lr_<n>`` (``interp.ovkq.onset_speedup``,
    recomputed from the stored curves; also ``..._at_<p>_lr_<n>``), its onsets and held-out
    ICL. Without the arms their metrics are absent (the conditions on them cannot be read)."""
    m: dict[str, Any] = {k: placebo.get(k) for k in CR7_PLACEBO_METRICS}
    m.update(synthetic_arm_speedups())
    m["pt_typed"] = cascade.get("pt_typed")
    for lr, r in cascade["by_lr"].items():
        n = lr_name(float(lr))
        m.update({f"ov_first_lr_{n}": r["ov_first"], f"t_onset_ov_lr_{n}": r["t_onset_ov"],
                  f"t_onset_kq_lr_{n}": r["t_onset_kq"], f"lead_steps_lr_{n}": r["lead_steps"],
                  f"kq_gain_lr_{n}": r.get("kq_gain"), f"ov_gain_lr_{n}": r.get("ov_gain"),
                  f"icl_heldout_exact_lr_{n}": r["icl_heldout_exact"],
                  f"relation_head_lr_{n}": r["relation_head"]})
        for p, o in (r.get("onsets") or {}).items():
            m.update({f"ov_first_at_{p}_lr_{n}": o["ov_first"],
                      f"t_onset_ov_at_{p}_lr_{n}": o["t_onset_ov"],
                      f"t_onset_kq_at_{p}_lr_{n}": o["t_onset_kq"]})
        arms = r.get("arms")
        if not arms:
            continue
        frac = r.get("onset_fraction", ONSET_FRACTION)
        tail = r.get("plateau_tail", PLATEAU_TAIL)
        for f in [frac] + [o["fraction"] for o in (r.get("onsets") or {}).values()]:
            at = "" if f == frac else f"at_{fraction_name(f)}_"
            for arm, v in arm_speedups(arms, r, f, tail).items():
                m[f"{arm}_{ARM_STATISTICS[arm]}_speedup_{at}lr_{n}"] = v
        for arm, a in arms.items():
            m.update({f"t_onset_ov_{arm}_lr_{n}": a["t_onset_ov"],
                      f"t_onset_kq_{arm}_lr_{n}": a["t_onset_kq"],
                      f"icl_heldout_exact_{arm}_lr_{n}": a.get("icl_heldout_exact")})
    return m


def cr7_convention_notes(per_seed: dict[str, dict[str, Any]]) -> str:
    """SPEC 0 "robust to conventions" for CR-7: the onset order (reported, not deciding) at
    the registered and at each reported onset fraction (how many seeds read OV first per
    learning rate), and whether the registered arm conditions would be met with the onset
    levels at each reported fraction (the ``..._at_<p>_lr_<n>`` speed-ups) instead of the
    registered one: if not, the verdict flips under that convention. Empty without reported
    fractions."""
    seeds = sorted(per_seed)
    pcts = sorted({int(g.group(1)) for m in per_seed.values() for k in m
                   if (g := _AT.match(k))})
    if not pcts:
        return ""

    def first(metric_of) -> str:
        return ", ".join(
            f"{sum(1 for m in per_seed.values() if m.get(metric_of(lr)) == 1.0)}/{len(seeds)} "
            f"at lr {lr}" for lr in CR7_LRS)

    def arms_met(at: str) -> bool | None:  # None: some arm condition cannot be read there
        met = [evaluate_condition(condition(
            c.metric.replace("_lr_", f"_{at}lr_"), c.op, c.threshold, c.rule,
            min_fraction=c.min_fraction), per_seed)["met"] for c in spec("CR-7").conditions]
        return False if False in met else (None if None in met else True)

    base = arms_met("")
    out = [f"onset order (reported, not deciding): OV first at 10% of the gain on "
           f"{first(lambda lr: f'ov_first_lr_{lr}')}"]
    for p in pcts:
        met = arms_met(f"at_{p}_")
        same = "as at the registered level" if met == base else (
            "unlike the registered level: the verdict flips under this convention")
        would = {True: "be met", False: "not be met", None: "not be readable"}[met]
        out.append(f"at {p}%: OV first on {first(lambda lr, p=p: f'ov_first_at_{p}_lr_{lr}')}"
                   f"; the arm conditions read at the {p}% onset levels would {would} ({same})")
    return "Conventions: " + "; ".join(out) + "."


def cr7_claim_from_metrics(per_seed: dict[str, dict[str, Any]], notes: str = "",
                           figure: str | None = None, details: dict | None = None) -> Claim:
    """CR-7 from per-seed metrics (:func:`cr7_seed_metrics`); the notes say how the onset
    order reads under each reported onset fraction (:func:`cr7_convention_notes`)."""
    return Claim.from_spec(
        spec("CR-7"), per_seed, controls=spec_controls(spec("CR-7"), per_seed),
        notes=" ".join(x for x in (
            "Continuous probes of the Relation head, both raw pre-softmax logits (linear in "
            "the weights they read, so weights moving together rise together): OV = "
            "same-type minus other-type mean OV logit over attribute tokens (ov_margin); "
            "KQ = the query's mean attention score on the in-context attributes minus "
            "that on the other visible tokens (kq_logit). Total gain at the plateau (mean "
            "of the last 10% of the logged steps) minus the start, onset = first logged step "
            "with 10% of it; OV first = OV onset strictly earlier (a tie is not OV first). "
            "Causal arms, each finetuned like the normal run (same PT state, seed, data order, "
            "steps) and read on its Relation head: OV preset / KQ preset = that head's W_V, "
            "W_O / W_Q, W_K, b_Q, b_K set to the normal run's end values; OV frozen / KQ "
            "frozen = their gradients masked (they stay at their PT values while everything "
            "else trains). Each arm is read by its speed-up: the normal run's onset step of "
            "the probe the rule asks about over the step at which the arm's probe reaches the "
            "normal run's onset level (0: never within the budget, which meets 'no earlier "
            "than' and fails 'no later than'; nan: the normal probe does not rise). Both "
            "heads' probes and each arm's held-out ICL are in the details. Placebo: the "
            "OV-first and KQ-first synthetic schedules (linear ramps, and the same orders "
            "with OV convex and KQ linear) must be read in their order, a simultaneous one "
            "and one with KQ a checkpoint ahead must not be read as OV first, and a schedule "
            "starting together with OV linear and KQ convex is read as OV first at every "
            "onset fraction (why the onset order does not decide); the arm statistics on a "
            "synthetic one-way cascade must pass (ii)-(v) and on a synthetic mutual coupling "
            "must fail (iv) or (v).",
            cr7_convention_notes(per_seed), notes) if x).strip(),
        figure=figure, details=dict(details or {}))


def cr7_claim(cr7: dict, placebo: dict, ccfg, figure: str | None) -> Claim:
    """CR-7 from the cascade results (``mechanism_model.run_cascade`` without its models) and the
    placebo readings (``interp.ovkq.placebo_orders``) per seed."""
    per = {str(s): cr7_seed_metrics(r, placebo[s]) for s, r in cr7.items()}
    keys = ("steps", "ov", "kq", "t_onset_ov", "t_onset_kq", "onsets", "kq_gain", "ov_gain")

    def pick(v: dict, ks) -> dict:
        return {k: v.get(k) for k in ks}

    details = {str(s): {"by_lr": {lr: {**pick(v, keys + ("icl_curve", "relation_head",
                                                          "ov_precision", "kq_top_attr",
                                                          "ov_contrast", "kq_mass")),
                                       "arms": {a: pick(x, keys + (
                                           "other_ov", "other_kq", "icl_curve",
                                           "icl_heldout_exact"))
                                                for a, x in (v.get("arms") or {}).items()}}
                                  for lr, v in r["by_lr"].items()},
                        "placebo": placebo[s]["schedules"]} for s, r in cr7.items()}
    arms = ("with the causal arms (OV preset, OV frozen, KQ preset, KQ frozen) at each of "
            "those lrs"
            if getattr(ccfg, "causal_arms", False) else
            "without the causal arms (cascade.causal_arms = false: their conditions are unmet)")
    notes = (f"Mechanism model ({ccfg.embedding} embeddings) pretrained {ccfg.pt_steps} steps "
             f"at lr {ccfg.pt_lr:g} (weight decay {ccfg.pt_weight_decay:g}), finetuned "
             f"'{ccfg.ft_trainable}' for {ccfg.ft_steps} steps "
             f"at each lr {[lr_name(x) for x in ccfg.ft_lrs]} from the same PT state, {arms}; "
             f"probes at every step up to {ccfg.dense_until}, then log-spaced and "
             f"every {ccfg.checkpoint_every} steps.")
    return cr7_claim_from_metrics(per, notes, figure, details)
