"""Step-1 attention row (pairwise pattern) and CoT accuracies across the checkpoints of an IR
run directory, e.g. one written by `icr reproduce ir` under out/runs/ir/seed0/ht_sym_pgd.

    python analyses/ir_attention_rows.py out/runs/ir/seed0/ht_sym_pgd --checkpoints all

Writes <run>/analyses/ir_attention_rows.json and an offline plotly figure next to it.
"""

from __future__ import annotations

import argparse
import json

from _common import IR, open_run, run_main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="IR run directory")
    ap.add_argument("--checkpoints", default="all", help="all | last | phase:NAME | steps:A-B")
    ap.add_argument("--n-eval", type=int, default=256)
    args = ap.parse_args(argv)
    run, _, _ = open_run(args.run, IR, args.checkpoints)

    import plotly.graph_objects as go

    from mechinterp_icr.interp.ir_attention import attention_row_table
    from mechinterp_icr.store.io import atomic_write_text
    from mechinterp_icr.viz.figures import save_figure

    rows = attention_row_table(args.run, args.checkpoints, args.n_eval)
    out = run.analyses_dir
    atomic_write_text(out / "ir_attention_rows.json", json.dumps(rows, indent=2))
    fig = go.Figure()
    x = list(range(len(rows)))
    labels = [r["checkpoint"] for r in rows]
    names = [f"s{i // 2 + 1}" if i % 2 == 0 else f"a{i // 2 + 1}" for i in
             range(len(rows[0]["row1"]) - 1)] + ["s_q"]
    for j, nm in enumerate(names):
        fig.add_trace(go.Scatter(x=x, y=[r["row1"][j] for r in rows], name=nm, mode="lines"))
    fig.update_xaxes(tickvals=x[:: max(1, len(x) // 12)], ticktext=labels[:: max(1, len(x) // 12)])
    fig.update_layout(title=f"step-1 attention row across checkpoints: {args.run}",
                      yaxis_title="attention")
    save_figure(fig, out / "ir_attention_rows")
    print(f"{'checkpoint':22} {'step1':>7} {'step2':>7} {'swap':>7} {'gap':>8} {'a':>7} {'s_q':>7}")
    for r in rows:
        print(f"{r['checkpoint']:22} {r['step1_acc']:7.4f} {r['step2_acc']:7.4f} "
              f"{r.get('step1_acc_swap', float('nan')):7.4f} {r['within_pair_gap']:8.5f} "
              f"{r['a']:7.4f} {r['mass_sq']:7.4f}")
    print(f"table: {out / 'ir_attention_rows.json'}")
    return 0


if __name__ == "__main__":
    run_main(main)
