"""CR-6: build the PT and ICL constructions for a CR task config (from a run directory) and
measure them in their own formats and on held-out ICL.

    python analyses/construction.py out/runs/cr/seed0
"""

from _common import parser, setup, write_table


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    from mechinterp_icr.experiments.cr_mechanism import _cr6_seed
    from mechinterp_icr.store.rundir import RunDir

    rc = RunDir(a.run).read_config()
    r = _cr6_seed(rc.task.build(rc.seed), a.seed)
    write_table(a.run, "construction", [r], list(r))


if __name__ == "__main__":
    main()
