"""Direct logit attribution per head and per MLP at the answer position, per checkpoint: each
component's output (heads z @ W_O, attention biases b_O, MLP outputs, embeddings, the
unembedding bias) dotted with the answer's unembedding direction, or with the difference of the
answer's and the corrupted answer's directions (TransformerLens cache.logit_attrs).

    python analyses/dla.py out/runs/cr/seed0 --checkpoints phase:ft-icl:last --n 128

CR: the corrupted answer is the query subject's attribute of another type (type pairs); IR and
induction: the answer of an independent prompt. The components sum to the model's logit
(difference) for models without a final norm (printed per checkpoint). Writes RUN/analyses/
dla.json, .png (a bar per component and checkpoint; --metric chooses the plotted value) and
.html, and over two checkpoints or more dla_steps.png / .html (each component's attribution
against training step, phases in sequence); --csv PATH.
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
COLUMNS = {"checkpoint": "checkpoint", "step": "step", "component": "component",
           "logit_attr": "direct attribution to the answer logit",
           "diff_attr": "direct attribution to the logit difference LD (answer - corrupted answer)"}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--metric", choices=("diff", "logit"), default="diff",
                    help="plotted value: the logit difference answer - corrupted answer "
                         "(default) or the answer logit")
    a = ap.parse_args()
    run, cfg, task, pr = open_prompts(a, KINDS)
    from mechinterp_icr.interp.lens import dla_rows
    from mechinterp_icr.viz.circuit_figures import dla_figure
    from mechinterp_icr.viz.figures import save_figure

    checks = []

    def fn(ck, model):
        rows, check = dla_rows(model, pr)
        checks.append({"checkpoint": ck.name, **check})
        return rows

    rows = checkpoint_rows(run, a.checkpoints, fn)
    write_table(run, "dla", rows, list(COLUMNS), a.csv, COLUMNS)
    for c in checks:
        print(f"{c['checkpoint']}: components sum to {c['sum_logit']:.4f} (model's answer "
              f"logit {c['model_logit']:.4f}), {c['sum_diff']:.4f} (model's logit difference LD "
              f"{c['model_diff']:.4f})")
    key = {"diff": "diff_attr", "logit": "logit_attr"}[a.metric]
    kind = type(cfg.task).kind
    what = "logit difference answer - corrupted answer" if a.metric == "diff" else "answer logit"
    where = f"{kind} {run_caption(run, a.checkpoints, rows)}, {a.n} prompts"
    fig = dla_figure(rows, key, f"Direct logit attribution to the {what} ({where}, at the "
                                "answer position)", f"{what} (mean)")
    paths = save_figure(fig, run.analyses_dir / "dla", width=1100, height=560)
    print_figures(paths)
    save_step_figure(run, "dla", rows, {"": key}, f"Direct logit attribution to the {what} "
                     f"against training step ({where})", f"{what} (mean)", group="component")


if __name__ == "__main__":
    run_main(main)
