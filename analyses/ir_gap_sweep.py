"""IR-6 / IR-7 within-pair gap against PGD knobs and n (see docs/ir.md).

    python analyses/ir_gap_sweep.py IR-7 --seeds 0,1,2 --out out/ir_gap_sweep_ir7.jsonl

Rows are appended to --out (one JSON object per setting and seed). --only replaces the
default grid by a JSON list of settings, e.g. '[{"sigma": 0.1}, {"n": 1024}]' (keys:
IR-7 n, N, big_lr, sigma, lr, steps; IR-6 also pre_steps, pretrain_pair_jitter); --profile
and --set give the base config of the reproduction (``--set n=1024``).
"""

import argparse
import json
import sys

from _common import Parser, add_config_args, run_main


def main() -> None:
    ap = Parser(description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("claim", choices=["IR-6", "IR-7"])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--out", required=True, help="JSONL file the rows are appended to")
    ap.add_argument("--only", default="", help="JSON list of settings instead of the grid")
    add_config_args(ap, "IR")
    a = ap.parse_args()
    # imported after parsing: --help stays fast
    from mechinterp_icr.cli.group import parse_seeds  # light: no torch before the checks
    from mechinterp_icr.config import ConfigError, apply_overrides

    try:
        seeds = parse_seeds(a.seeds)  # the commands' parser: distinct non-negative integers
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    from mechinterp_icr.experiments import ir
    from mechinterp_icr.experiments.ir.sweeps import check_gap_settings, gap_sweep, settings_grid

    if a.only:
        try:
            settings = json.loads(a.only)
        except json.JSONDecodeError as e:
            ap.error(f"--only is not valid JSON: {e}")
        if not isinstance(settings, list):
            ap.error("--only must be a JSON list of objects, e.g. '[{\"sigma\": 0.1}]'")
    else:
        settings = settings_grid(a.claim)
    try:
        cfg = apply_overrides(ir.profile(a.profile), a.overrides)
        check_gap_settings(a.claim, settings, cfg)  # before anything is written
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    with open(a.out, "a") as fh:
        def log(row):
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "row1"}), flush=True)
        gap_sweep(a.claim, seeds, settings, cfg, log=log)


if __name__ == "__main__":
    run_main(main)
