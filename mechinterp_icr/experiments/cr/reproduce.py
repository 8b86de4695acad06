"""The CR reproduction (claims CR-1 .. CR-7; SPEC section 1) as jobs, and its summary.

:func:`plan` cuts the reproduction into jobs (``jobs.Job``), each with its inputs as keyword
arguments and its outputs in its own run directory plus the returned record:

===============================  ==========================  =================================
job                              after                       writes
===============================  ==========================  =================================
``seed<N>/train``                (none)                      ``runs/cr/seed<N>`` (PT, branches)
``sweep/<slug>/seed<N>``         ``seed<N>/train`` when it   ``runs/cr-sweep/<slug>/seed<N>``
                                 reuses the main PT weights;
                                 the first setting with the
                                 same pretraining when it
                                 shares one; else none
``cr4-lam/<lam>/seed<N>``        (none)                      ``runs/cr-taskvec/lam<lam>/seed<N>``
``seed<N>/cascade``              (none)                      ``runs/cr-mech/seed<N>``
``seed<N>/placebo``              (none)                      (record only)
``seed<N>/cr4``                  ``seed<N>/train``           ``runs/cr/seed<N>/analyses``
``seed<N>/mechanism``            ``seed<N>/train``           (record only)
``seed<N>/uninf-demos``          ``seed<N>/train``           (record only)
``views``                        ``seed<first>/train``       ``views/``
``shared/seed<N>/train``         (none)                      ``shared-tokens/runs/cr/seed<N>``
``shared/seed<N>/cr4``           ``shared/seed<N>/train``    (its run's ``analyses``)
``shared/seed<N>/uninf-demos``   ``shared/seed<N>/train``    (record only)
===============================  ==========================  =================================

``uninf-demos`` (:mod:`.uninformative`) evaluates the seed's PT-only, ICL-finetuned and
mixed-type ICL+Grm models on the held-out ICL prompts with uninformative demos (each demo of
another type than the query's): the baselines of the shared-token variant's type bounds
(CR-1 and CR-3's control), reported in the default task.

The ``shared/`` jobs are the shared-token variant (``shared_variant_share`` > 0: the same
config with ``task.attr_share`` set to it), where CR-8 can be decided; CR-1 .. CR-4 and CR-8
are reported in it beside the default, under their own ids (``CR-8 (shared tokens)``).

The CR-3 sweep runs on the first ``sweep_seeds`` seeds (its default setting is the main
``ft-iclgrm`` branch: no job), the CR-4 lam sweep on every seed.
:func:`summarise` builds every claim, table and figure from the records alone (and writes the
summary); :func:`reproduce` is ``run_jobs(plan(...))`` then :func:`summarise`. No job sets
torch threads (the engine does, per worker) and every job's randomness comes from its own
seed and setting, so the summary is the same whatever the order or number of workers.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import check
from mechinterp_icr.experiments.cr.claims import cr123_claims, cr123_tables
from mechinterp_icr.experiments.cr.config import CRConfig
from mechinterp_icr.experiments.cr.evaluate import finetune_curves, heldout_icl_by_k
from mechinterp_icr.experiments.cr.mechanism import (
    add_mechanism,
    cascade_seed,
    mechanism_seed,
    placebo_seed,
)
from mechinterp_icr.experiments.cr.records import job_name, read_record
from mechinterp_icr.experiments.cr.sweep import (
    default_setting_row,
    print_sweep,
    sweep_job,
    sweep_settings,
    sweep_table,
)
from mechinterp_icr.experiments.cr.taskvec_stage import (
    add_cr4,
    lam_job,
    lam_seed_cap,
    lam_sweep_wanted,
    taskvec_seed,
)
from mechinterp_icr.experiments.cr.train import (
    check_run_dirs,
    run_config_for,
    seed_run_path,
    train_seed,
)
from mechinterp_icr.experiments.cr.uninformative import baseline_table, uninf_demos_seed
from mechinterp_icr.jobs import Job, run_jobs
from mechinterp_icr.store.io import atomic_write_json
from mechinterp_icr.tasks.cr import ideal_reader_table
from mechinterp_icr.tasks.cr_vocab import type_chance
from mechinterp_icr.viz.cr_figures import write_cr123_figures
from mechinterp_icr.viz.views import write_reproduction_views

__all__ = ["SHARED_DIR", "lam_seeds", "plan", "reproduce", "shared_config",
           "summarise", "views_job"]

SHARED_DIR = "shared-tokens"  # the shared-token variant's output folder under <out>


def shared_config(cfg: CRConfig) -> CRConfig | None:
    """The shared-token variant's config (``task.attr_share = shared_variant_share``, no
    CR-3 sweep, no lam sweep), or None when the variant is off."""
    if cfg.shared_variant_share <= 0:
        return None
    return replace(cfg, task=replace(cfg.task, attr_share=cfg.shared_variant_share),
                   sweep=(), shared_variant_share=0.0,
                   taskvec=replace(cfg.taskvec, lams=()))


def lam_seeds(cfg: CRConfig, seeds: list[int]) -> list[int]:
    """The seeds of the CR-4 lam sweep: every seed (or the first ``taskvec.lam_seeds`` when
    set; none without a lam sweep or with one attribute type, where there is nothing to
    decode)."""
    if not lam_sweep_wanted(cfg.taskvec) or cfg.task.n_types < 2:
        return []
    return list(seeds)[:lam_seed_cap(cfg.taskvec, len(seeds))]


def views_job(out_dir: Path, seed: int) -> dict[str, Any]:
    """Job ``views``: attention views of ``seed``'s run (last checkpoint of each phase) in
    ``<out>/views``; record: their paths relative to ``out_dir``."""
    t = time.perf_counter()
    written = write_reproduction_views(None, out_dir, [seed_run_path(out_dir, seed)], [seed],
                                       "")
    return {"views": [str(Path(p).relative_to(out_dir)) for p in written],
            "timings": {"attention views": time.perf_counter() - t}}


def _check_seeds(seeds) -> list[int]:
    check(isinstance(seeds, (list, tuple)) and len(seeds) > 0, "--seeds", seeds,
          "at least one seed")
    check(len(set(seeds)) == len(seeds), "--seeds", list(seeds), "distinct seeds")
    return list(seeds)


def plan(cfg: CRConfig, out_dir: Path, seeds: list[int]) -> list[Job]:
    """Every job of the CR reproduction of ``seeds`` (see the module docstring), in a good
    order to start them. Refuses run directories written under another config (and sweep
    settings that would share a directory) before any work."""
    out_dir, seeds = Path(out_dir), _check_seeds(seeds)
    check_run_dirs(cfg, out_dir, seeds)
    settings = sweep_settings(cfg)
    sweep_seeds = seeds[:cfg.sweep_seeds]

    def sweep(st, seed, after=()):
        return Job(job_name("sweep", seed, setting=st["slug"]), sweep_job,
                   {"cfg": cfg, "out_dir": out_dir, "seed": seed, "setting": st["setting"],
                    "pt_from": st["pt_from"]}, tuple(after))

    # first the training and the jobs that need nothing, so that the analyses find their
    # inputs ready and the workers are never idle waiting
    jobs = [Job(job_name("train", s), train_seed, {"cfg": cfg, "out_dir": out_dir, "seed": s})
            for s in seeds]
    jobs += [sweep(st, s) for s in sweep_seeds for st in settings if st["pt_from"] == "self"]
    for s in lam_seeds(cfg, seeds):
        base = run_config_for(cfg, s, f"seed{s}")[0]  # the config the seed's run holds
        # the main run's config with only task.lam changed; the main lam reads the main run
        # (so it waits for the seed's training)
        main = cfg.taskvec.lam_model == "main"
        jobs += [Job(job_name("cr4-lam", s, lam=lam), lam_job,
                     {"base": base, "lam": lam, "out_dir": out_dir, "seed": s,
                      "tvc": cfg.taskvec, "pretrain": cfg.pretrain, "finetune": cfg.finetune,
                      "main_run": seed_run_path(out_dir, s) if main else None},
                     (job_name("train", s),) if main and lam == cfg.task.lam else ())
                 for lam in cfg.taskvec.lams]
    jobs += [Job(job_name("cascade", s), cascade_seed,
                 {"task_cfg": cfg.task, "seed": s, "ccfg": cfg.cascade,
                  "run_path": out_dir / "runs" / "cr-mech" / f"seed{s}",
                  "n_pairs": cfg.mechanism.n_pairs}) for s in seeds]
    jobs += [Job(job_name("placebo", s), placebo_seed,
                 {"task_cfg": cfg.task, "seed": s, "ccfg": cfg.cascade}) for s in seeds]
    for s in seeds:
        train = (job_name("train", s),)
        if s in sweep_seeds:
            jobs += [sweep(st, s, train) for st in settings
                     if not st["default"] and st["pt_from"] is None]
        jobs.append(Job(job_name("cr4", s), taskvec_seed,
                        {"run_path": seed_run_path(out_dir, s), "seed": s, "tvc": cfg.taskvec},
                        train))
        jobs.append(Job(job_name("mechanism", s), mechanism_seed,
                        {"run_path": seed_run_path(out_dir, s), "seed": s,
                         "mech": cfg.mechanism}, train))
        jobs.append(uninf_job(cfg, out_dir, s))
    jobs += [sweep(st, s, [job_name("sweep", s, setting=st["pt_from"])]) for s in sweep_seeds
             for st in settings if st["pt_from"] not in (None, "self")]
    jobs.append(Job(job_name("views"), views_job, {"out_dir": out_dir, "seed": min(seeds)},
                    (job_name("train", min(seeds)),)))
    vcfg = shared_config(cfg)
    if vcfg is not None:  # SPEC: the ideal reader's type accuracy, before any training
        print_ideal_reader(vcfg, seeds)
        vout = out_dir / SHARED_DIR
        check_run_dirs(vcfg, vout, seeds)
        for s in seeds:
            jobs.append(Job(job_name("train", s, variant="shared"), train_seed,
                            {"cfg": vcfg, "out_dir": vout, "seed": s}))
            jobs.append(Job(job_name("cr4", s, variant="shared"), taskvec_seed,
                            {"run_path": seed_run_path(vout, s), "seed": s,
                             "tvc": vcfg.taskvec}, (job_name("train", s, variant="shared"),)))
            jobs.append(uninf_job(vcfg, vout, s, "shared"))
    return jobs


def uninf_job(cfg: CRConfig, out_dir: Path, seed: int, variant: str = "") -> Job:
    """The job ``[shared/]seed<N>/uninf-demos`` (evaluation only, after the seed's training):
    the type accuracies with uninformative demos of the models the training job wrote. Its
    inputs are the training job's, so it reruns whenever the training does."""
    return Job(job_name("uninf-demos", seed, variant=variant), uninf_demos_seed,
               {"cfg": cfg, "out_dir": out_dir, "seed": seed},
               (job_name("train", seed, variant=variant),))


def uninf_records(records: dict[str, dict], seeds: list[int], variant: str = "") -> dict:
    """seed -> its ``uninf-demos`` record, None where the records have none (a run from
    before the job existed: the variant's type bounds then cannot be read)."""
    out = {}
    for s in seeds:
        name = job_name("uninf-demos", s, variant=variant)
        out[s] = read_record(records, "uninf-demos", s, variant=variant) \
            if name in records else None
    return out


def reproduce(cfg: CRConfig, out_dir: Path, seeds: list[int], summary: Summary,
              workers: int = 1, ray_address: str | None = None, threads: int = 1) -> None:
    """Run every CR job for ``seeds`` (:func:`plan`; ``workers`` > 1 or ``ray_address``: on
    Ray; jobs with a record are skipped) and add the claims CR-1 .. CR-7, their tables and
    figures to ``summary``, written to ``out_dir/summary.json``."""
    out_dir = Path(out_dir)
    jobs = plan(cfg, out_dir, seeds)
    records_dir = out_dir / "jobs" / "cr"
    records = run_jobs(jobs, records_dir, workers, ray_address, threads)
    summarise(cfg, out_dir, seeds, records, summary)


def summarise(cfg: CRConfig, out_dir: Path, seeds: list[int], records: dict[str, dict],
              summary: Summary) -> None:
    """Add claims CR-1 .. CR-7, their tables and figures to ``summary`` from the job records
    of :func:`plan` (a pure function of them and of the run directories they name), and write
    ``out_dir/summary.json``. Per-stage job times are added to ``summary.timings``."""
    out_dir, seeds = Path(out_dir), list(seeds)
    for record in records.values():
        for stage, secs in record.get("timings", {}).items():
            summary.timings[stage] = summary.timings.get(stage, 0) + secs

    def rec(kind: str, s: int | None = None, **kw):
        return read_record(records, kind, s, **kw)

    # CR-1 .. CR-3
    results = [rec("train", s) for s in seeds]
    sweep_rows = []
    for r in results[:cfg.sweep_seeds]:
        for st in sweep_settings(cfg):
            if st["default"]:
                sweep_rows.append(default_setting_row(cfg, st["setting"], r.seed, r))
            else:
                sweep_rows.append(rec("sweep", r.seed, setting=st["slug"]).row)
    sweep = sweep_table(sweep_rows)
    baselines = uninf_records(records, seeds)
    for claim in cr123_claims(cfg, results, sweep, baselines):
        summary.add(claim)
    summary.tables["CR uninformative-demo baselines"] = baseline_table(baselines)
    summary.tables.update(cr123_tables(results, sweep))
    with summary.stage("figures"):
        figs = write_cr123_figures(heldout_icl_by_k(results, cfg.eval_ks), cfg.eval_ks,
                                   len(results), finetune_curves([r.curves for r in results]),
                                   sweep, out_dir / "figures", seeds=seeds)
    summary.tables["CR figures"] = figs
    atomic_write_json(out_dir / "cr" / "sweep_rows.json", sweep_rows)
    print_sweep(sweep)

    # CR-4
    lam_records = {s: [rec("cr4-lam", s, lam=lam) for lam in cfg.taskvec.lams]
                   for s in lam_seeds(cfg, seeds)}
    add_cr4(summary, out_dir, seeds, {s: rec("cr4", s) for s in seeds}, lam_records,
            cfg.taskvec)

    # CR-5 .. CR-7
    add_mechanism(summary, out_dir, seeds, {s: rec("mechanism", s) for s in seeds},
                  {s: rec("cascade", s) for s in seeds}, cfg.cascade,
                  {s: rec("placebo", s) for s in seeds})

    # the shared-token variant: CR-1 .. CR-4 and CR-8 under their own ids
    vcfg = shared_config(cfg)
    if vcfg is not None:
        add_shared_variant(summary, vcfg, out_dir, seeds, records)

    # attention views
    summary.tables.setdefault("CR attention views", []).extend(
        {"view": v} for v in rec("views").views)
    summary.write(out_dir)


def print_ideal_reader(vcfg: CRConfig, seeds: list[int]) -> list[dict[str, Any]]:
    """Print (and return) the ideal reader's type accuracy by K in the shared-token variant
    on the tasks of ``seeds`` (``tasks.cr.ideal_reader_table``)."""
    ks = list(range(1, vcfg.task.max_demos + 1))
    rows = ideal_reader_table(vcfg.task, ks, seeds=tuple(seeds))
    print(f"CR shared-token variant (task.attr_share = {vcfg.task.attr_share:g}): ideal "
          f"reader's type accuracy from the demos alone, by K (mean over task seeds "
          f"{list(seeds)}): " + ", ".join(f"K={r['K']} {r['mean']:.3f}" for r in rows),
          flush=True)
    return rows


def add_shared_variant(summary: Summary, vcfg: CRConfig, out_dir: Path, seeds: list[int],
                       records: dict[str, dict]) -> None:
    """CR-1 .. CR-3 and CR-4 / CR-8 of the shared-token variant from its job records, under
    the ids ``CR-k (shared tokens)``, with the ideal reader's table."""
    results = [read_record(records, "train", s, variant="shared") for s in seeds]
    chance = float(np.mean([type_chance(vcfg.task.build(s)) for s in seeds]))
    head = (f"Shared-token variant (task.attr_share = {vcfg.task.attr_share:g}: attribute "
            f"tokens belong to two types; an uninformed attribute guess has the right type "
            f"with probability {chance:.3f}, mean over the seeds' tasks, against 1/L = "
            f"{1 / vcfg.task.n_types:g} in the default task). ")
    vfig = Path(out_dir) / "figures" / SHARED_DIR
    write_cr123_figures(heldout_icl_by_k(results, vcfg.eval_ks), vcfg.eval_ks, len(results),
                        finetune_curves([r.curves for r in results]), [], vfig, seeds=seeds)
    baselines = uninf_records(records, seeds, "shared")
    summary.tables["CR shared-token uninformative-demo baselines"] = baseline_table(baselines)
    for claim in cr123_claims(vcfg, results, [], baselines, variant="shared"):
        claim.notes = head + claim.notes
        # the variant's own figure (CR-3 has no sweep there: its held-out-ICL-by-K figure)
        claim.figure = f"figures/{SHARED_DIR}/cr_icl_by_k.html"
        summary.add(claim)
    add_cr4(summary, out_dir, seeds,
            {s: read_record(records, "cr4", s, variant="shared") for s in seeds}, {},
            vcfg.taskvec, variant="shared")
    ks = list(range(1, vcfg.task.max_demos + 1))
    summary.tables["CR shared-token ideal reader"] = ideal_reader_table(vcfg.task, ks,
                                                                        seeds=tuple(seeds))
