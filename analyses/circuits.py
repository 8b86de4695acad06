"""OV/QK circuit probes per head and checkpoint: OV memory-recall probe (attributes ->
same-type attributes), KQ probe (query -> in-context attributes), subject OV probe, and the
similarity of each head's OV blocks to the construction (CR runs).

    python analyses/circuits.py out/runs/cr/seed0 --checkpoints phase:ft-icl
"""

from _common import CR, checkpoints, open_run, parser, run_main, setup, write_table

COLUMNS = {"checkpoint": "checkpoint", "step": "step", "head_name": "head",
           "ov_precision": "OV probe precision", "ov_strict": "OV probe strict",
           "kq_top_attr": "KQ probe top is attribute", "kq_mass_attr": "KQ attribute mass",
           "subject_ov": "subject OV probe", "sim_relation_ov": "similarity relation OV",
           "sim_subject_ov": "similarity subject OV"}


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    run, _, _ = open_run(a.run, CR, a.checkpoints)
    from mechinterp_icr.interp.circuits import probes_over_checkpoints

    rows = []
    for name in checkpoints(run, a.checkpoints):
        rows += probes_over_checkpoints(run, name, a.n, a.seed)
    for r in rows:
        r["head_name"] = f"L{r['layer']}H{r['head']}"
    write_table(run, "circuits", rows, list(COLUMNS), csv=a.csv, labels=COLUMNS)


if __name__ == "__main__":
    run_main(main)
