"""OV and QK circuits of one head drawn as heatmaps, per checkpoint: the token x token OV
blocks (CR: attribute -> attribute, subject -> attribute), the token x token QK block (CR:
subject queries against attribute, subject and grammar keys) and the position x position QK
block (W_pos W_QK W_pos^T, which a token-only QK leaves out), each row centred
(interp.circuits.circuit_blocks).

    python analyses/ov_qk.py out/runs/cr/seed0 --head L1H0
    python analyses/ov_qk.py out/runs/cr/seed0 --head all --checkpoints phase:ft-icl:last

Writes RUN/analyses/ov_qk-<checkpoint>-L<layer>H<head>.png / .html (kept under the options'
name like every result) and prints, per head, the largest |value| of each block and, on a CR
run, the head's OV probe (interp.circuits.ov_probe: the share of attributes whose best other
attribute output has the same type, and the same-type precision of the top V-1). A
vocabulary larger than 256 tokens is drawn as its position block alone.
"""

import re

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
MOST_CHECKPOINTS = 8


def _heads(text: str, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    if text == "all":
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"L(\d+)H(\d+)", part.strip())
        if not m or int(m[1]) >= n_layers or int(m[2]) >= n_heads:
            fail(f"--head = {part!r} is not allowed; expected all or LxHy with x < {n_layers} "
                 f"and y < {n_heads} (e.g. L0H0), several joined by commas")
        out.append((int(m[1]), int(m[2])))
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--head", default="all",
                    help="heads to draw: all, or LxHy joined by commas (e.g. L1H0)")
    a = ap.parse_args()
    setup(a)
    run, cfg, task = open_run(a.run, KINDS, a.checkpoints)
    heads = _heads(a.head, cfg.model.n_layers, cfg.model.n_heads)
    names = checkpoints(run, a.checkpoints)
    if len(names) > MOST_CHECKPOINTS:
        fail(f"--checkpoints selects {len(names)} checkpoints; ov_qk draws at most "
             f"{MOST_CHECKPOINTS} (one figure per checkpoint and head): select fewer")
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.circuits import circuit_blocks, ov_probe
    from mechinterp_icr.viz.circuit_figures import circuit_figure
    from mechinterp_icr.viz.figures import save_figure

    rows = []
    kind = type(cfg.task).kind

    def draw(ck, model):
        for layer, head in heads:
            blocks = circuit_blocks(model, task, layer, head)
            tag = f"L{layer}H{head}"
            fig, width, height = circuit_figure(
                blocks, f"OV and QK circuits of head {tag} ({kind} run "
                        f"{run.path.name}, checkpoint {ck.name})")
            print_figures(save_figure(fig, run.analyses_dir / f"ov_qk-{ck.name}-{tag}",
                                      width=width, height=height))
            for b in blocks:
                z = [v for r in b["z"] for v in r if v == v]
                row = {"checkpoint": ck.name, "head_name": tag, "block": b["name"],
                       "largest": max(map(abs, z)) if z else float("nan")}
                if b["name"].startswith("OV attribute"):  # CR-6's OV probe, same head
                    row.update(ov_probe(model, task, layer, head))
                rows.append(row)
        return {}

    map_checkpoints(run, ",".join(names), draw)  # one model at a time, the task built once
    save_json(run, "ov_qk", rows)
    print_table(rows, list(COLUMNS), COLUMNS)


if __name__ == "__main__":
    run_main(main)
