"""IR-5's learned arm: does training the position block on the first
``sample_complexity.learned_fit_max`` of its N sequences (its memory writes all N) change the
accuracy it reaches? (docs/ir.md, "IR-5".)

    python analyses/ir5_fit_cap.py --n 4096 --N 2048 --seed 0

Runs the learned arm's ``sample_complexity.learned_runs`` runs at one (n, N, seed) twice, with
the registered cap and with none (every sequence), and prints each run's final expected
step-1 accuracy and the two means. The same training draws and PGD seeds as the
reproduction's row at that (n, N, seed).
"""

import argparse
import dataclasses
import json
import sys
import time

from _common import Parser, add_config_args, run_main


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, required=True, help="subjects (a registered n)")
    ap.add_argument("--N", type=int, required=True, help="finetuning sequences")
    ap.add_argument("--seed", type=int, default=0)
    add_config_args(ap, "IR")
    a = ap.parse_args()
    from mechinterp_icr.config import ConfigError, apply_overrides
    from mechinterp_icr.experiments import ir
    from mechinterp_icr.experiments.ir.ir5 import learned_runs

    try:
        cfg = apply_overrides(ir.profile(a.profile), a.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if a.n < 2 or a.N < 1:
        ap.error(f"--n = {a.n}, --N = {a.N} are not allowed; expected n >= 2 and N >= 1")
    cap = cfg.sample_complexity.learned_fit_max
    out = {"n": a.n, "N": a.N, "seed": a.seed, "cap": cap}
    for name, c in (("capped", cfg), ("every sequence", dataclasses.replace(
            cfg, sample_complexity=dataclasses.replace(cfg.sample_complexity,
                                                       learned_fit_max=max(a.N, 1))))):
        t = time.perf_counter()
        accs, _ = learned_runs(c, a.seed, a.n, a.N)
        out[name] = {"runs": [round(v, 4) for v in accs],
                     "mean": round(sum(accs) / len(accs), 4),
                     "seconds": round(time.perf_counter() - t, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    run_main(main)
