"""CR-7: the two-step cascade in the attention-only mechanism model.

A 1-layer, 2-head, attention-only model is pretrained on PT, then finetuned on ICL (finetune
subjects only) from its PT state with ``training.loop.train_phase``. At every checkpoint the
OV probe and the KQ probe (``interp.circuits``) of both heads are logged (``metrics.jsonl`` and
the checkpoint sidecars). The Relation head is the head with the larger attention mass on the
demo attributes at the end of finetuning. For each probe, ``t_half`` is the first logged step
at which ``probe(t) - probe(0) >= 0.5 * (probe(T) - probe(0))``; the cascade holds when the OV
probe's ``t_half`` comes before the KQ probe's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, ModelConfig, RunConfig, TrainConfig
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.loop import train_phase

__all__ = [
    "CascadeConfig",
    "half_gain_step",
    "mechanism_model_config",
    "quick_cascade_config",
    "run_cascade",
    "train_mechanism_model",
]


@dataclass(frozen=True)
class CascadeConfig:
    d_model: int = 64
    d_head: int = 32
    pt_steps: int = 1500
    pt_batch: int = 64
    pt_lr: float = 3e-3
    ft_steps: int = 300
    ft_batch: int = 128
    ft_lr: float = 1e-3
    ft_trainable: str = "attention"
    dense_until: int = 40
    checkpoint_every: int = 20
    probe_batch: int = 128


def mechanism_model_config(task, cfg: CascadeConfig) -> ModelConfig:
    return ModelConfig(n_layers=1, n_heads=2, d_model=cfg.d_model, d_head=cfg.d_head, d_mlp=1,
                       attn_only=True, normalization="none", d_vocab=task.d_vocab,
                       n_ctx=task.n_ctx)


def half_gain_step(steps, values, frac: float = 0.5) -> float:
    """First step whose gain over the start reaches ``frac`` (default half) of the final gain
    (nan without gain)."""
    v = np.asarray(values, dtype=float)
    gain = v[-1] - v[0]
    if not np.isfinite(gain) or gain <= 1e-9:
        return float("nan")
    idx = np.nonzero(v - v[0] >= frac * gain)[0]
    return float(np.asarray(steps)[idx[0]])


def _probe_fn(task, batch):
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


def train_mechanism_model(task, seed: int, cfg: CascadeConfig, run: RunDir | None,
                          task_cfg=None):
    """PT then ICL finetuning of the 1-layer 2-head attention-only model.

    Returns (model, PT-state evaluation, finetune-phase result). Checkpoints of phases
    ``pretrain`` and ``ft-icl`` go to ``run`` (probes in their metrics)."""
    from mechinterp_icr.tasks.cr import evaluate_icl, evaluate_pt

    mc = mechanism_model_config(task, cfg)
    model = build_model(mc, seed=seed, device="cpu")
    if run is not None and task_cfg is not None:
        run.write_config(RunConfig(name=f"cr-mech-seed{seed}", seed=seed, task=task_cfg,
                                   model=mc, train=TrainConfig(steps=cfg.ft_steps,
                                                               progress=False)))
    pt = TrainConfig(steps=cfg.pt_steps, batch_size=cfg.pt_batch, lr=cfg.pt_lr, eval_every=0,
                     checkpoint_schedule="none", progress=False)
    train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), pt, run, "pretrain", seed,
                phase_order=0)
    pt_eval = evaluate_pt(model, task, seed + 101, n=256)
    probe_batch = task.sample_icl(np.random.default_rng([seed, 77]), cfg.probe_batch,
                                  subjects=task.heldout_subjects)
    ft = TrainConfig(steps=cfg.ft_steps, batch_size=cfg.ft_batch, lr=cfg.ft_lr, eval_every=0,
                     trainable=cfg.ft_trainable, checkpoint_schedule="log",
                     checkpoint_dense_until=cfg.dense_until,
                     checkpoint_every=cfg.checkpoint_every, progress=False)
    fts = task.finetune_subjects
    res = train_phase(model, lambda rng, bs: task.sample_icl(rng, bs, subjects=fts), ft, run,
                      "ft-icl", seed, phase_order=1, eval_fn=_probe_fn(task, probe_batch))
    res.final_metrics["icl_heldout"] = evaluate_icl(model, task, seed + 202,
                                                    subjects=task.heldout_subjects, n=512)
    return model, pt_eval, res, probe_batch


def run_cascade(task, seed: int, cfg: CascadeConfig = CascadeConfig(),
                run_path: str | Path | None = None, task_cfg=None) -> dict:
    """Train, then read the per-checkpoint probes back and time the two rises."""
    if run_path is None:
        raise ConfigError("run_path = None is not allowed; expected a run directory (the "
                          "probes are logged per checkpoint into it)")
    run = RunDir(run_path, create=True)
    # a fresh log and fresh checkpoints for a fresh run (the probes are read back from the log)
    if run.metrics_path.exists():
        run.metrics_path.unlink()
    if run.checkpoint_dir.exists():
        for p in run.checkpoint_dir.glob("*"):
            if p.is_file():
                p.unlink()
    model, pt_eval, res, probe_batch = train_mechanism_model(task, seed, cfg, run, task_cfg)
    rows = [r for r in run.read_metrics() if r.get("phase") == "ft-icl" and "h0_ov" in r]
    rows.sort(key=lambda r: r["step"])
    steps = [r["step"] for r in rows]
    from mechinterp_icr.interp.attention import head_role_table

    roles = head_role_table(model, probe_batch)
    rel = int(np.argmax([r["demo_attribute"] for r in roles]))
    sub = 1 - rel
    ov = [r[f"h{rel}_ov"] for r in rows]
    kq = [r[f"h{rel}_kq"] for r in rows]
    t_ov, t_kq = half_gain_step(steps, ov), half_gain_step(steps, kq)
    from mechinterp_icr.interp.circuits import construction_similarity

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
        "pt_typed": pt_eval.get("typed"), "pt_restricted": pt_eval.get("restricted"),
        "icl_heldout_exact": res.final_metrics["icl_heldout"]["exact"],
        "roles": roles, "similarity": sim,
        "sim_relation_ov": sim[rel]["sim_relation_ov"],
        "sim_subject_ov": sim[sub]["sim_subject_ov"],
        "seconds": res.seconds,
        "model": model,
    }


def quick_cascade_config(**kw) -> CascadeConfig:
    return replace(CascadeConfig(), **kw)
