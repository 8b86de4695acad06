"""Activation patching heatmap, head x position, per checkpoint: the normalised recovery of
the clean-minus-corrupted logit difference when one head's output (z) at one position is
copied from the clean run into the corrupted run (exact, one cell at a time; batched engine
interp.patching.patch_head_out_by_pos), with each cell's 95% bootstrap interval over prompt
pairs and sign-flip p-value (interp.uncertainty).

    python analyses/patching_heatmap.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 64

Prompts (interp.lens.patching_prompts): CR held-out type pairs, IR and induction two
independent batches; the metric is read at the answer position. The x axis names each
position with the first clean prompt's token. Where the clean - corrupted gap is below
--min-gap the figure says so instead of showing recoveries (the table prints n/a; the JSON
keeps the raw numbers). Writes RUN/analyses/patching_heatmap.json, .png (up to --max-panels
checkpoints) and .html (a slider over every checkpoint; hovering a cell shows its interval
and p-value); --csv PATH. The columns are patching_sweep.py's (docs/circuit_tools.md).

--track L1H0@5[,L0H1@3] (head @ position) also draws those cells' recovery against training
step, phases in sequence, with the 95% interval as a band (patching_heatmap_steps.png /
.html; checkpoints whose LD gap is below --min-gap are left out of the lines):

    python analyses/patching_heatmap.py out/runs/cr/seed0 --checkpoints all --track L1H0@12
"""


from _common import (
    add_bootstrap_args,
    add_heatmap_args,
    checkpoint_rows,
    fail,
    open_prompts,
    parser,
    print_figures,
    run_caption,
    run_main,
    save_step_figure,
    write_guarded_table,
)

KINDS = ("cr", "induction", "ir")


def tracked(text: str | None, n_layers: int, n_heads: int, n_pos: int) -> list[str]:
    """The cells ``--track`` names (``LxHy@P`` joined by commas), checked against the model's
    heads and the prompts' positions before anything is computed."""
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.models.factory import head_name, parse_heads

    out = []
    for part in text.split(",") if text else []:
        head, _, pos = part.strip().partition("@")
        try:
            (l, h), = parse_heads(head, n_layers, n_heads)
            ok = pos.isdigit() and int(pos) < n_pos
        except ConfigError:
            ok = False
        if not ok:
            fail(f"--track = {part.strip()[:40]!r} is not allowed; expected LxHy@P with "
                 f"x < {n_layers}, y < {n_heads} and a position P < {n_pos} (e.g. "
                 f"L0H0@{n_pos - 1}), several joined by commas")
        out.append(f"{head_name(l, h)}@{int(pos)}")
    return out


def main() -> None:
    ap = parser(__doc__)
    add_heatmap_args(ap)
    add_bootstrap_args(ap)
    ap.add_argument("--track", default=None, metavar="LxHy@P,...",
                    help="cells (head @ position) whose recovery is also drawn against "
                         "training step")
    a = ap.parse_args()
    run, cfg, task, pr = open_prompts(a, KINDS)
    from mechinterp_icr.interp.lens import PATCHING_COLUMNS, head_pos_rows, position_labels
    from mechinterp_icr.viz import circuit_figures as F

    labels = position_labels(task, pr.clean[0])
    cells = tracked(a.track, cfg.model.n_layers, cfg.model.n_heads, len(labels))
    rows = checkpoint_rows(run, a.checkpoints, lambda ck, model: head_pos_rows(
        model, pr, labels, a.n_resamples, a.bootstrap_seed)[0])
    write_guarded_table(run, "patching_heatmap", rows, PATCHING_COLUMNS, a.min_gap, a.csv,
                        keys=("recovery", "lo", "hi"))
    panels, heads, _ = F.recovery_panels(rows, lambda r: r["head_name"], lambda r: r["pos"],
                                         a.min_gap)
    static, slider = F.checkpoint_heatmaps(
        panels, labels, heads, f"Head output patching, clean into corrupted "
        f"({type(cfg.task).kind} run, {a.n} prompt pairs)",
        "normalised recovery<br>(0 = corrupted, 1 = clean)",
        "position and token (first clean prompt)", "head", a.max_panels,
        ci_note=F.ci_note(a.n_resamples, a.bootstrap_seed))
    paths = F.save_heatmaps(static, slider, run.analyses_dir / "patching_heatmap")
    print_figures(paths)
    if cells:
        keep = [dict(r, cell=f"{r['head_name']}@{r['pos']} ({r['token']})") for r in rows
                if f"{r['head_name']}@{r['pos']}" in cells and r["gap"] >= a.min_gap]
        save_step_figure(run, "patching_heatmap", keep, {"recovery": "recovery"},
                         f"Head output patching recovery against training step "
                         f"({run_caption(run, a.checkpoints, rows)}, {a.n} prompt pairs, "
                         f"95% bootstrap band; LD gap below {a.min_gap} left out)",
                         "normalised recovery (0 = corrupted, 1 = clean)", group="cell",
                         band=("lo", "hi"))


if __name__ == "__main__":
    run_main(main)
