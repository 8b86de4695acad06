"""Attention role summary: per head and checkpoint, the attention mass from the query position
onto demo subjects, demo attributes, grammar, separators, the query subject (CR runs).

    python analyses/attention_roles.py out/runs/cr/seed0 --checkpoints phase:ft-icl

Writes RUN/analyses/attention_roles.json (and --csv PATH) and a figure of the masses against
the training step.
"""

from _common import CR, checkpoints, open_run, parser, print_figures, run_main, setup, write_table


def main() -> None:
    a = parser(__doc__).parse_args()
    setup(a)
    run, _, task = open_run(a.run, CR, a.checkpoints)
    import numpy as np

    from mechinterp_icr.interp.attention import ROLE_GROUPS, roles_over_checkpoints
    from mechinterp_icr.viz.figures import checkpoint_figure, save_figure

    batch = task.sample_icl(np.random.default_rng([a.seed, 0xA77]), a.n,
                            subjects=task.heldout_subjects)
    rows = []
    for name in checkpoints(run, a.checkpoints):
        rows += roles_over_checkpoints(run, name, batch)
    for r in rows:
        r["head_name"] = f"L{r['layer']}H{r['head']}"
    groups = [g for g in ROLE_GROUPS if g != "pad"]
    write_table(run, "attention_roles", rows, ["checkpoint", "step", "head_name", *groups,
                                               "top_role"], csv=a.csv,
                labels={"head_name": "head", **{g: g.replace("_", " ") for g in groups}})
    fig = checkpoint_figure(rows, {g.replace("_", " "): g for g in
                                   ("demo_attribute", "query_subject", "demo_subject",
                                    "separator", "grammar")},
                            "attention mass from the query position by token role",
                            "attention mass (mean over prompts)", group="head_name",
                            y_range=(0, 1.02))
    paths = save_figure(fig, run.analyses_dir / "attention_roles")
    print_figures(paths)


if __name__ == "__main__":
    run_main(main)
