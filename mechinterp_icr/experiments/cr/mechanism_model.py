"""CR-5 / CR-7 training: the 1-layer, 2-head, attention-only mechanism model.

The model (:func:`mechanism_model_config`) is pretrained on PT once per seed, then finetuned
on ICL (finetune subjects only) from that PT state once per learning rate in
``cfg.ft_lrs`` (CR-7 needs both 3e-3 and 6e-3) and at ``cfg.ft_lr`` (the model whose head
roles CR-5 reads; shared when it is one of ``ft_lrs``). At every step up to
``dense_until``, then log-spaced and every ``checkpoint_every`` steps, of each finetune the
continuous OV and KQ probes of both heads are logged
(``interp.ovkq.checkpoint_probes``) into the run's ``metrics.jsonl`` (phase
``ft-icl-lr<lr>``); :func:`run_cascade` times the two rises per learning rate
(``interp.ovkq.cascade_timing``, onsets at ``cfg.onset_fraction`` and at each of
``cfg.onset_fractions_reported``).

The causal arms of CR-7 (:func:`causal_arms`, with ``cfg.causal_arms``; four more finetunes
per learning rate, the same seed, data order, step budget and probe steps as the normal run,
read on the normal run's Relation head): **OV preset** starts from the PT state with the
Relation head's ``W_V`` and ``W_O`` slices set to their values at the end of the normal run
(everything else trains as in it); **OV frozen** starts from the PT state with the gradient
of those two slices masked to zero (``train_phase``'s ``grad_masks``; the finetunes have no
weight decay, so they stay at their PT values) while the Subject head and every other
parameter train normally; **KQ preset** and **KQ frozen** do the same with the head's
``W_Q``, ``W_K``, ``b_Q`` and ``b_K`` slices (:data:`KQ_PARAMS`: everything that sets its
attention scores; the positional embeddings, shared by both heads, train in every arm, so a
frozen KQ's scores can still move through them). The Relation head's ``b_V`` slice and the
shared ``b_O`` are left to train in the OV arms: they add a constant to the head's output, not
its token-to-token OV map that the OV probe reads.

Embeddings (``cfg.embedding``), the construction-matched initialisation of CR-5:
``orthonormal`` (the default) lays the residual stream out as the construction does
(``d_model = 2 d_vocab``: a one-hot input block written by ``W_E``, an output block read by
``W_U`` scaled by ``cfg.out_scale``) and freezes both before any training: only attention and
positions learn, and with ``W_E W_U = 0`` a fact can only reach the output through a head,
which is what the construction (and the paper's mechanism) describes. ``frozen`` fixes random
unit-norm embeddings instead (``d_model`` from the config); ``learned`` trains them (the
direct path ``W_E W_U`` then stores part of the facts and the Subject role is split between
the head and that path: Subject 0.39-0.62 on three seeds, see docs/interp.md). Sizes come
from the ``cascade`` section of the CR config.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, ModelConfig, RunConfig, TrainConfig, check
from mechinterp_icr.experiments.cr.config import CascadeConfig
from mechinterp_icr.interp.ovkq import (
    arm_speedups,
    cascade_timing,
    checkpoint_probes,
    head_timing,
)
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import evaluate_icl, evaluate_pt
from mechinterp_icr.training.loop import checkpoint_steps, resolve_trainable, train_phase

__all__ = ["ARMS", "ARM_PARAMS", "KQ_PARAMS", "OV_PARAMS", "build_mechanism_model",
           "cascade_lrs", "causal_arms", "freeze_embeddings", "head_masks",
           "mechanism_finetune", "mechanism_ft_config", "mechanism_model_config",
           "mechanism_pretrain", "mechanism_pt_config", "mechanism_run_config", "preset_head",
           "probe_batch_for", "probed_finetune", "run_cascade",
           "train_mechanism_model"]

# the CR-7 causal arms, in the order they run (SPEC 1, CR-7 (ii)-(v))
ARMS = ("ov_preset", "ov_frozen", "kq_preset", "kq_frozen")
PT_EVAL_N = 256  # PT-format prompts of the mechanism model's PT evaluation
ICL_EVAL_N = 512  # held-out ICL prompts of each finetuned mechanism model's accuracy
PROBE_BATCH_TAG = 77  # the rng stream of the held-out ICL batch the OV / KQ probes read
# the weights of one head's OV map: the head's slice (first index) of each
OV_PARAMS = ("blocks.0.attn.W_V", "blocks.0.attn.W_O")
# ... and of its attention scores (b_K shifts every key's score alike, but is frozen with the
# rest so that a frozen KQ is the whole score map)
KQ_PARAMS = ("blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.b_Q", "blocks.0.attn.b_K")
ARM_PARAMS = {"ov": OV_PARAMS, "kq": KQ_PARAMS}  # an arm's part (its name's prefix)


def mechanism_model_config(task, cfg: CascadeConfig) -> ModelConfig:
    """The 1-layer, 2-head, attention-only model of ``cfg`` sized for ``task``
    (``d_model = 2 d_vocab`` with orthonormal embeddings: an input and an output block)."""
    d_model = 2 * task.d_vocab if cfg.embedding == "orthonormal" else cfg.d_model
    return ModelConfig(n_layers=1, n_heads=2, d_model=d_model, d_head=cfg.d_head, d_mlp=1,
                       attn_only=True, normalization="none", d_vocab=task.d_vocab,
                       n_ctx=task.n_ctx)


@torch.no_grad()
def freeze_embeddings(model, seed: int, out_scale: float, kind: str = "orthonormal") -> None:
    """Fix ``W_E`` and ``W_U`` (no bias) and freeze them (``requires_grad`` False:
    ``train_phase`` keeps them frozen). ``orthonormal`` (the construction's layout, needs
    ``d_model = 2 d_vocab``): token t writes ``e_t`` in the input block, logit t reads
    ``out_scale * e_{d_vocab + t}`` in the output block, so ``W_E W_U = 0`` (no direct path);
    ``frozen``: unit-norm random rows / random columns of norm ``out_scale``."""
    nv = model.cfg.d_vocab
    if kind == "orthonormal":
        check(model.cfg.d_model == 2 * nv, "cascade.embedding", kind,
              f"d_model = 2 d_vocab = {2 * nv} (got {model.cfg.d_model})")
        model.embed.W_E.zero_()
        model.embed.W_E[torch.arange(nv), torch.arange(nv)] = 1.0
        model.unembed.W_U.zero_()
        model.unembed.W_U[nv + torch.arange(nv), torch.arange(nv)] = float(out_scale)
    else:
        g = torch.Generator().manual_seed(
            int(np.random.default_rng([seed, 0xE3B]).integers(2**31)))
        E = torch.randn(model.embed.W_E.shape, generator=g)
        U = torch.randn(model.unembed.W_U.shape, generator=g)
        model.embed.W_E.copy_(E / E.norm(dim=1, keepdim=True))
        model.unembed.W_U.copy_(out_scale * U / U.norm(dim=0, keepdim=True))
    model.unembed.b_U.zero_()
    for p in (model.embed.W_E, model.unembed.W_U, model.unembed.b_U):
        p.requires_grad_(False)


def cascade_lrs(cfg: CascadeConfig) -> list[float]:
    """The finetuning learning rates to run: ``ft_lrs`` then ``ft_lr`` if not among them."""
    lrs = [float(x) for x in cfg.ft_lrs]
    return lrs + ([float(cfg.ft_lr)] if float(cfg.ft_lr) not in lrs else [])


def build_mechanism_model(task, seed: int, cfg: CascadeConfig):
    """The mechanism model of ``cfg`` for ``task``, built and with its embeddings fixed and
    frozen (unless ``cfg.embedding`` is ``learned``)."""
    model = build_model(mechanism_model_config(task, cfg), seed=seed, device="cpu")
    if cfg.embedding != "learned":
        freeze_embeddings(model, seed, cfg.out_scale, cfg.embedding)
    return model


def mechanism_pt_config(cfg: CascadeConfig) -> TrainConfig:
    """The PT settings of the mechanism model (start and end checkpoints only)."""
    return TrainConfig(steps=cfg.pt_steps, batch_size=cfg.pt_batch, lr=cfg.pt_lr,
                       weight_decay=cfg.pt_weight_decay, eval_every=0,
                       checkpoint_schedule="none", progress=False)


def mechanism_ft_config(cfg: CascadeConfig, lr: float) -> TrainConfig:
    """The ICL finetuning settings of the mechanism model at learning rate ``lr``; its
    checkpoint steps are the steps the OV and KQ probes are read at."""
    return TrainConfig(steps=cfg.ft_steps, batch_size=cfg.ft_batch, lr=lr, eval_every=0,
                       trainable=cfg.ft_trainable, checkpoint_schedule="log",
                       checkpoint_dense_until=cfg.dense_until,
                       checkpoint_every=cfg.checkpoint_every, progress=False)


def mechanism_run_config(task, task_cfg, seed: int, cfg: CascadeConfig,
                         name: str) -> RunConfig:
    """The ``config.json`` of a mechanism-model run: the task, the model and its PT (the
    finetunes' settings are in each phase's checkpoints and in the cascade section)."""
    return RunConfig(name=name, seed=seed, task=task_cfg,
                     model=mechanism_model_config(task, cfg), train=mechanism_pt_config(cfg))


def mechanism_pretrain(model, task, seed: int, cfg: CascadeConfig, run: RunDir | None,
                       phase: str = "pretrain", eval_fn=None, run_config=None, on_log=None):
    """PT of the mechanism ``model`` (from :func:`build_mechanism_model`) in place; returns
    the ``PhaseResult``. The reproduction's phase is ``pretrain``, the CLI's
    ``mech-pretrain``."""
    return train_phase(model, lambda rng, bs: task.sample_pt(rng, bs),
                       mechanism_pt_config(cfg), run, phase, seed, phase_order=0,
                       eval_fn=eval_fn, run_config=run_config, on_log=on_log)


def mechanism_finetune(model, task, seed: int, cfg: CascadeConfig, lr: float,
                       run: RunDir | None, eval_fn, phase: str = "ft-icl", run_config=None,
                       extra_meta=None, on_log=None, grad_masks=None):
    """ICL finetuning (finetune subjects only) of the mechanism ``model`` in place at ``lr``;
    ``eval_fn`` runs at every checkpoint step; ``grad_masks`` {parameter name: 0/1 tensor}
    multiply those gradients (``train_phase``). The batches depend on ``seed`` and ``phase``
    only, so two finetunes with the same ones see the same data. Returns the
    ``PhaseResult``."""
    fts = task.finetune_subjects
    return train_phase(model, lambda rng, bs: task.sample_icl(rng, bs, subjects=fts),
                       mechanism_ft_config(cfg, lr), run, phase, seed, phase_order=1,
                       eval_fn=eval_fn, run_config=run_config, extra_meta=extra_meta,
                       on_log=on_log, grad_masks=grad_masks)


def probe_batch_for(task, seed: int, cfg: CascadeConfig):
    """The held-out ICL batch the OV and KQ probes are read on."""
    return task.sample_icl(np.random.default_rng([seed, PROBE_BATCH_TAG]), cfg.probe_batch,
                           subjects=task.heldout_subjects)


def probed_finetune(model, task, seed: int, cfg: CascadeConfig, lr: float, probe_batch,
                    grad_masks=None) -> tuple[list[dict], float]:
    """:func:`mechanism_finetune` of ``model`` in place (phase ``ft-icl``, no checkpoint
    files) with the OV and KQ probes (``interp.ovkq.checkpoint_probes`` on
    ``probe_batch``) read at every checkpoint step. Returns (probe rows with their ``step``,
    seconds)."""
    steps = checkpoint_steps(mechanism_ft_config(cfg, lr))
    rows: list[dict] = []
    probe = checkpoint_probes(task, probe_batch)

    def ev(mm):
        rows.append({"step": steps[len(rows)], **probe(mm)})
        return {}

    t = time.perf_counter()
    mechanism_finetune(model, task, seed, cfg, lr, None, ev, grad_masks=grad_masks)
    model.eval()
    return rows, time.perf_counter() - t


def train_mechanism_model(task, seed: int, cfg: CascadeConfig, run: RunDir | None,
                          task_cfg=None):
    """PT of the mechanism model, then one ICL finetune from the PT state per learning rate
    (:func:`cascade_lrs`). Returns (PT model, PT evaluation, {lr: (model, probe rows,
    seconds)}, probe batch); probe rows carry their ``step``."""
    model = build_mechanism_model(task, seed, cfg)
    if run is not None and task_cfg is not None:
        run.write_config(mechanism_run_config(task, task_cfg, seed, cfg, f"cr-mech-seed{seed}"))
    mechanism_pretrain(model, task, seed, cfg, run)
    model.eval()
    pt_eval = evaluate_pt(model, task, seed + 101, n=PT_EVAL_N)
    probe_batch = probe_batch_for(task, seed, cfg)
    finetuned = {}
    for lr in cascade_lrs(cfg):
        m = copy.deepcopy(model)
        # run=None: the probes are the record (no checkpoint files for every probe step)
        rows, secs = probed_finetune(m, task, seed, cfg, lr, probe_batch)
        if run is not None:
            for r in rows:
                run.log_metrics({"phase": f"ft-icl-lr{lr:g}", **r})
        finetuned[lr] = (m, rows, secs)
    return model, pt_eval, finetuned, probe_batch


def _check_head(model, head) -> int:
    n = model.cfg.n_heads
    check(isinstance(head, (int, np.integer)) and not isinstance(head, bool) and 0 <= head < n,
          "head", head, f"a head index in 0..{n - 1}")
    return int(head)


@torch.no_grad()
def preset_head(model, source, head: int, params=OV_PARAMS) -> None:
    """Set ``head``'s slices of ``params`` in ``model`` (in place) to those of ``source`` (same
    architecture); every other weight is left as it is."""
    head = _check_head(model, head)
    src = dict(source.named_parameters())
    for n, p in model.named_parameters():
        if n in params:
            p[head].copy_(src[n][head])


def head_masks(model, head: int, params=OV_PARAMS, trainable: str = "all"
               ) -> dict[str, torch.Tensor]:
    """Gradient masks (``train_phase``'s ``grad_masks``) that freeze ``head``'s slices of
    ``params``: 0 on the slice, 1 elsewhere; only for those parameters that ``trainable``
    trains (a parameter the finetune does not train needs no mask)."""
    head = _check_head(model, head)
    names = set(resolve_trainable(model, trainable))
    masks = {}
    for n, p in model.named_parameters():
        if n in params and n in names and p.requires_grad:
            m = torch.ones_like(p)
            m[head] = 0.0
            masks[n] = m
    return masks


def causal_arms(pt_model, final_model, task, seed: int, cfg: CascadeConfig, lr: float,
                probe_batch, head: int, normal: dict, run: RunDir | None = None) -> dict:
    """The four CR-7 causal arms at ``lr`` (:data:`ARMS`, module doc), each a copy of
    ``pt_model`` finetuned as the normal run was (:func:`probed_finetune`) and read on
    ``head`` (the normal run's Relation head) with
    :func:`~mechinterp_icr.interp.ovkq.head_timing`, plus the other head's probe curves
    (``other_ov``, ``other_kq``: a frozen Relation head's role may move to it), the held-out
    ICL curve and the arm's final held-out ICL exact accuracy. A ``*_preset`` arm starts with
    ``head``'s part (:data:`ARM_PARAMS`) from ``final_model`` (the normal run's end); a
    ``*_frozen`` arm keeps it at the PT value. ``normal``: the normal run's timing
    (``cascade_timing``). Returns ``{arm: timing + seconds, "speedups": {arm: speed-up}}``
    (:func:`~mechinterp_icr.interp.ovkq.arm_speedups`); with a ``run``, each arm's probe
    rows are logged as phase ``ft-icl-lr<lr>-<arm>``. The finetuned models are
    ``{arm: model}`` under ``"models"`` (not serialisable: popped by the caller)."""
    fr = cfg.onset_fractions_reported
    other = 1 - head
    out: dict = {"models": {}}
    for arm in ARMS:
        part, kind = arm.split("_")
        m = copy.deepcopy(pt_model)
        masks = None
        if kind == "preset":
            preset_head(m, final_model, head, ARM_PARAMS[part])
        else:
            masks = head_masks(m, head, ARM_PARAMS[part], cfg.ft_trainable)
        rows, secs = probed_finetune(m, task, seed, cfg, lr, probe_batch, grad_masks=masks)
        if run is not None:
            for r in rows:
                run.log_metrics({"phase": f"ft-icl-lr{lr:g}-{arm.replace('_', '-')}", **r})
        out[arm] = {**head_timing(rows, head, cfg.onset_fraction, cfg.plateau_tail, fr),
                    "relation_head": head, "seconds": secs,
                    "other_ov": [r[f"h{other}_ov_margin"] for r in rows],
                    "other_kq": [r[f"h{other}_kq_logit"] for r in rows],
                    "icl_curve": [r["icl_heldout_exact"] for r in rows],
                    "icl_heldout_exact": evaluate_icl(m, task, seed + 202,
                                                      subjects=task.heldout_subjects,
                                                      n=ICL_EVAL_N)["exact"]}
        out["models"][arm] = m
    out["speedups"] = arm_speedups({a: out[a] for a in ARMS}, normal, cfg.onset_fraction,
                                   cfg.plateau_tail)
    return out


def run_cascade(task, seed: int, cfg: CascadeConfig = CascadeConfig(),
                run_path: str | Path | None = None, task_cfg=None) -> dict:
    """Train into ``run_path`` (afresh), then time the two rises per learning rate and, with
    ``cfg.causal_arms``, run the causal arms (:func:`causal_arms`) per learning rate.

    Result: ``by_lr`` {str(lr): cascade timing + ``icl_heldout_exact`` + ``seconds`` (+
    ``arms`` {arm: timing} and ``speedups`` {arm: speed-up} with the arms)}, the PT numbers,
    and (not serialisable, popped by the caller) ``pt_model``, ``models`` {lr: finetuned
    model}, ``arm_models`` {lr: {arm: model}} (empty without the arms) and ``probe_batch``."""
    if run_path is None:
        raise ConfigError("run_path = None is not allowed; expected a run directory (the "
                          "probes are logged per checkpoint into it)")
    run = RunDir(run_path, create=True)
    # a fresh log and fresh checkpoints for a fresh run (the probes are read back from it)
    if run.metrics_path.exists():
        run.metrics_path.unlink()
    if run.checkpoint_dir.exists():
        for p in run.checkpoint_dir.glob("*"):
            if p.is_file():
                p.unlink()
    pt_model, pt_eval, finetuned, probe_batch = train_mechanism_model(task, seed, cfg, run,
                                                                      task_cfg)
    by_lr, arm_models = {}, {}
    for lr, (m, rows, secs) in finetuned.items():
        v = {**cascade_timing(m, task, rows, probe_batch, cfg.onset_fraction,
                              cfg.plateau_tail, cfg.onset_fractions_reported),
             "icl_heldout_exact": evaluate_icl(m, task, seed + 202,
                                               subjects=task.heldout_subjects,
                                               n=ICL_EVAL_N)["exact"],
             "seconds": secs}
        if cfg.causal_arms and float(lr) in cfg.ft_lrs:
            arms = causal_arms(pt_model, m, task, seed, cfg, lr, probe_batch,
                               v["relation_head"], v, run)
            arm_models[f"{lr:g}"] = arms.pop("models")
            v["speedups"] = arms.pop("speedups")
            v["arms"] = arms
        by_lr[f"{lr:g}"] = v
    return {"by_lr": by_lr, "pt_typed": pt_eval.get("typed"),
            "pt_restricted": pt_eval.get("restricted"), "embedding": cfg.embedding,
            "causal_arms": bool(cfg.causal_arms),
            "pt_model": pt_model, "models": {f"{lr:g}": v[0] for lr, v in finetuned.items()},
            "arm_models": arm_models, "probe_batch": probe_batch}
