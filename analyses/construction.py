"""CR-6: build the PT and ICL constructions for the task of a CR run directory (its config;
the run's checkpoints are not used) and measure them in their own formats and on held-out
ICL.

    python analyses/construction.py out/runs/cr/seed0 --seed 0
"""

import argparse

from _common import CR, open_run, run_main, setup, write_table


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="CR run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the evaluation prompts")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    setup(a)
    _, _, task = open_run(a.run, CR)  # exits 2 with one line unless a CR run
    from mechinterp_icr.experiments.cr.mechanism import construction_numbers

    r = construction_numbers(task, a.seed)
    write_table(a.run, "construction", [r], list(r))


if __name__ == "__main__":
    run_main(main)
