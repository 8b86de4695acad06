"""Task vectors and type probes for the checkpoints of a CR run directory.

    python probes/task_vectors.py runs/cr/seed0 --checkpoints phase:pretrain:last,phase:ft-icl:last
    python probes/task_vectors.py out/runs/cr/seed0 --checkpoints phase:ft-icl --quick --umap

Prints, per checkpoint, the boundary chosen on the dev split and the test accuracy of the
top-PC and full probes (and, unless --quick, transfer, label-shuffle and random-direction
controls, type variance share). Writes RUN/analyses/task_vectors.json and a PCA (or UMAP)
scatter (PC signs aligned across checkpoints; --color-by type, query-subject or correct); over
two checkpoints or more also task_vectors_steps.png / .html (probe accuracies and eta^2 against
training step, phases in sequence). All computation lives in
mechinterp_icr.experiments.cr.taskvec; RUN must be a CR run (task kind cr).
"""

import argparse
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="CR run directory (config.json + checkpoints/)")
    ap.add_argument("--checkpoints", default="phase:pretrain:last,phase:ft-icl:last",
                    help="all | last | phase:NAME | phase:NAME:last | steps:A-B | names, "
                         "comma-separated")
    ap.add_argument("--profile", default="quick", choices=["quick", "paper"],
                    help="profile whose taskvec sizes to use")
    ap.add_argument("--n", type=int, default=None, help="held-out prompts per checkpoint")
    ap.add_argument("--n-pc", type=int, default=None, help="principal components of the probe")
    ap.add_argument("--seed", type=int, default=0, help="seed of prompts and splits")
    ap.add_argument("--quick", action="store_true", help="probes only (no controls/transfer)")
    ap.add_argument("--k-sweep", action="store_true", help="also separation vs K")
    ap.add_argument("--umap", action="store_true", help="UMAP view instead of PCA (slow)")
    ap.add_argument("--color-by", default="type", choices=["type", "query-subject", "correct"],
                    help="what the scatter's colour shows: the attribute type, the query "
                         "subject, or whether the model's answer is right")
    ap.add_argument("--out", type=Path, default=None, help="figure folder (RUN/analyses)")
    ap.add_argument("--csv", default=None, metavar="PATH",
                    help="also write the table (one row per checkpoint) as CSV to PATH")
    a = ap.parse_args(argv)

    import torch

    from mechinterp_icr.config import ConfigError, check_prompt_batch, check_range
    from mechinterp_icr.experiments import cr
    from mechinterp_icr.experiments.cr.taskvec import probe_run
    from mechinterp_icr.experiments.cr.train import require_cr_run
    from mechinterp_icr.store.checkpoint import CheckpointError
    from mechinterp_icr.store.rundir import RunError

    torch.set_num_threads(1)
    try:
        check_range("--seed", a.seed, 0, 2**31 - 1, integer=True)
        rc = require_cr_run(a.run)
        tvc = cr.profile(a.profile).taskvec
        if a.n is not None:
            check_range("--n", a.n, 1, 1_000_000, integer=True)
            tvc = replace(tvc, n_heldout=a.n)
        if a.n_pc is not None:
            check_range("--n-pc", a.n_pc, 1, 4096, integer=True)
            tvc = replace(tvc, n_pc=a.n_pc)
        # refused before any allocation: all held-out prompts go through the model at once
        check_prompt_batch(replace(rc.model, d_vocab=rc.model.d_vocab or rc.task.vocab_size(),
                                   n_ctx=rc.model.n_ctx or rc.task.context_len()),
                           tvc.n_heldout, rc.resources, "--n")
        from mechinterp_icr.pipeline import resolve_selection
        from mechinterp_icr.store.rundir import RunDir

        # a bare last / first is the main phase's (ft-icl), never the all-weights arm
        selection = resolve_selection(RunDir(a.run), a.checkpoints)
        res = probe_run(a.run, selection, tvc, a.seed, full=not a.quick, umap=a.umap,
                        out_dir=a.out, with_k=a.k_sweep, color_by=a.color_by)
    except (ConfigError, RunError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.k_sweep:
        for r in res["rows"]:
            print(r["checkpoint"], " ".join(f"K={k['K']}:{k['type_variance_fraction']:.3f}"
                                            for k in r["k_sweep"]))
    if a.csv:
        write_csv(a.csv, res["rows"])
    folder = Path(res["figures"]["html"]).parent
    print(f"wrote {folder / 'task_vectors.json'} and {res['figures']['html']}")
    keep(folder, vars(a), folder / "task_vectors.json", res["figures"])
    steps = step_figures(res["rows"], folder, a)
    if steps:
        print("figures: " + ", ".join(steps[k] for k in ("png", "html") if k in steps))
        keep(folder, vars(a), None, steps)
    return 0


SERIES = {"top-PC probe accuracy (test)": "acc_pc", "full probe accuracy (test)": "acc_full",
          "eta^2: type share of variance": "eta2",
          "label-shuffle control (top-PC)": "acc_shuffle_pc"}


def step_figures(rows, folder: Path, a) -> dict:
    """The probe accuracies and eta^2 against training step (phases in sequence), when the
    selection holds two checkpoints or more: the paths written ({} otherwise)."""
    if len(rows) < 2:
        return {}
    from mechinterp_icr.viz.figures import save_figure
    from mechinterp_icr.viz.step_figures import step_figure

    title = (f"Type probes on held-out task vectors against training step (run "
             f"{Path(a.run).resolve().name}, {a.checkpoints} ({len(rows)} checkpoints), "
             f"boundary chosen per checkpoint)")
    fig = step_figure(rows, SERIES, title, "accuracy / variance share", y_range=(0, 1.02))
    return save_figure(fig, folder / "task_vectors_steps", width=1100, height=560)


def keep(folder: Path, options: dict, table: Path, figures: dict) -> None:
    """Keep the table and figures under the name of this selection and these options (the
    latest stay task_vectors.json / task_vectors_pca.*; RUN/analyses/index.json lists all)."""
    from mechinterp_icr.store.results import keep_result

    kept = keep_result(folder, "task_vectors", options, [table]) if table else []
    for k in ("png", "html"):
        if k in figures:
            keep_result(folder, Path(figures[k]).stem, options, [figures[k]])
    if kept:
        print(f"kept as {kept[0]} (RUN/analyses/index.json lists every kept result)")


def write_csv(path, rows) -> None:
    """The rows' scalar columns (numbers, strings, booleans) as CSV."""
    from mechinterp_icr.store.io import atomic_write_csv

    atomic_write_csv(path, rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
