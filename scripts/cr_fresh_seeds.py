"""Fresh-seed check of CR-1 .. CR-3: runs only the ``seed<N>/train`` task of the CR plan
(pretraining, the finetuning branches and their evaluation, exactly as ``icr reproduce cr``
runs it) on seeds no setting was chosen on, and prints every registered condition of CR-1,
CR-2 and CR-3 per seed with the verdict the registry gives.

The CR-3 sweep and the controls that need other tasks are not run, so a verdict printed here
can only say whether the claim's own conditions hold on these seeds (controls read
``not measured``); the records are the reproduction's own (``OUT/tasks/cr/seed<N>/train.json``),
so ``icr reproduce cr --out OUT --seeds ...`` later reuses them.

    OMP_NUM_THREADS=1 python scripts/cr_fresh_seeds.py --seeds 31,32,33,34,35 \\
        --out /tmp/cr_fresh --workers 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mechinterp_icr.experiments.cr.claims import cr123_claims
from mechinterp_icr.experiments.cr.reproduce import plan
from mechinterp_icr.jobs import run_tasks
from mechinterp_icr.runner import resolve_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", required=True, help="comma-separated seeds")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = resolve_config("cr", args.profile, args.overrides)
    tasks = [t for t in plan(cfg, args.out, seeds) if t.name.endswith("/train")]
    records = run_tasks(tasks, args.out / "tasks" / "cr", args.workers)
    results = [records[f"seed{s}/train"] for s in seeds]
    report = {}
    for claim in cr123_claims(cfg, results, []):
        verdict, reason, conds = claim.evaluate(seeds)
        report[claim.id] = {"verdict": verdict, "reason": reason, "conditions": conds}
        print(f"\n{claim.id}: {verdict} -- {reason}")
        for c in conds:
            vals = {s: (round(v, 4) if isinstance(v, float) else v)
                    for s, v in c.get("per_seed", {}).items()}
            print(f"  {c['condition']}: met={c['met']} {vals}")
    (args.out / "fresh_seeds.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
