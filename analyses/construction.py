"""CR-6: build the PT and ICL constructions for the task of a CR run directory (from its
config) and measure them in their own formats and on held-out ICL. With --checkpoints, also
compare the selected checkpoints with the construction: per head, the cosine of its OV
blocks with the construction's Relation and Subject heads.

    python analyses/construction.py out/runs/cr/seed0 --seed 0
    python analyses/construction.py out/runs/cr/seed0 --checkpoints phase:ft-icl:last
"""

import argparse

from _common import (
    CR,
    SEED,
    SELECTION_HELP,
    THREADS,
    Parser,
    add_csv,
    checkpoints,
    open_run,
    print_table,
    run_main,
    save_json,
    setup,
    write_table,
)

_CELLS = {"pt_construction_icl": "PT construction on held-out ICL",
          "zeroed_relation_ov_icl": "ICL construction without its Relation OV, held-out ICL"}
MEANING = {
    "pt_construction_pt_exact": "PT construction, exact recall in its own PT format",
    "pt_construction_icl_heldout_exact": "PT construction on held-out ICL (ties shared)",
    "icl_construction_icl_heldout_exact": "ICL construction, held-out ICL (ties shared)",
    "icl_construction_icl_finetune_exact": "ICL construction, finetune-subject ICL",
    "icl_construction_pt_exact": "ICL construction in the PT format",
    "zeroed_relation_ov_icl_exact": "negative control: " + _CELLS["zeroed_relation_ov_icl"],
    "own_format_min": "CR-6's number: the smaller of the two own-format accuracies",
    **{f"{k}_{suffix}": f"{v}: {what}" for k, v in _CELLS.items()
       for suffix, what in (("exact_argmax", "plain argmax accuracy"),
                            ("restricted", "accuracy among attribute tokens"),
                            ("n_top", "mean number of tokens tied at the top"),
                            ("tied", "share of prompts with a tie at the top"))},
}


def main(argv=None) -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="CR run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--checkpoints", default=None,
                    help="also compare these checkpoints with the construction: "
                         + SELECTION_HELP)
    ap.add_argument("--seed", type=SEED, default=0, help="seed of the evaluation prompts")
    ap.add_argument("--threads", type=THREADS, default=1)
    add_csv(ap)
    a = ap.parse_args(argv)
    setup(a)
    run, _, task = open_run(a.run, CR, a.checkpoints)  # exits 2 unless a CR run
    from mechinterp_icr.experiments.cr.mechanism import construction_numbers

    r = construction_numbers(task, a.seed)
    # one row per measured number (the JSON keeps the record as the reproduction stores it)
    out = save_json(run, "construction", [r])
    print_table([{"quantity": k, "meaning": MEANING.get(k, ""), "value": v}
                 for k, v in r.items()], ["quantity", "value", "meaning"], csv=a.csv)
    print(f"wrote {out}")
    if a.checkpoints is None:
        return
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.circuits import construction_similarity

    rows = []
    for name in checkpoints(run, a.checkpoints):
        for c in map_checkpoints(run, name, lambda ck, m: {"heads": [
                s for l in range(m.cfg.n_layers) for s in construction_similarity(m, task, l)]}):
            for h in c.pop("heads"):
                rows.append({**c, "head_name": f"L{h['layer']}H{h['head']}", **h})
    csv2 = None if a.csv is None else a.csv.removesuffix(".csv") + "_checkpoints.csv"
    write_table(run, "construction_checkpoints", rows,
                ["checkpoint", "step", "head_name", "sim_relation_ov", "sim_subject_ov"],
                csv=csv2, labels={"head_name": "head",
                                  "sim_relation_ov": "OV similarity to construction Relation",
                                  "sim_subject_ov": "OV similarity to construction Subject"})


if __name__ == "__main__":
    run_main(main)
