"""IR-3/IR-4 causal test on an IR run directory: overwrite the step-1 attention row (query at
s3) with the learned pairwise form, one pair only, unequal within pairs, uniform and an
induction-style row, and measure step-1 accuracy on clean, single-pair-confusing and
re-pairing (swap)-confusing sequences at every selected checkpoint.

    python analyses/ir_overwrite_rows.py out/runs/ir/seed0/ht_sym_pgd --checkpoints all

Writes <run>/analyses/ir_overwrite_rows.json and prints a table (accuracy clean/single/swap).
"""

from __future__ import annotations

import argparse
import json

from _common import IR, fail, open_run, run_main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="IR run directory (K = 2)")
    ap.add_argument("--checkpoints", default="all", help="all | last | phase:NAME | steps:A-B")
    ap.add_argument("--n-each", type=int, default=128, help="sequences per kind")
    ap.add_argument("--deltas", default="0.02,0.05,0.1",
                    help="half within-pair gaps of the unequal rows")
    args = ap.parse_args(argv)
    try:
        deltas = tuple(float(d) for d in args.deltas.split(","))
    except ValueError:
        fail(f"--deltas {args.deltas!r} is not allowed; expected comma-separated numbers")
    run, _, _ = open_run(args.run, IR, args.checkpoints)

    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.interp.ir_attention import overwrite_rows_across_checkpoints
    from mechinterp_icr.store.io import atomic_write_text

    try:  # the row overwrite needs K = 2 (refused before any checkpoint is loaded)
        rows = overwrite_rows_across_checkpoints(args.run, args.checkpoints, args.n_each,
                                                 deltas)
    except ConfigError as e:
        fail(str(e))
    out = run.analyses_dir / "ir_overwrite_rows.json"
    atomic_write_text(out, json.dumps(rows, indent=2))
    for r in rows:
        print(f"{r['checkpoint']}  a={r['a']:.3f}  critical gap={r['critical_gap']:.3f}")
        for name, acc in r["acc"].items():
            print(f"    {name:14s} " + "  ".join(f"{k} {v:.3f}" for k, v in acc.items()) +
                  f"  | P(r*) swap {r['prob'][name]['swap']:.3f}")
    print(out)
    return 0


if __name__ == "__main__":
    run_main(main)
