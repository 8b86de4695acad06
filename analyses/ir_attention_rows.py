"""Step-1 attention row (pairwise pattern) and CoT accuracies across the checkpoints of an IR
run directory, e.g. one written by `icr reproduce ir` under out/runs/ir/seed0/ht_sym_pgd.

    python analyses/ir_attention_rows.py out/runs/ir/seed0/ht_sym_pgd --checkpoints all

Writes <run>/analyses/ir_attention_rows.json (and --csv PATH) and a figure of the row
against the training step, phases in sequence (the large step, then PGD), one colour per
position, with the ideal row at the last checkpoint's pair mass a dashed and labelled.
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


def _ideal_row(fig, last: dict, names: list[str]) -> None:
    """Grey dashed lines at the ideal step-1 row for the last checkpoint's pair mass a: the
    first pair's two positions at a, the second's at 1/2 - a, s_q at 0 (the two-pair rows the
    task's ceiling is computed over), each labelled."""
    a = last.get("a")
    if not isinstance(a, (int, float)) or len(names) != 5:
        return
    for v, text in ((a, f"ideal s1, a1: a = {a:.3f} (the last checkpoint's pair mass)"),
                    (0.5 - a, f"ideal s2, a2: 1/2 - a = {0.5 - a:.3f}"), (0.0, "ideal s_q: 0")):
        fig.add_hline(y=v, line={"dash": "dash", "width": 1, "color": "grey"})
        fig.add_annotation(x=1, xref="paper", y=v, text=text, showarrow=False, xanchor="right",
                           yanchor="bottom" if v >= 0.25 or v == 0 else "top",
                           font={"size": 11, "color": "grey"})


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
    from mechinterp_icr.viz.figures import save_figure
    from mechinterp_icr.viz.step_figures import step_figure

    rows = []
    for name in checkpoints(run, args.checkpoints):
        rows += attention_row_table(run.path, name, args.n_eval)
    n = len(rows[0]["row1"])
    names = [f"s{i // 2 + 1}" if i % 2 == 0 else f"a{i // 2 + 1}" for i in range(n - 1)] + \
        ["s_q"]
    for r in rows:
        r.update({f"row1 {nm}": v for nm, v in zip(names, r["row1"])})
    fig = step_figure(rows, {nm: f"row1 {nm}" for nm in names},
                      f"Step-1 attention row from the query s_q against training step (run "
                      f"{run.path.name}, {args.checkpoints}, {args.n_eval} sequences)",
                      "attention from s_q", y_range=(0, 1.02))
    _ideal_row(fig, rows[-1], names)
    paths = save_figure(fig, run.analyses_dir / "ir_attention_rows", width=1100, height=560)
    write_table(run, "ir_attention_rows", rows, list(COLUMNS), csv=args.csv, labels=COLUMNS)
    print_figures(paths)
    return 0


if __name__ == "__main__":
    run_main(main)
