"""IR-3/IR-4 causal test on an IR run directory: overwrite the step-1 attention row (query at
s3) with the learned pairwise form, one pair only, unequal within pairs, uniform and an
induction-style row, and measure step-1 accuracy on clean, single-pair-confusing and
re-pairing (swap)-confusing sequences at every selected checkpoint.

    python analyses/ir_overwrite_rows.py out/runs/ir/seed0/ht_sym_pgd --checkpoints all

Writes <run>/analyses/ir_overwrite_rows.json and prints one line per checkpoint and written
row (--csv PATH: the same table as CSV).
"""

from __future__ import annotations

import argparse

from _common import (
    COUNT,
    IR,
    SELECTION_HELP,
    Parser,
    add_csv,
    checkpoints,
    fail,
    open_run,
    print_table,
    run_main,
    save_json,
)


def main(argv=None) -> int:
    ap = Parser(description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="IR run directory (K = 2)")
    ap.add_argument("--checkpoints", default="all", help=SELECTION_HELP)
    ap.add_argument("--n-each", type=COUNT, default=128, help="sequences per kind")
    ap.add_argument("--deltas", default="0.02,0.05,0.1",
                    help="half within-pair gaps of the unequal rows")
    add_csv(ap)
    args = ap.parse_args(argv)
    try:
        deltas = tuple(float(d) for d in args.deltas.split(","))
    except ValueError:
        fail(f"--deltas {args.deltas!r} is not allowed; expected comma-separated numbers")
    run, _, _ = open_run(args.run, IR, args.checkpoints)

    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.interp.ir_attention import overwrite_rows_across_checkpoints

    rows = []
    try:  # the row overwrite needs K = 2 (refused before any checkpoint is loaded)
        for name in checkpoints(run, args.checkpoints):
            rows += overwrite_rows_across_checkpoints(run.path, name, args.n_each, deltas)
    except ConfigError as e:
        fail(str(e))
    out = save_json(run, "ir_overwrite_rows", rows)
    flat = []
    for r in rows:
        for name, acc in r["acc"].items():
            flat.append({"checkpoint": r["checkpoint"], "step": r["step"], "a": r["a"],
                         "critical_gap": r["critical_gap"], "row": name,
                         **{f"acc_{k}": v for k, v in acc.items()},
                         "p_swap": r["prob"][name]["swap"]})
    print_table(flat, ["checkpoint", "step", "a", "critical_gap", "row", "acc_clean",
                       "acc_single", "acc_swap", "p_swap"],
                {"a": "learned a", "critical_gap": "critical gap", "row": "row written",
                 "acc_clean": "step-1 accuracy clean", "acc_single": "step-1 accuracy single",
                 "acc_swap": "step-1 accuracy swap", "p_swap": "P(r*) on swap"}, args.csv)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
