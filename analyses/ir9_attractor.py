"""IR-9 on its own: is within-pair equality an attractor? (docs/ir.md, "IR-9".)

    python analyses/ir9_attractor.py --seeds 91,92,93,94,95 --out ir9.json

For each seed, the same job as the reproduction's ``seed<N>/ir9`` (the main run's state right
after the large step, the registered within-pair offset imposed, then the registered small
steps and the same at learning rate 0), through ``experiments.ir.ir9.attractor_metrics``; the
per-seed numbers are then decided by IR-9's registered spec, exactly as ``icr reproduce ir``
decides them (``claims.redecide``). Prints one line per seed and the verdict; ``--out``
writes the claim entry (per-seed numbers, conditions, controls, verdict) and the two gap
trajectories per seed as JSON. About 6 s per seed on one core at the quick profile.
"""

import argparse

from _common import Parser, add_config_args, run_main


def _short(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    add_config_args(ap, "IR")
    ap.add_argument("--out", default=None, metavar="PATH", help="write the claim entry as JSON")
    a = ap.parse_args()
    # the commands' seed parser (light: click and the config errors); a bad seed list or
    # override is one line and exit 2 (run_main) before any model is built
    from mechinterp_icr.cli.group import parse_seeds

    seeds = parse_seeds(a.seeds)
    # imported after checking the arguments: --help stays fast
    from mechinterp_icr.claims.redecide import redecide_claim
    from mechinterp_icr.config import apply_overrides
    from mechinterp_icr.experiments import ir
    from mechinterp_icr.experiments.ir.ir9 import attractor_metrics, per_seed_metrics
    from mechinterp_icr.store.io import atomic_write_json

    cfg = apply_overrides(ir.profile(a.profile), a.overrides)
    per_seed, traces = {}, {}
    for s in seeds:
        m = attractor_metrics(cfg, s)
        per_seed[str(s)] = per_seed_metrics(m)
        traces[str(s)] = {"learned": m["trace"], "frozen": m["frozen_trace"]}
        print(f"seed {s}: " + ", ".join(
            f"{k} {_short(per_seed[str(s)][k])}" for k in (
                "ir9_imposed", "ir9_start_gap", "ir9_final_gap", "ir9_frozen_final_gap",
                "ir9_first_step_at_converged_gap")), flush=True)
    claim = redecide_claim("IR-9", {"per_seed": per_seed}, [str(s) for s in seeds])
    for c in claim["controls"]:
        print(f"control {c['name']}: as expected {c['as_expected']}")
    print(f"IR-9: {claim['verdict']} ({claim['verdict_reason']})")
    if a.out:
        atomic_write_json(a.out, {"profile": a.profile, "overrides": a.overrides,
                                  "seeds": seeds, "claim": claim, "traces": traces})
        print(f"wrote {a.out}")


if __name__ == "__main__":
    run_main(main)
