"""Exact head x position activation patching (batched engine) and attribution patching, per
checkpoint; prints the per-cell normalised recovery. Prompts (``interp.lens.
patching_prompts``): CR runs use held-out type pairs; induction and IR runs two independent
batches, with the logit difference of their next tokens at the second-to-last position.

    python analyses/patching_sweep.py out/runs/cr/seed0 --checkpoints phase:ft-icl:last --n 32

Where the clean-minus-corrupted logit difference is below --min-gap (the checkpoint does not
tell the prompts apart) the recoveries are printed as n/a; the JSON keeps the raw numbers.
"""

from _common import (
    checkpoints,
    finite_float,
    open_run,
    parser,
    print_table,
    run_main,
    save_json,
    setup,
)

KINDS = ("cr", "induction", "ir")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--min-gap", type=finite_float, default=0.5,
                    help="smallest clean - corrupted logit difference for which recoveries "
                         "are shown (default 0.5)")
    a = ap.parse_args()
    setup(a)
    run, _, task = open_run(a.run, KINDS, a.checkpoints)
    import torch

    from mechinterp_icr.interp import patching as P
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.lens import answer_prompts, head_pos_patching

    pr = answer_prompts(task, a.n, a.seed)  # interp.lens.patching_prompts, answered

    def fn(ck, model):
        hp = head_pos_patching(model, pr)  # the exact engine, as patching_heatmap.py
        c_val, x_val, exact, rec = hp["clean"], hp["corrupted"], hp["value"], hp["recovery"]
        with torch.enable_grad():
            attr = P.attribution_patch(model, pr.clean, pr.corrupted, pr.metric) + x_val
        rec_a = P.normalised_recovery(attr, c_val, x_val)
        return {"cells": [{"layer": l, "pos": p, "head": h, "head_name": f"L{l}H{h}",
                           "gap": c_val - x_val, "recovery": float(rec[l, p, h]),
                           "attribution_recovery": float(rec_a[l, p, h])}
                          for l in range(exact.shape[0]) for p in range(exact.shape[1])
                          for h in range(exact.shape[2])]}

    rows = []
    for name in checkpoints(run, a.checkpoints):
        for r in map_checkpoints(run, name, fn):
            rows += [{"checkpoint": r["checkpoint"], "step": r["step"], **c}
                     for c in r["cells"]]
    out = save_json(run, "patching_sweep", rows)
    shown = [dict(r, recovery="n/a", attribution_recovery="n/a") if not r["gap"] >= a.min_gap
             else r for r in rows]
    print_table(shown, ["checkpoint", "step", "layer", "pos", "head_name", "gap", "recovery",
                        "attribution_recovery"],
                {"head_name": "head", "pos": "position", "gap": "LD gap (clean LD - corrupted LD)",
                 "recovery": "exact patching recovery",
                 "attribution_recovery": "attribution patching recovery"}, a.csv)
    print(f"wrote {out}")


if __name__ == "__main__":
    run_main(main)
