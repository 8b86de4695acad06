"""Step-1 attention row (pairwise pattern) and CoT accuracies across the checkpoints of an IR
run directory, e.g. one written by `icr reproduce ir` under out/runs/ir/seed0/ht_sym_pgd.

    python analyses/ir_attention_rows.py out/runs/ir/seed0/ht_sym_pgd --checkpoints all

Writes <run>/analyses/ir_attention_rows.json (and --csv PATH) and an offline plotly figure
of the row against the training step next to it.
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
    open_run,
    print_figures,
    run_main,
    write_table,
)

COLUMNS = {"checkpoint": "checkpoint", "step": "step", "step1_acc": "step-1 accuracy",
           "step2_acc": "step-2 accuracy", "step1_acc_swap": "step-1 accuracy (swap)",
           "within_pair_gap": "within-pair gap", "a": "a (pair mass)",
           "mass_sq": "mass on s_q"}


def main(argv=None) -> int:
    ap = Parser(description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="IR run directory")
    ap.add_argument("--checkpoints", default="all", help=SELECTION_HELP)
    ap.add_argument("--n-eval", type=COUNT, default=256, help="sequences per checkpoint")
    add_csv(ap)
    args = ap.parse_args(argv)
    run, _, _ = open_run(args.run, IR, args.checkpoints)

    from mechinterp_icr.interp.ir_attention import attention_row_table
    from mechinterp_icr.viz.figures import checkpoint_figure, save_figure

    rows = []
    for name in checkpoints(run, args.checkpoints):
        rows += attention_row_table(run.path, name, args.n_eval)
    n = len(rows[0]["row1"])
    names = [f"s{i // 2 + 1}" if i % 2 == 0 else f"a{i // 2 + 1}" for i in range(n - 1)] + \
        ["s_q"]
    for r in rows:
        r.update({f"row1 {nm}": v for nm, v in zip(names, r["row1"])})
    fig = checkpoint_figure(rows, {nm: f"row1 {nm}" for nm in names},
                            f"step-1 attention row (query s_q) across checkpoints: {args.run}",
                            "attention from s_q", y_range=(0, 1.02))
    paths = save_figure(fig, run.analyses_dir / "ir_attention_rows")
    write_table(run, "ir_attention_rows", rows, list(COLUMNS), csv=args.csv, labels=COLUMNS)
    print_figures(paths)
    return 0


if __name__ == "__main__":
    run_main(main)
