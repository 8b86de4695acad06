"""Attention role summary: per head and checkpoint, the attention mass from the query position
onto demo subjects, demo attributes, grammar, separators, the query subject (CR runs).

    python analyses/attention_roles.py out/runs/cr/seed0 --checkpoints phase:ft-icl
"""

import numpy as np
from _common import CR, open_run, parser, run_main, setup, write_table


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    run, _, task = open_run(a.run, CR, a.checkpoints)
    from mechinterp_icr.interp.attention import ROLE_GROUPS, roles_figure, roles_over_checkpoints
    from mechinterp_icr.viz.figures import save_figure

    batch = task.sample_icl(np.random.default_rng([a.seed, 0xA77]), a.n,
                            subjects=task.heldout_subjects)
    rows = roles_over_checkpoints(a.run, a.checkpoints, batch)
    write_table(a.run, "attention_roles", rows,
                ["checkpoint", "layer", "head", *[g for g in ROLE_GROUPS if g != "pad"],
                 "top_role"])
    paths = save_figure(roles_figure(rows), run.analyses_dir / "attention_roles")
    print(f"figure: {paths.get('png') or paths['html']}")


if __name__ == "__main__":
    run_main(main)
