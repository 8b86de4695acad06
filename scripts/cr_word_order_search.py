"""Time-boxed search for a CR configuration in which CR-1, CR-2 and CR-3 hold together
(issue 14), above all in the paper's literal ``s g.. a`` PT word order.

A *pretraining* (PT overrides of the quick profile) is trained once per seed in its own run
directory (resumable, checkpoints at ``--snap`` intervals); every *finetuning variant* starts
from a PT snapshot (a step of that pretraining) and runs the CR branches it needs through the
package's public functions (``experiments.cr.train.finetune_branch``,
``experiments.cr.evaluate.full_eval``, ``experiments.cr.claims.cr123_seed_metrics``). One JSON
line per finished unit (``pt`` snapshot evaluation, finetuning branch) is appended to
``--log``; a restart skips every unit already there. ``--stop-at HH:MM`` (UTC) stops launching
new units after that time. ``--table`` prints the aggregated table (and the registry verdicts).

Run (background, one torch thread)::

    mkdir -p out-search
    OMP_NUM_THREADS=1 nice -n 10 python scripts/cr_word_order_search.py --plan main \\
        --log out-search/search.jsonl --out out-search/search > out-search/search.out 2>&1 &
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from mechinterp_icr.config import apply_overrides, to_dict
from mechinterp_icr.experiments.cr.claims import cr123_from_metrics, cr123_seed_metrics
from mechinterp_icr.experiments.cr.config import CRConfig, quick
from mechinterp_icr.experiments.cr.evaluate import checkpoint_eval, full_eval
from mechinterp_icr.experiments.cr.train import copy_state, finetune_branch, run_config_for
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.loop import train_phase

# ---- the settings -------------------------------------------------------------------------
# pretrainings: name -> overrides of the quick profile (task PT fields, pretrain.*)
PRETRAININGS = {
    "smoke": ["pretrain.steps=20", "pretrain.checkpoint_every=10", "finetune.steps=3",
              "eval_n=32"],
    "gsa-500": [],  # the quick profile's default pretraining
    "sga-12k": ["task.order=sga", "pretrain.steps=12000", "pretrain.checkpoint_every=3000"],
    "sga-12k-cos": ["task.order=sga", "pretrain.steps=12000", "pretrain.checkpoint_every=3000",
                    "pretrain.lr=0.003", "pretrain.decay=cosine"],
}
# finetuning variants: name -> overrides (task ICL+Grm / finetune fields, finetune.*)
# (explicit: the quick profile's own default changed to a bare query during the search)
VARIANTS = {
    "q-grm": ["task.iclgrm_query_grammar=true"],  # the query gets a grammar run too
    "bare": ["task.iclgrm_query_grammar=false"],  # s g.. a demos, bare query (the default)
    "bare-len0": ["task.iclgrm_query_grammar=false", "task.iclgrm_len_min=0"],
    "q-grm-len0": ["task.iclgrm_query_grammar=true", "task.iclgrm_len_min=0"],
    "bare-600": ["task.iclgrm_query_grammar=false", "finetune.steps=600"],
    "bare-len0-600": ["task.iclgrm_query_grammar=false", "task.iclgrm_len_min=0",
                      "finetune.steps=600"],
    # CR-2's K condition at quick settings: more held-out prompts per K, longer finetuning
    "bare-ev2048": ["task.iclgrm_query_grammar=false", "eval_n=2048"],
    "bare-400": ["task.iclgrm_query_grammar=false", "finetune.steps=400"],
    "bare-400-ev2048": ["task.iclgrm_query_grammar=false", "finetune.steps=400",
                        "eval_n=2048"],
    "type-chain": ["task.iclgrm_query_grammar=false", "task.iclgrm_chain=type"],
    "gsa-placement": ["task.iclgrm_query_grammar=false", "task.iclgrm_order=gsa"],
    "bare-k4": ["task.iclgrm_query_grammar=false", "task.finetune_k_min=4",
                "task.finetune_k_max=4"],
}
# plans: list of (pretraining, snapshot steps, variants, seeds, with mixed controls?)
PLANS = {
    "smoke": [("smoke", [10, 20], ["bare", "bare-len0"], [0], True)],
    # after the main plan's seed 0 (sga 12000 + len 0-2 + 600 finetuning steps: 0.93 / 0.93)
    "lit": [
        ("sga-12k", [12000], ["bare-len0-600", "bare-600"], [0, 1, 2], True),
    ],
    "kcheck": [
        ("gsa-500", [500], ["bare-ev2048", "bare-400", "bare-400-ev2048"], [11, 12], False),
    ],
    "lit-unseen": [
        ("sga-12k", [12000], ["bare-len0-600", "bare-600"], [11, 12], True),
    ],
    # then: how much pretraining does the 600-step finetuning need (snapshots of the same runs)
    "lit-unseen-then-shorter": [
        ("sga-12k", [12000], ["bare-len0-600", "bare-600"], [11, 12], True),
        ("sga-12k", [9000], ["bare-len0-600", "bare-600"], [0, 1, 2], True),
        ("sga-12k", [6000], ["bare-600"], [0, 1, 2], True),
    ],
    "main": [
        ("gsa-500", [500], ["q-grm", "bare", "bare-len0"], [0], True),
        ("sga-12k", [6000], ["bare", "bare-len0"], [0], False),
        ("gsa-500", [500], ["q-grm", "bare", "bare-len0"], [1, 2], True),
        ("gsa-500", [500], ["q-grm", "bare", "bare-len0"], [11, 12], True),
        ("sga-12k", [12000], ["bare", "bare-len0", "bare-len0-600"], [0], False),
        ("sga-12k", [6000], ["bare", "bare-len0"], [1], False),
        ("sga-12k", [12000], ["bare", "bare-len0", "bare-len0-600"], [1], False),
        ("sga-12k", [6000], ["bare", "bare-len0"], [2], False),
        ("sga-12k", [12000], ["bare", "bare-len0", "bare-len0-600"], [2], False),
    ],
}
BRANCH_KEYS = {  # which finetuning fields each branch depends on (units are shared by key)
    "ft-icl": ("finetune", "task.finetune_k_min", "task.finetune_k_max"),
    "ft-icl-mixed": ("finetune", "task.finetune_k_min", "task.finetune_k_max"),
    "ft-iclgrm": ("finetune", "task.finetune_k_min", "task.finetune_k_max", "task.iclgrm"),
    "ft-iclgrm-mixed": ("finetune", "task.finetune_k_min", "task.finetune_k_max",
                        "task.iclgrm"),
}


def pt_config(name: str) -> CRConfig:
    # the PT run directories were made before the quick profile's ICL+Grm query became bare:
    # keep their config (PT does not use the field; every variant sets it explicitly)
    base = apply_overrides(replace(quick(), sweep=()), ["task.iclgrm_query_grammar=true"])
    return apply_overrides(base, PRETRAININGS[name])


def variant_config(pt: str, variant: str) -> CRConfig:
    return apply_overrides(pt_config(pt), VARIANTS[variant])


def branch_key(cfg: CRConfig, branch: str) -> str:
    """What a finetuning branch depends on beyond the PT snapshot (shared across variants)."""
    t = to_dict(cfg.task)
    parts = {"finetune": to_dict(cfg.finetune)}
    if cfg.eval_n != 512:  # (the quick profile's; rows before this key part used 512)
        parts["eval_n"] = cfg.eval_n
    for k in BRANCH_KEYS[branch]:
        if k.startswith("task."):
            f = k[5:]
            parts.update({n: v for n, v in t.items() if n.startswith(f)})
    return json.dumps(parts, sort_keys=True)


def load_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append(path: Path, row: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def pt_snapshot(pt: str, seed: int, step: int, out: Path) -> dict:
    """The PT weights at ``step`` (trained or resumed in the pretraining's run directory)."""
    cfg = pt_config(pt)
    rc, task = run_config_for(cfg, seed, f"seed{seed}")
    run = RunDir.open_for(out / "pt" / pt / f"seed{seed}", rc)
    model = build_model(rc.model, seed=seed)
    have = [c.step for c in run.checkpoints() if c.phase == "pretrain"]
    if step in have:
        name = run.checkpoint_stem("pretrain", step).name
        ((_, m),) = list(run.iter_models(name, lambda: build_model(rc.model, seed=seed)))
        return copy_state(m)
    train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), cfg.pretrain, run, "pretrain",
                seed, run_config=rc, eval_fn=checkpoint_eval(task, seed, cfg.ckpt_eval_n),
                phase_order=0, stop_after=step)
    return copy_state(model)


def run_unit(cfg: CRConfig, seed: int, pt_state: dict, branch: str) -> list[dict]:
    """One finetuning branch from the PT weights, evaluated (full_eval rows)."""
    rc, task = run_config_for(cfg, seed, f"seed{seed}")
    ft = replace(cfg.finetune, checkpoint_schedule="none")
    model = finetune_branch(cfg, task, rc, None, pt_state, branch, seed, ft_cfg=ft)
    return full_eval(model, task, seed, cfg.eval_ks, cfg.eval_n)


def run_plan(plan: str, log: Path, out: Path, stop_at: str | None, only_seeds=None) -> None:
    done = {(r["kind"], r["pt"], r["step"], r["seed"], r.get("key")) for r in load_log(log)}
    for pt, steps, variants, seeds, mixed in PLANS[plan]:
        for seed in seeds:
            if only_seeds and seed not in only_seeds:
                continue
            for step in steps:
                units = []
                for v in variants:
                    cfg = variant_config(pt, v)
                    for b in ("ft-icl", "ft-iclgrm") + (("ft-icl-mixed", "ft-iclgrm-mixed")
                                                        if mixed else ()):
                        units.append((b, branch_key(cfg, b), cfg))
                todo = [u for u in units if ("ft", pt, step, seed, u[0] + u[1]) not in done]
                if ("pt", pt, step, seed, None) in done and not todo:
                    continue
                if stop_at and dt.datetime.now(dt.timezone.utc).strftime("%H:%M") >= stop_at:
                    print(f"stop-at {stop_at} reached: not starting {pt}@{step} seed {seed}",
                          flush=True)
                    return
                t = time.perf_counter()
                state = pt_snapshot(pt, seed, step, out)
                if ("pt", pt, step, seed, None) not in done:
                    cfg = pt_config(pt)
                    rc, task = run_config_for(cfg, seed, f"seed{seed}")
                    m = build_model(rc.model, seed=seed)
                    m.load_state_dict(state)
                    rows = full_eval(m, task, seed, cfg.eval_ks, cfg.eval_n)
                    append(log, {"kind": "pt", "pt": pt, "step": step, "seed": seed,
                                 "key": None, "rows": rows, "task": task.describe(),
                                 "seconds": time.perf_counter() - t})
                    done.add(("pt", pt, step, seed, None))
                    print(f"{pt}@{step} seed {seed}: PT {time.perf_counter() - t:.0f}s",
                          flush=True)
                for b, key, cfg in todo:
                    if ("ft", pt, step, seed, b + key) in done:
                        continue
                    t = time.perf_counter()
                    rows = run_unit(cfg, seed, state, b)
                    append(log, {"kind": "ft", "pt": pt, "step": step, "seed": seed,
                                 "key": b + key, "branch": b, "rows": rows,
                                 "seconds": time.perf_counter() - t})
                    done.add(("ft", pt, step, seed, b + key))
                    from mechinterp_icr.experiments.cr.evaluate import pick
                    print(f"{pt}@{step} seed {seed} {b}: held-out ICL K=4 "
                          f"{pick(rows, 'heldout', 'icl', 4):.3f} "
                          f"({time.perf_counter() - t:.0f}s)", flush=True)


def check_default(seeds, log: Path, out: Path, stop_at: str | None) -> None:
    """The quick profile's default, through the pipeline's own ``train_seed`` (every branch,
    nested held-out evaluation by K), on ``seeds``: one ``default`` line per seed."""
    from mechinterp_icr.experiments.cr.train import train_seed

    done = {r["seed"] for r in load_log(log) if r["kind"] == "default"}
    cfg = replace(quick(), sweep=())
    for seed in seeds:
        if seed in done:
            continue
        if stop_at and dt.datetime.now(dt.timezone.utc).strftime("%H:%M") >= stop_at:
            return
        t = time.perf_counter()
        rec = train_seed(cfg, out / "default", seed)
        m = cr123_seed_metrics(rec["phases"], rec["task"], cfg.task.n_demos, cfg.eval_ks,
                               cfg.task.n_types)
        append(log, {"kind": "default", "pt": "gsa-500 default", "step": 500, "seed": seed,
                     "key": None, "metrics": m, "seconds": time.perf_counter() - t})
        print(f"default seed {seed}: CR-2 {m['CR-2']['heldout_icl_exact']:.3f} drop "
              f"{m['CR-2']['max_drop_over_k']:.3f} CR-3 {m['CR-3']['heldout_icl_exact']:.3f} "
              f"({time.perf_counter() - t:.0f}s)", flush=True)


def print_default(log: Path) -> None:
    per = {str(r["seed"]): r["metrics"] for r in load_log(log) if r["kind"] == "default"}
    if not per:
        return
    claims = cr123_from_metrics(*[{s: m[c] for s, m in per.items()}
                                  for c in ("CR-1", "CR-2", "CR-3")])
    print("\nquick default through train_seed, seeds", ",".join(per))
    for c in claims:
        d = c.to_dict()
        print(f"  {c.id} {d['verdict']}: " + "; ".join(
            f"{k['condition']} = {k['value']:.3f} {dict(k['per_seed'])}" for k in d["conditions"])
            + " | controls: " + "; ".join(f"{k['name']} {k['value']:.3f} "
                                           f"(as expected: {k['as_expected']})"
                                           for k in d["controls"]))


def _verdict(d: dict) -> str:
    """The registry's verdict; with fewer seeds than the protocol needs (SPEC 0: 5), whether
    the rule is met and every control behaves on the seeds there are."""
    if d["verdict_reason"].startswith("rule met on"):
        ok = all(c["as_expected"] for c in d["controls"]) and d["controls"]
        return f"rule met, controls {'ok' if ok else 'NOT ok'} ({d['n_seeds']} seeds < 5)"
    return d["verdict"]


def table(log: Path) -> list[dict]:
    """One row per (pretraining, step, variant) with every seed that has all its units:
    per-seed CR-1 / CR-2 / CR-3 metrics and the registry verdicts over those seeds."""
    rows = load_log(log)
    pts = {(r["pt"], r["step"], r["seed"]): r for r in rows if r["kind"] == "pt"}
    fts = {(r["pt"], r["step"], r["seed"], r["key"]): r["rows"] for r in rows
           if r["kind"] == "ft"}
    out = []
    for pt in PRETRAININGS:
        steps = sorted({s for (p, s, _) in pts if p == pt})
        for step in steps:
            for v in VARIANTS:
                cfg = variant_config(pt, v)
                per = {}
                for (p, s, seed), prow in sorted(pts.items()):
                    if (p, s) != (pt, step):
                        continue
                    phases = {"pretrain": prow["rows"]}
                    for b, ph in (("ft-icl", "ft-icl"), ("ft-iclgrm", "ft-iclgrm"),
                                  ("ft-icl-mixed", "ft-icl-mixed"),
                                  ("ft-iclgrm-mixed", "ft-iclgrm-mixed")):
                        k = (pt, step, seed, b + branch_key(cfg, b))
                        if k in fts:
                            phases[ph] = fts[k]
                    if "ft-icl" in phases and "ft-iclgrm" in phases:
                        per[str(seed)] = cr123_seed_metrics(
                            phases, prow["task"], cfg.task.n_demos, cfg.eval_ks,
                            cfg.task.n_types)
                if not per:
                    continue
                claims = cr123_from_metrics(*[{s: m[c] for s, m in per.items()}
                                              for c in ("CR-1", "CR-2", "CR-3")])
                verdicts = {c.id: _verdict(c.to_dict()) for c in claims}
                out.append({"pretraining": pt, "pt_steps": step, "variant": v,
                            "order": cfg.task.order, "seeds": sorted(per, key=int),
                            "per_seed": per, "verdicts": verdicts})
    return out


def _fmt(vals, nd=2):
    return "/".join(f"{v:.{nd}f}" if isinstance(v, (int, float)) else "-" for v in vals)


def print_table(log: Path) -> None:
    print("| pretraining | PT steps | ICL+Grm variant | seeds | CR-1 PT best-attr type "
          "(typed recall) | CR-1 control: ft best-attr type | CR-2 held-out ICL K=4 | "
          "CR-2 max K-drop | CR-2 mixed ctrl | CR-3 plain ICL K=4 | CR-3 mixed ctrl type | "
          "verdicts CR-1/2/3 |")
    print("|" + "---|" * 12)
    for r in table(log):
        p = [r["per_seed"][s] for s in r["seeds"]]
        g = lambda c, k, p=p: [m.get(c, {}).get(k) for m in p]  # noqa: E731
        v = r["verdicts"]
        print(f"| {r['pretraining']} | {r['pt_steps']} | {r['variant']} | "
              f"{','.join(r['seeds'])} | {_fmt(g('CR-1', 'heldout_icl_best_attr_type'))} "
              f"({_fmt(g('CR-1', 'pt_typed_recall'))}) | "
              f"{_fmt(g('CR-1', 'ft_heldout_icl_best_attr_type'))} | "
              f"{_fmt(g('CR-2', 'heldout_icl_exact'))} | "
              f"{_fmt(g('CR-2', 'max_drop_over_k'))} | "
              f"{_fmt(g('CR-2', 'mixed_heldout_icl_exact'))} | "
              f"{_fmt(g('CR-3', 'heldout_icl_exact'))} | "
              f"{_fmt(g('CR-3', 'mixed_heldout_icl_best_attr_type'))} | "
              f"{v['CR-1']} / {v['CR-2']} / {v['CR-3']} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", default="main", choices=sorted(PLANS))
    ap.add_argument("--log", default="/tmp/cr_a/search.jsonl")
    ap.add_argument("--out", default="/tmp/cr_a/search")
    ap.add_argument("--stop-at", default=None, help="HH:MM UTC: start nothing new after")
    ap.add_argument("--seeds", default=None, help="only these seeds (comma-separated)")
    ap.add_argument("--table", action="store_true", help="print the table and exit")
    ap.add_argument("--default-seeds", default=None,
                    help="after the plan, check the quick default on these seeds (train_seed)")
    ap.add_argument("--then-plan", default=None, choices=sorted(PLANS),
                    help="after that, this plan (with --stop-at)")
    a = ap.parse_args(argv)
    log, out = Path(a.log), Path(a.out)
    if a.table:
        print_table(log)
        print_default(log)
        return 0
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else None
    run_plan(a.plan, log, out, a.stop_at, seeds)
    if a.default_seeds:
        check_default([int(s) for s in a.default_seeds.split(",")], log, out, None)
    if a.then_plan:
        run_plan(a.then_plan, log, out, a.stop_at, seeds)
    print_table(log)
    print_default(log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
