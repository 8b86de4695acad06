"""The two calibrations that produced registered CR values, as functions behind ``icr
calibrate`` (docs/taskvec.md, "Calibrations"). Each runs before a decision run, on seeds
outside the decision seeds, and prints what it recommends; the value is registered by hand
with a dated change-log entry (docs/registry.md), never read from here by a claim.

- :func:`cr9_noise`: CR-9's retraining noise SD (``claims.cr_registry.CR9_LAM_SD``): eta^2 at
  the CR-4 hook over full retrainings at the default lam, one per seed; the rule's drop
  tolerance is 2 sqrt(2) SD / sqrt(n_seeds) (``claims.derive.cr9_tolerance``).
- :func:`shared_rate_table`: the shared-token variant's sharing rate (``task.attr_share``),
  chosen before any training from the ideal (Bayes) reader of the demos alone: the smallest
  rate on the 0.1 grid whose ideal type accuracy is at most ``SHARED_IDEAL_K1_MAX`` at K = 1
  and at least ``SHARED_IDEAL_KMAX_MIN`` at K = max_demos on every task seed, with the mean
  +/- 3 SD over the seeds inside both bounds too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RATES", "cr9_noise", "recommended_rate", "shared_rate_table"]

RATES = tuple(round(0.1 * i, 1) for i in range(11))  # the sharing rates searched


def cr9_noise(cfg, seeds: list[int], out_dir: Path, workers: int = 1) -> dict[str, Any]:
    """One PT + ICL finetuning per seed at ``cfg``'s lam (the CR-9 lam runs' own code,
    ``taskvec_stage.lam_job``), kept as jobs ``OUT/jobs/cr/cr9-noise/seed<N>`` (a rerun
    resumes), and the sample SD (ddof 1) of their eta^2 with the 5-seed drop tolerance."""
    from mechinterp_icr.claims.derive import cr9_tolerance
    from mechinterp_icr.experiments.cr.taskvec_stage import lam_job
    from mechinterp_icr.experiments.cr.train import run_config_for
    from mechinterp_icr.jobs import Job, run_jobs

    lam = cfg.task.lam
    jobs = [Job(f"cr9-noise/seed{s}", lam_job,
                {"base": run_config_for(cfg, s, f"seed{s}")[0], "lam": lam,
                 "out_dir": out_dir, "seed": s, "tvc": cfg.taskvec,
                 "pretrain": cfg.pretrain, "finetune": cfg.finetune, "main_run": None})
            for s in seeds]
    records = run_jobs(jobs, out_dir / "jobs" / "cr", workers)
    rows = [records[t.name]["row"] for t in jobs]
    eta = np.array([r["ft_eta2"] for r in rows], dtype=float)
    sd = float(eta.std(ddof=1)) if len(eta) > 1 else float("nan")
    return {"lam": lam, "seeds": list(seeds), "ft_eta2": eta.tolist(), "mean": float(eta.mean()),
            "std": sd, "tolerance_5_seeds": cr9_tolerance(sd, 5),
            "mixed_eta2": [r.get("mixed_eta2") for r in rows],
            "ft_icl_exact": [r.get("ft_icl_exact") for r in rows]}


def shared_rate_table(base, seeds, n: int) -> list[dict[str, Any]]:
    """Per rate of :data:`RATES` (``base``: the registered CR task config): the ideal reader's
    table at K = 1 .. max_demos over the task ``seeds`` (``tasks.cr_eval.ideal_reader_table``,
    ``n`` Monte Carlo prompts per seed and K), the K = 1 accuracy of a reader that also knows
    the knowledge base's counts (reported), the worst seed's margins to both bounds (positive:
    inside) and ``meets``: both bounds on every seed and at mean +/- 3 SD."""
    from mechinterp_icr.claims.cr_registry import SHARED_IDEAL_K1_MAX, SHARED_IDEAL_KMAX_MIN
    from mechinterp_icr.tasks.cr_eval import ideal_reader_table

    ks = range(1, base.max_demos + 1)
    out = []
    for r in RATES:
        cfg = dataclasses.replace(base, attr_share=r)
        rows = ideal_reader_table(cfg, ks, seeds=seeds, n=n)
        kb1 = ideal_reader_table(cfg, [1], seeds=seeds, n=n, reader="kb")[0]
        k1, km = np.asarray(rows[0]["per_seed"]), np.asarray(rows[-1]["per_seed"])
        many = len(k1) > 1
        k1_hi = float(k1.mean() + 3 * k1.std(ddof=1)) if many else float("nan")
        # the bounds must hold on task seeds nobody chose the rate on: mean +/- 3 SD over the
        # seeds read here inside both bounds, as well as every seed itself
        spread_ok = (k1_hi <= SHARED_IDEAL_K1_MAX
                     and km.mean() - 3 * km.std(ddof=1) >= SHARED_IDEAL_KMAX_MIN) if many else True
        out.append({"attr_share": r, "n_shared_slots": cfg.n_shared_slots, "rows": rows,
                    "kb_reader_k1": kb1, "k1_mean_plus_3sd": k1_hi,
                    "k1_margin": SHARED_IDEAL_K1_MAX - float(k1.max()),
                    "kmax_margin": float(km.min()) - SHARED_IDEAL_KMAX_MIN,
                    "meets": bool(k1.max() <= SHARED_IDEAL_K1_MAX
                                  and km.min() >= SHARED_IDEAL_KMAX_MIN and spread_ok)})
    return out


def recommended_rate(table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The smallest rate of ``table`` that meets both bounds (the variant closest to the
    default task), or None."""
    return next((t for t in table if t["meets"]), None)
