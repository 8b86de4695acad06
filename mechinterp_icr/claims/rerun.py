"""Verdicts that survive the machine (SPEC 0, "robust to the machine"): a published
reproduction carries a rerun of the same code and seeds under a second float rounding
(``icr reproduce ... --rounding avx2``), and every claim says what the rerun decided.

- :func:`attach_rerun` writes, on every claim of the decision run, ``rerun`` (the rerun's
  verdict, headline and the deciding number in both runs) and ``fragile`` (True where the two
  verdicts differ); on the summary, ``rerun`` (where the rerun's summary is, its rounding and
  code state). Both runs are decided under the same specs first (``icr redecide`` redecides the
  rerun it finds beside the summary, so a rule change judges both).
- :func:`shown_verdict` is how a verdict is printed: a fragile one is never shown as settled.
- :func:`machine_noise` measures, per claim and per condition or control, how far the number a
  seed rule compares (:func:`decision_statistic`) moves between the two roundings, per seed
  and for the statistic itself, against its margin to the threshold; ``icr compare A B
  --noise`` prints it, and ``docs/reproduce.md`` records it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from mechinterp_icr.claims.headline import claim_headline, deciding_entry
from mechinterp_icr.claims.protocol import as_number, bound_mean
from mechinterp_icr.claims.registry import metric_range
from mechinterp_icr.config import ConfigError

__all__ = ["RERUN_DIR", "NoiseRow", "attach_rerun", "decision_statistic", "machine_noise",
           "pairing_problem", "rerun_cell", "rerun_summary_path", "shown_verdict"]

RERUN_DIR = "rerun"  # a published folder keeps its rerun's summary in rerun/summary.json


def decision_statistic(entry: Mapping[str, Any]) -> float | None:
    """The one number a stored condition's (or control's) seed rule compares with its
    threshold: the pooled value (``pooled``), the mean (``mean``; a mean not met with unread
    seeds, the mean with those at the declared range's favourable end, which decided it), the
    worst seed under ``every_seed`` (for a negative control, which misbehaves when *any* seed
    meets it, the seed furthest on the meeting side) and under ``fraction`` the seed value the
    fraction turns on (with 5 seeds and 80%, the 4th best; the fraction is of every seed,
    readable or not, and a rule not met is not met even with every unread seed passing, so it
    turns on the seed that many places higher). None when it cannot be read."""
    if entry.get("met", True) is None or entry.get("meets_rule", True) is None:
        return None  # the rule could not be read: no number decided it
    rule = str(entry.get("rule") or "every_seed")
    if rule == "pooled":
        return as_number(entry.get("pooled_value", entry.get("value")))
    per_seed = entry.get("per_seed") if isinstance(entry.get("per_seed"), Mapping) else {}
    bad = entry.get("unreadable") if isinstance(entry.get("unreadable"), Mapping) else {}
    vals = [as_number(v) for s, v in per_seed.items() if str(s) not in bad]
    if not vals or any(v is None for v in vals):
        return None
    unread = len(per_seed) - len(vals)
    not_met = entry.get("met", entry.get("meets_rule")) is False
    if rule == "mean":  # not met with unread seeds: decided with them at their best
        bound = bound_mean(vals, unread, str(entry.get("op")),
                           metric_range(str(entry.get("metric")))) if unread and not_met else None
        return sum(vals) / len(vals) if bound is None else bound
    high_good = entry.get("op") in (">=", ">")
    if entry.get("kind") == "negative" and rule != "fraction":
        high_good = not high_good  # the best seed decides "any seed meets it"
    ordered = sorted(vals, reverse=high_good)  # best first
    if rule == "fraction":  # the fraction is of every seed, readable or not (evaluate_condition)
        frac = as_number(entry.get("min_fraction"))
        need = math.ceil((1.0 if frac is None else min(max(frac, 0.0), 1.0)) * len(per_seed)
                         - 1e-9)
        if not_met:
            need -= unread  # not met even with every unread seed passing
        return ordered[max(need, 1) - 1] if need <= len(ordered) else None
    return ordered[-1]


def _margin(entry: Mapping[str, Any], stat: float | None) -> float | None:
    thr = as_number(entry.get("threshold"))
    return None if stat is None or thr is None else abs(stat - thr)


def _entries(claim: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A claim's stored conditions and controls by a key naming them."""
    out = {}
    for e in claim.get("conditions") or []:
        if isinstance(e, Mapping):
            out[f"condition {e.get('metric')}"] = e
    for e in claim.get("controls") or []:
        if isinstance(e, Mapping):
            out[f"control {e.get('name')}"] = e
    return out


def _deciding(claim_id: str, claim: Mapping[str, Any]) -> str | None:
    """The key (:func:`_entries`) of the stored condition or control that decided the
    claim's verdict (:func:`.headline.deciding_entry`; None for a reason)."""
    h = claim_headline(claim_id, claim)
    if deciding_entry(claim, h) is None:
        return None
    return f"control {h.control}" if h.control is not None else f"condition {h.metric}"


def rerun_summary_path(path: Path, stored: Mapping[str, Any]) -> Path | None:
    """The rerun summary the summary at ``path`` names (``rerun.summary``, relative to its
    folder), or None when it names none. A path outside the folder, or a named rerun that is
    missing, is a ``ConfigError``: the verdicts' robustness would silently disappear."""
    rec = stored.get("rerun")
    if not isinstance(rec, Mapping) or not rec.get("summary"):
        return None
    where = Path(str(rec["summary"]))
    if where.is_absolute() or ".." in where.parts:
        raise ConfigError(f"{path}: rerun.summary {str(where)!r} must be a path inside "
                          f"{path.parent}")
    full = path.parent / where
    if not full.is_file():
        raise ConfigError(f"{path}: its rounding rerun {full} is missing; restore it, or attach "
                          "a new one with `icr redecide OUT --rerun RERUN_OUT`")
    return full


def pairing_problem(main: Mapping[str, Any], rerun: Mapping[str, Any]) -> str | None:
    """Why ``rerun`` is not a rounding rerun of ``main`` (None when it is): another profile or
    seed set, or the same rounding (or none stamped) as the decision run: such a pair could
    never show a fragile verdict."""
    for key in ("profile", "seeds"):
        if rerun.get(key) != main.get(key):
            return (f"the rerun's {key} {rerun.get(key)!r} is not the decision run's "
                    f"{main.get(key)!r}: not a rerun of it")
    r, m = rerun.get("rounding"), main.get("rounding")
    if not r:
        return ("the rerun names no rounding (summary.json 'rounding'): run it with "
                "`icr reproduce ... --rounding NAME`")
    if r == m:
        return (f"the rerun ran under the decision run's own rounding {r!r}: it cannot show "
                "what another rounding does")
    return None


def attach_rerun(main: Mapping[str, Any], rerun: Mapping[str, Any], where: str
                 ) -> dict[str, Any]:
    """``main`` with, on every claim, ``rerun`` and ``fragile`` from the rerun summary
    ``rerun`` (both already decided under the same specs), and the summary-level ``rerun``
    record naming ``where`` (the rerun summary's path relative to ``main``'s folder). A claim
    the rerun lacks gets ``rerun.verdict`` None and ``fragile`` True: not checked is not
    settled."""
    claims = {}
    other = rerun.get("claims") or {}
    for cid, c in (main.get("claims") or {}).items():
        if not isinstance(c, Mapping):
            claims[cid] = c
            continue
        r = other.get(cid)
        key = _deciding(str(cid), c)
        entry = _entries(c)[key] if key else None
        if not isinstance(r, Mapping):
            rec = {"verdict": None, "headline": "not in the rerun", "deciding": None}
            fragile = True
        else:
            r_entry = _entries(r).get(key) if key else None
            rec = {"verdict": r.get("verdict"), "headline": claim_headline(str(cid), r).text,
                   "deciding": None if entry is None else {
                       "what": key, "value": decision_statistic(entry),
                       "rerun_value": None if r_entry is None else decision_statistic(r_entry)}}
            fragile = r.get("verdict") != c.get("verdict")
        claims[cid] = {**c, "rerun": {**rec, "rounding": rerun.get("rounding")},
                       "fragile": fragile}
    record = {"summary": where, "rounding": rerun.get("rounding"),
              "code_state": rerun.get("code_state") or rerun.get("git_revision"),
              "seeds": rerun.get("seeds"), "profile": rerun.get("profile"),
              "fragile": sorted(str(c) for c, v in claims.items()
                                if isinstance(v, Mapping) and v.get("fragile"))}
    return {**main, "claims": claims, "rerun": record}


def rerun_cell(claim: Mapping[str, Any]) -> str:
    """A claim's verdict in the rounding rerun with the number that decided the decision
    run's verdict as the rerun measured it (its seed rule's statistic), for the README table
    and the report."""
    r = claim.get("rerun") if isinstance(claim.get("rerun"), Mapping) else {}
    d = r.get("deciding") if isinstance(r.get("deciding"), Mapping) else {}
    v = as_number(d.get("rerun_value"))
    return f"{r.get('verdict') or 'not decided'}" + ("" if v is None else f" ({v:.4g})")


def shown_verdict(claim: Mapping[str, Any]) -> str:
    """A claim's verdict as the README table and the report print it: a fragile verdict
    (the rerun under another rounding decided otherwise) is marked, never shown as settled."""
    v = str(claim.get("verdict") or ("holds" if claim.get("holds") else "does not hold"))
    if not claim.get("fragile"):
        return v
    rec = claim.get("rerun") if isinstance(claim.get("rerun"), Mapping) else {}
    other, rounding = rec.get("verdict"), rec.get("rounding")
    under = f" under {rounding} rounding" if rounding else " in the rerun"
    return f"{v}, fragile ({other or 'not decided'}{under})"


@dataclass(frozen=True)
class NoiseRow:
    """How one condition or control of one claim moves between two roundings: the number its
    seed rule compares in each run (``stat_a``, ``stat_b``), their difference (``stat_noise``),
    the largest per-seed difference (``seed_noise``), the margin of ``stat_a`` to the threshold,
    and whether the noise is more than half that margin (``tight``)."""

    claim: str
    what: str
    rule: str
    threshold: float | None
    stat_a: float | None
    stat_b: float | None
    stat_noise: float | None
    seed_noise: float | None
    margin: float | None

    @property
    def noise(self) -> float | None:
        """The noise a rule must be wider than: per seed for a rule on a tail of the seeds
        (every seed, a fraction), of the statistic itself for a mean or a pooled number."""
        tail = self.rule in ("every_seed", "fraction")
        return self.seed_noise if tail and self.seed_noise is not None else self.stat_noise

    @property
    def tight(self) -> bool:
        n, m = self.noise, self.margin
        return n is not None and m is not None and n > m / 2


def machine_noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[NoiseRow]:
    """One :class:`NoiseRow` per condition and control of every claim in both summaries
    (run ``a`` is the decision run: margins are read there)."""
    rows = []
    for cid, ca in (a.get("claims") or {}).items():
        cb = (b.get("claims") or {}).get(cid)
        if not isinstance(ca, Mapping) or not isinstance(cb, Mapping):
            continue
        eb = _entries(cb)
        for key, ea in _entries(ca).items():
            e2 = eb.get(key)
            if e2 is None:
                continue
            sa, sb = decision_statistic(ea), decision_statistic(e2)
            pa, pb = ea.get("per_seed") or {}, e2.get("per_seed") or {}
            seed_d = [abs(x - y) for s in pa if (x := as_number(pa[s])) is not None
                      and (y := as_number(pb.get(s))) is not None]
            rows.append(NoiseRow(
                str(cid), key, str(ea.get("rule") or "every_seed"),
                as_number(ea.get("threshold")), sa, sb,
                None if sa is None or sb is None else abs(sa - sb),
                max(seed_d) if seed_d else None, _margin(ea, sa)))
    return rows
