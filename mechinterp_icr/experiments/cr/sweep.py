"""The CR-3 sweep: ICL+Grm finetuning under other settings of the open choices, evaluated on
plain ICL on held-out subjects.

A setting is a :class:`~.config.SweepSetting` (a label and the ``task`` and ``finetune``
fields it changes; on the command line ``"label|task.key=value,finetune.key=value"``).
Settings that only change finetuning reuse the PT weights of the seed's main run; settings
that change PT (word order, lam, ...) pretrain their own model in
``<out>/runs/cr-sweep/<label>/seed<N>/``, shared between settings with the same pretraining.

In the reproduction each (setting, seed) is a job ``sweep/<slug>/seed<N>``
(:func:`sweep_job`, planned by :func:`sweep_settings`): a setting that reuses the main PT
weights runs after ``seed<N>/train`` and reads them from ``<out>/runs/cr/seed<N>``; the first
setting with a given pretraining pretrains it, the later ones with the same pretraining run
after it and read its weights from its run directory. The default setting (no overrides) is
the main ``ft-iclgrm`` branch: no job, its row comes from the seed's record
(:func:`default_setting_row`).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.claims import ci95
from mechinterp_icr.claims.protocol import UNIT
from mechinterp_icr.config import check, to_dict
from mechinterp_icr.experiments.cr.config import (
    PT_FIELDS,
    CRConfig,
    SweepSetting,
    sweep_config,
)
from mechinterp_icr.experiments.cr.evaluate import pick, to_record
from mechinterp_icr.experiments.cr.train import (
    copy_state,
    finetune_branch,
    last_state,
    model_config,
    open_seed_run,
    pretrain,
    run_config_for,
    seed_run_path,
)
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import evaluate_icl, evaluate_pt

__all__ = [
    "default_setting_row",
    "format_sweep",
    "print_sweep",
    "pt_key",
    "run_sweep",
    "run_sweep_setting",
    "slug",
    "sweep_job",
    "sweep_run_path",
    "sweep_settings",
    "sweep_table",
]


def slug(label: str) -> str:
    """The directory (and job) name of a sweep setting's label."""
    keep = "".join(ch if ch.isalnum() else "-" for ch in label.lower())
    return "-".join(p for p in keep.split("-") if p)[:60] or "default"


def pt_key(cfg: CRConfig) -> str:
    """Identity of the pretraining (task PT fields, model, pretrain config)."""
    t = {k: getattr(cfg.task, k) for k in sorted(PT_FIELDS)}
    return json.dumps([t, to_dict(cfg.model), to_dict(cfg.pretrain)], sort_keys=True)


def run_sweep_setting(cfg: CRConfig, setting: SweepSetting, out_dir: Path, seed: int,
                      pt_state: dict | None, main: dict | None = None,
                      pt_cache: dict | None = None) -> dict[str, Any]:
    """ICL+Grm finetuning under one sweep setting for one seed; held-out plain ICL and
    ICL+Grm accuracy. Reuses ``pt_state`` unless the setting changes the PT data.

    ``main`` is the seed's main result (``{"phases": {...}}``): the default setting (no
    overrides) is its ``ft-iclgrm`` branch, whose evaluation is reused."""
    label, scfg, own_pt = sweep_config(cfg, setting)
    spec = setting.spec
    if main is not None and not setting.overrides:
        return default_setting_row(cfg, setting, seed, main)
    rc, task = run_config_for(scfg, seed, f"seed{seed}")
    if not own_pt:
        rc = replace(rc, model=model_config(cfg, cfg.task.build(seed)))
    elif scfg.model.n_ctx == cfg.model.n_ctx and task.n_ctx > rc.model.n_ctx:
        rc = replace(rc, model=replace(rc.model, n_ctx=task.n_ctx))
    run = RunDir.open_for(sweep_run_path(out_dir, slug(label), seed), rc)
    t = time.perf_counter()
    if own_pt and pt_cache is not None and pt_key(scfg) in pt_cache:
        pt_state = pt_cache[pt_key(scfg)]  # same PT as an earlier setting of this seed
    elif own_pt or pt_state is None:
        pt_state = copy_state(pretrain(scfg, task, rc, run, seed))
        if pt_cache is not None:
            pt_cache[pt_key(scfg)] = pt_state
    pt_icl = pt_best_type = None
    if own_pt:
        # CR-1 under this setting's pretraining: held-out plain ICL of the PT-only model
        pt_model = build_model(rc.model, seed=seed)
        pt_model.load_state_dict(pt_state)
        r = evaluate_icl(pt_model, task, [seed, 399], task.heldout_subjects,
                         scfg.task.n_demos, cfg.eval_n)
        pt_icl, pt_best_type = r["exact"], r["restricted_type"]
    ft = replace(scfg.finetune, checkpoint_schedule="none")
    model = finetune_branch(scfg, task, rc, run, pt_state, "ft-iclgrm", seed, ft_cfg=ft)
    n = cfg.eval_n
    K = scfg.task.n_demos
    icl = evaluate_icl(model, task, [seed, 400], task.heldout_subjects, K, n)
    grm = evaluate_icl(model, task, [seed, 401], task.heldout_subjects, K, n, grammar=True)
    ptr = evaluate_pt(model, task, [seed, 402], None, max(64, n // 2))
    return {"setting": label, "spec": spec, "seed": seed, "own_pretrain": own_pt,
            "heldout_icl_exact": icl["exact"], "heldout_icl_type": icl["type"],
            "heldout_icl_best_attr_type": icl["restricted_type"],
            "heldout_iclgrm_exact": grm["exact"], "pt_typed_after": ptr["typed"],
            "pt_only_heldout_icl_exact": pt_icl, "pt_only_heldout_icl_best_attr_type": pt_best_type,
            "seconds": time.perf_counter() - t}


def default_setting_row(cfg: CRConfig, setting: SweepSetting, seed: int, main: dict[str, Any]
                        ) -> dict[str, Any]:
    """The sweep row of the default setting (no overrides): the seed's main ``ft-iclgrm``
    branch, whose evaluation (``main["phases"]``, the seed's record) is reused."""
    label = sweep_config(cfg, setting)[0]
    spec = setting.spec
    rows, K = main.phases["ft-iclgrm"], cfg.task.n_demos
    return {"setting": label, "spec": spec, "seed": seed, "own_pretrain": False,
            "heldout_icl_exact": pick(rows, "heldout", "icl", K),
            "heldout_icl_type": pick(rows, "heldout", "icl", K, "type"),
            "heldout_icl_best_attr_type": pick(rows, "heldout", "icl", K, "restricted_type"),
            "heldout_iclgrm_exact": pick(rows, "heldout", "iclgrm", K),
            "pt_typed_after": float(np.mean([pick(rows, sp, "pt", key="typed")
                                             for sp in ("heldout", "finetune")])),
            "seconds": 0.0}


def sweep_settings(cfg: CRConfig) -> list[dict[str, Any]]:
    """How each setting of ``cfg.sweep`` runs, in order: ``{setting, slug, default, own_pt,
    pt_from}`` where ``pt_from`` is None (reuses the seed's main PT weights, or the default
    setting), ``"self"`` (pretrains its own) or the slug of the earlier setting whose
    pretraining it shares. ``ConfigError`` when two settings share a slug (one directory)."""
    out, owners, seen = [], {}, {}
    for setting in cfg.sweep:
        label, scfg, own_pt = sweep_config(cfg, setting)
        s = slug(label)
        check(s not in seen, "sweep", str(setting),
              f"settings whose labels differ after slugging (this one and {seen.get(s)!r} both "
              f"become {s!r})")
        seen[s] = str(setting)
        default = not setting.overrides
        pt_from = None
        if own_pt:
            pt_from = owners.setdefault(pt_key(scfg), s)
            pt_from = "self" if pt_from == s else pt_from
        out.append({"setting": setting, "slug": s, "default": default, "own_pt": own_pt,
                    "pt_from": pt_from})
    return out


def sweep_run_path(out_dir: Path, slug_: str, seed: int) -> Path:
    """The run directory of a sweep setting: ``<out>/runs/cr-sweep/<slug>/seed<N>``."""
    return Path(out_dir) / "runs" / "cr-sweep" / slug_ / f"seed{seed}"


def sweep_job(cfg: CRConfig, out_dir: Path, seed: int, setting: SweepSetting,
              pt_from: str | None) -> dict[str, Any]:
    """Job ``sweep/<slug>/seed<N>``: ICL+Grm finetuning under one non-default setting
    (:func:`run_sweep_setting`). ``pt_from`` (:func:`sweep_settings`): None reads the PT
    weights of ``<out>/runs/cr/seed<N>``, ``"self"`` pretrains (or resumes) in the setting's
    own run directory, a slug reads that setting's finished pretraining. Record: the sweep
    row and ``timings``."""
    t = time.perf_counter()
    _, scfg, _ = sweep_config(cfg, setting)
    if pt_from is None:
        row = run_sweep_setting(cfg, setting, out_dir, seed,
                                last_state(seed_run_path(out_dir, seed)))
    elif pt_from == "self":
        row = run_sweep_setting(cfg, setting, out_dir, seed, None)
    else:
        state = last_state(sweep_run_path(out_dir, pt_from, seed))
        row = run_sweep_setting(cfg, setting, out_dir, seed, None,
                                pt_cache={pt_key(scfg): state})
    return to_record({"row": row, "timings": {"sweep": time.perf_counter() - t}})


def run_sweep(cfg: CRConfig, out_dir: Path, seeds, settings, log=None
              ) -> list[dict[str, Any]]:
    """Standalone CR-3 sweep (``analyses/cr_sweep.py``): pretrain (or resume) the main PT run
    of each seed, then ICL+Grm-finetune every setting from it; one JSON row per (setting,
    seed) appended to ``log`` as it finishes. A setting may be given in its command-line form
    (``SweepSetting.parse``)."""
    settings = [s if isinstance(s, SweepSetting) else SweepSetting.parse(s) for s in settings]
    for s in settings:
        sweep_config(cfg, s)
    rows = []
    for seed in seeds:
        run, rc, task = open_seed_run(cfg, out_dir, seed)
        pt_state = copy_state(pretrain(cfg, task, rc, run, seed))
        cache = {pt_key(cfg): pt_state}
        for setting in settings:
            _, scfg, _own = sweep_config(cfg, setting)
            row = run_sweep_setting(cfg, setting, out_dir, seed, cache.get(pt_key(scfg)),
                                    pt_cache=cache)
            rows.append(row)
            if log is not None:
                with open(log, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return rows


def sweep_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate per-seed sweep rows into (setting, seeds, held-out ICL, held-out ICL+Grm)."""
    out = []
    for label in dict.fromkeys(r["setting"] for r in rows):
        rs = [r for r in rows if r["setting"] == label]
        icl = [r["heldout_icl_exact"] for r in rs]
        grm = [r["heldout_iclgrm_exact"] for r in rs]
        out.append({"setting": label, "spec": rs[0]["spec"], "seeds": [r["seed"] for r in rs],
                    "heldout_icl_exact_mean": float(np.mean(icl)),
                    "heldout_icl_exact_ci95": list(ci95(icl, UNIT)),
                    "heldout_icl_exact_per_seed": icl,
                    "heldout_iclgrm_exact_mean": float(np.mean(grm)),
                    "heldout_iclgrm_exact_per_seed": grm,
                    "pt_typed_after_mean": float(np.mean([r["pt_typed_after"] for r in rs])),
                    "heldout_icl_best_attr_type_mean": _mean_of(rs, "heldout_icl_best_attr_type"),
                    "pt_only_heldout_icl_exact_mean": _mean_of(rs, "pt_only_heldout_icl_exact"),
                    "pt_only_heldout_icl_best_attr_type_mean": _mean_of(
                        rs, "pt_only_heldout_icl_best_attr_type"),
                    "own_pretrain": rs[0]["own_pretrain"]})
    return out


def _mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    """Mean of ``key`` over rows; None unless every row has it."""
    vals = [r.get(key) for r in rows]
    return float(np.mean(vals)) if vals and all(v is not None for v in vals) else None


def format_sweep(sweep: list[dict[str, Any]]) -> str:
    """The aggregated sweep as an aligned text table."""
    rows = [("setting", "seeds", "held-out plain ICL", "held-out ICL+Grm", "PT typed after")]
    for r in sweep:
        rows.append((r["setting"], str(len(r["seeds"])),
                     f"{r['heldout_icl_exact_mean']:.3f} (" +
                     ", ".join(f"{v:.2f}" for v in r["heldout_icl_exact_per_seed"]) + ")",
                     f"{r['heldout_iclgrm_exact_mean']:.3f}",
                     f"{r['pt_typed_after_mean']:.3f}"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)) for r in rows)


def print_sweep(sweep) -> None:
    if sweep:
        print("\nCR-3 sweep (ICL+Grm finetuning; accuracy on held-out subjects)")
        print(format_sweep(sweep))
