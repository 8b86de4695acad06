"""Fresh-seed check of CR claims from one kind of job of the CR plan, run exactly as
``icr reproduce cr`` runs it, on seeds no setting was chosen on; prints every registered
condition (and, where that job measures them, every control) per seed with the verdict the
registry gives.

- ``--job train`` (default): CR-1 .. CR-3 from the ``seed<N>/train`` job (pretraining, the
  finetuning branches and their evaluation). The CR-3 sweep and the controls that need other
  jobs are not run, so those controls read ``not measured``.
- ``--job cascade``: CR-5 and CR-7 from the ``seed<N>/cascade`` job (the 1-layer
  attention-only mechanism model's PT, its ICL finetune at each registered learning rate,
  the CR-7 probes and causal arms, CR-5's head roles and controls) and the
  ``seed<N>/placebo`` job (CR-7's synthetic schedules). CR-5's 2-layer roles, reported
  beside the claim from the ``seed<N>/mechanism`` job, are not run.

The records are the reproduction's own (``OUT/jobs/cr/seed<N>/<job>.json``), so
``icr reproduce cr --out OUT --seeds ...`` later reuses them; ``--set KEY=VALUE`` tries
another setting.

    OMP_NUM_THREADS=1 python scripts/cr_fresh_seeds.py --seeds 31,32,33,34,35 \\
        --out out-fresh --workers 2 [--job cascade]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mechinterp_icr.experiments.cr.claims import cr123_claims
from mechinterp_icr.experiments.cr.claims_mech import cr5_claim, cr7_claim
from mechinterp_icr.experiments.cr.records import read_record
from mechinterp_icr.experiments.cr.reproduce import plan
from mechinterp_icr.jobs import run_jobs
from mechinterp_icr.runner import resolve_config


def _show(v):
    return round(v, 4) if isinstance(v, float) else v


def _claims(job: str, cfg, seeds: list[int], records: dict) -> list:
    recs = {s: read_record(records, job, s) for s in seeds}
    if job == "train":
        return list(cr123_claims(cfg, [recs[s] for s in seeds], []))
    return [cr5_claim({s: r.cr5_mech for s, r in recs.items()}, {}, None),
            cr7_claim({s: r.cr7 for s, r in recs.items()},
                      {s: read_record(records, "placebo", s).placebo for s in seeds},
                      cfg.cascade, None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", required=True, help="comma-separated seeds")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--job", "--task", dest="job", choices=("train", "cascade"), default="train",
                    help="the kind of job of the CR plan to run (--task: the old spelling)")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = resolve_config("cr", args.profile, args.overrides)
    wanted = {args.job} | ({"placebo"} if args.job == "cascade" else set())
    jobs = [t for t in plan(cfg, args.out, seeds) if t.name.rsplit("/", 1)[-1] in wanted
            and not t.name.startswith("shared/")]
    records = run_jobs(jobs, args.out / "jobs" / "cr", args.workers)
    report = {}
    for claim in _claims(args.job, cfg, seeds, records):
        d = claim.to_dict()
        report[claim.id] = {k: d.get(k) for k in ("verdict", "verdict_reason", "conditions",
                                                  "controls")}
        print(f"\n{claim.id}: {d['verdict']} -- {d['verdict_reason']}")
        for c in d["conditions"]:
            vals = {s: _show(v) for s, v in c.get("per_seed", {}).items()}
            print(f"  {c['condition']}: met={c['met']} {vals}")
        for c in d.get("controls") or []:
            vals = {s: _show(v) for s, v in (c.get("per_seed") or {}).items()}
            print(f"  control {c['name']}: as expected={c.get('as_expected')} {vals}")
    (args.out / f"fresh_seeds_{args.job}.json").write_text(
        json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
