"""CR-7 measurements: continuous OV and KQ probes of a 1-layer attention-only model across
finetuning checkpoints, when each of them rises, and the synthetic-schedule placebo.

Probes (both continuous, and both in the same units: raw pre-softmax logits, each a linear
function of the weights it reads, so that the two rise on the same schedule when the weights
move together; see docs/registry.md):

- **OV probe** ``ov_margin`` (:func:`ov_margin`): in the head's full OV circuit
  ``W_E W_V W_O W_U`` restricted to attribute tokens, the mean logit an attribute gives the
  other attributes of its own type minus the mean it gives attributes of other types (in
  output logits; linear in ``W_O``).
- **KQ probe** ``kq_logit`` (:func:`checkpoint_probes`): at the query position of a fixed
  batch of held-out ICL prompts, the mean pre-softmax attention score on the in-context
  attribute tokens minus the mean score on the other visible tokens (in attention logits,
  ``hook_attn_scores``; linear in ``W_K``).

The earlier probes ``ov_contrast`` (the margin divided by the block's spread: a ratio that
rises steeply then flattens) and ``kq_mass`` (a softmax attention mass: flat, then a jump)
read OV and KQ weights moving together as OV first; both are still logged as diagnostics.

:func:`checkpoint_probes` logs both (and the rank-based ``ov_precision`` / ``kq_top_attr`` of
``interp.circuits``, as diagnostics) for every head at every checkpoint. :func:`plateau_gain`:
the total gain is measured at the plateau (mean of the last ``tail`` share of checkpoints, at
least 3) minus the start; :func:`onset_step`: the first checkpoint whose gain over the start
reaches ``frac`` (the claim's 10%) of it. :func:`cascade_timing` picks the Relation head
(larger attention mass on the demo attributes at the end) and says whether its OV onset
comes strictly before its KQ onset, at the claim's fraction and at each reported fraction
(``onsets``, keyed by :func:`fraction_name`); :func:`head_timing` reads the same numbers for
a given head (the causal arms of ``experiments.cr.mechanism_model``, read on the normal run's
Relation head), and :func:`onset_speedup` / :func:`arm_speedups` compare an arm with the
normal run (what CR-7 decides on; the onset order is reported only).

Placebo (:func:`synthetic_schedule`, :func:`placebo_orders`): models interpolated between
the PT and the ICL construction (``models.construction``). Positive (the same probe and onset
code must read each order correctly): one schedule moving the Relation head's OV first and
its KQ second, one the other way round (both linear ramps), and the same two orders with the
curve shapes swapped (KQ linear, OV convex: a cubic ramp), which must be read by onset, not
by shape, and one where both start together with OV linear and KQ convex (``same_start``),
which is read "OV first" at every onset fraction: why the onset order cannot decide.
Negative (must NOT be read as OV first): both moving together, and KQ leading by one
checkpoint (``kq_leads``). The arm statistics have their own placebo on synthetic arm curves
of a one-way cascade and of a mutual coupling (:func:`synthetic_arm_curves`,
:func:`synthetic_arm_speedups`).

Nothing here trains: the mechanism model is trained by the CR experiment
(``experiments.cr.mechanism_model``), which passes :func:`checkpoint_probes` as its evaluation.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch

__all__ = ["KQ_PROBE", "ONSET_FRACTION", "OV_PROBE", "PLACEBO_METRICS", "PLACEBO_ORDERS",
           "PLATEAU_TAIL", "SCHEDULE_RAMPS", "cascade_timing", "checkpoint_probes", "fraction_name",
           "ARM_STATISTICS", "SYNTHETIC_ARM_RATES", "arm_speedups", "half_gain_step",
           "head_timing", "level_step", "onset_speedup", "onset_step",
           "synthetic_arm_curves", "synthetic_arm_speedups",
           "ov_contrast", "ov_margin", "placebo_orders", "plateau_gain", "probe_rows",
           "synthetic_schedule"]

ONSET_FRACTION = 0.1  # SPEC: onset = first checkpoint with 10% of the total gain
PLACEBO_NOISE = 0.2  # std of the fixed noise on the placebo Relation head's W_O
PLATEAU_TAIL = 0.1  # the plateau = mean of the last 10% of checkpoints (at least 3)
OV_PROBE, KQ_PROBE = "ov_margin", "kq_logit"  # the claim's probes (raw logits, module doc)
PLACEBO_ORDERS = ("ov_first", "kq_first", "simultaneous", "kq_leads", "swapped_ov_first",
                  "swapped_kq_first", "same_start")
# each schedule's ramps on the path t in [0, 1]: (start, width, shape) of the OV and of the KQ
# interpolation coefficient; "linear": (t - start) / width clipped to [0, 1], "cubic": its
# cube (convex: slow, then fast). kq_leads' OV starts one checkpoint after its KQ (set per
# n_points in synthetic_schedule). The swapped pair moves OV on a cubic ramp and KQ on a
# linear one, each built so that reading by shape (the half-gain step, speed) gives the
# opposite order to reading by onset: in swapped_ov_first OV's slow cubic ramp over [0, 0.8]
# starts first (onset t = 0.37) but reaches half its gain (t = 0.635) after KQ's linear ramp
# over [0.4, 0.8] (onset 0.44, half 0.6); in swapped_kq_first KQ's slow linear ramp over
# [0, 0.8] starts first (onset 0.08, half 0.4) and OV's fast cubic ramp over [0.15, 0.25]
# starts later (onset 0.196) but reaches half its gain first (0.229).
SCHEDULE_RAMPS = {
    "ov_first": ((0.0, 0.4, "linear"), (0.4, 0.4, "linear")),
    "kq_first": ((0.4, 0.4, "linear"), (0.0, 0.4, "linear")),
    "simultaneous": ((0.0, 0.5, "linear"), (0.0, 0.5, "linear")),
    "kq_leads": ((None, 0.5, "linear"), (0.0, 0.5, "linear")),
    "swapped_ov_first": ((0.0, 0.8, "cubic"), (0.4, 0.4, "linear")),
    "swapped_kq_first": ((0.15, 0.1, "cubic"), (0.0, 0.8, "linear")),
    # both start together, OV linear and KQ convex: what the measured curves look like, and
    # read "OV first" at every onset fraction (why onset order does not decide CR-7)
    "same_start": ((0.0, 0.6, "linear"), (0.0, 0.6, "cubic")),
}
# the placebo metric of each schedule: (name, the reading it is 1 for, control kind); a
# positive control reads the schedule's own order, a negative one whether it is (wrongly)
# read as OV first
PLACEBO_METRICS = {
    "ov_first": ("placebo_ov_first", "ov_first", "positive"),
    "kq_first": ("placebo_kq_first", "kq_first", "positive"),
    "simultaneous": ("placebo_simultaneous_ov_first", "ov_first", "negative"),
    "kq_leads": ("placebo_kq_leads_ov_first", "ov_first", "negative"),
    "swapped_ov_first": ("placebo_swapped_ov_first", "ov_first", "positive"),
    "swapped_kq_first": ("placebo_swapped_kq_first", "kq_first", "positive"),
    "same_start": ("placebo_same_start_ov_first", "ov_first_every_fraction", "positive"),
}


def half_gain_step(steps, values, frac: float = 0.5) -> float:
    """First step whose gain over the start reaches ``frac`` of the final gain (nan without
    gain). Kept as a diagnostic; the claim uses :func:`onset_step`."""
    v = np.asarray(values, dtype=float)
    gain = v[-1] - v[0]
    if not np.isfinite(gain) or gain <= 1e-9:
        return float("nan")
    idx = np.nonzero(v - v[0] >= frac * gain)[0]
    return float(np.asarray(steps)[idx[0]])


def fraction_name(frac: float) -> str:
    """0.05 -> '5': the percent a reported onset fraction is named by in metric names
    (``ov_first_at_5_lr_3e-3``) and in ``onsets``."""
    return str(int(round(100 * float(frac))))


def plateau_gain(values, tail: float = PLATEAU_TAIL) -> float:
    """The total gain of a probe curve: the mean of its last ``tail`` share of values (at
    least 3, at most all) minus its first value; nan for fewer than 2 values."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float("nan")
    k = min(len(v), max(3, int(math.ceil(tail * len(v)))))
    return float(v[-k:].mean() - v[0])


def onset_step(steps, values, frac: float = ONSET_FRACTION, tail: float = PLATEAU_TAIL
               ) -> float:
    """First step whose gain over the start reaches ``frac`` of the total gain, the total
    gain measured at the plateau (:func:`plateau_gain`). nan when the probe does not rise."""
    v = np.asarray(values, dtype=float)
    gain = plateau_gain(v, tail)
    if not np.isfinite(gain) or gain <= 1e-9:
        return float("nan")
    # relative tolerance: a value at exactly 10% of the gain must not fall on either side by
    # rounding (two linear probes on one schedule then read as a tie, not as an order)
    idx = np.nonzero(v - v[0] >= frac * gain * (1 - 1e-6))[0]
    return float(np.asarray(steps)[idx[0]])


@torch.no_grad()
def ov_margin(model, task, head: int, layer: int = 0) -> float:
    """The continuous OV probe (module doc): same-type minus other-type mean OV logit over
    attribute tokens, the token itself excluded."""
    from mechinterp_icr.interp.circuits import full_ov, restrict

    V, L = task.cfg.n_values, task.cfg.n_types
    n = L * V
    M = restrict(full_ov(model, layer, head), task.attr_ids, task.attr_ids).double()
    t = torch.arange(n) // V
    same = (t[:, None] == t[None, :]) & ~torch.eye(n, dtype=torch.bool)
    other = t[:, None] != t[None, :]
    per = (M * same).sum(1) / same.sum(1) - (M * other).sum(1) / other.sum(1)
    return float(per.mean())


@torch.no_grad()
def ov_contrast(model, task, head: int, layer: int = 0) -> float:
    """The CR-7 OV probe: :func:`ov_margin` divided by the standard deviation of the
    off-diagonal attribute-to-attribute OV logits (a d'-like contrast: bounded by the block's
    own spread, so it plateaus once the type structure is formed even while cross-entropy keeps
    growing the logit scale; 0 for an all-zero block)."""
    from mechinterp_icr.interp.circuits import full_ov, restrict

    n = task.cfg.n_types * task.cfg.n_values
    M = restrict(full_ov(model, layer, head), task.attr_ids, task.attr_ids).double()
    sd = float(M[~torch.eye(n, dtype=torch.bool)].std())
    return ov_margin(model, task, head, layer) / sd if sd > 1e-9 else 0.0


def checkpoint_probes(task, batch):
    """A checkpoint evaluation ``fn(model) -> metrics``: per head ``h{h}_ov_margin`` and
    ``h{h}_kq_logit`` (the two continuous probes of the claim, both raw logits),
    ``h{h}_ov_contrast``, ``h{h}_kq_mass``, ``h{h}_ov`` (ov_precision) and ``h{h}_kq``
    (kq_top_attr) as diagnostics, and ``icl_heldout_exact``
    on ``batch`` (an ICL batch with ``query_pos``, ``roles`` and ``answer`` in its meta).
    One forward pass per call (the KQ numbers of ``interp.circuits.kq_probe`` from its
    cached attention pattern)."""
    from mechinterp_icr.interp.circuits import ov_probe

    is_attr = (batch.meta["roles"] == 5).float()  # (B, T) in-context attribute tokens
    qp = torch.as_tensor(batch.meta["query_pos"]).long()
    rows = torch.arange(len(qp))
    T = is_attr.shape[1]
    visible = (torch.arange(T)[None, :] <= qp[:, None]).float()  # causal row of the query
    other = visible * (1 - is_attr)
    names = ("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_attn_scores")

    @torch.no_grad()
    def fn(model):
        dev = next(model.parameters()).device
        logits, cache = model.run_with_cache(batch.tokens.to(dev),
                                             names_filter=lambda n: n in names)
        pat = cache["blocks.0.attn.hook_pattern"].cpu()  # (B, H, T, T)
        sc = cache["blocks.0.attn.hook_attn_scores"].cpu().double()  # pre-softmax, masked
        out = {}
        for h in range(model.cfg.n_heads):
            row = pat[rows, h, qp]  # (B, T) the query's attention
            srow = torch.where(visible > 0, sc[rows, h, qp], torch.zeros((), dtype=sc.dtype))
            on_attr = (srow * is_attr).sum(-1) / is_attr.sum(-1).clamp(min=1)
            on_other = (srow * other).sum(-1) / other.sum(-1).clamp(min=1)
            out[f"h{h}_kq_logit"] = float((on_attr - on_other).mean())
            out[f"h{h}_ov_contrast"] = ov_contrast(model, task, h)
            out[f"h{h}_ov_margin"] = ov_margin(model, task, h)
            out[f"h{h}_kq_mass"] = float((row * is_attr).sum(-1).mean())
            out[f"h{h}_ov"] = ov_probe(model, task, 0, h)["ov_precision"]
            out[f"h{h}_kq"] = float(is_attr[rows, row.argmax(-1)].mean())
        pred = logits[rows.to(dev), qp.to(dev)].argmax(-1).cpu()
        out["icl_heldout_exact"] = float((pred == batch.meta["answer"]).float().mean())
        return out

    return fn


def _order(t_ov: float, t_kq: float) -> dict[str, float]:
    both = bool(np.isfinite(t_ov) and np.isfinite(t_kq))
    return {"ov_first": float(t_ov < t_kq) if both else 0.0,
            "kq_first": float(t_kq < t_ov) if both else 0.0}


def _timing(steps, rows: list[dict[str, Any]], rel: int, frac: float = ONSET_FRACTION,
            tail: float = PLATEAU_TAIL, fractions=()) -> dict[str, Any]:
    ov = [r[f"h{rel}_{OV_PROBE}"] for r in rows]
    kq = [r[f"h{rel}_{KQ_PROBE}"] for r in rows]
    t_ov, t_kq = onset_step(steps, ov, frac, tail), onset_step(steps, kq, frac, tail)
    both = np.isfinite(t_ov) and np.isfinite(t_kq)
    onsets = {}
    for f in fractions:
        a, b = onset_step(steps, ov, f, tail), onset_step(steps, kq, f, tail)
        onsets[fraction_name(f)] = {"fraction": float(f), "t_onset_ov": a, "t_onset_kq": b,
                                    **_order(a, b)}
    return {"steps": list(steps), "ov": ov, "kq": kq, "onset_fraction": float(frac),
            "t_onset_ov": t_ov, "t_onset_kq": t_kq, **_order(t_ov, t_kq),
            "lead_steps": (t_kq - t_ov) if both else float("nan"),
            "onsets": onsets,
            "ov_gain": plateau_gain(ov, tail), "kq_gain": plateau_gain(kq, tail),
            "t_half_ov": half_gain_step(steps, ov), "t_half_kq": half_gain_step(steps, kq),
            "ov_start": ov[0], "ov_end": ov[-1], "kq_start": kq[0], "kq_end": kq[-1]}


def head_timing(rows: list[dict[str, Any]], head: int, frac: float = ONSET_FRACTION,
                tail: float = PLATEAU_TAIL, fractions=()) -> dict[str, Any]:
    """The OV and KQ curves of ``head`` from per-checkpoint probe ``rows`` (those of
    :func:`checkpoint_probes` with a ``step``, sorted by step): their onsets at ``frac`` and
    at each of ``fractions`` (``onsets``, keyed by :func:`fraction_name`), ``ov_first`` /
    ``kq_first`` (strictly earlier; a tie or a probe that does not rise is neither), and
    their total gains ``ov_gain`` / ``kq_gain`` (:func:`plateau_gain`)."""
    return _timing([r["step"] for r in rows], rows, head, frac, tail, fractions)


def level_step(steps, values, level: float) -> float:
    """First step whose value reaches ``level`` (relative tolerance 1e-6, as
    :func:`onset_step`); nan when it never does."""
    v = np.asarray(values, dtype=float)
    tol = 1e-6 * max(1.0, abs(float(level)))
    idx = np.nonzero(v >= level - tol)[0]
    return float(np.asarray(steps)[idx[0]]) if len(idx) else float("nan")


def onset_speedup(arm: dict[str, Any], normal: dict[str, Any], probe: str,
                  frac: float = ONSET_FRACTION, tail: float = PLATEAU_TAIL) -> float:
    """How much sooner a causal arm's ``probe`` curve (``"ov"`` or ``"kq"``) reaches the
    **normal run's** onset level (the normal start plus ``frac`` of the normal plateau gain)
    than the normal run does: the normal onset step over the arm's step at that level (2: in
    half the steps; 0.5: twice as late). Both are ``head_timing``-style dicts with ``steps``
    and the probe's curve. Read against the normal run's level, not the arm's own gain: an
    arm whose probe barely moves must not get an early onset from 10% of its own small gain.

    An arm that never reaches the level within its budget gets 0 (infinitely late: "or never"
    meets a "no earlier than" rule and fails a "no later than" one, whatever the budget; a
    censored ratio would read "never" as "just after the budget"). An arm already at the
    level at step 0 is read at its first logged step after 0 (a bound: it got there by then).
    NaN (cannot be read) when the normal curve does not rise or its onset is at step 0, or
    when the arm's curve is empty or has a non-number anywhere (no number, no evidence)."""
    n_steps, n_v = normal["steps"], normal[probe]
    n_on = onset_step(n_steps, n_v, frac, tail)
    gain = plateau_gain(n_v, tail)
    if not (np.isfinite(n_on) and np.isfinite(gain)) or n_on <= 0 or gain <= 0:
        return float("nan")
    a_v = np.asarray(arm.get(probe) or [], dtype=float)
    if len(a_v) == 0 or len(a_v) != len(arm.get("steps") or []) or not np.all(np.isfinite(a_v)):
        return float("nan")  # no number on some step: "never" cannot be told from "unknown"
    a_on = level_step(arm["steps"], arm[probe], float(n_v[0]) + frac * gain * (1 - 1e-6))
    if not np.isfinite(a_on):
        return 0.0
    if a_on <= 0:
        a_on = float(min((x for x in arm["steps"] if x > 0), default=1.0))
    return n_on / a_on


# the four causal arms' statistics (SPEC 1, CR-7): (arm, probe read) in the order (ii)-(v)
ARM_STATISTICS = {"ov_preset": "kq", "ov_frozen": "kq", "kq_preset": "ov", "kq_frozen": "ov"}


def arm_speedups(arms: dict[str, dict[str, Any]], normal: dict[str, Any],
                 frac: float = ONSET_FRACTION, tail: float = PLATEAU_TAIL) -> dict[str, float]:
    """``{arm: onset_speedup}`` of every arm in ``arms`` that :data:`ARM_STATISTICS` names,
    each read on the probe the claim asks about (the OV arms move KQ, the KQ arms OV)."""
    return {a: onset_speedup(arms[a], normal, p, frac, tail)
            for a, p in ARM_STATISTICS.items() if a in arms}


# the synthetic arm curves of CR-7's placebo: rates of the two coupled logistic-like probes
# (per step, 300 steps), chosen so that the normal run rises over the budget in both models
SYNTHETIC_ARM_RATES = {"one_way": (0.02, 0.05, 0.0), "mutual": (0.1, 0.1, 0.02)}


def synthetic_arm_curves(coupling: str, n_steps: int = 300) -> dict[str, dict[str, Any]]:
    """The normal run and the four causal arms of a synthetic two-probe system, for the arm
    statistics' placebo (SPEC 1, CR-7). ``one_way``: a one-way cascade, OV' = a (1 - OV),
    KQ' = b OV (1 - KQ) (KQ waits for OV, OV does not wait for KQ). ``mutual``: mutual
    coupling without an order, OV' = a (e + KQ)(1 - OV), KQ' = b (e + OV)(1 - KQ). Both start
    at 0; a preset arm starts the part at the normal run's end value and trains on, a frozen
    arm holds it at 0. Returns ``{run: {"steps", "ov", "kq"}}`` for ``normal`` and the four
    arms of :data:`ARM_STATISTICS`."""
    if coupling not in SYNTHETIC_ARM_RATES:
        raise ValueError(f"coupling {coupling!r} not in {sorted(SYNTHETIC_ARM_RATES)}")
    a, b, e = SYNTHETIC_ARM_RATES[coupling]

    def run(ov0: float, kq0: float, hold: str = "") -> dict[str, Any]:
        ov, kq, ovs, kqs = ov0, kq0, [], []
        for _ in range(n_steps + 1):
            ovs.append(ov)
            kqs.append(kq)
            if coupling == "one_way":
                d_ov, d_kq = a * (1 - ov), b * ov * (1 - kq)
            else:
                d_ov, d_kq = a * (e + kq) * (1 - ov), b * (e + ov) * (1 - kq)
            ov = ov if hold == "ov" else ov + d_ov
            kq = kq if hold == "kq" else kq + d_kq
        return {"steps": list(range(n_steps + 1)), "ov": ovs, "kq": kqs}

    normal = run(0.0, 0.0)
    return {"normal": normal, "ov_preset": run(normal["ov"][-1], 0.0),
            "ov_frozen": run(0.0, 0.0, hold="ov"), "kq_preset": run(0.0, normal["kq"][-1]),
            "kq_frozen": run(0.0, 0.0, hold="kq")}


def synthetic_arm_speedups(frac: float = ONSET_FRACTION, tail: float = PLATEAU_TAIL
                           ) -> dict[str, float]:
    """The arm statistics (:func:`arm_speedups`) on both synthetic systems
    (:func:`synthetic_arm_curves`), as ``placebo_<coupling>_<arm>_speedup``: what CR-7's
    placebo controls read (a one-way cascade must pass (ii)-(v), mutual coupling must fail
    (iv) or (v): ``claims.derive.cr7_mutual_derive``)."""
    out = {}
    for coupling in SYNTHETIC_ARM_RATES:
        c = synthetic_arm_curves(coupling)
        for arm, v in arm_speedups(c, c["normal"], frac, tail).items():
            out[f"placebo_{coupling}_{arm}_speedup"] = v
    return out


def probe_rows(models, task, batch) -> list[dict[str, Any]]:
    """:func:`checkpoint_probes` of every model in ``models`` (one row each)."""
    fn = checkpoint_probes(task, batch)
    return [fn(m) for m in models]


def cascade_timing(model, task, rows: list[dict[str, Any]], batch,
                   frac: float = ONSET_FRACTION, tail: float = PLATEAU_TAIL,
                   fractions=()) -> dict[str, Any]:
    """The cascade of a finetuned 2-head model from its per-checkpoint probe ``rows`` (those of
    :func:`checkpoint_probes` with a ``step``, sorted by step): the Relation head (larger
    attention mass on the demo attributes of ``batch`` at the end), its OV and KQ curves and
    their timing (:func:`head_timing`: onsets at ``frac`` and at each of ``fractions``,
    ``ov_first``, gains), and the similarity of each head to the construction."""
    from mechinterp_icr.interp.attention import head_role_table
    from mechinterp_icr.interp.circuits import construction_similarity

    steps = [r["step"] for r in rows]
    roles = head_role_table(model, batch)
    rel = int(np.argmax([r["demo_attribute"] for r in roles]))
    sim = construction_similarity(model, task)
    return {"relation_head": rel, "subject_head": 1 - rel,
            **_timing(steps, rows, rel, frac, tail, fractions),
            "icl_curve": [r["icl_heldout_exact"] for r in rows],
            "ov_contrast": [r[f"h{rel}_ov_contrast"] for r in rows],
            "kq_mass": [r[f"h{rel}_kq_mass"] for r in rows],
            "ov_precision": [r[f"h{rel}_ov"] for r in rows],
            "kq_top_attr": [r[f"h{rel}_kq"] for r in rows],
            "roles": roles, "similarity": sim,
            "sim_relation_ov": sim[rel]["sim_relation_ov"],
            "sim_subject_ov": sim[1 - rel]["sim_subject_ov"]}


# ------------------------------------------------------------------------------------------
# Placebo: synthetic schedules between the PT and the ICL construction
# ------------------------------------------------------------------------------------------
def _ramp(t: float, start: float, width: float, shape: str) -> float:
    x = float(np.clip((t - start) / width, 0.0, 1.0))
    return x ** 3 if shape == "cubic" else x


@torch.no_grad()
def synthetic_schedule(task, order: str, n_points: int = 21,
                       noise_scale: float = PLACEBO_NOISE) -> list:
    """Models on a synthetic "training" path t in [0, 1] from the PT to the ICL construction
    (Relation head only; the Subject head is the same in both). The Relation head's ``W_O``
    moves with the OV coefficient and its ``W_K`` with the KQ coefficient, each on the ramp of
    :data:`SCHEDULE_RAMPS` (``order``): ``ov_first`` OV over [0, 0.4] then KQ over [0.4, 0.8]
    (linear); ``kq_first`` the other way round; ``simultaneous`` both over [0, 0.5];
    ``kq_leads`` KQ over [0, 0.5], OV one checkpoint later; ``swapped_ov_first`` /
    ``swapped_kq_first`` the same starts with OV on a cubic (convex) ramp, KQ linear. Both
    probes are linear in the weight they read, so each follows its coefficient. A fixed
    random matrix (std ``noise_scale``) is added to the Relation head's ``W_O`` at every
    point. Returns ``n_points`` models (checkpoints 0..n-1)."""
    from mechinterp_icr.config import check, check_choice
    from mechinterp_icr.models.construction import RELATION_HEAD, build_construction

    check_choice("order", order, list(PLACEBO_ORDERS))
    check(isinstance(n_points, int) and n_points >= 5, "n_points", n_points,
          "an integer of at least 5 checkpoints")
    pt, icl = build_construction(task, "pt"), build_construction(task, "icl")
    a_pt, a_icl = pt.blocks[0].attn, icl.blocks[0].attn
    h = RELATION_HEAD
    # fixed noise on the Relation head's output map (the same at every point, about 2 logits
    # against the construction's 10), so that the OV block is not clean at any point
    g = torch.Generator().manual_seed(0xC7)
    noise = noise_scale * torch.randn(a_icl.W_O[h].shape, generator=g)
    (ov_start, ov_w, ov_shape), (kq_start, kq_w, kq_shape) = SCHEDULE_RAMPS[order]
    if ov_start is None:  # kq_leads: OV one checkpoint after KQ
        ov_start = kq_start + 1.0 / (n_points - 1)
    models = []
    for t in np.linspace(0.0, 1.0, n_points):
        a_ov = _ramp(t, ov_start, ov_w, ov_shape)
        a_kq = _ramp(t, kq_start, kq_w, kq_shape)
        m = copy.deepcopy(icl)
        at = m.blocks[0].attn
        at.W_K[h].copy_((1 - a_kq) * a_pt.W_K[h] + a_kq * a_icl.W_K[h])
        at.W_V[h].copy_(a_pt.W_V[h] + a_icl.W_V[h])  # copies either token set's identity
        at.W_O[h].copy_((1 - a_ov) * a_pt.W_O[h] + a_ov * a_icl.W_O[h] + noise)
        models.append(m)
    return models


def placebo_orders(task, batch, n_points: int = 21, frac: float = ONSET_FRACTION,
                   tail: float = PLATEAU_TAIL, fractions=()) -> dict[str, Any]:
    """Read every synthetic schedule (:data:`PLACEBO_ORDERS`) with the claim's probe and onset
    code (the Relation head found as in :func:`cascade_timing`). Positive controls (1 when
    read correctly): ``placebo_ov_first`` / ``placebo_kq_first`` (the linear pair) and
    ``placebo_swapped_ov_first`` / ``placebo_swapped_kq_first`` (OV convex, KQ linear), each
    1 when its schedule is read in its own order. Negative controls (must be 0):
    ``placebo_simultaneous_ov_first`` and ``placebo_kq_leads_ov_first``, 1 when the
    simultaneous and the KQ-leading schedule are (wrongly) read as OV first. ``schedules``
    holds each schedule's curves, onsets (also at each of ``fractions``) and half-gain steps
    (``t_half_ov`` / ``t_half_kq``: the speed reading an onset must not be confused with)."""
    from mechinterp_icr.interp.attention import head_role_table

    out: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    for order in PLACEBO_ORDERS:
        models = synthetic_schedule(task, order, n_points)
        rows = probe_rows(models, task, batch)
        rel = int(np.argmax([r["demo_attribute"] for r in head_role_table(models[-1], batch)]))
        tm = _timing(list(range(n_points)), rows, rel, frac, tail, fractions)
        tm["ov_first_every_fraction"] = float(tm["ov_first"] == 1.0 and all(
            o["ov_first"] == 1.0 for o in tm["onsets"].values()))
        name, reading, kind = PLACEBO_METRICS[order]
        metrics[name] = tm[reading]
        out[order] = {"read_correctly" if kind == "positive" else "read_ov_first": tm[reading],
                      "relation_head": rel,
                      **{k: tm[k] for k in ("t_onset_ov", "t_onset_kq", "t_half_ov",
                                            "t_half_kq", "onsets", "ov", "kq")}}
    return {**metrics, "schedules": out}
