"""Exact head x position activation patching (batched engine) and attribution patching, per
checkpoint; prints the per-cell normalised recovery. Prompts (``interp.patch_bench.
patching_prompts``): CR runs use held-out type pairs; induction and IR runs two independent
batches, with the logit difference of their next tokens at the second-to-last position.

    python analyses/patching_sweep.py out/runs/cr/seed0 --checkpoints phase:ft-icl:last --n 32
"""

from _common import open_run, parser, run_main, setup, write_table

KINDS = ("cr", "induction", "ir")


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    _, _, task = open_run(a.run, KINDS, a.checkpoints)
    import torch

    from mechinterp_icr.interp import patching as P
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.patch_bench import patching_prompts

    clean, corr, metric, mpos = patching_prompts(task, a.n, a.seed)

    def fn(ck, model):
        _, cache = model.run_with_cache(clean, names_filter=lambda n: n.endswith("hook_z"))
        c_val, x_val = float(metric(model(clean))), float(metric(model(corr)))
        exact = P.patch_head_out_by_pos(model, corr, cache, metric,
                                        metric_positions=mpos)  # (L, T, H)
        with torch.enable_grad():
            attr = P.attribution_patch(model, clean, corr, metric) + x_val
        rec = P.normalised_recovery(exact, c_val, x_val)
        rec_a = P.normalised_recovery(attr, c_val, x_val)
        return {"cells": [{"layer": l, "pos": p, "head": h, "recovery": float(rec[l, p, h]),
                           "attribution_recovery": float(rec_a[l, p, h])}
                          for l in range(exact.shape[0]) for p in range(exact.shape[1])
                          for h in range(exact.shape[2])]}

    rows = []
    for r in map_checkpoints(a.run, a.checkpoints, fn):
        rows += [{"checkpoint": r["checkpoint"], **c} for c in r["cells"]]
    write_table(a.run, "patching_sweep", rows, ["checkpoint", "layer", "pos", "head", "recovery",
                                                "attribution_recovery"])


if __name__ == "__main__":
    run_main(main)
