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
    SELECTION_HELP,
    add_csv,
    checkpoints,
    open_run,
    run_main,
    setup,
    write_table,
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="CR run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--checkpoints", default=None,
                    help="also compare these checkpoints with the construction: "
                         + SELECTION_HELP)
    ap.add_argument("--seed", type=int, default=0, help="seed of the evaluation prompts")
    ap.add_argument("--threads", type=int, default=1)
    add_csv(ap)
    a = ap.parse_args(argv)
    setup(a)
    run, _, task = open_run(a.run, CR, a.checkpoints)  # exits 2 unless a CR run
    from mechinterp_icr.experiments.cr.mechanism import construction_numbers

    r = construction_numbers(task, a.seed)
    write_table(run, "construction", [r], list(r), csv=a.csv)
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
