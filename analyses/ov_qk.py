"""OV and QK circuits of one head drawn as heatmaps, per checkpoint: the token x token OV
blocks (CR: attribute -> attribute, subject -> attribute), the token x token QK block (CR:
subject queries against attribute, subject and grammar keys) and the position x position QK
block (W_pos W_QK W_pos^T, which a token-only QK leaves out), each row centred
(interp.circuits.circuit_blocks).

    python analyses/ov_qk.py out/runs/cr/seed0 --head L1H0
    python analyses/ov_qk.py out/runs/cr/seed0 --head all --checkpoints phase:ft-icl:last

Writes RUN/analyses/ov_qk-<checkpoint>-L<layer>H<head>.png / .html per checkpoint (at most 8,
evenly chosen with the first and last) and, over two checkpoints or more (at most 64),
ov_qk-L<layer>H<head>-checkpoints.html, one page per head with a slider over the checkpoints
(each kept under the options' name like every result). Prints, per head, the largest |value| of
each block and, on a CR run, the head's OV probe (interp.circuits.ov_probe: the share of
attributes whose best other attribute output has the same type, and the same-type precision of
the top V-1). A vocabulary larger than 256 tokens is drawn as its position block alone.
"""

from _common import (
    CR,
    IR,
    checkpoints,
    fail,
    open_run,
    parser,
    print_figures,
    print_table,
    run_main,
    save_json,
    setup,
)

KINDS = (*CR, *IR, "induction")
COLUMNS = {"checkpoint": "checkpoint", "head_name": "head", "block": "block",
           "largest": "largest |value|", "ov_top1": "OV probe top-1 same type",
           "ov_precision": "OV probe precision"}
MOST_CHECKPOINTS = 64  # on the slider page of each head
MOST_FIGURES = 8  # checkpoints drawn as their own PNG / HTML per head (evenly chosen)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--head", default="all",
                    help="heads to draw: all, or LxHy joined by commas (e.g. L1H0)")
    a = ap.parse_args()
    setup(a)
    run, cfg, task = open_run(a.run, KINDS, a.checkpoints)
    from mechinterp_icr.models.factory import head_name, parse_heads

    heads = parse_heads(a.head, cfg.model.n_layers, cfg.model.n_heads)
    names = checkpoints(run, a.checkpoints)
    if len(names) > MOST_CHECKPOINTS:
        fail(f"--checkpoints selects {len(names)} checkpoints; ov_qk draws at most "
             f"{MOST_CHECKPOINTS} (on one slider page per head): select fewer")
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.circuits import circuit_blocks, ov_probe
    from mechinterp_icr.viz.circuit_figures import (
        checkpoint_slider,
        circuit_figure,
        shown_panels,
    )
    from mechinterp_icr.viz.figures import save_figure

    names = list(names)
    own_figure = {names[i] for i in shown_panels(len(names), MOST_FIGURES)}

    rows = []
    kind = type(cfg.task).kind
    drawn: dict[str, list] = {}  # head -> [(checkpoint, figure, width, height)]

    def draw(ck, model):
        for layer, head in heads:
            blocks = circuit_blocks(model, task, layer, head)
            tag = head_name(layer, head)
            fig, width, height = circuit_figure(
                blocks, f"OV and QK circuits of head {tag} ({kind} run "
                        f"{run.path.name}, checkpoint {ck.name})")
            if ck.name in own_figure:
                print_figures(save_figure(fig, run.analyses_dir / f"ov_qk-{ck.name}-{tag}",
                                          width=width, height=height))
            drawn.setdefault(tag, []).append((ck.name, fig, width, height))
            for b in blocks:
                z = [v for r in b["z"] for v in r if v == v]
                row = {"checkpoint": ck.name, "head_name": tag, "block": b["name"],
                       "largest": max(map(abs, z)) if z else float("nan")}
                if b["name"].startswith("OV attribute"):  # CR-6's OV probe, same head
                    row.update(ov_probe(model, task, layer, head))
                rows.append(row)
        return {}

    map_checkpoints(run, ",".join(names), draw)  # one model at a time, the task built once
    for tag, figs in drawn.items():  # one page per head: a slider over the checkpoints
        if len(figs) > 1:
            slider = checkpoint_slider([f for _, f, _, _ in figs], [c for c, _, _, _ in figs])
            print_figures(save_figure(slider, run.analyses_dir / f"ov_qk-{tag}-checkpoints",
                                      png=False, width=figs[-1][2],
                                      height=figs[-1][3] + 120))
    save_json(run, "ov_qk", rows)
    print_table(rows, list(COLUMNS), COLUMNS)


if __name__ == "__main__":
    run_main(main)
