"""IR-6 / IR-7 within-pair gap against PGD knobs and n (see docs/ir.md).

    python analyses/ir_gap_sweep.py IR-7 --seeds 0,1,2 --out out/ir_gap_sweep_ir7.jsonl
"""

import argparse
import json

from mechinterp_icr.experiments.ir_gap_sweep import gap_sweep, settings_grid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("claim", choices=["IR-6", "IR-7"])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="JSON list of settings instead of the grid")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    settings = json.loads(a.only) if a.only else settings_grid(a.claim)
    with open(a.out, "a") as fh:
        def log(row):
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "row1"}), flush=True)
        gap_sweep(a.claim, seeds, settings, log=log)


if __name__ == "__main__":
    main()
