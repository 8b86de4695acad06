"""The CR reproduction (claims CR-1 .. CR-7; SPEC section 1): every stage in order.

:func:`reproduce` is the whole pipeline; each stage is one named call with its inputs and
outputs, timed by ``summary.stage``:

1. per seed, ``pretrain`` then ``evaluate``; per finetuning branch ``finetune`` then
   ``evaluate`` (``<out>/runs/cr/seed<N>/``; ``train``, ``evaluate``);
2. ``sweep``: the CR-3 sweep on the first ``sweep_seeds`` seeds (``sweep``);
3. the CR-1..3 claims and tables (``claims``), then ``figures`` (``viz.cr_figures``); the
   summary is written so these claims are safe on disk before the analyses;
4. ``CR-4 task vectors and probes`` (``taskvec``), ``CR-5..7 mechanism`` (``mechanism``,
   ``cascade``) and ``attention views`` (``viz.views``), each followed by a summary write.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import check
from mechinterp_icr.experiments.cr.claims import cr123_claims, cr123_tables
from mechinterp_icr.experiments.cr.config import CRConfig
from mechinterp_icr.experiments.cr.evaluate import finetune_curves, full_eval, heldout_icl_by_k
from mechinterp_icr.experiments.cr.mechanism import add_mechanism_claims
from mechinterp_icr.experiments.cr.sweep import print_sweep, sweep_seeds, sweep_table
from mechinterp_icr.experiments.cr.taskvec import add_taskvec_claim
from mechinterp_icr.experiments.cr.train import (
    branch_phases,
    check_run_dirs,
    copy_state,
    finetune_branch,
    open_seed_run,
    pretrain,
)
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.viz.cr_figures import write_cr123_figures
from mechinterp_icr.viz.views import write_reproduction_views

__all__ = ["cr_run_dirs", "reproduce", "torch_threads"]


@contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch threads (0: leave as is); the previous count is restored
    afterwards, so the process is left as it was found."""
    prev = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def cr_run_dirs(out_dir: Path) -> list[Path]:
    """The CR run directories under ``out_dir`` (``runs/cr/seed<N>``), by seed."""
    return sorted((Path(out_dir) / "runs" / "cr").glob("seed*"),
                  key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else 0)


def reproduce(cfg: CRConfig, out_dir: Path, seeds: list[int], summary: Summary) -> None:
    """Run every CR stage for ``seeds`` into ``out_dir`` and add claims CR-1 .. CR-7, their
    tables and figures to ``summary`` (written to ``out_dir/summary.json`` after the CR-1..3
    claims and after each later stage)."""
    out_dir = Path(out_dir)
    check(isinstance(seeds, (list, tuple)) and len(seeds) > 0, "--seeds", seeds,
          "at least one seed")
    seeds = list(seeds)
    with torch_threads(cfg.threads):  # CR-1..3 train under cfg.threads
        cpu0, wall0 = time.process_time(), time.perf_counter()
        check_run_dirs(cfg, out_dir, seeds)  # refuse stale run directories before any training
        results, pt_states = [], {}
        for seed in seeds:
            run, rc, task = open_seed_run(cfg, out_dir, seed)
            result = {"seed": seed, "task": task.describe(), "phases": {}, "seconds": {}}
            t = time.perf_counter()
            with summary.stage("pretrain"):
                model = pretrain(cfg, task, rc, run, seed)
            result["seconds"]["pretrain"] = time.perf_counter() - t
            pt_states[seed] = copy_state(model)
            with summary.stage("evaluate"):
                result["phases"]["pretrain"] = full_eval(model, task, seed, cfg.eval_ks,
                                                         cfg.eval_n)
            for phase in branch_phases(cfg):
                t = time.perf_counter()
                with summary.stage("finetune"):
                    model = finetune_branch(cfg, task, rc, run, pt_states[seed], phase, seed)
                result["seconds"][phase] = time.perf_counter() - t
                with summary.stage("evaluate"):
                    result["phases"][phase] = full_eval(model, task, seed, cfg.eval_ks,
                                                        cfg.eval_n)
            results.append(result)
        with summary.stage("sweep"):
            sweep_rows = sweep_seeds(cfg, out_dir, results, pt_states)
        sweep = sweep_table(sweep_rows)
        pt_states.clear()
        for claim in cr123_claims(cfg, results, sweep):
            summary.add(claim)
        summary.tables.update(cr123_tables(results, sweep))
        with summary.stage("figures"):
            figs = write_cr123_figures(heldout_icl_by_k(results, cfg.eval_ks), cfg.eval_ks,
                                       len(results), finetune_curves(out_dir, seeds), sweep,
                                       out_dir / "figures")
        summary.tables["CR figures"] = figs
        summary.tables["CR cpu"] = {"process_cpu_s": time.process_time() - cpu0,
                                    "wall_s": time.perf_counter() - wall0,
                                    "torch_threads": torch.get_num_threads()}
        (out_dir / "cr").mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "cr" / "sweep_rows.json", json.dumps(sweep_rows, indent=2))
        print_sweep(sweep)
    summary.write(out_dir)  # the CR-1..3 claims are safe on disk before the analyses run

    run_dirs = cr_run_dirs(out_dir)
    with summary.stage("CR-4 task vectors and probes"):
        add_taskvec_claim(summary, out_dir, run_dirs, seeds, cfg.taskvec)
    summary.write(out_dir)
    with summary.stage("CR-5..7 mechanism"):
        add_mechanism_claims(summary, out_dir, run_dirs, seeds, cfg.mechanism, cfg.cascade)
    summary.write(out_dir)
    with summary.stage("attention views"):
        write_reproduction_views(summary, out_dir, run_dirs, seeds, summary.profile)
    summary.write(out_dir)
