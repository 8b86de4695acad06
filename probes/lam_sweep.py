"""Separation of task vectors vs the pretraining grammar separation lam.

    python probes/lam_sweep.py out/runs/cr/seed0 --lams 0,0.5,0.9 --out out/

Trains PT + ICL-finetune runs with RUN's config and only task.lam changed at every lam
(the profile's pretrain / finetune settings; RUN itself at its own lam; into
OUT/runs/cr-taskvec/lam<lam>/seed<N>/, resumable) and prints, for PT only and after
finetuning, the type variance share of held-out task vectors and the top-PC probe accuracy.
All computation lives in mechinterp_icr.experiments.cr.taskvec; RUN must be a CR run (task
kind cr).
"""

import argparse
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="CR run directory whose task/seed to reuse")
    ap.add_argument("--lams", default=None, help="comma-separated lam values")
    ap.add_argument("--profile", default="quick", choices=["quick", "paper"])
    ap.add_argument("--out", type=Path, default=Path("out"), help="output root")
    ap.add_argument("--csv", default=None, metavar="PATH",
                    help="also write the table (one row per lam) as CSV to PATH")
    a = ap.parse_args(argv)

    import torch

    from mechinterp_icr.config import ConfigError, check
    from mechinterp_icr.experiments import cr
    from mechinterp_icr.experiments.cr.claims import spearman
    from mechinterp_icr.experiments.cr.taskvec import lam_sweep
    from mechinterp_icr.experiments.cr.train import require_cr_run
    from mechinterp_icr.store.rundir import RunError

    torch.set_num_threads(1)
    try:
        base = require_cr_run(a.run)
        tvc = cr.profile(a.profile).taskvec
        if a.lams:
            try:
                lams = tuple(float(x) for x in a.lams.split(",") if x.strip())
            except ValueError:
                lams = ()
            check(len(lams) >= 1 and all(0 <= x <= 1 for x in lams), "--lams", a.lams,
                  "comma-separated numbers in [0, 1], e.g. 0,0.5,0.9")
            tvc = replace(tvc, lams=lams)
        prof = cr.profile(a.profile)
        rows = lam_sweep(base, a.out, base.seed, tvc, print, prof.pretrain, prof.finetune,
                         Path(a.run))
    except (ConfigError, RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'lam':>5} {'grammar TV':>10} {'PT eta2':>8} {'FT eta2':>8} {'PT probe':>8} "
          f"{'FT probe':>8} {'FT ICL':>7}")
    for r in rows:
        print(f"{r['lam']:5.2f} {r['grammar_tv']:10.3f} {r['pt_type_variance_fraction']:8.3f} "
              f"{r['ft_type_variance_fraction']:8.3f} {r['pt_acc_pc']:8.3f} "
              f"{r['ft_acc_pc']:8.3f} {r['ft_icl_exact']:7.3f}")
    rho = spearman([r["lam"] for r in rows], [r["ft_type_variance_fraction"] for r in rows])
    print(f"Spearman rho(lam, separation after finetuning) = {rho:.2f}")
    if a.csv:
        write_csv(a.csv, rows)
    return 0


def write_csv(path, rows) -> None:
    """The rows' scalar columns (numbers, strings, booleans) as CSV."""
    from mechinterp_icr.store.io import atomic_write_csv

    atomic_write_csv(path, rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
