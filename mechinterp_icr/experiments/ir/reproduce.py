"""Reproduction of paper IR (in-context factual recall): the jobs, and the summary of their
records.

:func:`plan` cuts the reproduction into jobs (:mod:`.jobs`), per seed ``s``:

- ``seed<s>/main``         IR-1 memory + ceiling; IR-2/3/4 PGD vs plain GD (fast exact path,
  theory setting) on raw and pair-symmetric data, written to
  ``<out>/runs/ir/seed<s>/fast_<data>_<alg>.json``; the IR-8 score of the learned head.
- ``seed<s>/overwrite``    IR-3/IR-4 causal: fixed step-1 rows at the learned ``a`` (reads the
  fast run of ``seed<s>/main``).
- ``seed<s>/induction``    IR-8 induction-head control.
- ``seed<s>/ir8_tok``      IR-8 decided on the token-dependent model (all of W_Q, W_K).
- ``seed<s>/k3``           IR-7 K = 3 in-context pairs.
- ``seed<s>/ir6_memory``   IR-6: pretrain the memory, written to
  ``.../seed<s>/ir6_memory.safetensors`` (+ ``.json``); ``seed<s>/ir6`` reads it
  and finetunes with PGD.
- ``gap/n<n>/seed<s>``     IR-3 within-pair gap, one per n of ``gap_n``.
- ``sample/n<n>/seed<s>``  IR-5 sample complexity (random embeddings), one per n of
  ``sample_complexity.n``; ``sample_learned/n<n>/seed<s>`` its positive control (the learned
  memory).
- First seed only: ``seed<s>/ht/<run>``, the HookedTransformer runs with checkpoints at
  every early step (``<out>/runs/ir/seed<s>/ht_<data>_<pgd|gd>``, position block, and
  ``ht_raw_qk_pgd``, all of W_Q, W_K with gradient clipping); ``seed<s>/ht_overwrite/<run>``
  overwrites the step-1 row across that run's checkpoints.

:func:`summarise` turns the records (and the fast runs' files of the first seed, for the IR-4
figure) into the IR-5 fits, the tables, the claims, the figures and the attention views;
:func:`reproduce` runs the plan with :func:`mechinterp_icr.jobs.run_jobs` and summarises.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import Summary
from mechinterp_icr.claims.ir5_rule import IR5_TABLE
from mechinterp_icr.experiments.ir.claims import empty_per_seed, ir_claims
from mechinterp_icr.experiments.ir.config import IRConfig
from mechinterp_icr.experiments.ir.controls import OW_RUNS, causal_table
from mechinterp_icr.experiments.ir.ir5 import sample_complexity_per_seed, sample_complexity_table
from mechinterp_icr.experiments.ir.ir9 import per_seed_metrics as ir9_per_seed
from mechinterp_icr.experiments.ir.jobs import (
    attractor_job,
    gap_job,
    hooked_job,
    hooked_overwrite_job,
    induction_job,
    k3_job,
    main_job,
    memory_job,
    overwrite_job,
    pretrained_job,
    sample_job,
    tok_job,
)
from mechinterp_icr.experiments.ir.records import job_name, read_record
from mechinterp_icr.experiments.ir.stages import HOOKED_RUNS, read_trajectories
from mechinterp_icr.experiments.ir.sweeps import gap_fit
from mechinterp_icr.jobs import Job, run_jobs
from mechinterp_icr.viz.claim_figures import write_verdict_figures
from mechinterp_icr.viz.ir_figures import write_ir_figures
from mechinterp_icr.viz.views import write_ir_views

__all__ = ["ir8_per_seed", "memory_file", "plan", "reproduce", "seed_dir", "summarise"]


def seed_dir(out_dir: Path, seed: int) -> Path:
    """The run directory of ``seed``: ``<out>/runs/ir/seed<seed>``."""
    return Path(out_dir) / "runs" / "ir" / f"seed{seed}"


def memory_file(out_dir: Path, seed: int) -> Path:
    """The pretrained memory of IR-6 for ``seed`` (written by the ``ir6_memory`` job)."""
    return seed_dir(out_dir, seed) / "ir6_memory.safetensors"


def plan(cfg: IRConfig, out_dir: Path, seeds: list[int]) -> list[Job]:
    """Every IR job for ``seeds`` (names and order in the module docstring); the longest
    come first so that a pool of workers starts on them."""
    out_dir = Path(out_dir)
    seeds = list(dict.fromkeys(seeds))
    first = seeds[0]
    jobs: list[Job] = []

    def add(kind: str, s: int, fn, after: tuple[str, ...] = (), n: int | None = None,
            run: str | None = None, **kwargs: Any) -> None:
        kw = {"n": n} if n is not None else {}
        kw |= {"name": run} if run is not None else {}
        jobs.append(Job(job_name(kind, s, n=n, run=run), fn,
                        {"cfg": cfg, "seed": s, **kw, **kwargs}, after))

    def sample_jobs(s: int, ns) -> None:
        for n in ns:
            add("sample_learned", s, sample_job, n=n, arm="learned")
            add("sample", s, sample_job, n=n)

    for s in seeds:
        add("ir6_memory", s, memory_job, memory_file=memory_file(out_dir, s))
    # the finetuning on a pretrained memory is the longest IR job (about 3 CPU-minutes at
    # pretrained.n = 256): listed next, a worker takes it as soon as its memory is written
    for s in seeds:
        add("ir6", s, pretrained_job, (job_name("ir6_memory", s),),
            memory_file=memory_file(out_dir, s))
    # IR-5 at the largest n next (its positive control runs up to max sample_complexity.Ns
    # sequences)
    by_size = sorted(dict.fromkeys(cfg.sample_complexity.n), reverse=True)
    for n in by_size[:2]:
        for s in seeds:
            sample_jobs(s, [n])
    for s in seeds:
        add("main", s, main_job, run_dir=seed_dir(out_dir, s))
    for name in HOOKED_RUNS:
        add("ht", first, hooked_job, run=name, run_dir=seed_dir(out_dir, first))
    for s in seeds:
        add("induction", s, induction_job)
        add("ir8_tok", s, tok_job)
        add("ir9", s, attractor_job)
        add("k3", s, k3_job)
        add("overwrite", s, overwrite_job, (job_name("main", s),),
            run_dir=seed_dir(out_dir, s))
        for n in dict.fromkeys(cfg.gap_n):
            add("gap", s, gap_job, n=n)
        sample_jobs(s, by_size[2:])
    for name in OW_RUNS:
        add("ht_overwrite", first, hooked_overwrite_job,
            (job_name("ht", first, run=name),), run=name, run_dir=seed_dir(out_dir, first))
    return jobs


def ir8_per_seed(pos: dict, tok: dict, ctrl: dict) -> dict[str, Any]:
    """IR-8's per-seed metrics: the token-dependent model's (the conditions), the
    induction-head control's, and the position-only model's as structural numbers."""
    return {
        "tok_solved": tok["solved"],
        "tok_induction_row_step1_acc": tok["induction_row_step1_acc"],
        "tok_learned_row_step1_acc": tok["learned_row_step1_acc"],
        "tok_head_score_minus_baseline": tok["project"]["score_minus_baseline"],
        "tok_head_tl_score_minus_baseline": tok["transformer_lens"]["score_minus_baseline"],
        "tok_offset_1_step1_acc": tok["offset_1_step1_acc"],
        "tok_offset_2_step1_acc": tok["offset_2_step1_acc"],
        "tok_query_seen_before": tok.get("query_seen_before"),
        "induction_model_score_minus_baseline": ctrl["project"]["score_minus_baseline"],
        "induction_model_tl_score_minus_baseline":
            ctrl["transformer_lens"]["score_minus_baseline"],
        "posonly": {
            "induction_row_step1_acc": pos["induction_row_step1_acc"],
            "learned_row_step1_acc": pos["learned_row_step1_acc"],
            "score_minus_baseline": pos["head"]["project"]["score_minus_baseline"],
            "tl_score_minus_baseline": pos["head"]["transformer_lens"]["score_minus_baseline"]}}


def summarise(cfg: IRConfig, out_dir: Path, seeds: list[int], records: dict[str, dict],
              summary: Summary) -> None:
    """Record the claims, tables, figures and views of the job ``records`` in ``summary``
    (written to ``out_dir/summary.json`` after the claims and again after the views). Rows
    and seeds are taken in the order of ``seeds`` and of the config's sweeps, never in the
    order the jobs ran."""
    out_dir = Path(out_dir)
    seeds = list(seeds)
    first = seeds[0]
    for record in records.values():
        for stage, secs in record.get("timings", {}).items():
            summary.timings[stage] = summary.timings.get(stage, 0) + secs
    per = empty_per_seed()
    gap_rows: list[dict] = []
    sweep_rows: list[dict] = []
    ow_seed: dict[str, dict] = {}
    ir8_detail: dict[str, dict] = {}
    gap_traces: dict[str, list] = {}
    ir9_traces: dict[str, dict] = {}
    def rec(kind: str, s: int, **kw):
        return read_record(records, kind, s, **kw)

    for s in seeds:
        sk, main = str(s), rec("main", s)
        for cid, m in zip(("IR-1", "IR-2", "IR-3", "IR-4"),
                          (main.ir1, main.ir2, main.ir3, main.ir4)):
            per[cid][sk] = dict(m)
        gap_traces[sk] = per["IR-3"][sk].pop("gap_trace")
        ow_seed[sk] = rec("overwrite", s).fixed_rows
        ctrl, tok = rec("induction", s).control, rec("ir8_tok", s).ir8
        per["IR-8"][sk] = ir8_per_seed(main.ir8, tok, ctrl)
        ir8_detail[sk] = {"token_dependent": tok, "position_only_structural": main.ir8,
                          "control": ctrl}
        gap_rows += [rec("gap", s, n=n).row for n in cfg.gap_n]
        per["IR-7"][sk] = rec("k3", s).ir7
        ir9 = rec("ir9", s).ir9
        per["IR-9"][sk] = ir9_per_seed(ir9)
        ir9_traces[sk] = {"learned": ir9["trace"], "frozen": ir9["frozen_trace"]}
        per["IR-6"][sk] = rec("ir6", s).ir6
        sweep_rows += [rec(arm, s, n=n).row for arm in ("sample", "sample_learned")
                       for n in cfg.sample_complexity.n]
    summary.tables["IR HookedTransformer runs"] = {
        name: rec("ht", first, run=name).row for name in HOOKED_RUNS}
    ow_runs = {name: rows for name in OW_RUNS
               if (rows := rec("ht_overwrite", first, run=name).rows) is not None}

    per["IR-5"] = sample_complexity_per_seed(cfg, sweep_rows, seeds)
    summary.tables[IR5_TABLE] = sample_complexity_table(cfg, per["IR-5"])
    summary.tables["IR-3 gap vs n"] = {"rows": gap_rows, "fit": gap_fit(gap_rows)}
    summary.tables["IR-3 gap decay"] = gap_traces
    summary.tables["IR-9 gap from the imposed offset"] = ir9_traces
    summary.tables["IR-8 prefix-matching scores"] = ir8_detail
    causal = causal_table(ow_seed, ow_runs, cfg)
    summary.tables["IR-3/IR-4 causal: attention-row overwrite"] = causal
    claims = ir_claims(per, cfg, causal, gap_rows)
    # a claim without a figure of its own gets its verdict figure (per-seed values of every
    # condition and control against the registered thresholds)
    write_verdict_figures(claims, out_dir / "figures", seeds)
    for claim in claims:
        summary.add(claim)
    summary.tables["IR figures"] = write_ir_figures(
        out_dir / "figures", seeds, traj={first: read_trajectories(seed_dir(out_dir, first))},
        gap_rows=gap_rows, gap_traces=gap_traces, ir5=per["IR-5"],
        ow_runs=ow_runs, n=cfg.n, ht_n=cfg.hooked.n, ir8=ir8_detail, ir9=ir9_traces)
    summary.write(out_dir)  # the IR claims are safe on disk before the views

    with summary.stage("attention views"):
        write_ir_views(summary, out_dir, [seed_dir(out_dir, first)], seeds, summary.profile)
    summary.write(out_dir)


def reproduce(cfg: IRConfig, out_dir: Path, seeds: list[int], summary: Summary,
              workers: int = 1, ray_address: str | None = None, threads: int = 1) -> None:
    """Run every IR job for ``seeds`` into ``out_dir`` (``workers`` processes, or the Ray
    cluster at ``ray_address``; ``threads`` torch threads each; jobs with a stored record
    are skipped) and record claims, tables, figures and views in ``summary``."""
    t0 = time.perf_counter()
    records = run_jobs(plan(cfg, out_dir, seeds), Path(out_dir) / "jobs" / "ir", workers,
                       ray_address, threads)
    summary.timings["ir_total"] = time.perf_counter() - t0
    summarise(cfg, out_dir, seeds, records, summary)
