"""Reproduction of paper IR (in-context factual recall): the stages in order.

Per seed:

- IR-1  constructed-memory retrieval over every triple; ideal-attention ceiling.
- IR-2/3/4 PGD vs plain GD (fast exact path, theory setting) on raw and pair-symmetric data:
  accuracies, the converged step-1 row, escape from the saddle.
- IR-3/IR-4 causal: fixed step-1 rows written into the head (per seed).
- IR-8  induction / prefix-matching score of the IR head vs an induction-head control.
- IR-3  within-pair gap against n.
- IR-7  K = 3 in-context pairs.
- IR-6  pretrained (not constructed) memory.
- IR-5  sample-complexity sweep (bisection on N over >= 5 doublings of n).
- First seed only: HookedTransformer runs with checkpoints at every early step, for analyses
  (``<out>/runs/ir/seed<s>/ht_<data>_<pgd|gd>``, position block, and ``ht_raw_qk_pgd``, all
  of W_Q, W_K with gradient clipping), and the row overwrite across their checkpoints.

Then the IR-5 fits, the tables, the claims, the figures, and the attention views of the
HookedTransformer runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from mechinterp_icr.claims import Summary
from mechinterp_icr.experiments.ir.claims import empty_per_seed, ir_claims
from mechinterp_icr.experiments.ir.config import IRConfig
from mechinterp_icr.experiments.ir.controls import (
    causal_table,
    overwrite_fixed_rows,
    overwrite_table_runs,
)
from mechinterp_icr.experiments.ir.stages import (
    hooked_runs,
    induction_metrics,
    k3_metrics,
    k3_records,
    main_setting,
    memory_and_ceiling,
    pgd_vs_gd_metrics,
    pgd_vs_gd_runs,
    pretrained_metrics,
    trajectories,
)
from mechinterp_icr.experiments.ir.sweeps import (
    gap_vs_n,
    random_embedding_rows,
    sample_complexity_per_seed,
    sample_complexity_rows,
    sample_complexity_table,
)
from mechinterp_icr.viz.ir_figures import write_ir_figures
from mechinterp_icr.viz.views import write_ir_views

__all__ = ["reproduce"]


def reproduce(cfg: IRConfig, out_dir: Path, seeds: list[int], summary: Summary) -> None:
    """Run every IR stage for ``seeds`` into ``out_dir`` and record claims, tables, figures
    and views in ``summary`` (written to ``out_dir/summary.json`` after the claims and again
    after the views)."""
    torch.set_num_threads(1)
    out_dir = Path(out_dir)
    root = out_dir / "runs" / "ir"
    per = empty_per_seed()
    traj: dict[int, dict[str, list]] = {}
    gap_rows: list[dict] = []
    sweep_rows: list[dict] = []
    sweep_rand_rows: list[dict] = []
    ow_seed: dict[str, dict] = {}
    ow_runs: dict[str, list] = {}
    t_start = time.perf_counter()
    for seed in seeds:
        sk = str(seed)
        seed_dir = root / f"seed{seed}"
        seed_dir.mkdir(parents=True, exist_ok=True)
        main = main_setting(cfg, seed)
        with summary.stage("IR-1 memory + ceiling"):
            per["IR-1"][sk], ceil = memory_and_ceiling(main, seed)
        with summary.stage("IR-2/3/4 PGD vs GD (fast)"):
            runs = pgd_vs_gd_runs(cfg, main, seed, seed_dir)
            traj[seed] = trajectories(runs)
            per["IR-2"][sk], per["IR-3"][sk], per["IR-4"][sk] = pgd_vs_gd_metrics(cfg, runs,
                                                                                  ceil)
        with summary.stage("IR-3/IR-4 causal: row overwrite"):
            ow_seed[sk] = overwrite_fixed_rows(cfg, seed, per["IR-3"][sk]["a"])
        with summary.stage("IR-8 induction control"):
            per["IR-8"][sk] = induction_metrics(cfg, seed, runs, main)
        del runs
        with summary.stage("IR-3 gap vs n"):
            gap_rows += gap_vs_n(cfg, seed)
        with summary.stage("IR-7 K=3"):
            per["IR-7"][sk] = k3_metrics(k3_records(cfg, seed))
        with summary.stage("IR-6 pretrained memory"):
            per["IR-6"][sk] = pretrained_metrics(cfg, seed)
        with summary.stage("IR-5 sample complexity"):
            sweep_rows += sample_complexity_rows(cfg, seed)
            if seeds.index(seed) < cfg.sweep_random_seeds:
                sweep_rand_rows += random_embedding_rows(cfg, seed)
        if seed == seeds[0]:
            with summary.stage("HookedTransformer runs (checkpoints)"):
                summary.tables["IR HookedTransformer runs"] = hooked_runs(cfg, seed, seed_dir)
            with summary.stage("IR-3/IR-4 causal: row overwrite"):
                ow_runs = overwrite_table_runs(seed_dir, cfg.ow_n, seed)
    summary.timings["ir_total"] = time.perf_counter() - t_start

    per["IR-5"] = sample_complexity_per_seed(cfg, sweep_rows, seeds)
    summary.tables["IR-5 sample complexity"] = sample_complexity_table(cfg, sweep_rows,
                                                                       sweep_rand_rows)
    summary.tables["IR-3 gap vs n"] = gap_rows
    causal = causal_table(ow_seed, ow_runs, cfg)
    summary.tables["IR-3/IR-4 causal: attention-row overwrite"] = causal
    for claim in ir_claims(per, cfg, causal):
        summary.add(claim)
    summary.tables["IR figures"] = write_ir_figures(
        out_dir / "figures", seeds, traj=traj, gap_rows=gap_rows, sweep_rows=sweep_rows,
        sweep_random_rows=sweep_rand_rows, ow_runs=ow_runs, n=cfg.n, ht_n=cfg.ht_n)
    summary.write(out_dir)  # the IR claims are safe on disk before the views

    with summary.stage("attention views"):
        run_dirs = sorted(root.glob("seed*"),
                          key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else 0)
        write_ir_views(summary, out_dir, run_dirs, seeds, summary.profile)
    summary.write(out_dir)
