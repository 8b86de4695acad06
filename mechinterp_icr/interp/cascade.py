"""CR-7 measurements: the OV and KQ probes of a 1-layer attention-only model across
finetuning checkpoints, and when each of them rises.

At every checkpoint :func:`checkpoint_probes` logs, for every head, the OV probe
(``ov_precision``, ``ov_top1``) and the KQ probe (``kq_top_attr``, ``kq_mass_attr``) of
``interp.circuits``, and the model's exact accuracy on a fixed batch. :func:`cascade_timing`
reads those rows back: the Relation head is the head with the larger attention mass on the
demo attributes at the end, and for each probe ``t_half`` is the first logged step at which
``probe(t) - probe(0) >= 0.5 * (probe(T) - probe(0))`` (:func:`half_gain_step`). The cascade
holds when the OV probe's ``t_half`` comes before the KQ probe's.

Nothing here trains: the mechanism model is trained by the CR experiment
(``experiments.cr.cascade``), which passes :func:`checkpoint_probes` as its checkpoint
evaluation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["cascade_timing", "checkpoint_probes", "half_gain_step"]


def half_gain_step(steps, values, frac: float = 0.5) -> float:
    """First step whose gain over the start reaches ``frac`` (default half) of the final gain
    (nan without gain)."""
    v = np.asarray(values, dtype=float)
    gain = v[-1] - v[0]
    if not np.isfinite(gain) or gain <= 1e-9:
        return float("nan")
    idx = np.nonzero(v - v[0] >= frac * gain)[0]
    return float(np.asarray(steps)[idx[0]])


def checkpoint_probes(task, batch):
    """A checkpoint evaluation ``fn(model) -> metrics``: per head ``h{h}_ov``,
    ``h{h}_ov_top1``, ``h{h}_kq``, ``h{h}_kq_mass`` (layer 0), and ``icl_heldout_exact``, the
    exact accuracy at the query position of ``batch`` (an ICL batch with ``query_pos`` and
    ``answer`` in its meta)."""
    from mechinterp_icr.interp.circuits import kq_probe, ov_probe

    def fn(model):
        out = {}
        for h in range(model.cfg.n_heads):
            ov = ov_probe(model, task, 0, h)
            kq = kq_probe(model, batch, 0, h)
            out[f"h{h}_ov"] = ov["ov_precision"]
            out[f"h{h}_ov_top1"] = ov["ov_top1"]
            out[f"h{h}_kq"] = kq["kq_top_attr"]
            out[f"h{h}_kq_mass"] = kq["kq_mass_attr"]
        with torch.no_grad():
            logits = model(batch.tokens.to(next(model.parameters()).device))
            qp = batch.meta["query_pos"]
            pred = logits[torch.arange(len(qp)), qp].argmax(-1).cpu()
        out["icl_heldout_exact"] = float((pred == batch.meta["answer"]).float().mean())
        return out

    return fn


def cascade_timing(model, task, rows: list[dict[str, Any]], batch) -> dict[str, Any]:
    """The cascade of a finetuned 2-head model from its per-checkpoint probe ``rows`` (those of
    :func:`checkpoint_probes`, sorted by step): the Relation head (larger attention mass on the
    demo attributes on ``batch``), its OV and KQ curves, their half-gain and onset (10%)
    steps, ``ov_first`` (1.0 when the OV probe's half gain comes strictly first) and the
    similarity of each head to the construction."""
    from mechinterp_icr.interp.attention import head_role_table
    from mechinterp_icr.interp.circuits import construction_similarity

    steps = [r["step"] for r in rows]
    roles = head_role_table(model, batch)
    rel = int(np.argmax([r["demo_attribute"] for r in roles]))
    sub = 1 - rel
    ov = [r[f"h{rel}_ov"] for r in rows]
    kq = [r[f"h{rel}_kq"] for r in rows]
    t_ov, t_kq = half_gain_step(steps, ov), half_gain_step(steps, kq)
    sim = construction_similarity(model, task)
    return {
        "relation_head": rel, "subject_head": sub, "steps": steps, "ov": ov, "kq": kq,
        "kq_mass": [r[f"h{rel}_kq_mass"] for r in rows],
        "icl_curve": [r["icl_heldout_exact"] for r in rows],
        "t_half_ov": t_ov, "t_half_kq": t_kq,
        "t_half_kq_mass": half_gain_step(steps, [r[f"h{rel}_kq_mass"] for r in rows]),
        "t_half_ov_top1": half_gain_step(steps, [r[f"h{rel}_ov_top1"] for r in rows]),
        # onset (post-hoc diagnostic, not the claim's criterion): 10% of the final gain
        "t_onset_ov": half_gain_step(steps, ov, 0.1),
        "t_onset_kq": half_gain_step(steps, kq, 0.1),
        "ov_first": float(t_ov < t_kq) if np.isfinite(t_ov) and np.isfinite(t_kq) else 0.0,
        "lead_steps": (t_kq - t_ov) if np.isfinite(t_ov) and np.isfinite(t_kq) else float("nan"),
        "ov_start": ov[0], "ov_end": ov[-1], "kq_start": kq[0], "kq_end": kq[-1],
        "roles": roles, "similarity": sim,
        "sim_relation_ov": sim[rel]["sim_relation_ov"],
        "sim_subject_ov": sim[sub]["sim_subject_ov"],
    }
