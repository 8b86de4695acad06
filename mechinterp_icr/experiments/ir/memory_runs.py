"""IR-6's two phases as HookedTransformer run directories (``icr train --task ir --phase
memory-pretrain`` / ``memory-pgd``).

- :func:`memory_pretrain_run`: the memory pretrained on triple completion at ``n = pretrained.n``
  (``stages.pretrained_setting``, the reproduction's IR-6 memory job, the same steps, step
  size, batch and data), placed in the IR HookedTransformer (``models.ir.build_ir_hooked``:
  fixed embeddings, the copy circuit, uniform attention) and written as the phase
  ``memory-pretrain``'s one checkpoint; the pretraining progress goes to ``metrics.jsonl`` as
  phase ``memory-log``.
- :func:`memory_pgd_run`: PGD of the position block on top of that frozen memory with IR-6's
  settings (``stages.pretrained_pgd``: ``pretrained.ft_steps`` small steps of ``pretrained.ft_lr``)
  on IR-6's data draws (``pretrained.N`` training sequences ``train6``, ``eval_size`` evaluation
  sequences ``eval6``), as phases ``big`` then ``pgd`` (``training.pgd.pgd_hooked``).

The reproduction decides IR-6 on the exact float64 model (``models.ir.FastIR``) with the same
memory, data and steps; these runs are its float32 HookedTransformer form, for analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig
from mechinterp_icr.experiments.ir.config import IRConfig, model_spec, task_config
from mechinterp_icr.experiments.ir.stages import pretrained_pgd, pretrained_setting
from mechinterp_icr.experiments.ir.train import (
    check_pgd_resume,
    hooked_metrics_fn,
    tagged_rng,
)
from mechinterp_icr.models.ir import build_ir_hooked, ir_model_config, memory_retrieval
from mechinterp_icr.store.checkpoint import read_sidecar
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.loop import train_phase
from mechinterp_icr.training.pgd import pgd_hooked

__all__ = ["memory_pgd_run", "memory_pretrain_run", "memory_run_config"]


def _eval_batch(cfg: IRConfig, task, seed: int):
    return task.sample(tagged_rng(seed, "eval6", task.cfg.n_subjects), cfg.eval_size)


def memory_run_config(cfg: IRConfig, seed: int, name: str) -> RunConfig:
    """The ``config.json`` of a memory run: the task at ``pretrained.n``, the IR model with the
    pretrained memory's width, and the memory pretraining's settings (steps, step size,
    batch; the checkpointed phase itself has no attention steps)."""
    tcfg = task_config(cfg, cfg.pretrained.n)
    spec = model_spec(cfg, memory="pretrained")  # as stages.pretrained_setting builds it
    return RunConfig(name=name, seed=seed, task=tcfg,
                     model=ir_model_config(tcfg.build(seed), spec),
                     train=TrainConfig(steps=cfg.pretrained.steps, batch_size=cfg.pretrained.batch,
                                       lr=cfg.pretrained.lr, trainable="attention", eval_every=0,
                                       checkpoint_schedule="none", progress=False))


def memory_pretrain_run(cfg: IRConfig, seed: int, path: Path, on_log=None) -> dict[str, Any]:
    """Pretrain the memory and write the run ``path`` (resumed: a finished run is read, not
    pretrained again). Returns its retrieval and the pretraining's last record. ``on_log``
    (a tracker) gets the pretraining's records and the checkpoint's evaluation."""
    rcfg = memory_run_config(cfg, seed, Path(path).name)
    run = RunDir.open_for(path, rcfg)  # refuses a directory holding another run
    done = [c for c in run.checkpoints() if c.phase == "memory-pretrain"]
    if done:
        return {"finished": True, **(read_sidecar(done[-1].stem).get("memory") or {})}
    log: list[dict] = []
    pre = pretrained_setting(cfg, seed, log=log)
    model = build_ir_hooked(pre.task, pre.spec, seed=seed, memory=pre.memory, E=pre.E)
    ret = memory_retrieval(pre.task, pre.spec, pre.memory, pre.E)
    info = {"relation_acc": float(ret["relation_acc"]), "answer_acc": float(ret["answer_acc"]),
            "pretrain_final": log[-1] if log else None}
    ev = _eval_batch(cfg, pre.task, seed)
    zero = TrainConfig(steps=0, batch_size=1, trainable="attention", eval_every=0,
                       checkpoint_schedule="none", progress=False)
    train_phase(model, lambda rng, bs: ev, zero, run, "memory-pretrain", seed,
                run_config=rcfg, eval_fn=hooked_metrics_fn(pre.task, ev),
                extra_meta={"memory": info,
                            "memory_pretrain": {"steps": cfg.pretrained.steps,
                                                "lr": cfg.pretrained.lr,
                                                "batch": cfg.pretrained.batch}},
                on_log=on_log)
    for r in log:
        record = {"phase": "memory-log", **r}
        run.log_metrics(record)
        if on_log is not None:
            on_log(record)
    return {"finished": False, **info}


def memory_pgd_run(cfg: IRConfig, seed: int, path: Path, model, init_from: str,
                   rcfg: RunConfig, on_log=None) -> dict[str, Any]:
    """PGD on top of the memory in ``model`` (loaded from a ``memory-pretrain`` checkpoint;
    everything but the attention is frozen here) into ``path`` with IR-6's settings and
    data (``on_log``: its tracker). Returns the last evaluation."""
    task = rcfg.task.build(seed)
    n = task.cfg.n_subjects
    if n != cfg.pretrained.n:
        raise ConfigError(f"pretrained.n = {cfg.pretrained.n} is not allowed here: the memory "
                          "run it starts "
                          f"from has n = {n} subjects")
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("blocks.0.attn."))
    run = RunDir.open_for(path, rcfg)
    pgd = pretrained_pgd(cfg)
    settings = {"pretrained.N": cfg.pretrained.N, "eval_size": cfg.eval_size,
                "hooked.dense": cfg.hooked.dense}
    check_pgd_resume(run, pgd, settings)
    train = task.sample(tagged_rng(seed, "train6", n), cfg.pretrained.N)
    ev = _eval_batch(cfg, task, seed)
    pgd_hooked(model, train, pgd, run, seed, eval_fn=hooked_metrics_fn(task, ev),
               dense_until=cfg.hooked.dense, first_order=1,
               extra_meta={"init_from": init_from, "ir_settings": settings}, on_log=on_log)
    last = [m for m in run.read_metrics() if "step1_acc" in m][-1]
    return {"run": str(path), "n_checkpoints": len(run.checkpoints()),
            **{k: last[k] for k in ("step1_acc", "step2_acc", "within_pair_gap", "a",
                                    "mass_sq") if k in last}}
