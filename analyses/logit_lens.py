"""Logit lens at the answer position, per checkpoint: the residual stream before every layer,
after every attention layer and after the last layer, through the final norm (recomputed on
each point) and the unembedding; the answer's probability, rank and top-1 accuracy.

    python analyses/logit_lens.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 128

Prompts (interp.lens.answer_prompts): CR held-out ICL prompts (answer predicted at the query
subject), IR sequences (the answer a_q predicted at the relation token r*), induction
sequences (the last token predicted at the second-to-last). Writes RUN/analyses/logit_lens
.json, .png (answer probability by layer, one line per checkpoint) and .html, and over two
checkpoints or more logit_lens_steps.png / .html (the answer probability at each point against
training step, phases in sequence); --csv PATH.
"""

from _common import (
    checkpoint_rows,
    open_prompts,
    parser,
    print_figures,
    run_caption,
    run_main,
    save_step_figure,
    write_table,
)

KINDS = ("cr", "induction", "ir")
COLUMNS = {"checkpoint": "checkpoint", "step": "step", "layer": "layer",
           "answer_prob": "answer probability", "answer_rank": "answer rank (1 = top)",
           "top1_acc": "top-1 accuracy"}


def main() -> None:
    a = parser(__doc__).parse_args()
    run, cfg, task, pr = open_prompts(a, KINDS)
    from mechinterp_icr.interp.lens import logit_lens
    from mechinterp_icr.viz.circuit_figures import lens_figure, lens_height
    from mechinterp_icr.viz.figures import save_figure

    rows = checkpoint_rows(run, a.checkpoints,
                           lambda ck, model: logit_lens(model, pr.clean, pr.pos, pr.answer))
    write_table(run, "logit_lens", rows, list(COLUMNS), a.csv, COLUMNS)
    kind = type(cfg.task).kind
    where = f"{kind} {run_caption(run, a.checkpoints, rows)}, {a.n} prompts"
    fig = lens_figure(rows, f"Logit lens at the answer position ({where}): one line per "
                            "checkpoint", final_norm=cfg.model.normalization != "none")
    paths = save_figure(fig, run.analyses_dir / "logit_lens", width=1100,
                        height=lens_height(len({r["checkpoint"] for r in rows})))
    print_figures(paths)
    save_step_figure(run, "logit_lens", rows, {"answer probability": "answer_prob"},
                     f"Logit lens: answer probability at each residual-stream point against "
                     f"training step ({where})", "answer probability (mean over prompts)",
                     group="layer", y_range=(0, 1.02))


if __name__ == "__main__":
    run_main(main)
