"""IR-3 / IR-6 / IR-7 under the nearby conventions of the stopping rule (SPEC 0: "robust to
conventions"): the within-pair gap (and the other row statistics) where the stopping rule
would stop with its tolerance ``stop_tol`` times each factor of
:data:`~mechinterp_icr.claims.ir_registry.STOP_TOL_FACTORS` (halved, registered, doubled),
and whether each claim's rule would be met there. Reported only; no verdict reads it.

- IR-3 and IR-7 run under the rule (:func:`..train.gap_stop_rule`). A larger tolerance stops
  at or before the registered stop: read from the run's records (every record holds the
  step-1 row). A smaller one stops at or after it: the run is continued from its final state
  with the same full-batch small steps (deterministic, so equal to the longer run) until the
  rule with that tolerance is met or ``stop_max``.
- IR-6 runs a fixed ``pretrained.ft_steps``; the rule (every tolerance) is applied to its records
  after the fact, capped at the run's length.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from mechinterp_icr.claims.ir_registry import STOP_TOL_FACTORS
from mechinterp_icr.claims.protocol import evaluate_condition
from mechinterp_icr.claims.registry import spec
from mechinterp_icr.experiments.ir.config import IRConfig
from mechinterp_icr.interp.ir_attention import row_stats
from mechinterp_icr.training.pgd import fast_loss

__all__ = ["convention_report", "factor_label", "fixed_length_variants", "stop_step",
           "stop_tol_variants"]


def factor_label(f: float) -> str:
    return {0.5: "tol/2", 1.0: "tol", 2.0: "2 tol"}.get(f, f"{f:g} tol")


def _stats(row1) -> dict[str, float]:
    st = row_stats(row1, (len(row1) - 1) // 2)
    return {"within_pair_gap": st["within_pair_gap"], "pair_mass_diff": st["pair_mass_spread"],
            "mass_s3": st["mass_sq"]}


def _checks(cfg: IRConfig, last: int) -> list[int]:
    """Record steps at which the rule is checked (record step = small steps + 1)."""
    return list(range(cfg.steps + 1, last + 1, cfg.stop_every))


def stop_step(gaps: dict[int, float], cfg: IRConfig, tol: float) -> int | None:
    """The first check step whose gap moved by < ``tol`` since the previous check (None:
    never among ``gaps``, record step -> gap)."""
    for t in sorted(gaps):
        prev = gaps.get(t - cfg.stop_every)
        if prev is not None and abs(prev - gaps[t]) < tol:
            return t
    return None


def _variant(step: int, row1, cap: int) -> dict[str, Any]:
    return {"small_steps": step - 1, **_stats(row1), "ran_to_length_bound": step >= cap}


def stop_tol_variants(cfg: IRConfig, fast, recs: list[dict], train) -> dict[str, dict]:
    """For a run under IR-3's stopping rule (``fast`` its final model, ``recs`` its records
    with a step-1 row each, ``train`` its finetuning batch): per tolerance factor, where the
    rule stops and the row statistics there."""
    by = {r["step"]: r for r in recs}
    end = max(by)
    cap = cfg.stop_max + 1
    gaps = {t: _stats(by[t]["row1"])["within_pair_gap"] for t in _checks(cfg, end) if t in by}
    out: dict[str, dict] = {}
    for f in STOP_TOL_FACTORS:
        tol = f * cfg.stop_tol
        t = stop_step(gaps, cfg, tol)
        if t is not None and t <= end:
            out[factor_label(f)] = {"tol": tol, **_variant(t, by[t]["row1"], cap)}
            continue
        if end >= cap:  # the registered run already ran to its length bound
            out[factor_label(f)] = {"tol": tol, **_variant(end, by[end]["row1"], cap)}
            continue
        out[factor_label(f)] = {"tol": tol, **_continued(cfg, fast, train, gaps, end, tol)}
    return out


def _continued(cfg: IRConfig, fast, train, gaps: dict[int, float], end: int, tol: float
               ) -> dict[str, Any]:
    """Continue a copy of ``fast`` (at record step ``end``) with small steps until the rule
    with ``tol`` is met or ``stop_max``."""
    f2 = copy.deepcopy(fast)
    gaps = dict(gaps)
    K = f2.task.cfg.n_pairs
    cap = cfg.stop_max + 1
    t = end
    row1 = None
    while t < cap:
        f2.B.grad = None
        loss = fast_loss(f2, train)
        loss.backward()
        with torch.no_grad():
            f2.B -= cfg.lr * f2.B.grad
        t += 1
        if (t - cfg.steps - 1) % cfg.stop_every == 0 and t >= cfg.steps + 1:
            with torch.no_grad():
                row1 = f2.attention([2 * K])[0, : 2 * K + 1].tolist()
            gaps[t] = _stats(row1)["within_pair_gap"]
            prev = gaps.get(t - cfg.stop_every)
            if prev is not None and abs(prev - gaps[t]) < tol:
                break
    if row1 is None:
        with torch.no_grad():
            row1 = f2.attention([2 * K])[0, : 2 * K + 1].tolist()
    return _variant(t, row1, cap)


def fixed_length_variants(cfg: IRConfig, recs: list[dict]) -> dict[str, dict]:
    """IR-6 (a fixed-length run): per tolerance factor, where the stopping rule would have
    stopped it (capped at its last record) and the row statistics there."""
    by = {r["step"]: r for r in recs if "row1" in r}
    end = max(by)
    gaps = {t: _stats(by[t]["row1"])["within_pair_gap"] for t in _checks(cfg, end) if t in by}
    out = {}
    for f in STOP_TOL_FACTORS:
        tol = f * cfg.stop_tol
        t = stop_step(gaps, cfg, tol) or end
        out[factor_label(f)] = {"tol": tol, **_variant(t, by[t]["row1"], end)}
    return out


def convention_report(cid: str, per_seed: dict[str, dict[str, Any]],
                      key: str = "stop_tol_variants") -> dict[str, Any]:
    """Whether ``cid``'s rule (its registered conditions, every seed) is met under each
    tolerance: the per-seed row statistics of each variant replace the claim's own (the
    accuracies stay those of the registered stop), and ``flips`` names the tolerances under
    which the rule's outcome differs from the registered run's."""
    conds = spec(cid).conditions
    base = all(evaluate_condition(c, per_seed)["met"] for c in conds)
    out: dict[str, Any] = {"registered_rule_met": base, "variants": {}, "flips": []}
    labels = [factor_label(f) for f in STOP_TOL_FACTORS]
    for lab in labels:
        alt, missing = {}, []
        for s, m in per_seed.items():
            v = (m.get(key) or {}).get(lab)
            if v is None:
                missing.append(s)
            alt[s] = {**m, **({k: v[k] for k in ("within_pair_gap", "pair_mass_diff",
                                                  "mass_s3") if k in v} if v else {})}
        met = all(evaluate_condition(c, alt)["met"] for c in conds) and not missing
        out["variants"][lab] = {
            "rule_met": met, "missing_seeds": missing,
            "within_pair_gap_per_seed": {s: (m.get(key) or {}).get(lab, {}).get(
                "within_pair_gap") for s, m in per_seed.items()},
            "small_steps_per_seed": {s: (m.get(key) or {}).get(lab, {}).get("small_steps")
                                     for s, m in per_seed.items()}}
        if met != base:
            out["flips"].append(lab)
    return out
