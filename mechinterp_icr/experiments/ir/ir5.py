"""IR-5: sample complexity on random embeddings, measured (the rule is
:mod:`mechinterp_icr.claims.ir5_rule`, a pure function of what this module stores).

The paper's statement is an upper bound (N grows at most polylogarithmically in n; a flat N
satisfies it), so it is decided against a measurement shown able to see growth:

- **memory arm** (the claim): the constructed memory over random unit embeddings of the
  registered width ``sample_complexity.d[i]`` at ``sample_complexity.n[i]`` (chosen from
  retrieval alone, :mod:`.ir5_dn`); per N of ``sample_complexity.Ns``,
  ``sample_complexity.runs`` PGD runs of the position block (``plateau_runs`` at the two
  largest N), each on its own training draw with the whole budget of
  ``sample_complexity.steps`` small steps (no early stop), scored by its expected step-1
  accuracy on held-out sequences used for nothing else. Its zero-data accuracy is the
  perturbation alone.
- **learned arm** (positive control: the measurement can see linear growth): the same n, d,
  data and budgets on a memory that must learn its facts during finetuning. It starts empty
  (no unit, no fact: its zero-data accuracy is the model's own with no unit) and the
  finetuning sequences write one unit per triple they show, ``(s_i, r*, a_i)`` of the context
  pairs and ``(s_q, r*, a_q)`` of the query (the outer-product write one gradient step makes
  on an associative memory from zero, made exact: a triple seen once is stored as the
  constructed memory stores it, an unseen one is absent). It is the most sample-efficient
  memory that learns from the data, so its N must grow about linearly with the n R facts.
  Its grid is the powers of two up to ``learned_N_max``, ended at the first N where every
  run reaches z + q x (1 - z), at or above the rule's target whatever the plateau. Its
  position block trains on the first ``learned_fit_max`` of the N sequences (the memory
  writes all of them): the memory arm shows the position block needs far fewer (its plateau
  by N = 128), and a larger PGD batch only costs time (``analyses/ir5_fit_cap.py`` measures
  the difference).

Per seed (:func:`sample_complexity_per_seed`) the rows are stored as ``ir5_by_n``, the input
of the rule.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from mechinterp_icr.claims.ir5_rule import IR5_GRID_KEYS, ir5_table
from mechinterp_icr.experiments.ir.config import (
    IRConfig,
    main_pgd,
    model_spec,
    sweep_width,
    task_config,
)
from mechinterp_icr.experiments.ir.ir5_dn import retrieval_at
from mechinterp_icr.experiments.ir.train import CEILING_GRID_EXPECTED, ceiling, tagged_rng
from mechinterp_icr.models.ir import FastIR, token_embeddings
from mechinterp_icr.tasks.base import Batch
from mechinterp_icr.tasks.ir import SUBJ
from mechinterp_icr.training.pgd import PGDConfig, perturbation, pgd_fast

__all__ = [
    "ARMS",
    "learned_grid",
    "learned_memory",
    "learned_runs",
    "rule_kwargs",
    "sample_complexity_per_seed",
    "sample_complexity_row",
    "sample_complexity_table",
    "seen_triples",
    "Step1IR",
    "step1_expected",
    "step1_logits",
]

ARMS = ("memory", "learned")


def step1_logits(fast: FastIR, tokens: torch.Tensor) -> torch.Tensor:
    """The step-1 logits of the relation tokens (B, R) of a random-embedding FastIR with the
    constructed memory or a subset of its units: the relation block of
    :meth:`FastIR.cot_blocks`, exactly (a test pins it), from the units that can fire
    (:meth:`FastIR.relation_block`)."""
    sp, task = fast.spec, fast.task
    q1 = task.step1_pos
    A = fast.attention([q1])
    copy = torch.einsum("pt,btd->bpd", A, fast.E[tokens])[:, 0]
    gate = sp.gate * (fast.ttype[tokens[:, q1]] != SUBJ).to(A.dtype)
    return fast.relation_block(copy, gate) * (sp.lam2 / task.cfg.temperature)


def step1_expected(fast: FastIR, batch) -> float:
    """Expected step-1 accuracy (P(r*) at the decoding temperature) from
    :func:`step1_logits` (every other step-1 logit is exactly 0)."""
    b1 = step1_logits(fast, batch.tokens)
    n, R = fast.task.cfg.n_subjects, fast.task.cfg.n_relations
    logits = torch.zeros(len(batch), fast.V, dtype=b1.dtype)
    logits[:, n: n + R] = b1
    t1 = batch.targets[:, fast.task.step1_pos]
    return float(torch.softmax(logits, -1).gather(-1, t1[:, None]).mean())


class Step1IR(FastIR):
    """The IR-5 sweep's model: :class:`FastIR` whose CoT blocks are the exact step-1 block
    (:func:`step1_logits`) and a constant step-2 block. IR-5 reads step 1 only, and nothing
    the step-2 loss trains reaches the step-1 logits (the step-2 attention row is another row
    of B, the answer units are gated off at s_q), so PGD gives the step-1 row, logits and
    expected accuracy of the full loss at every step (a test pins it) at about half the cost;
    the step-2 row only keeps its perturbation."""

    def cot_blocks(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b1 = step1_logits(self, tokens)
        return b1, torch.zeros(tokens.shape[0], self.task.cfg.m, dtype=b1.dtype)


def seen_triples(task, batch) -> torch.Tensor:
    """Sorted indices into ``task.triples`` (row ``s R + r``) of the triples the sequences of
    ``batch`` show: ``(s_i, r*)`` for every subject of the context and the query."""
    K, n, R = task.cfg.n_pairs, task.cfg.n_subjects, task.cfg.n_relations
    subj = batch.tokens[:, 0: 2 * K + 1: 2]  # (B, K+1) subject ids
    rel = batch.tokens[:, 2 * K + 1] - n  # (B,) r*
    return torch.unique((subj * R + rel[:, None]).reshape(-1))


def learned_memory(fast: FastIR, batch) -> int:
    """Make ``fast`` (constructed memory, random embeddings) the learned arm's memory after
    the finetuning data ``batch``: only the units of :func:`seen_triples` remain. Returns how
    many units it holds."""
    idx = seen_triples(fast.task, batch)
    fast.s_tok, fast.r_tok, fast.a_tok = fast.s_tok[idx], fast.r_tok[idx], fast.a_tok[idx]
    return len(idx)


def learned_grid(cfg: IRConfig) -> list[int]:
    """The learned arm's N grid: the powers of two from 1 to ``learned_N_max``."""
    top = cfg.sample_complexity.learned_N_max
    return [2 ** k for k in range(int(math.log2(top)) + 1)]


def _head(batch: Batch, k: int) -> Batch:
    """The first ``k`` sequences of ``batch`` (all when it has fewer)."""
    if len(batch) <= k:
        return batch
    meta = {key: (v[:k] if hasattr(v, "shape") and len(v) == len(batch) else v)
            for key, v in batch.meta.items()}
    return Batch(batch.tokens[:k], batch.targets[:k], meta)


def _run(fast: FastIR, train: Batch, ev: Batch, pgd: PGDConfig, seed: int) -> float:
    """One PGD run of the position block from zero for the whole budget (no early stop):
    its final expected step-1 accuracy on ``ev``."""
    with torch.no_grad():
        fast.B.zero_()
    pgd_fast(fast, train, pgd, seed, record_rows=False)
    with torch.no_grad():
        return step1_expected(fast, ev)


def _empty(fast: FastIR) -> FastIR:
    """``fast`` with no memory unit (the learned arm before any sequence)."""
    none = torch.zeros(0, dtype=torch.long)
    fast.s_tok, fast.r_tok, fast.a_tok = fast.s_tok[none], fast.r_tok[none], fast.a_tok[none]
    return fast


def _pgd(cfg: IRConfig) -> PGDConfig:
    """The registered PGD of an IR-5 run: the main run's large step and perturbation, then
    ``sample_complexity.steps`` small steps."""
    return dataclasses.replace(main_pgd(cfg), steps=cfg.sample_complexity.steps)


def _setting(cfg: IRConfig, seed: int, n: int):
    """(d, model spec, task, embeddings, held-out evaluation sequences) of IR-5 at n."""
    d = sweep_width(cfg, n)
    rspec = model_spec(cfg, embedding="random", d_embed=d)
    tk = task_config(cfg, n).build(seed)
    E = token_embeddings(tk, rspec, seed)
    return d, rspec, tk, E, tk.sample(tagged_rng(seed, "sweep-eval", n), cfg.sample_complexity.eval)


def learned_runs(cfg: IRConfig, seed: int, n: int, N: int, setting=None
                 ) -> tuple[list[float], list[int]]:
    """The learned arm at one (n, N): ``sample_complexity.learned_runs`` runs, each a memory
    written from its N training sequences and a PGD run of the position block on the first
    ``sample_complexity.learned_fit_max`` of them; (final expected accuracies, units held).
    ``setting``: :func:`_setting`'s result when the caller has it."""
    sc = cfg.sample_complexity
    _, rspec, tk, E, ev = setting or _setting(cfg, seed, n)
    pgd = _pgd(cfg)
    accs, units = [], []
    for r in range(sc.learned_runs):
        train = tk.sample(tagged_rng(seed, "sweep-train", n, N, r), N)
        fast = Step1IR(tk, rspec, seed=seed, E=E)
        units.append(learned_memory(fast, train))
        accs.append(_run(fast, _head(train, sc.learned_fit_max), ev, pgd, seed * 1000 + r))
    return accs, units


def sample_complexity_row(cfg: IRConfig, seed: int, n: int, arm: str = "memory"
                          ) -> dict[str, Any]:
    """IR-5 at one n of ``sample_complexity.n`` for one arm (:data:`ARMS`): width
    ``d = sample_complexity.d[i]``, the ideal-row expected-accuracy ceiling C at (n, d) (on
    its own sample), the arm's zero-data accuracy ``z`` (the perturbation alone; the learned
    arm with no unit) and every run's final expected step-1 accuracy by N (``acc``) on the
    held-out sequences. The memory arm also measures retrieval (:func:`..ir5_dn.retrieval_at`).
    Training draws are shared by the arms (same seed, n, N and run index)."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r} not in {ARMS}")
    sc = cfg.sample_complexity
    d, rspec, tk, E, ev = _setting(cfg, seed, n)
    ceil = ceiling(tk, rspec, tk.sample(tagged_rng(seed, "sweep-ceiling", n), sc.eval), seed,
                   E=E, key="step1_prob", grid=CEILING_GRID_EXPECTED)["step1_prob"]
    out: dict[str, Any] = {"seed": seed, "n": n, "d_embed": d, "arm": arm, "ceiling": ceil}
    fast = Step1IR(tk, rspec, seed=seed, E=E)
    if arm == "learned":
        _empty(fast)
    else:
        out.update(retrieval_at(cfg, n, d, seed))
    with torch.no_grad():
        fast.B.copy_(perturbation(fast.T, cfg.sigma, seed))
        out["z"] = step1_expected(fast, ev)
    pgd = _pgd(cfg)
    acc: dict[str, list[float]] = {}
    if arm == "memory":
        top2 = sorted(sc.Ns)[-2:]
        for N in sc.Ns:
            acc[str(N)] = [_run(fast, tk.sample(tagged_rng(seed, "sweep-train", n, N, r), N),
                                ev, pgd, seed * 1000 + r)
                           for r in range(sc.plateau_runs if N in top2 else sc.runs)]
    else:
        # every run at z + q (1 - z): at or above the rule's target z + q (P - z) whatever
        # the memory arm's plateau P (an accuracy is at most 1), so ending the grid there never
        # censors N; it reads no plateau and no ceiling
        stop = out["z"] + sc.q * (1.0 - out["z"])
        units: dict[str, list[int]] = {}
        for N in learned_grid(cfg):
            accs, us = learned_runs(cfg, seed, n, N, (d, rspec, tk, E, ev))
            acc[str(N)], units[str(N)] = accs, us
            if min(accs) >= stop:
                break
        out.update(stop_target=stop, units=units)
    out["acc"] = acc
    return out


def rule_kwargs(cfg: IRConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`..claims.ir5_rule.ir5_seed` from ``cfg``: its plateau
    bars and grid (the registered ones are ``claims.ir_registry.ir5_rule_kwargs``, which also
    give the slope bar)."""
    sc = cfg.sample_complexity
    return {"flat": sc.plateau_flat, "min_frac": sc.plateau_min,
            "retrieval_min": sc.retrieval_min,
            "grid": {k: getattr(sc, k) for k in IR5_GRID_KEYS}}


def sample_complexity_per_seed(cfg: IRConfig, rows: list[dict], seeds: list[int]
                               ) -> dict[str, dict[str, Any]]:
    """IR-5's stored measurement per seed: ``ir5_by_n`` = {n: {d, ceiling, retrieval, memory:
    {z, acc}, learned: {z, acc}}} over the registered n (a row without ``arm`` is the memory
    arm's; a missing row stays missing, which the rule reads as not measurable). Two rows of
    one (seed, n, arm) store neither (which one counted would depend on their order): that n
    is not measurable."""
    per: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        by_n: dict[str, dict[str, Any]] = {str(n): {"d": sweep_width(cfg, n)}
                                           for n in cfg.sample_complexity.n}
        for r in rows:
            if r["seed"] != seed or r["n"] not in cfg.sample_complexity.n:
                continue
            arm = r.get("arm", "memory")
            e = by_n[str(r["n"])]
            e[arm] = None if arm in e else {"z": r.get("z"), "acc": r.get("acc") or {}}
            if arm == "memory":
                e.update(ceiling=r.get("ceiling"), retrieval=r.get("retrieval"))
        per[str(seed)] = {"ir5_by_n": by_n}
    return per


def sample_complexity_table(cfg: IRConfig, per: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The IR-5 summary table (:func:`..claims.ir5_rule.ir5_table` at ``cfg``'s q, conventions
    and plateau bars; ``icr redecide`` recomputes the same entries under the registered ones),
    with the widths d(n) and a note."""
    sc = cfg.sample_complexity
    return {**ir5_table(per, sc.q, sc.conventions, **rule_kwargs(cfg)),
            "d_of_n": {str(n): sweep_width(cfg, n) for n in sc.n},
            "note": "N = where the isotonic fit of the mean expected step-1 accuracy against "
                    "log N first reaches z + q x (P - z) (log-interpolated; None = not reached "
                    "by the grid's largest N: right-censored); P = the memory arm's mean at its "
                    "two largest N, shared by both arms; learned = the positive control, a "
                    "memory that writes the triples its finetuning sequences show"}
