"""Task IR: in-context factual recall with a chain of thought (paper IR, SPEC section 2).

Knowledge base: ``n`` subjects, ``R`` relations and ``m`` answers shared across relations;
``f[s, r] = a``. A sequence with ``K`` in-context pairs is

    s_1 a_1 ... s_K a_K s_q r* a_q          (length 2K + 3)

with ``a_i = f(s_i, r*)`` for a hidden relation ``r*``. Step 1 predicts ``r*`` at the ``s_q``
position (index 2K); step 2 predicts ``a_q = f(s_q, r*)`` at the ``r*`` position (2K + 1). The
loss is taken only at these two positions (``targets`` is IGNORE elsewhere).

Confusions (both are planted in the knowledge base and mixed into the data at set rates):
- single-pair: one in-context pair fits a second relation, ``f(s, r') = f(s, r*)``;
- swap (re-pairing): the pairs fit another relation once re-paired,
  ``f(s_1, r') = a_2`` and ``f(s_2, r') = a_1``. With K >= 3 pairs the planted re-pairing is
  a K-cycle over all the pairs, ``f(s_i, r') = a_{i+1 mod K}``: a re-pairing of only two of
  three pairs does not tie under uniform attention (r* keeps three reads against two), so
  only the full re-pairing makes K >= 3 sequences that a pairwise row must resolve.

Assumption 1 (for two distinct subjects exactly one relation is consistent with both pairs) is
equivalent to: no relation pair ``(r, r')`` has ``f(s, r) = f(s, r')`` for two different
subjects. The generator enforces it by rejection and :func:`check_assumption1` verifies it.
Assumption 2 (confusing sequences have positive probability) is the knob
``p_single + p_swap > 0``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check, check_range, register_task
from mechinterp_icr.tasks.base import IGNORE, Batch, Vocab

__all__ = [
    "ANS",
    "KIND_PLAIN",
    "KIND_SINGLE",
    "KIND_SWAP",
    "REL",
    "SUBJ",
    "IRTask",
    "IRTaskConfig",
    "KnowledgeBase",
    "check_assumption1",
    "make_kb",
]

SUBJ, REL, ANS = 0, 1, 2  # token types
KIND_PLAIN, KIND_SINGLE, KIND_SWAP = 0, 1, 2  # how a sequence was drawn


@register_task("ir")
@dataclass(frozen=True)
class IRTaskConfig:
    n_subjects: int = 64
    n_relations: int = 6
    n_answers: int = 0  # 0 = same as n_subjects
    n_pairs: int = 2  # K in-context pairs
    kb_single: int = -1  # planted single-pair collisions; -1 = as many as Assumption 1 allows
    kb_swap_frac: float = 0.5  # fraction of subjects that take part in a planted swap
    p_single: float = 0.25  # probability that a sequence is single-pair confusing
    p_swap: float = 0.25  # probability that a sequence is swap confusing
    pair_symmetric: bool = False  # every batch holds each sequence and its pair-reversed copy
    temperature: float = 0.05  # decoding temperature T: logits = memory output / T

    def __post_init__(self) -> None:
        check_range("task.n_subjects", self.n_subjects, 4, 1_000_000, integer=True)
        check_range("task.n_relations", self.n_relations, 2, 1000, integer=True)
        check_range("task.n_answers", self.n_answers, 0, 1_000_000, integer=True)
        check(self.n_answers == 0 or self.n_answers >= self.n_relations + 2, "task.n_answers",
              self.n_answers, f"0 (= n_subjects) or at least n_relations + 2 = "
              f"{self.n_relations + 2} (every subject has distinct answers across relations)")
        check(self.n_subjects >= self.n_relations + 2 or self.n_answers != 0, "task.n_subjects",
              self.n_subjects, f"at least n_relations + 2 = {self.n_relations + 2} when "
              "n_answers = 0")
        check_range("task.n_pairs", self.n_pairs, 1, 64, integer=True)
        check(self.n_pairs + 1 <= self.n_subjects, "task.n_pairs", self.n_pairs,
              f"at most n_subjects - 1 = {self.n_subjects - 1} (distinct subjects)")
        max_single = self.n_relations * (self.n_relations - 1) // 2
        check(isinstance(self.kb_single, int) and not isinstance(self.kb_single, bool)
              and -1 <= self.kb_single <= min(max_single, self.n_subjects), "task.kb_single",
              self.kb_single, f"-1 (as many as allowed) or an integer in [0, "
              f"{min(max_single, self.n_subjects)}] (Assumption 1 allows one subject per "
              "relation pair)")
        check_range("task.kb_swap_frac", self.kb_swap_frac, 0, 1)
        check_range("task.p_single", self.p_single, 0, 1)
        check_range("task.p_swap", self.p_swap, 0, 1)
        check(self.p_single + self.p_swap <= 1, "task.p_single + task.p_swap",
              self.p_single + self.p_swap, "at most 1")
        check(isinstance(self.pair_symmetric, bool), "task.pair_symmetric",
              self.pair_symmetric, "true or false")
        check_range("task.temperature", self.temperature, 0, 100, lo_open=True)
        if self.p_single > 0:
            check(self.kb_single != 0, "task.kb_single", self.kb_single,
                  "non-zero when task.p_single > 0 (single-pair sequences need collisions)")
        if self.p_swap > 0:
            check(self.kb_swap_frac > 0 and int(self.kb_swap_frac * self.n_subjects) >= 2,
                  "task.kb_swap_frac", self.kb_swap_frac,
                  "a fraction giving at least 2 subjects when task.p_swap > 0")

    @property
    def m(self) -> int:
        return self.n_answers or self.n_subjects

    @property
    def seq_len(self) -> int:
        return 2 * self.n_pairs + 3

    def build_bytes(self) -> int:
        """An upper bound on the bytes :meth:`build` allocates, from the config alone (a task
        too large for the memory ceiling is refused before it is built): the knowledge base's
        (n, m) random keys and their argsort (float64 + int64), the (n, R) answer table with
        the triples and their index grids (12 int64 copies), the per-subject bookkeeping of
        planted collisions (about 400 bytes a subject) and the vocabulary (about 200 bytes
        and three int64 ids a token). Measured against the real allocation by
        ``tests/unit/test_reliability_estimates.py``."""
        n, R, m = self.n_subjects, self.n_relations, self.m
        d = n + R + m
        return int(2 * 8 * n * m + 12 * 8 * n * R + 400 * n + (200 + 3 * 8) * d + (1 << 16))

    def build(self, seed: int = 0) -> IRTask:
        return IRTask(self, seed)


# --------------------------------------------------------------------------------------------
# Knowledge base
# --------------------------------------------------------------------------------------------
@dataclass
class KnowledgeBase:
    f: np.ndarray  # (n, R) answer index in [0, m)
    singles: np.ndarray  # (k, 3): subject, r, r' with f[s, r] == f[s, r'] (planted)
    swaps: np.ndarray  # (k, L + 2): L subjects s_1..s_L, then r, r', with
    # f[s_i, r'] == f[s_{i+1 mod L}, r]; L = max(2, K) (L = 2: the swap f[s', r'] == f[s, r],
    # f[s, r'] == f[s', r])

    @property
    def cycle_len(self) -> int:
        """L, the number of subjects in each planted re-pairing."""
        return self.swaps.shape[1] - 2


def check_assumption1(f: np.ndarray) -> list[tuple[int, int, list[int]]]:
    """Violations of Assumption 1: relation pairs (r, r') on which two or more subjects
    collide (``f[s, r] == f[s, r']``). Returns [(r, r', subjects)]; empty means it holds.

    Two distinct subjects with such a collision give sequences whose two pairs are consistent
    with both r and r', so the relation is not identifiable; with at most one colliding
    subject per relation pair, exactly one relation is consistent with any two pairs.
    """
    f = np.asarray(f)
    out = []
    R = f.shape[1]
    for r in range(R):
        for r2 in range(r + 1, R):
            subj = np.nonzero(f[:, r] == f[:, r2])[0]
            if len(subj) > 1:
                out.append((r, r2, subj.tolist()))
    return out


def _row_ok(row: np.ndarray, allowed: set[tuple[int, int]]) -> bool:
    """A subject's answers are distinct across relations except for allowed collisions."""
    R = len(row)
    for r in range(R):
        for r2 in range(r + 1, R):
            if row[r] == row[r2] and (r, r2) not in allowed:
                return False
    return True


def make_kb(cfg: IRTaskConfig, seed: int) -> KnowledgeBase:
    """Random knowledge base with planted single-pair collisions and swaps (Assumption 1 kept
    by rejection, verified at the end)."""
    rng = np.random.default_rng([int(seed), zlib.crc32(b"ir-kb")])
    n, R, m = cfg.n_subjects, cfg.n_relations, cfg.m
    # every subject: R distinct answers (no accidental single-pair collisions)
    f = np.argsort(rng.random((n, m)), axis=1)[:, :R].astype(np.int64)
    used = np.zeros(n, bool)
    allowed: dict[int, set[tuple[int, int]]] = {s: set() for s in range(n)}
    # planted re-pairings: L = max(2, K) subjects and relations r != r', f[s_i, r'] =
    # f[s_{i+1}, r] (L = 2: a swap of two subjects' answers)
    L = max(2, cfg.n_pairs)
    n_swap_subj = int(cfg.kb_swap_frac * n) // L * L
    swaps = []
    order = rng.permutation(n)
    cand = list(order[:n_swap_subj])
    for i in range(0, len(cand) - L + 1, L):
        subj = [int(x) for x in cand[i: i + L]]
        for _ in range(20):
            r, r2 = rng.choice(R, 2, replace=False)
            old = f[subj].copy()
            vals = f[subj, r].copy()
            f[subj, r2] = np.roll(vals, -1)
            if (all(_row_ok(f[s], allowed[s]) for s in subj)
                    and len(set(vals.tolist())) == L):
                swaps.append((*subj, int(r), int(r2)))
                used[subj] = True
                break
            f[subj] = old
    # planted single-pair collisions: at most one subject per relation pair (Assumption 1)
    pairs = [(r, r2) for r in range(R) for r2 in range(r + 1, R)]
    n_single = len(pairs) if cfg.kb_single < 0 else cfg.kb_single
    n_single = min(n_single, int((~used).sum()), len(pairs))
    pair_order = rng.permutation(len(pairs))[:n_single]
    free = [int(s) for s in order if not used[s]]
    singles = []
    for k, pi in enumerate(pair_order):
        r, r2 = pairs[pi]
        s = free[k]
        if rng.random() < 0.5:
            f[s, r2] = f[s, r]
        else:
            f[s, r] = f[s, r2]
        allowed[s].add((r, r2))
        singles.append((s, r, r2))
        used[s] = True
    bad = check_assumption1(f)
    if bad:  # cannot happen by construction; kept as a guard
        raise ConfigError(f"knowledge base violates Assumption 1 on {bad[:3]}")
    return KnowledgeBase(f, np.array(singles, np.int64).reshape(-1, 3),
                         np.array(swaps, np.int64).reshape(-1, L + 2))


# --------------------------------------------------------------------------------------------
# Task
# --------------------------------------------------------------------------------------------
class IRTask:
    """Sampler, vocabulary and confusion bookkeeping of one IR knowledge base."""

    def __init__(self, cfg: IRTaskConfig, seed: int = 0):
        self.cfg = cfg
        self.seed = seed
        self.kb = make_kb(cfg, seed)
        n, R, m = cfg.n_subjects, cfg.n_relations, cfg.m
        names = [f"S{i}" for i in range(n)] + [f"R{i}" for i in range(R)] + \
                [f"A{i}" for i in range(m)]
        self.vocab = Vocab(names)
        self.n_ctx = cfg.seq_len
        self.subj_ids = np.arange(n)
        self.rel_ids = n + np.arange(R)
        self.ans_ids = n + R + np.arange(m)
        self.token_type = np.concatenate([np.full(n, SUBJ), np.full(R, REL), np.full(m, ANS)])
        self.step1_pos = 2 * cfg.n_pairs
        self.step2_pos = 2 * cfg.n_pairs + 1
        # triples (s, r, a) as token ids, used by the memory
        s_idx, r_idx = np.meshgrid(np.arange(n), np.arange(R), indexing="ij")
        self.triples = np.stack([s_idx.ravel(), r_idx.ravel(),
                                 self.kb.f[s_idx.ravel(), r_idx.ravel()]], 1)  # (nR, 3)

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    # -- sampling ----------------------------------------------------------------------------
    def _distinct_subjects(self, rng, B: int, k: int, fixed: np.ndarray | None = None):
        n = self.cfg.n_subjects
        out = rng.integers(0, n, size=(B, k))
        if fixed is not None:
            out[:, : fixed.shape[1]] = fixed
        for _ in range(1000):
            srt = np.sort(out, axis=1)
            bad = (srt[:, 1:] == srt[:, :-1]).any(1)
            if not bad.any():
                return out
            lo = 0 if fixed is None else fixed.shape[1]
            out[bad, lo:] = rng.integers(0, n, size=(int(bad.sum()), k - lo))
        raise RuntimeError("could not draw distinct subjects")

    def sample_struct(self, rng: np.random.Generator, B: int) -> dict[str, np.ndarray]:
        """Draw B sequences as (subjects (B, K+1), relation (B,), kind (B,))."""
        cfg, kb = self.cfg, self.kb
        K = cfg.n_pairs
        u = rng.random(B)
        kind = np.full(B, KIND_PLAIN)
        if len(kb.singles):
            kind[u < cfg.p_single] = KIND_SINGLE
        if len(kb.swaps) and K >= 2:
            kind[(u >= cfg.p_single) & (u < cfg.p_single + cfg.p_swap)] = KIND_SWAP
        rel = rng.integers(0, cfg.n_relations, size=B)
        subj = np.empty((B, K + 1), np.int64)
        for kd in (KIND_PLAIN, KIND_SINGLE, KIND_SWAP):
            idx = np.nonzero(kind == kd)[0]
            if len(idx) == 0:
                continue
            if kd == KIND_PLAIN:
                fixed = None
            elif kd == KIND_SINGLE:
                pick = kb.singles[rng.integers(0, len(kb.singles), len(idx))]
                fixed = pick[:, :1]
                rel[idx] = np.where(rng.random(len(idx)) < 0.5, pick[:, 1], pick[:, 2])
            else:
                L = kb.cycle_len
                pick = kb.swaps[rng.integers(0, len(kb.swaps), len(idx))]
                fixed = pick[:, :L]
                rel[idx] = np.where(rng.random(len(idx)) < 0.5, pick[:, L], pick[:, L + 1])
            subj[idx] = self._distinct_subjects(rng, len(idx), K + 1, fixed)
        # context answers must be distinct (a1 != a2): redraw the free subjects of bad rows
        for _ in range(1000):
            ans = kb.f[subj[:, :K], rel[:, None]]
            srt = np.sort(ans, axis=1)
            bad = (srt[:, 1:] == srt[:, :-1]).any(1) if K > 1 else np.zeros(B, bool)
            if not bad.any():
                break
            for i in np.nonzero(bad)[0]:
                nfix = {KIND_PLAIN: 0, KIND_SINGLE: 1, KIND_SWAP: kb.cycle_len}[int(kind[i])]
                subj[i] = self._distinct_subjects(rng, 1, K + 1, subj[i: i + 1, :nfix])[0]
        # the planted pairs sit in random context slots
        perm = np.argsort(rng.random((B, K)), axis=1)
        subj[:, :K] = np.take_along_axis(subj[:, :K], perm, axis=1)
        return {"subjects": subj, "relation": rel, "kind": kind}

    def encode_struct(self, st: dict[str, np.ndarray]) -> Batch:
        cfg, kb = self.cfg, self.kb
        K, n, R = cfg.n_pairs, cfg.n_subjects, cfg.n_relations
        subj, rel = st["subjects"], st["relation"]
        B = len(rel)
        ans = kb.f[subj, rel[:, None]]  # (B, K+1)
        toks = np.empty((B, 2 * K + 3), np.int64)
        toks[:, 0: 2 * K: 2] = subj[:, :K]
        toks[:, 1: 2 * K: 2] = n + R + ans[:, :K]
        toks[:, 2 * K] = subj[:, K]
        toks[:, 2 * K + 1] = n + rel
        toks[:, 2 * K + 2] = n + R + ans[:, K]
        tgt = np.full_like(toks, IGNORE)
        tgt[:, 2 * K] = n + rel
        tgt[:, 2 * K + 1] = n + R + ans[:, K]
        meta = {"kind": torch.from_numpy(st["kind"].astype(np.int64)),
                **{k: torch.from_numpy(v) for k, v in self.confusion_flags(subj, rel).items()}}
        return Batch(torch.from_numpy(toks), torch.from_numpy(tgt), meta)

    def confusion_flags(self, subj: np.ndarray, rel: np.ndarray) -> dict[str, np.ndarray]:
        """Which sequences are single-pair / swap confusing, computed from the KB."""
        f = self.kb.f
        K = self.cfg.n_pairs
        R = self.cfg.n_relations
        other = np.ones((len(rel), R), bool)
        other[np.arange(len(rel)), rel] = False
        ans = f[subj[:, :K], rel[:, None]]  # (B, K)
        fs = f[subj[:, :K]]  # (B, K, R)
        single = ((fs == ans[:, :, None]) & other[:, None, :]).any((1, 2))
        # swap: another relation r' fits every pair once re-paired, i.e. {f(s_i, r')} equals
        # {a_i} as sets (a_i are distinct); with two pairs exactly the swap f(s_1, r') = a_2,
        # f(s_2, r') = a_1 (the identity re-pairing would break Assumption 1)
        swap = np.zeros(len(rel), bool)
        if K >= 2:
            eq = fs[:, :, :, None] == ans[:, None, None, :]  # (B, K pairs, R, K answers)
            onto = eq.any(1).all(2) & eq.any(3).all(1)  # (B, R): {f(s_i, r')} == {a_i}
            swap = (onto & other).any(1)
        return {"single": single, "swap": swap, "confusing": single | swap}

    def sample(self, rng: np.random.Generator, batch_size: int, split: str = "train") -> Batch:
        """``split`` is accepted for the Task protocol; train and eval share one distribution."""
        if split not in ("train", "eval", "test"):
            raise ConfigError(f"split = {split!r} is not allowed; expected train, eval or test")
        if not self.cfg.pair_symmetric:
            return self.encode_struct(self.sample_struct(rng, batch_size))
        half = (batch_size + 1) // 2
        st = self.sample_struct(rng, half)
        return self.encode_struct(pair_symmetrize(st, self.cfg.n_pairs, batch_size))

    def info(self) -> dict[str, Any]:
        return {"n_singles": len(self.kb.singles), "n_swaps": len(self.kb.swaps),
                "d_vocab": self.d_vocab, "n_ctx": self.n_ctx,
                "assumption1_violations": len(check_assumption1(self.kb.f))}


def pair_symmetrize(st: dict[str, np.ndarray], K: int, total: int | None = None):
    """Append to each sequence its copy with the in-context pairs in reverse order."""
    subj = st["subjects"]
    rev = subj.copy()
    rev[:, :K] = subj[:, :K][:, ::-1]
    out = {"subjects": np.concatenate([subj, rev]),
           "relation": np.concatenate([st["relation"], st["relation"]]),
           "kind": np.concatenate([st["kind"], st["kind"]])}
    if total is not None:
        out = {k: v[:total] for k, v in out.items()}
    return out
