"""Per-seed stages of the IR reproduction (IR-1, IR-2/3/4, IR-6, IR-7, IR-8, the
HookedTransformer runs). Each takes the config and the seed (and what an earlier stage
produced) and returns its per-seed metrics or runs; :mod:`.units` cuts them into tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from mechinterp_icr.experiments.ir.config import IRConfig, main_pgd, task_config
from mechinterp_icr.experiments.ir.train import (
    ceiling,
    escape_step,
    final_record,
    hooked_run,
    run_fast,
    tagged_rng,
)
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.models.ir import (
    IRModelSpec,
    Memory,
    memory_retrieval,
    pretrain_memory,
    token_embeddings,
)
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.training.pgd import PGDConfig

__all__ = [
    "HOOKED_RUNS",
    "MainSetting",
    "PretrainedSetting",
    "hooked_run_named",
    "induction_metrics",
    "k3_metrics",
    "k3_records",
    "main_setting",
    "memory_and_ceiling",
    "pgd_vs_gd_metrics",
    "pgd_vs_gd_runs",
    "pretrained_metrics",
    "pretrained_pgd",
    "pretrained_records",
    "pretrained_setting",
    "read_trajectories",
]

Runs = dict[tuple[str, str], tuple[Any, list[dict]]]  # (data, alg) -> (FastIR, records)


@dataclass(frozen=True)
class MainSetting:
    """The main IR task of a seed (n = cfg.n), its evaluation batch and token embeddings."""

    task: Any
    spec: IRModelSpec
    ev: Any
    E: torch.Tensor


def main_setting(cfg: IRConfig, seed: int) -> MainSetting:
    spec = IRModelSpec(lam2=cfg.lam2)
    task = task_config(cfg, cfg.n).build(seed)
    ev = task.sample(tagged_rng(seed, "eval", cfg.n), cfg.eval_size)
    return MainSetting(task, spec, ev, token_embeddings(task, spec, seed))


# --------------------------------------------------------------------------------------------
# IR-1 .. IR-4
# --------------------------------------------------------------------------------------------
def memory_and_ceiling(main: MainSetting, seed: int) -> tuple[dict[str, Any], dict]:
    """IR-1: retrieval of the constructed memory over every triple, and the ideal-attention
    ceiling. Returns (IR-1 per-seed metrics, the ceiling record)."""
    task = main.task
    mem = memory_retrieval(task, main.spec, None, main.E)
    ceil = ceiling(task, main.spec, main.ev, seed)
    ir1 = {"memory_acc": min(mem.values()), **mem, "ceiling_step1": ceil["step1_acc"],
           "ceiling_step2": ceil["step2_acc"], "ceiling_a": ceil["a"],
           "n_swaps_kb": len(task.kb.swaps), "n_singles_kb": len(task.kb.singles)}
    return ir1, ceil


def pgd_vs_gd_runs(cfg: IRConfig, main: MainSetting, seed: int, seed_dir: Path) -> Runs:
    """PGD and plain GD on raw and pair-symmetric finetuning data (fast path); each run's
    records are written to ``seed_dir/fast_<data>_<alg>.json``."""
    runs: Runs = {}
    for data in ("raw", "sym"):
        tk = task_config(cfg, cfg.n, sym=(data == "sym")).build(seed)
        train = tk.sample(tagged_rng(seed, "train", cfg.n, data), cfg.N)
        for alg in ("pgd", "gd"):
            steps = cfg.gd_sym_steps if (data, alg) == ("sym", "gd") else cfg.steps
            pgd = replace(main_pgd(cfg), perturb=(alg == "pgd"), steps=steps)
            fast, recs = run_fast(main.task, main.spec, train, main.ev, pgd, seed)
            runs[(data, alg)] = (fast, recs)
            atomic_write_text(seed_dir / f"fast_{data}_{alg}.json",
                              json.dumps({"pgd": pgd.__dict__, "n": cfg.n, "N": cfg.N,
                                          "records": recs}))
    return runs


def read_trajectories(seed_dir: Path) -> dict[str, list[dict]]:
    """The records of each fast run written by :func:`pgd_vs_gd_runs`, keyed
    ``<data>_<alg>`` (for the IR-4 figure)."""
    return {f"{d}_{a}": json.loads((seed_dir / f"fast_{d}_{a}.json").read_text())["records"]
            for d in ("raw", "sym") for a in ("pgd", "gd")}


def pgd_vs_gd_metrics(cfg: IRConfig, runs: Runs, ceil: dict
                      ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Per-seed metrics of IR-2 (accuracies), IR-3 (the converged step-1 row) and IR-4
    (saddle and escape of PGD vs GD) from :func:`pgd_vs_gd_runs`."""
    fin = final_record(runs[("raw", "pgd")][1])
    ir2 = {"step1_acc": fin["step1_acc"], "step2_acc": fin["step2_acc"],
           "step1_acc_swap": fin.get("step1_acc_swap"),
           "step1_acc_single": fin.get("step1_acc_single"),
           "ceiling_step1": ceil["step1_acc"],
           "step1_margin": fin["step1_acc"] - min(0.999, ceil["step1_acc"] - 0.001)}
    ir3 = {k: fin[k] for k in ("within_pair_gap", "mass_sq", "a", "a_min", "step2_mass_sq")}
    ir3["row1"] = fin["row1"]
    esc = {f"escape_{d}_{a}": escape_step(runs[(d, a)][1], cfg.escape_spread)
           for d in ("raw", "sym") for a in ("pgd", "gd")}
    cens = {k: (v if v is not None else (cfg.gd_sym_steps if "sym_gd" in k
                                         else cfg.steps) + 2) for k, v in esc.items()}
    after_big = {f"{d}_{a}": next(r for r in runs[(d, a)][1] if r["step"] == 1)
                 for d in ("raw", "sym") for a in ("pgd", "gd")}
    fin_gd_sym = final_record(runs[("sym", "gd")][1])
    ir4 = {
        **esc,
        "escape_ratio_sym": cens["escape_sym_gd"] / cens["escape_sym_pgd"],
        "escape_ratio_raw": cens["escape_raw_gd"] / cens["escape_raw_pgd"],
        "saddle_swap_acc_sym_gd": after_big["sym_gd"].get("step1_acc_swap"),
        "saddle_swap_prob_sym_pgd": after_big["sym_pgd"].get("step1_prob_swap"),
        "saddle_swap_prob_raw_pgd": after_big["raw_pgd"].get("step1_prob_swap"),
        "saddle_swap_prob_raw_gd": after_big["raw_gd"].get("step1_prob_swap"),
        "saddle_swap_prob_sym_gd": after_big["sym_gd"].get("step1_prob_swap"),
        "saddle_spread_sym_gd": after_big["sym_gd"]["pair_mass_spread"],
        "final_swap_acc_sym_gd": fin_gd_sym.get("step1_acc_swap"),
        "final_swap_prob_sym_gd": fin_gd_sym.get("step1_prob_swap"),
        "final_swap_prob_sym_pgd": final_record(runs[("sym", "pgd")][1]).get(
            "step1_prob_swap"),
        "final_loss_sym_gd": runs[("sym", "gd")][1][-1]["loss"],
        "final_loss_sym_pgd": runs[("sym", "pgd")][1][-1]["loss"],
    }
    return ir2, ir3, ir4


def induction_metrics(head: dict[str, float], ctrl: dict[str, Any]) -> dict[str, Any]:
    """IR-8 per-seed metrics: the prefix-matching scores of the raw-data PGD head
    (:func:`..controls.ir_head_scores`) against the induction-head control
    (:func:`..controls.induction_control`)."""
    return {"ir_head_induction_score": head["induction_score"],
            "ir_head_duplicate_score": head["duplicate_score"],
            "control_induction_score": ctrl["induction_score"],
            "control_L0_prev_token_score": ctrl["L0_prev_token_score"],
            "control_train_acc": ctrl["train_acc"]}


# --------------------------------------------------------------------------------------------
# IR-7 (K = 3) and IR-6 (pretrained memory); the gap sweep reuses both with changed knobs
# --------------------------------------------------------------------------------------------
def k3_records(cfg: IRConfig, seed: int, n: int | None = None, N: int | None = None,
               pgd: PGDConfig | None = None) -> list[dict]:
    """PGD records of the K = 3 setting (n = ``k3_n``, N = ``N``, the main PGD unless given)."""
    n = cfg.k3_n if n is None else n
    tk = task_config(cfg, n, K=3).build(seed)
    ev3 = tk.sample(tagged_rng(seed, "eval3", n), cfg.sweep_eval)
    train = tk.sample(tagged_rng(seed, "train3", n), cfg.N if N is None else N)
    _, recs = run_fast(tk, IRModelSpec(lam2=cfg.lam2), train, ev3,
                       main_pgd(cfg) if pgd is None else pgd, seed)
    return recs


def k3_metrics(recs: list[dict]) -> dict[str, Any]:
    """IR-7 per-seed metrics from :func:`k3_records`."""
    f = final_record(recs)
    return {"within_pair_gap": f["within_pair_gap"],
            "pair_masses": row_stats(f["row1"], 3)["pair_masses"],
            "mass_sq": f["mass_sq"], "step1_acc": f["step1_acc"],
            "step2_acc": f["step2_acc"], "row1": f["row1"]}


@dataclass(frozen=True)
class PretrainedSetting:
    """An IR task with a memory pretrained on triple completion (then frozen)."""

    task: Any
    spec: IRModelSpec
    E: torch.Tensor
    memory: Memory


def pretrained_setting(cfg: IRConfig, seed: int, n: int | None = None,
                       pre_steps: int | None = None, jitter: float = 0.0,
                       log: list | None = None, memory: Memory | None = None
                       ) -> PretrainedSetting:
    """Pretrain the memory at n = ``pre_n`` for ``pre_steps`` (``log`` gets its progress);
    ``memory``: one already pretrained with these settings (read back from the file of the
    IR-6 memory task) is used instead of pretraining again."""
    n = cfg.pre_n if n is None else n
    tk = task_config(cfg, n).build(seed)
    spec = IRModelSpec(memory="pretrained", lam2=cfg.lam2,
                       pretrain_steps=cfg.pre_steps if pre_steps is None else pre_steps,
                       pretrain_pair_jitter=jitter)
    E = token_embeddings(tk, spec, seed)
    if memory is None:
        memory = pretrain_memory(tk, spec, E, seed, log=log)
    return PretrainedSetting(tk, spec, E, memory)


def pretrained_pgd(cfg: IRConfig) -> PGDConfig:
    """The pretrained memory converges slowly along the s3 direction: its own length and step
    size (s3 mass 0.067 after 200 steps of lr 0.05, 0.018 after 1000 of 0.25)."""
    return replace(main_pgd(cfg), steps=cfg.pre_ft_steps, lr=cfg.pre_ft_lr)


def pretrained_records(cfg: IRConfig, seed: int, pre: PretrainedSetting,
                       N: int | None = None, pgd: PGDConfig | None = None) -> list[dict]:
    """PGD records on top of the frozen pretrained memory (N = ``pre_N`` unless given)."""
    tk = pre.task
    n = tk.cfg.n_subjects
    ev6 = tk.sample(tagged_rng(seed, "eval6", n), cfg.sweep_eval)
    train = tk.sample(tagged_rng(seed, "train6", n), cfg.pre_N if N is None else N)
    _, recs = run_fast(tk, pre.spec, train, ev6, pretrained_pgd(cfg) if pgd is None else pgd,
                       seed, memory=pre.memory, E=pre.E)
    return recs


def pretrained_metrics(cfg: IRConfig, seed: int, pre: PretrainedSetting,
                       log: list[dict]) -> dict[str, Any]:
    """IR-6 per-seed metrics of the pretrained memory ``pre`` (``log``: its pretraining
    progress): check its retrieval, finetune with PGD."""
    mem6 = memory_retrieval(pre.task, pre.spec, pre.memory, pre.E)
    f = final_record(pretrained_records(cfg, seed, pre))
    return {"within_pair_gap": f["within_pair_gap"],
            "mass_sq": f["mass_sq"], "a": f["a"], "a_min": f["a_min"],
            "step1_acc": f["step1_acc"], "step2_acc": f["step2_acc"],
            "memory_relation_acc": mem6["relation_acc"],
            "memory_answer_acc": mem6["answer_acc"],
            "pretrain_final": log[-1] if log else None, "row1": f["row1"]}


# --------------------------------------------------------------------------------------------
# HookedTransformer runs with checkpoints (first seed)
# --------------------------------------------------------------------------------------------
# run name -> (pair-symmetric data, perturbed (PGD), target): the position block, or all of
# W_Q, W_K for the experiment setting
HOOKED_RUNS: dict[str, tuple[bool, bool, str]] = {
    "ht_sym_pgd": (True, True, "pos"), "ht_sym_gd": (True, False, "pos"),
    "ht_raw_pgd": (False, True, "pos"), "ht_raw_gd": (False, False, "pos"),
    "ht_raw_qk_pgd": (False, True, "qk")}


def hooked_run_named(cfg: IRConfig, seed: int, seed_dir: Path, name: str) -> dict[str, Any]:
    """The HookedTransformer run ``name`` of :data:`HOOKED_RUNS` into ``seed_dir/name``;
    returns its summary row."""
    sym, perturb, target = HOOKED_RUNS[name]
    return hooked_run(cfg, seed, seed_dir, name, sym, perturb, target)
