"""Shared argument handling of the analysis scripts (thin: parsing and printing only)."""

import argparse
import json
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", help="run directory (e.g. out/runs/cr/seed0)")
    ap.add_argument("--checkpoints", default="last",
                    help="all | last | first | phase:NAME | phase:NAME:last | steps:A-B | name")
    ap.add_argument("--n", type=int, default=128, help="prompts per checkpoint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def setup(a) -> None:
    import torch

    torch.set_num_threads(a.threads)


def write_table(run: str, name: str, rows: list[dict], cols: list[str]) -> Path:
    from mechinterp_icr.store.io import atomic_write_text
    from mechinterp_icr.store.rundir import RunDir

    out = RunDir(run).analyses_dir / f"{name}.json"
    atomic_write_text(out, json.dumps(rows, indent=2, default=str))
    print("  ".join(c[:16].ljust(16) for c in cols))
    for r in rows:
        print("  ".join((f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")))
                        [:16].ljust(16) for c in cols))
    print(f"wrote {out}")
    return out
