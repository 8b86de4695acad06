"""The type bounds of CR-1 and of CR-3's control as within-model contrasts (SPEC 0, "chance
from the model, not from a formula"; SPEC 1, CR-8's shared-token variant).

The job ``[shared/]seed<N>/uninf-demos`` (:func:`uninf_demos_seed`, after the seed's
``train`` job; evaluation only) loads the last checkpoint of three models of the seed's run:
the PT-only model (``pretrain``, CR-1's condition), the ICL-finetuned model (``ft-icl``,
CR-1's control) and the mixed-type ICL+Grm finetune (``ft-iclgrm-mixed``, CR-3's control).
Each is evaluated on the **same** held-out ICL prompts as the stored
``heldout_icl_best_attr_type`` of its phase (``evaluate.full_eval``: the nested prompts of
``[seed, 310]`` cut to the default K, ``eval_n_by_k`` of them), twice: with the real demos and
with **uninformative demos** (``tasks.cr_eval.other_type_demos``: every demo keeps its subject
and position and shows that subject's attribute of a type drawn uniformly from the L - 1
types other than the query's, independently per demo, from the stream ``[seed, 320, K]``).
The statistic is the type of the best attribute guess (``restricted_type``); the contrast is
real minus uninformative.

:func:`baseline_metrics` turns a record into the per-seed metrics the claims store
(``<metric>_uninf`` beside each ``<metric>``, and ``uninf_demo_query_type``); the registry's
``claims.derive.type_bound_derive`` computes the contrasts and the bounds from them, so
``icr redecide`` recomputes every verdict from the stored numbers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mechinterp_icr.claims.protocol import as_number
from mechinterp_icr.experiments.cr.config import CRConfig
from mechinterp_icr.experiments.cr.evaluate import nested_prompts, to_record
from mechinterp_icr.experiments.cr.train import seed_run_path
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import evaluate_icl

__all__ = ["PHASE_METRICS", "UNINF_SUFFIX", "UNINF_TAG", "baseline_metrics", "baseline_table",
           "uninf_demos_seed"]

# phase -> (the claim whose per-seed metrics hold its number, the stored real-demo metric)
PHASE_METRICS = {
    "pretrain": ("CR-1", "heldout_icl_best_attr_type"),
    "ft-icl": ("CR-1", "ft_heldout_icl_best_attr_type"),
    "ft-iclgrm-mixed": ("CR-3", "mixed_heldout_icl_best_attr_type"),
}
UNINF_SUFFIX = "_uninf"  # <metric>_uninf: the same statistic with uninformative demos
UNINF_TAG = 320  # the random stream of the other-type draws: [seed, UNINF_TAG, K]
SAME_REAL_TOL = 1e-9  # the job's real-demo number must be the training record's


def _prompts(task, seed: int, cfg: CRConfig) -> tuple[int, int, dict]:
    """(K, n, the fixed prompts at K): ``full_eval``'s held-out ICL prompts at the default K."""
    K, n = int(cfg.task.n_demos), int(cfg.eval_n_by_k)
    nested = nested_prompts(task, [seed, 310], task.heldout_subjects,
                            max(max(cfg.eval_ks), K), n)
    return K, n, {**nested, "demo_subjects": nested["demo_subjects"][:, :K]}


def uninf_demos_seed(cfg: CRConfig, out_dir: Path, seed: int) -> dict[str, Any]:
    """Job ``[shared/]seed<N>/uninf-demos``: for each phase of :data:`PHASE_METRICS` that the
    seed's run (``<out_dir>/runs/cr/seed<N>``, written by ``train_seed`` under ``cfg``) has,
    the type of the best attribute guess on the held-out ICL prompts at the default K with the
    real demos and with uninformative demos (module docstring). Record ``{seed, K, n, phases:
    {phase: {real, uninformative, contrast, demo_query_type}}, timings}``."""
    from mechinterp_icr.pipeline import load_run_model

    t = time.perf_counter()
    run = RunDir(seed_run_path(out_dir, seed))
    _, task, build = load_run_model(run)
    K, n, fixed = _prompts(task, seed, cfg)
    phases: dict[str, Any] = {}
    for phase in PHASE_METRICS:
        if run.latest(phase) is None:
            continue
        ((_, model),) = list(run.iter_models(f"phase:{phase}:last", build))
        real = evaluate_icl(model, task, [seed, 300, 0, 0, K], task.heldout_subjects, K, n,
                            fixed=fixed)
        other = evaluate_icl(model, task, [seed, 300, 0, 0, K], task.heldout_subjects, K, n,
                             fixed=fixed, uninformative=[seed, UNINF_TAG, K])
        r, u = real["restricted_type"], other["restricted_type"]
        phases[phase] = {"real": r, "uninformative": u, "contrast": r - u,
                         "demo_query_type": other["demo_query_type"]}
    return to_record({"seed": seed, "K": K, "n": n, "phases": phases,
                      "timings": {"uninformative demos": time.perf_counter() - t}})


def baseline_metrics(rec: Any, claim_metrics: dict[str, dict[str, Any]]
                     ) -> tuple[dict[str, dict[str, float]], list[str]]:
    """({claim id: per-seed metrics to add}, problems) of one seed from its
    :func:`uninf_demos_seed` record ``rec`` (an ``UninfRecord``, or None when the job did not
    run) and that seed's stored metrics ``claim_metrics`` (``{"CR-1": {...}, "CR-3":
    {...}}``). Each phase adds ``<metric>_uninf`` (:data:`PHASE_METRICS`) and the claim's
    ``uninf_demo_query_type``. A phase whose real-demo number in the job is not the stored one
    (another model or other prompts: no contrast on the same model and prompts) gets NaN and a
    problem line; a phase the job did not measure gets no metric (no value: unreadable)."""
    out: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    if rec is None:
        return out, ["the uninformative-demo job did not run"]
    for phase, (cid, metric) in PHASE_METRICS.items():
        got = rec.phases.get(phase)
        if got is None:
            continue
        stored = as_number(claim_metrics.get(cid, {}).get(metric))
        real, uninf = as_number(got.get("real")), as_number(got.get("uninformative"))
        same = stored is not None and real is not None and abs(stored - real) <= SAME_REAL_TOL
        if not same:
            problems.append(f"{phase}: the job's real-demo {metric} {real} is not the stored "
                            f"{stored}")
        d = out.setdefault(cid, {})
        d[metric + UNINF_SUFFIX] = uninf if same and uninf is not None else float("nan")
        d["uninf_demo_query_type"] = float(got.get("demo_query_type", float("nan")))
    return out, problems


def baseline_table(records: dict[int, Any]) -> list[dict[str, Any]]:
    """One row per seed and measured phase of the ``uninf-demos`` records (seed -> record or
    None): the type of the best attribute guess with the real demos and with uninformative
    demos, their contrast and the share of uninformative demo tokens that are values of the
    query's type (0 in the default task)."""
    return [{"seed": s, "phase": phase, "K": rec.K, "prompts": rec.n, **vals}
            for s, rec in records.items() if rec is not None
            for phase, vals in rec.phases.items()]
