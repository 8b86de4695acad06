"""CR-3 sweep: ICL+Grm finetuning under several settings of the open choices, evaluated on
plain ICL on held-out subjects. Thin wrapper around mechinterp_icr.experiments.cr.run_sweep.

    OMP_NUM_THREADS=1 python analyses/cr_sweep.py --out runs-sweep --seeds 0,1,2 \\
        --setting "sga, type chain|task.order=sga,task.iclgrm_chain=type" --log sweep.jsonl
"""

import argparse
from pathlib import Path

import torch

from mechinterp_icr.experiments import cr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default="paper", choices=cr.PROFILES)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="override of the experiment config, e.g. finetune.steps=300")
    ap.add_argument("--setting", action="append", default=[],
                    help="'label|task.key=v,finetune.key=v' (default: the profile's sweep)")
    ap.add_argument("--log", default=None, help="append one JSON row per (setting, seed)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = cr.validate(a.profile, [0], a.overrides)
    settings = a.setting or list(cfg.sweep)
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = cr.run_sweep(cfg, Path(a.out), seeds, settings, log=a.log)
    print(cr.format_sweep(cr.sweep_table(rows)))


if __name__ == "__main__":
    main()
