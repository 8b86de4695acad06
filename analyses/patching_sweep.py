"""Exact head x position activation patching (batched engine) and attribution patching, per
checkpoint; prints the per-cell normalised recovery with its 95% bootstrap interval over
prompt pairs and sign-flip p-value (interp.uncertainty), and the attribution patching
estimate. Prompts (``interp.lens.patching_prompts``): CR runs use held-out type pairs;
induction and IR runs two independent batches, with the logit difference of their next tokens
at the second-to-last position.

    python analyses/patching_sweep.py out/runs/cr/seed0 --checkpoints phase:ft-icl:last --n 32

Where the clean-minus-corrupted logit difference is below --min-gap (the checkpoint does not
tell the prompts apart) the recoveries are printed as n/a; the JSON keeps the raw numbers.
The columns are patching_heatmap.py's, then attribution_recovery (docs/circuit_tools.md).
"""

from _common import (
    add_bootstrap_args,
    checkpoint_rows,
    finite_float,
    open_prompts,
    parser,
    run_main,
    write_guarded_table,
)

KINDS = ("cr", "induction", "ir")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--min-gap", type=finite_float, default=0.5,
                    help="smallest clean - corrupted logit difference for which recoveries "
                         "are shown (default 0.5)")
    add_bootstrap_args(ap)
    a = ap.parse_args()
    run, _, task, pr = open_prompts(a, KINDS)  # interp.lens.patching_prompts, answered
    import torch

    from mechinterp_icr.interp import patching as P
    from mechinterp_icr.interp.lens import PATCHING_COLUMNS, head_pos_rows, position_labels

    labels = position_labels(task, pr.clean[0])

    def fn(ck, model):
        rows, hp = head_pos_rows(model, pr, labels, a.n_resamples, a.bootstrap_seed)
        with torch.enable_grad():
            attr = P.attribution_patch(model, pr.clean, pr.corrupted, pr.metric)
        rec_a = P.normalised_recovery(attr + hp["corrupted"], hp["clean"], hp["corrupted"])
        return [dict(r, attribution_recovery=float(rec_a[r["layer"], r["pos"], r["head"]]))
                for r in rows]

    rows = checkpoint_rows(run, a.checkpoints, fn)
    cols = {**PATCHING_COLUMNS, "attribution_recovery": "attribution patching recovery"}
    write_guarded_table(run, "patching_sweep", rows, cols, a.min_gap, a.csv,
                        keys=("recovery", "lo", "hi", "attribution_recovery"))


if __name__ == "__main__":
    run_main(main)
