"""CR-1..3 evaluation: the small held-out evaluation logged at every checkpoint, the full
evaluation of each phase's final model, and reading those rows back.

A full evaluation row is ``{split, format, K, exact, type, restricted, typed,
restricted_type, ...}``: PT factual recall (typed, restricted with its Bayes ceiling, exact)
on finetune and held-out subjects, and ICL / ICL+Grm accuracy (exact, type, restricted) per
number of demos K.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mechinterp_icr.store.io import json_default
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import CRTask, evaluate_icl, evaluate_pt

__all__ = ["CURVE_KEYS", "checkpoint_eval", "curve_points", "finetune_curves", "full_eval",
           "heldout_icl_by_k", "max_drop_over_k", "nested_prompts", "pick", "to_record"]

# checkpoint metrics drawn as finetuning curves
CURVE_KEYS = ("heldout_icl_exact", "heldout_iclgrm_exact", "pt_restricted")


def checkpoint_eval(task: CRTask, seed: int, n: int):
    """The small held-out evaluation logged at every checkpoint (``n`` prompts per cell)."""

    def fn(model) -> dict[str, float]:
        out = {}
        r = evaluate_icl(model, task, [seed, 101], task.heldout_subjects, task.cfg.n_demos, n)
        out.update({f"heldout_icl_{k}": v for k, v in r.items()
                    if k in ("exact", "type", "restricted")})
        r = evaluate_icl(model, task, [seed, 102], task.heldout_subjects, task.cfg.n_demos, n,
                         grammar=True)
        out["heldout_iclgrm_exact"] = r["exact"]
        r = evaluate_icl(model, task, [seed, 103], task.finetune_subjects, task.cfg.n_demos, n)
        out["finetune_icl_exact"] = r["exact"]
        r = evaluate_pt(model, task, [seed, 104], None, max(16, n // 4))
        out.update({f"pt_{k}": v for k, v in r.items() if k in ("typed", "restricted", "exact")})
        return out

    return fn


def full_eval(model, task: CRTask, seed: int, ks, n: int, n_by_k: int | None = None
              ) -> list[dict[str, Any]]:
    """Rows (split, format, K, exact, type, restricted, typed, restricted_type): PT recall
    on both splits, held-out plain ICL at every K of ``ks`` on ``n_by_k`` nested prompts
    (CR-2's K condition; ``n`` when None), and the other cells (finetune-subject ICL,
    ICL+Grm) at the default K and the largest K only, ``n`` prompts each."""
    rows = []
    splits = {"heldout": task.heldout_subjects, "finetune": task.finetune_subjects}
    few = sorted({task.cfg.n_demos, max(ks)})
    n_k = n if n_by_k is None else n_by_k
    nested = nested_prompts(task, [seed, 310], task.heldout_subjects, max(ks), n_k)
    for si, (split, subs) in enumerate(splits.items()):
        r = evaluate_pt(model, task, [seed, 200, si], subs, max(64, n // 2))
        rows.append({"split": split, "format": "pt", "K": None, **r})
        for gi, fmt in enumerate(("icl", "iclgrm")):
            for K in (ks if (split, fmt) == ("heldout", "icl") else few):
                fixed, m = None, n
                if (split, fmt) == ("heldout", "icl"):  # the same prompts at every K
                    fixed = {**nested, "demo_subjects": nested["demo_subjects"][:, :K]}
                    m = n_k
                r = evaluate_icl(model, task, [seed, 300, si, gi, K], subs, K, m,
                                 grammar=fmt == "iclgrm", fixed=fixed)
                rows.append({"split": split, "format": fmt, "K": K, **r})
    return rows


def nested_prompts(task: CRTask, seed, subjects, k_max: int, n: int) -> dict[str, np.ndarray]:
    """``n`` held-out ICL prompts with ``k_max`` demos (type, query subject, demo subjects,
    distinct per row) whose first K demos give the prompt at K: held-out accuracy by K is
    then measured on the same queries and types, so a drop between consecutive K is the
    model's, not the sampling noise of independent prompt sets (CR-2's K condition)."""
    rng = np.random.default_rng(seed)
    subjects = np.asarray(subjects)
    pick = rng.random((n, len(subjects))).argsort(axis=1)[:, :k_max + 1]
    chosen = subjects[pick]
    return {"types": rng.integers(task.cfg.n_types, size=n), "query_subjects": chosen[:, 0],
            "demo_subjects": chosen[:, 1:]}


def max_drop_over_k(acc_by_k: dict[int, float], k_from: int = 2) -> float:
    """The largest drop between consecutive evaluated K (K >= ``k_from``) of a K -> accuracy
    map (0 when accuracy never falls; nan with fewer than two such K): CR-2's K condition."""
    ks = sorted(k for k in acc_by_k if k >= k_from)
    if len(ks) < 2:
        return float("nan")
    return float(max(0.0, max(acc_by_k[a] - acc_by_k[b] for a, b in zip(ks, ks[1:]))))


def pick(rows, split, fmt, K=None, key="exact"):
    """The ``key`` of the first evaluation row of (split, format[, K]); nan when absent."""
    for r in rows:
        if r["split"] == split and r["format"] == fmt and (K is None or r["K"] == K):
            return r[key]
    return float("nan")


def heldout_icl_by_k(results: list[dict[str, Any]], ks) -> dict[str, list[list[float]]]:
    """phase -> for every K of ``ks`` the held-out plain-ICL exact accuracy of every seed
    (phases in the order they ran)."""
    return {phase: [[pick(r.phases[phase], "heldout", "icl", K) for r in results]
                    for K in ks]
            for phase in results[0].phases}


def curve_points(run_path: Path) -> list[list]:
    """``[phase, metric, step, value]`` of every checkpoint evaluation (``metrics.jsonl``) of
    the ``ft-icl`` and ``ft-iclgrm`` branches of one run, in the order they were logged."""
    out = []
    for m in RunDir(run_path).read_metrics():
        for key in CURVE_KEYS:
            if m.get("phase") in ("ft-icl", "ft-iclgrm") and key in m:
                out.append([m["phase"], key, int(m["step"]), float(m[key])])
    return out


def finetune_curves(points_by_seed: list[list[list]]) -> dict[tuple[str, str], dict[int, list]]:
    """(phase, metric) -> step -> values over seeds, from each seed's :func:`curve_points`
    (seeds in order)."""
    curves: dict[tuple[str, str], dict[int, list[float]]] = {}
    for points in points_by_seed:
        for phase, key, step, value in points:
            curves.setdefault((phase, key), {}).setdefault(int(step), []).append(float(value))
    return curves


def to_record(obj: Any) -> Any:
    """``obj`` as plain JSON types (numpy scalars and arrays, tuples, paths converted): what a
    job returns, so that a record read back from disk equals the one returned."""
    return json.loads(json.dumps(obj, default=json_default))
