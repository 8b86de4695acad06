"""OV/QK circuit probes per head and checkpoint: OV memory-recall probe (attributes ->
same-type attributes), KQ probe (query -> in-context attributes), subject OV probe, and the
similarity of each head's OV blocks to the construction (CR runs).

    python analyses/circuits.py out/runs/cr/seed0 --checkpoints phase:ft-icl
"""

from _common import CR, open_run, parser, run_main, setup, write_table


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    open_run(a.run, CR, a.checkpoints)
    from mechinterp_icr.interp.circuits import probes_over_checkpoints

    rows = probes_over_checkpoints(a.run, a.checkpoints, a.n, a.seed)
    write_table(a.run, "circuits", rows,
                ["checkpoint", "layer", "head", "ov_precision", "ov_strict", "kq_top_attr",
                 "kq_mass_attr", "subject_ov", "sim_relation_ov", "sim_subject_ov"])


if __name__ == "__main__":
    run_main(main)
