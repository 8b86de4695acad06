"""Activation patching heatmap, head x position, per checkpoint: the normalised recovery of
the clean-minus-corrupted logit difference when one head's output (z) at one position is
copied from the clean run into the corrupted run (exact, one cell at a time; batched engine
interp.patching.patch_head_out_by_pos).

    python analyses/patching_heatmap.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 64

Prompts (interp.lens.patching_prompts): CR held-out type pairs, IR and induction two
independent batches; the metric is read at the answer position. The x axis names each
position with the first clean prompt's token. Where the clean - corrupted gap is below
--min-gap the figure says so instead of showing recoveries (the table prints n/a; the JSON
keeps the raw numbers). Writes RUN/analyses/patching_heatmap.json, .png (up to --max-panels
checkpoints) and .html (a slider over every checkpoint); --csv PATH.
"""

from _common import (
    add_heatmap_args,
    checkpoint_rows,
    open_prompts,
    parser,
    print_figures,
    run_main,
    write_guarded_table,
)

KINDS = ("cr", "induction", "ir")
COLUMNS = {"checkpoint": "checkpoint", "step": "step", "head_name": "head", "pos": "position",
           "token": "token (first clean prompt)", "gap": "LD gap (clean LD - corrupted LD)",
           "recovery": "exact patching recovery"}


def main() -> None:
    ap = parser(__doc__)
    add_heatmap_args(ap)
    a = ap.parse_args()
    run, cfg, task, pr = open_prompts(a, KINDS)
    from mechinterp_icr.interp.lens import head_pos_patching, position_labels
    from mechinterp_icr.viz import circuit_figures as F

    labels = position_labels(task, pr.clean[0])

    def fn(ck, model):
        res = head_pos_patching(model, pr)
        L, T, H = res["recovery"].shape
        return [{"layer": l, "pos": p, "head": h, "head_name": f"L{l}H{h}",
                 "token": labels[p].split(" ", 1)[1], "gap": res["gap"],
                 "recovery": float(res["recovery"][l, p, h])}
                for l in range(L) for h in range(H) for p in range(T)]

    rows = checkpoint_rows(run, a.checkpoints, fn)
    write_guarded_table(run, "patching_heatmap", rows, COLUMNS, a.min_gap, a.csv)
    panels, heads, _ = F.recovery_panels(rows, lambda r: r["head_name"], lambda r: r["pos"],
                                         a.min_gap)
    static, slider = F.checkpoint_heatmaps(
        panels, labels, heads, f"Head output patching, clean into corrupted "
        f"({type(cfg.task).kind} run, {a.n} prompt pairs)",
        "normalised recovery<br>(0 = corrupted, 1 = clean)",
        "position and token (first clean prompt)", "head", a.max_panels)
    paths = F.save_heatmaps(static, slider, run.analyses_dir / "patching_heatmap")
    print_figures(paths)


if __name__ == "__main__":
    run_main(main)
