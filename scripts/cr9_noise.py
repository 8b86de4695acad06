"""CR-9's retraining noise SD: eta^2 at the CR-4 hook over retrainings at the default lam, on
seeds outside the decision seeds (SPEC section 1, CR-9; registered before the decision run as
``claims.cr_registry.CR9_LAM_SD``, docs/registry.md; the rule's drop tolerance is
2 x sqrt(2) x SD / sqrt(n_seeds), ``claims.derive.cr9_tolerance``).

Every seed is one full PT + ICL finetuning at the main run's config (the CR-9 lam runs' own
code, ``experiments.cr.taskvec_stage.lam_job`` at ``task.lam``), so the spread is what a lam run's
eta^2 varies by when nothing but the seed changes: SD = the sample standard deviation (ddof
1) over the seeds. The records are jobs of their own (``OUT/jobs/cr/cr9-noise/...``):
a rerun resumes.

    OMP_NUM_THREADS=1 python scripts/cr9_noise.py --seeds 200,201,202,203,204,205,206,207 \\
        --out out-noise --workers 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mechinterp_icr.claims.derive import cr9_tolerance
from mechinterp_icr.experiments.cr.taskvec_stage import lam_job
from mechinterp_icr.experiments.cr.train import run_config_for
from mechinterp_icr.jobs import Job, run_jobs
from mechinterp_icr.runner import resolve_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", required=True, help="comma-separated seeds (not decision seeds)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = resolve_config("cr", args.profile, args.overrides)
    lam = cfg.task.lam
    jobs = [Job(f"cr9-noise/seed{s}", lam_job,
                {"base": run_config_for(cfg, s, f"seed{s}")[0], "lam": lam,
                 "out_dir": args.out, "seed": s, "tvc": cfg.taskvec,
                 "pretrain": cfg.pretrain, "finetune": cfg.finetune, "main_run": None})
            for s in seeds]
    records = run_jobs(jobs, args.out / "jobs" / "cr", args.workers)
    rows = [records[t.name]["row"] for t in jobs]
    eta = np.array([r["ft_eta2"] for r in rows])
    sd = float(eta.std(ddof=1)) if len(eta) > 1 else float("nan")
    out = {"lam": lam, "seeds": seeds, "ft_eta2": eta.tolist(), "mean": float(eta.mean()),
           "std": sd, "tolerance_5_seeds": cr9_tolerance(sd, 5),
           "mixed_eta2": [r.get("mixed_eta2") for r in rows],
           "ft_icl_exact": [r.get("ft_icl_exact") for r in rows]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cr9_noise.json").write_text(json.dumps(out, indent=1))
    for s, r in zip(seeds, rows):
        print(f"seed {s}: ft eta^2 {r['ft_eta2']:.4f}  held-out ICL exact "
              f"{r.get('ft_icl_exact', float('nan')):.3f}")
    print(f"lam {lam:g}: eta^2 mean {out['mean']:.4f}, SD {sd:.4f} over {len(seeds)} "
          f"seeds -> drop tolerance for 5 seeds 2 sqrt(2) SD / sqrt(5) = "
          f"{out['tolerance_5_seeds']:.4f}")


if __name__ == "__main__":
    main()
