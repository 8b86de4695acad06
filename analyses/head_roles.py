"""Head roles by activation patching (CR-5) per checkpoint: type pairs (demos of another type)
and subject pairs (another query subject); names a Relation head and a Subject head.

    python analyses/head_roles.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 64
"""

from _common import CR, open_run, parser, run_main, setup, write_table


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    open_run(a.run, CR, a.checkpoints)
    from mechinterp_icr.interp.roles import roles_across_checkpoints

    rows = roles_across_checkpoints(a.run, a.checkpoints, a.seed, a.n)
    write_table(a.run, "head_roles", rows,
                ["checkpoint", "relation_head", "relation_recovery", "relation_moved",
                 "subject_head", "subject_recovery", "subject_moved", "distinct"])


if __name__ == "__main__":
    run_main(main)
