"""IR-5's rule (SPEC 2, revised 2026-12-05) as pure functions of the stored runs, so that
``icr redecide`` recomputes every N(n), slope and control from ``summary.json``.

What the experiment stores per seed (``ir5_by_n``, written by ``experiments/ir/ir5.py``), per
n of the registered grid: the width ``d``, the ideal-row expected-accuracy ceiling C(n)
(``ceiling``), the constructed memory's retrieval (``retrieval``), and per arm (``memory``:
the claim; ``learned``: the positive control) its zero-data accuracy ``z`` and every run's
final expected step-1 accuracy by N (``acc``: {N: [accuracies]}).

What the rule reads from them:

- **Plateau** P(n): the memory arm's mean accuracy at the two largest N of its grid; valid
  only when flat (the two means within ``flat``) and P(n) >= ``min_frac`` x C(n); otherwise
  that n is not measurable.
- **Target** of an arm: tau(n) = z(n) + q x (P(n) - z(n)), z the arm's own zero-data accuracy,
  P shared by both arms (a learned memory that has seen every fact is the constructed one).
- **N(n)**: where the isotonic (non-decreasing) fit of the mean accuracy against log N first
  reaches tau, log-interpolated between grid points (:func:`crossing`); the smallest N when
  reached there; None (right-censored) when not reached by the largest.
- **Slope** of log N(n) on log n by least squares (:func:`log_slope`); the memory arm's
  censored N counts as its grid's largest; the learned arm's slope is over its uncensored n.
- **s_poly** = log((log n_max / log n_min)^2) / log(n_max / n_min) (:func:`s_poly`): the slope
  of (log n)^2 over the range, the steepest growth the polylog upper bound allows.
- **The registered grid** (``grid``: n, the memory arm's N, its runs per N and at the two
  largest N, the learned arm's runs per N): an n of it that was not stored, or stored with
  fewer N or runs, is not measurable (a ``--set`` with fewer runs is not the registered
  measurement); a stored n outside it is ignored. Without ``grid`` (ad-hoc use) the stored
  rows are read as they are.
- **Not measurable never hides a failure** (SPEC 0): where some n cannot be read, the slope is
  still bounded: least squares is linear in log N, so the smallest slope any values at those n
  could give (each between the grid's smallest and largest N) is :func:`best_case_slope`.
  When even that exceeds the registered bar (``slope_bar``), the seed's slope condition is
  read as failing on that bound instead of as not measurable. N at n_max is read whenever
  n_max itself can be read.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from mechinterp_icr.claims.intervals import interval
from mechinterp_icr.claims.protocol import as_number as _num

__all__ = ["IR5_GRID_KEYS", "IR5_PER_SEED", "IR5_POOLED", "IR5_TABLE", "best_case_slope",
           "crossing", "ir5_derive", "ir5_seed", "ir5_table", "ir5_unreadable", "isotonic_fit",
           "log_slope", "plateau", "s_poly"]

IR5_TABLE = "IR-5 sample complexity"  # the summary table :func:`ir5_table` fills
# the ``sample_complexity`` settings the rule checks a stored run's grid against (``grid``)
IR5_GRID_KEYS = ("n", "Ns", "runs", "plateau_runs", "learned_runs")

# the derived metrics the spec decides on (per seed) and the pooled one
IR5_PER_SEED = ("slope_minus_s_poly", "memory_reached_at_n_max", "learned_slope",
                "learned_uncensored_n", "zero_data_reaches", "min_gain")
IR5_POOLED = ("mean_slope_hi95_minus_s_poly",)
# the conditions that cannot be read when the memory arm cannot be read at an n of a seed
_WHOLE_GRID = ("slope_minus_s_poly", "memory_reached_at_n_max")


def isotonic_fit(y: list[float], w: list[float] | None = None) -> list[float]:
    """The non-decreasing weighted least-squares fit of ``y`` (in order; pool adjacent
    violators)."""
    w = [1.0] * len(y) if w is None else w
    blocks: list[list[float]] = []  # [weighted sum, weight, points]
    for v, wt in zip(y, w):
        blocks.append([float(v) * wt, float(wt), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s_, w_, k_ = blocks.pop()
            blocks[-1][0] += s_
            blocks[-1][1] += w_
            blocks[-1][2] += k_
    return [b[0] / b[1] for b in blocks for _ in range(int(b[2]))]


def _acc_grid(acc: Any) -> list[tuple[float, list[float]]]:
    """The stored {N: [accuracies]} as [(N, accuracies)] sorted by N; a run whose accuracy is
    not a number makes its N unusable (the caller reads that as not measurable)."""
    out = []
    for N, runs in (acc or {}).items():
        vals = [_num(v) for v in (runs or [])]
        out.append((float(N), [math.nan if v is None else v for v in vals]))
    return sorted(out)


def crossing(acc: Mapping[Any, list[float]], target: float) -> float | None:
    """N(n) for one arm: where the isotonic fit of the mean accuracy against log N (each N
    weighted by its run count) first reaches ``target``, log-interpolated between the grid
    points around it; the smallest N when the fit is already there; None (right-censored) when
    it never gets there. NaN when a run's accuracy is not a number or an N has no run."""
    grid = _acc_grid(acc)
    if not grid or any(not r or any(math.isnan(v) for v in r) for _, r in grid):
        return math.nan
    Ns = [N for N, _ in grid]
    fit = isotonic_fit([float(np.mean(r)) for _, r in grid], [len(r) for _, r in grid])
    for i, f in enumerate(fit):
        if f >= target:
            if i == 0:
                return Ns[0]
            f0, f1 = fit[i - 1], f
            frac = (target - f0) / (f1 - f0)
            return float(math.exp(math.log(Ns[i - 1]) + frac * (math.log(Ns[i]) -
                                                                 math.log(Ns[i - 1]))))
    return None


def plateau(acc: Mapping[Any, list[float]]) -> tuple[float, float]:
    """(P, spread): the mean accuracy at the two largest N of the grid and the difference of
    their means (NaN with fewer than two N)."""
    grid = _acc_grid(acc)
    if len(grid) < 2 or any(not r for _, r in grid[-2:]):
        return math.nan, math.nan
    a, b = (float(np.mean(r)) for _, r in grid[-2:])
    return (a + b) / 2.0, abs(b - a)


def s_poly(n_min: float, n_max: float) -> float:
    """The slope of log((log n)^2) against log n between ``n_min`` and ``n_max``: the steepest
    least-squares slope of log N on log n a polylog (log n)^2 growth can show over the range."""
    return math.log((math.log(n_max) / math.log(n_min)) ** 2) / math.log(n_max / n_min)


def log_slope(ns: list[float], Ns: list[float]) -> float:
    """The least-squares slope of log N against log n (NaN with fewer than two points)."""
    if len(ns) < 2:
        return math.nan
    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(Ns, float))
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def best_case_slope(ns: list[float], Ns: list[float], free: list[bool], lo: float, hi: float
                    ) -> float:
    """The smallest least-squares slope of log N on log n when the N at the ``free`` positions
    may be anything in [``lo``, ``hi``] (the others as given): the slope is linear in each
    log N with weight log n minus its mean, so each free N sits at ``lo`` where that weight
    is positive and at ``hi`` where it is negative. NaN with fewer than two n or a given N
    that is not a positive number."""
    if len(ns) < 2 or not 0 < lo <= hi:
        return math.nan
    x = np.log(np.asarray(ns, float))
    x = x - x.mean()
    y = []
    for xi, N, f in zip(x, Ns, free):
        if f:
            y.append(math.log(lo if xi > 0 else hi))
        elif N is None or not N > 0:
            return math.nan
        else:
            y.append(math.log(N))
    return float((x * np.asarray(y)).sum() / (x * x).sum())


def _grid_gaps(r: Mapping[str, Any], grid: Mapping[str, Any] | None) -> tuple[str, str]:
    """(why the memory arm, why the learned arm) of one stored n falls short of the registered
    ``grid`` ("" when it does not, or without a grid)."""
    if not grid:
        return "", ""
    mem = (r.get("memory") or {}).get("acc") or {}
    lrn = (r.get("learned") or {}).get("acc") or {}
    Ns = sorted(float(N) for N in grid["Ns"])
    have = {float(N): len(v or []) for N, v in mem.items()}
    missing = [f"{N:g}" for N in Ns if N not in have]
    if missing:
        return f"memory arm lacks the registered N = {', '.join(missing)}", ""
    need = {N: grid["plateau_runs"] if N in Ns[-2:] else grid["runs"] for N in Ns}
    short = [f"{have[N]} of {need[N]} runs at N = {N:g}" for N in Ns if have[N] < need[N]]
    few = [f"{len(v or [])} of {grid['learned_runs']} runs at N = {float(N):g}"
           for N, v in lrn.items() if len(v or []) < grid["learned_runs"]]
    return (("memory arm: " + "; ".join(short)) if short else "",
            ("learned arm: " + "; ".join(few)) if few else "")


def _g(v: float | None) -> str:
    return "none" if v is None else f"{v:.4g}"


def _arm_N(arm: Any, P: float, q: float) -> tuple[float, float | None]:
    """(tau, N) of one arm at one n for the fraction ``q`` of the gain."""
    z = _num((arm or {}).get("z"))
    if z is None or math.isnan(P):
        return math.nan, math.nan
    tau = z + q * (P - z)
    return tau, crossing((arm or {}).get("acc") or {}, tau)


def ir5_seed(m: Any, q: float, *, flat: float, min_frac: float, retrieval_min: float,
             slope_bar: float | None = None, grid: Mapping[str, Any] | None = None
             ) -> dict[str, Any]:
    """One seed's IR-5 quantities at gain fraction ``q`` from its stored ``ir5_by_n``: per n
    the plateau, whether it is valid (why not: retrieval below ``retrieval_min``, a plateau
    whose two means differ by more than ``flat`` or below ``min_frac`` x the ceiling, a run
    without a number, fewer N or runs than the registered ``grid``), both arms' targets and
    N; then the memory arm's slope (censored N = its grid's largest; where an n cannot be
    read, its best case, which decides only when it already fails ``slope_bar``), the learned
    arm's slope over its uncensored n, and the controls' numbers. ``unmeasurable`` maps an n
    to why the memory arm cannot be read there; ``blank`` maps each whole-grid metric that
    cannot be read on this seed to why; ``learned_unmeasurable`` an n to why the learned arm
    cannot (its controls are then not measured; the memory arm's conditions are still read)."""
    by_n = (m.get("ir5_by_n") if isinstance(m, Mapping) else None) or {}
    keys = ({str(int(n)) for n in grid["n"]} if grid else set(by_n))
    rows, why, why_l = {}, {}, {}
    for key in sorted(keys, key=float):
        r = by_n.get(key) if isinstance(by_n.get(key), Mapping) else {}
        mem, lrn = r.get("memory") or {}, r.get("learned") or {}
        P, spread = plateau(mem.get("acc") or {})
        C, retr = _num(r.get("ceiling")), _num(r.get("retrieval"))
        tau_m, N_m = _arm_N(mem, P, q)
        tau_l, N_l = _arm_N(lrn, P, q)
        rows[key] = {"P": P, "plateau_spread": spread, "ceiling": C, "tau_memory": tau_m,
                     "N_memory": N_m, "tau_learned": tau_l, "N_learned": N_l,
                     "z_memory": _num(mem.get("z")), "z_learned": _num(lrn.get("z")),
                     "memory_top_N": max((float(N) for N in mem.get("acc") or {}),
                                         default=math.nan)}
        short_m, short_l = _grid_gaps(r, grid) if mem.get("acc") else ("", "")
        if not mem.get("acc"):
            why[key] = "the memory arm not measured (or stored twice)"
        elif short_m:
            why[key] = short_m
        elif retr is None or retr < retrieval_min:
            why[key] = f"retrieval {_g(retr)} < {retrieval_min:g}"
        elif math.isnan(P) or not spread <= flat + 1e-12:
            why[key] = f"memory plateau not flat (two largest N differ by {spread:.3g} > {flat:g})"
        elif C is None or P < min_frac * C:
            why[key] = f"memory plateau {P:.3g} < {min_frac:g} x ceiling {_g(C)}"
        elif isinstance(N_m, float) and math.isnan(N_m):
            why[key] = "a memory-arm run without a number"
        # the learned arm's own gaps: they leave its controls unmeasured, never the memory
        # arm's conditions (a failing memory arm still decides)
        if not lrn.get("acc"):
            why_l[key] = "the learned arm not measured (or stored twice)"
        elif short_l:
            why_l[key] = short_l
        elif isinstance(N_l, float) and math.isnan(N_l):
            why_l[key] = "a learned-arm run without a number"
    out: dict[str, Any] = {"by_n": rows, "unmeasurable": why, "learned_unmeasurable": why_l}
    if not rows:
        return {**out, "unmeasurable": {"*": "no IR-5 rows stored"},
                "blank": dict.fromkeys(_WHOLE_GRID, "no IR-5 rows stored")}
    return {**out, **_whole_grid(rows, why, why_l, slope_bar)}


def _whole_grid(rows: dict[str, dict], why: dict[str, str], why_l: dict[str, str],
                slope_bar: float | None) -> dict[str, Any]:
    """:func:`ir5_seed`'s metrics over the whole n grid from its per-n ``rows`` and the n the
    memory (``why``) and learned (``why_l``) arms cannot be read at."""
    out: dict[str, Any] = {}
    ns = [float(k) for k in rows]
    n_lo, n_hi = min(ns), max(ns)
    out["s_poly"] = s_poly(n_lo, n_hi) if n_hi > n_lo else math.nan
    mem_N = [rows[k]["N_memory"] if rows[k]["N_memory"] is not None else rows[k]["memory_top_N"]
             for k in rows]
    grid_N = [float(r["memory_top_N"]) for r in rows.values() if r["memory_top_N"] > 0]
    # the range an unreadable n's N could take: from 1 sequence to the largest N stored at any
    # n (both at least as wide as the crossing's own range there: the bound is conservative)
    lo_N = 1.0
    out["slope"] = math.nan if why else log_slope(ns, mem_N)
    out["slope_best_case"] = (best_case_slope(ns, mem_N, [k in why for k in rows], lo_N,
                                              max(grid_N, default=math.nan))
                              if why else out["slope"])
    out["slope_minus_s_poly"] = out["slope"] - out["s_poly"]
    blank = {}
    reason = "; ".join(f"n = {n}: {w}" for n, w in why.items())
    bound = out["slope_best_case"] - out["s_poly"]
    if why and slope_bar is not None and bound > slope_bar:  # fails whatever those n hold
        out["slope_minus_s_poly"] = bound
    elif why:
        blank["slope_minus_s_poly"] = reason
    top_key = max(rows, key=float)
    out["memory_reached_at_n_max"] = (math.nan if top_key in why else
                                      float(rows[top_key]["N_memory"] is not None))
    if top_key in why:
        blank["memory_reached_at_n_max"] = f"n = {top_key}: {why[top_key]}"
    out["blank"] = blank
    ok_l = [(float(k), rows[k]["N_learned"]) for k in rows
            if k not in why and rows[k]["N_learned"] is not None]
    gap = why or why_l  # the learned arm's target needs the memory arm's plateau
    out["learned_uncensored_n"] = math.nan if gap else float(len(ok_l))
    out["learned_slope"] = (math.nan if gap else
                            log_slope([a for a, _ in ok_l], [b for _, b in ok_l]))
    reach = [float(rows[k]["z_memory"] >= rows[k]["tau_memory"]) for k in rows
             if k not in why]
    out["zero_data_reaches"] = max(reach) if reach and not why else math.nan
    gains = [rows[k]["P"] - rows[k]["z_memory"] for k in rows if k not in why]
    out["min_gain"] = min(gains) if gains and not why else math.nan
    return out


def ir5_derive(claim_id: str, per_seed: Mapping[str, Any], q: float, conventions,
               **rule: Any) -> tuple[dict, dict]:
    """IR-5's per-seed metrics (:data:`IR5_PER_SEED`, plus the slopes at the convention
    fractions, reported) and the pooled ``mean_slope_hi95_minus_s_poly``: the upper end of
    the 95% Student-t interval of the seed-mean memory slope minus s_poly (NaN unless every
    seed's slope can be read). ``rule``: :func:`ir5_seed`'s keyword arguments."""
    per, slopes, sp = {}, [], math.nan
    for s, m in per_seed.items():
        r = ir5_seed(m, q, **rule)
        d = {k: r.get(k, math.nan) for k in IR5_PER_SEED}
        d.update(ir5_slope=r.get("slope", math.nan), ir5_s_poly=r.get("s_poly", math.nan),
                 ir5_slope_best_case=r.get("slope_best_case", math.nan))
        for c in conventions:
            rc = ir5_seed(m, float(c), **rule)
            d[f"slope_q{c:g}"] = rc.get("slope", math.nan)
            d[f"learned_slope_q{c:g}"] = rc.get("learned_slope", math.nan)
        per[str(s)] = d
        slopes.append(d["ir5_slope"])
        sp = r.get("s_poly", sp)
    ok = slopes and all(not math.isnan(v) for v in slopes)
    return per, {"mean_slope_hi95_minus_s_poly":
                 interval(slopes)[1] - sp if ok else math.nan}


def ir5_unreadable(claim_id: str, per_seed: Mapping[str, Any], q: float, **rule: Any
                   ) -> dict[str, dict[str, str]]:
    """The seeds whose whole-grid metrics cannot be read (:func:`ir5_seed`'s ``blank``: an n
    not measurable, with the n and the reason; a slope whose best case already fails is
    read), and the pooled slope bound when some seed's slope cannot be read."""
    out: dict[str, dict[str, str]] = {}
    for s, m in per_seed.items():
        for metric, why in ir5_seed(m, q, **rule)["blank"].items():
            out.setdefault(metric, {})[str(s)] = why
    if "slope_minus_s_poly" in out:
        out["mean_slope_hi95_minus_s_poly"] = {
            "*": "seed(s) " + ", ".join(out["slope_minus_s_poly"]) + " not measurable at some n"}
    return out


def ir5_table(per_seed: Mapping[str, Any], q: float, conventions, **rule: Any
              ) -> dict[str, Any]:
    """The IR-5 table's entries: per seed and n the plateau, both arms' zero-data accuracy,
    target and N at ``q`` (None = right-censored) and at each convention fraction, and why an
    n is not measurable (memory arm, learned arm). ``rule``: :func:`ir5_seed`'s keywords."""
    rows = []
    for seed, m in per_seed.items():
        by_q = {float(c): ir5_seed(m, float(c), **rule) for c in (q, *conventions)}
        main = by_q[float(q)]
        for n, r in main["by_n"].items():
            rows.append({"seed": str(seed), "n": int(float(n)), **{
                k: r[k] for k in ("P", "plateau_spread", "ceiling", "z_memory", "z_learned",
                                  "tau_memory", "tau_learned", "N_memory", "N_learned")},
                "N_by_q": {f"{c:g}": {"memory": by_q[c]["by_n"][n]["N_memory"],
                                      "learned": by_q[c]["by_n"][n]["N_learned"]}
                           for c in by_q},
                "unmeasurable": main["unmeasurable"].get(n),
                "learned_unmeasurable": main["learned_unmeasurable"].get(n)})
    return {"rows": rows, "q": float(q), "conventions": [float(c) for c in conventions]}
