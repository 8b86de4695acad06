"""CR-3 sweep: ICL+Grm finetuning under several settings of the open choices, evaluated on
plain ICL on held-out subjects. Thin wrapper around mechinterp_icr.experiments.cr.sweep.

    OMP_NUM_THREADS=1 python analyses/cr_sweep.py --out runs-sweep --seeds 0,1,2 \\
        --setting "sga, type chain|task.order=sga,task.iclgrm_chain=type" --log sweep.jsonl

Existing run directories OUT/runs/cr/seed<N> are resumed; they must be CR runs.
"""

import argparse
import sys
from pathlib import Path

from _common import THREADS, Parser, add_csv, print_table, run_main


def main(argv=None) -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, help="output root (runs under OUT/runs/cr/)")
    ap.add_argument("--profile", default="paper", choices=("quick", "paper"))
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="override of the experiment config, e.g. finetune.steps=300")
    ap.add_argument("--setting", action="append", default=[],
                    help="'label|task.key=v,finetune.key=v' (default: the profile's sweep)")
    ap.add_argument("--log", default=None, help="append one JSON row per (setting, seed)")
    ap.add_argument("--threads", type=THREADS, default=1)
    add_csv(ap)
    a = ap.parse_args(argv)
    import torch  # imported after parsing: --help stays fast

    from mechinterp_icr.config import ConfigError, apply_overrides
    from mechinterp_icr.experiments import cr
    from mechinterp_icr.experiments.cr.sweep import format_sweep, run_sweep, sweep_table
    from mechinterp_icr.experiments.cr.train import require_cr_run
    from mechinterp_icr.store.rundir import RunError

    torch.set_num_threads(a.threads)
    try:
        cfg = apply_overrides(cr.profile(a.profile), a.overrides)
        seeds = [int(s) for s in a.seeds.split(",")]
        for seed in seeds:  # runs resumed here must be CR runs
            if (Path(a.out) / "runs" / "cr" / f"seed{seed}").is_dir():
                require_cr_run(Path(a.out) / "runs" / "cr" / f"seed{seed}")
    except (ConfigError, RunError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings = a.setting or list(cfg.sweep)
    rows = run_sweep(cfg, Path(a.out), seeds, settings, log=a.log)
    table = sweep_table(rows)
    print(format_sweep(table))
    if a.csv:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):  # the table is printed above
            print_table(table, [k for k in table[0] if not isinstance(table[0][k], list)],
                        csv=a.csv)
        print(f"wrote {a.csv}")
    return 0


if __name__ == "__main__":
    run_main(main)
