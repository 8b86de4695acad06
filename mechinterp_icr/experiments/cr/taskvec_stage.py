"""The CR-4 / CR-8 / CR-9 stage as jobs of the CR reproduction, and the claims from their
records (SPEC section 1). The measurements are :mod:`.taskvec`'s; this module runs them per
seed and per lam (job records ``{status, result | error, timings}``), and adds the claims,
tables and figures (:func:`add_cr4`) for the default task or the shared-token variant.

- :func:`taskvec_seed`: job ``seed<N>/cr4`` (``taskvec.analyse_seed`` of one run directory);
- :func:`lam_job`: job ``cr4-lam/<lam>/seed<N>`` (one lam run of CR-9, ``taskvec.lam_point``);
- :func:`add_cr4`: CR-4, CR-8, CR-9 (and their tables and figures) from those records;
- :func:`add_taskvec_claim`: all of it in this process for a list of run directories.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mechinterp_icr.claims import Summary
from mechinterp_icr.claims.cr_registry import CR8_HEADROOM
from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig
from mechinterp_icr.experiments.cr.claims_taskvec import (
    per_seed_metrics,
    taskvec_claims,
    taskvec_not_measured,
    taskvec_tables,
)
from mechinterp_icr.experiments.cr.config import TaskvecConfig
from mechinterp_icr.experiments.cr.evaluate import to_record
from mechinterp_icr.experiments.cr.records import LamRecord, TaskvecRecord
from mechinterp_icr.experiments.cr.taskvec import PHASE_FT, PHASE_PT, analyse_seed, lam_point
from mechinterp_icr.store.io import atomic_write_json
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.viz.cr_figures import write_cr4_figures, write_cr8_figure, write_cr9_figure

__all__ = ["ANALYSIS_ERRORS", "add_cr4", "add_taskvec_claim", "lam_job", "lam_seed_cap",
           "lam_sweep_wanted", "taskvec_seed"]


ANALYSIS_ERRORS = (ConfigError, ValueError, RuntimeError)  # reported in the claim, not raised


def lam_sweep_wanted(tvc: TaskvecConfig) -> bool:
    """Whether CR-4 runs a lam sweep (at least two lam values)."""
    return len(tvc.lams) >= 2


def lam_seed_cap(tvc: TaskvecConfig, n_seeds: int) -> int:
    """How many seeds (the first ones) get the lam sweep: every seed unless ``tvc.lam_seeds``
    caps it (CR-4's lam condition is per seed, so a capped run cannot hold)."""
    return n_seeds if tvc.lam_seeds == 0 else min(n_seeds, tvc.lam_seeds)


def taskvec_seed(run_path: Path | None, seed: int, tvc: TaskvecConfig, log=print
                 ) -> dict[str, Any]:
    """Job ``seed<N>/cr4``: :func:`analyse_seed` of one CR run directory, written to
    ``<run>/analyses/taskvec.json``. Record ``{status: ok|skipped|error, result|error,
    timings}``: a run without phases pretrain and ft-icl, or with one attribute type, is
    ``skipped``; an analysis error (``ConfigError``, ``ValueError``, ``RuntimeError``) is
    reported in the claim, not raised."""
    t = time.perf_counter()
    out: dict[str, Any] = {"status": "skipped"}
    run = RunDir(run_path) if run_path is not None and Path(run_path).is_dir() else None
    if run is not None and run.latest(PHASE_PT) is not None and run.latest(PHASE_FT) is not None:
        try:
            if getattr(run.read_config().task, "n_types", 0) >= 2:  # else: nothing to decode
                res = analyse_seed(run.path, seed, tvc, log=log)
                atomic_write_json(run.analyses_dir / "taskvec.json", res)
                out = {"status": "ok", "result": res}
        except ANALYSIS_ERRORS as e:
            out = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    out["timings"] = {"cr4_taskvec": time.perf_counter() - t}
    return to_record(out)


def lam_job(base: RunConfig, lam: float, out_dir: Path, seed: int, tvc: TaskvecConfig,
            log=print, pretrain: TrainConfig | None = None,
            finetune: TrainConfig | None = None, main_run: Path | None = None
            ) -> dict[str, Any]:
    """Job ``cr4-lam/<lam>/seed<N>``: :func:`lam_point` of the seed whose main run config is
    ``base`` (trained with the main run's ``pretrain`` / ``finetune``; the main lam reads
    ``main_run``). Record ``{row}`` or ``{error}`` (an analysis error, reported in the
    claim), and ``timings``."""
    t = time.perf_counter()
    try:
        out: dict[str, Any] = {"row": lam_point(base, lam, out_dir, seed, tvc, log, pretrain,
                                                finetune, main_run)}
    except ANALYSIS_ERRORS as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    out["timings"] = {"cr4_lam_sweep": time.perf_counter() - t}
    return to_record(out)


def _relative(fig: Any, out_dir: Path) -> Any:
    """``save_figure``'s result (a dict of written files, or a path) as the HTML's path
    relative to ``out_dir`` (``figures/shared-tokens/cr8_by_k.html``); other values as they
    are."""
    path = fig.get("html") if isinstance(fig, dict) else fig
    if not isinstance(path, (str, Path)):
        return fig
    p = Path(path)
    try:
        return str(p.resolve().relative_to(out_dir.resolve()))
    except ValueError:
        return str(p)


def add_cr4(summary: Summary, out_dir: Path, seeds: list[int], seed_records: dict,
            lam_records: dict, tvc: TaskvecConfig, variant: str = "") -> None:
    """Add claims CR-4, CR-8 and CR-9 (``variant='shared'``: CR-4 and CR-8 of the
    shared-token variant, figures in ``figures/shared-tokens``), their tables and figures from
    the job records: ``seed_records`` maps a seed to its :func:`taskvec_seed` record,
    ``lam_records`` a seed to its :func:`lam_job` records in ``tvc.lams`` order (every seed by
    default, :func:`lam_seed_cap`); a seed whose lam sweep had an error has none."""
    results, skipped = [], []
    errors: dict[Any, str] = {}
    for seed in seeds:
        rec = seed_records.get(seed) or TaskvecRecord(status="skipped")
        if rec.status == "skipped":
            skipped.append(seed)
            continue
        if rec.status == "error":
            errors[seed] = rec.error
            continue
        res = dict(rec.result)
        lams = lam_records.get(seed)
        if len(results) < lam_seed_cap(tvc, len(seeds)) and lam_sweep_wanted(tvc) and lams:
            bad = [r.error for r in lams if r.error is not None]
            if bad:
                errors[f"lam sweep, seed {seed}"] = bad[0]
            else:
                res["lam_sweep"] = [r.row for r in lams]
                atomic_write_json(Path(res["run"]) / "analyses" / "taskvec.json", res)
        results.append(res)
    if not results:
        for claim in taskvec_not_measured(seeds, errors, variant):
            summary.add(claim)
        return
    fig_dir = Path(out_dir) / "figures" / ("shared-tokens" if variant else "")
    per_seed = {str(r["seed"]): per_seed_metrics(r) for r in results}
    label = "shared-token variant" if variant else "default task"
    with summary.stage("cr4_figures"):
        figs = write_cr4_figures(results, fig_dir)
        figs["cr8"] = write_cr8_figure(per_seed, fig_dir, CR8_HEADROOM, label)
        if not variant:
            figs["cr9"] = write_cr9_figure(per_seed, fig_dir)
    # a claim names its figure by its path relative to the output folder
    figs = {k: _relative(v, Path(out_dir)) for k, v in figs.items()}
    for claim in taskvec_claims(results, tvc, skipped, errors, figs, variant, per_seed):
        summary.add(claim)
    summary.tables.update(taskvec_tables(results, variant))


def add_taskvec_claim(summary: Summary, out_dir: Path, run_dirs: list[Path],
                      seeds: list[int], tvc: TaskvecConfig, log=print,
                      pretrain: TrainConfig | None = None,
                      finetune: TrainConfig | None = None) -> None:
    """Add claim CR-4 (and its tables and figures) for the CR runs ``run_dirs``, in this
    process: :func:`taskvec_seed` per seed, the lam sweep (:func:`lam_job`) on every seed
    with a result (or the first ``tvc.lam_seeds``), then :func:`add_cr4`.

    Run directories are matched to seeds by name (``seed<N>``); a seed without a complete run
    (phases pretrain and ft-icl) is skipped and named in the claim's notes. ``tvc`` is the
    ``taskvec`` section of the CR config (tests pass tiny sizes).
    """
    by_name = {Path(p).name: Path(p) for p in run_dirs}
    seed_records, lam_records, n_ok = {}, {}, 0
    for i, seed in enumerate(seeds):
        path = by_name.get(f"seed{seed}")
        if path is None and len(run_dirs) == len(seeds):
            path = Path(run_dirs[i])
        with summary.stage("cr4_taskvec"):
            seed_records[seed] = TaskvecRecord.read(taskvec_seed(path, seed, tvc, log=log))
        if seed_records[seed].status != "ok":
            continue
        if n_ok < lam_seed_cap(tvc, len(seeds)) and lam_sweep_wanted(tvc):
            base = RunDir(path).read_config()
            with summary.stage("cr4_lam_sweep"):
                lam_records[seed] = []
                for lam in tvc.lams:
                    lam_records[seed].append(LamRecord.read(lam_job(
                        base, lam, out_dir, seed, tvc, log, pretrain, finetune, path)))
                    if lam_records[seed][-1].error is not None:
                        break  # as one sweep: the first error stops it
        n_ok += 1
    add_cr4(summary, out_dir, seeds, seed_records, lam_records, tvc)
