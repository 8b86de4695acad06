"""Path patching, sender head -> receiver head, per checkpoint: the normalised recovery of the
clean-minus-corrupted logit difference when only the paths from a sender head's clean output
into a receiver head's query, key or value input (or all three, or the logits directly) are
restored (interp.patching.path_patch).

    python analyses/path_patching.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 64

Per sender (every head) and receiver (every head of a later layer, input q, k, v or qkv; and
the logits, input direct): run the corrupted prompts with the sender's z clean and every other
head's z (and, unless --no-freeze-mlps, every MLP output from the sender's layer on) frozen at
the corrupted run's value; record the receiver's input; run the corrupted prompts again with
only that input replaced. Prompts as in patching_heatmap.py. Where the clean - corrupted gap
is below --min-gap the recoveries are n/a. Writes RUN/analyses/path_patching.json, .png (a
sender x receiver heatmap per checkpoint, up to --max-panels) and .html (a slider over every
checkpoint; blank cells: no path, the receiver is not in a later layer); --csv PATH.
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
COLUMNS = {"checkpoint": "checkpoint", "step": "step", "sender": "sender head",
           "receiver": "receiver", "input": "receiver input",
           "gap": "LD gap (clean LD - corrupted LD)", "recovery": "path patching recovery"}


def main() -> None:
    ap = parser(__doc__)
    add_heatmap_args(ap)
    ap.add_argument("--no-freeze-mlps", action="store_true",
                    help="let the MLPs respond to the sender (default: frozen at their "
                         "corrupted outputs, so only attention paths count)")
    a = ap.parse_args()
    run, cfg, task, pr = open_prompts(a, KINDS)
    from mechinterp_icr.interp.lens import path_patching_table
    from mechinterp_icr.viz import circuit_figures as F

    rows = checkpoint_rows(run, a.checkpoints, lambda ck, model: path_patching_table(
        model, pr, freeze_mlps=not a.no_freeze_mlps))
    write_guarded_table(run, "path_patching", rows, COLUMNS, a.min_gap, a.csv)
    panels, senders, cols = F.recovery_panels(rows, lambda r: r["sender"],
                                              lambda r: f"{r['receiver']}.{r['input']}",
                                              a.min_gap)
    mlps = "MLPs respond" if a.no_freeze_mlps else "MLPs frozen"
    static, slider = F.checkpoint_heatmaps(
        panels, cols, senders, f"Path patching sender -> receiver ({type(cfg.task).kind} run, "
        f"{a.n} prompt pairs, {mlps})", "normalised recovery<br>(0 = corrupted, 1 = clean)",
        "receiver head.input (or logits.direct)", "sender head", a.max_panels)
    paths = F.save_heatmaps(static, slider, run.analyses_dir / "path_patching")
    print_figures(paths)


if __name__ == "__main__":
    run_main(main)
