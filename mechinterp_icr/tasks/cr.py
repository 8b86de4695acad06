"""Task CR: contextual recall (paper CR, SPEC section 1).

Vocabulary, contiguous id blocks::

    0 [PAD]  1 [BOS]  2 [SEP]
    3 ..             subjects  S0 .. S{M-1}
    3+M ..           grammar   G0 .. G{G-1}
    3+M+G ..         attributes, type-major: A{l}_{v} = attr_base + l*V + v (the names and
                     ids; which types a token is a value of: ``value_ids``, below)

A seeded knowledge base ``kb[s, l] = v`` gives every subject one value *slot* per type; the
token of type ``l``'s slot ``v`` is ``value_ids[l, v]`` and a subject's attribute is
``answer_id(s, l) = value_ids[l, kb[s, l]]``. By default (``attr_share = 0``) ``value_ids[l, v]
= attr_base + l*V + v``: the types' values are disjoint, so one attribute token reveals its type.

Shared-token variant (``attr_share = r`` in (0, 1], SPEC section 1, CR-8): an attribute token
may belong to two types; the ids and ``d_vocab`` do not change, only ``value_ids`` does (a pure
function of (cfg, seed); ``attr_share = 0`` is the default task bit for bit). Its construction
(which slots are shared, with whom; the dead tokens) and the ideal reader: ``tasks.cr_vocab``.

Membership: ``type_member`` (d_vocab, L) says which types a token belongs to; ``has_type``
reads it vectorised; ``attr_type_of_id`` is the type of a token that belongs to exactly one
type (-2: several, -1: none). ``ideal_type_accuracy`` is the Bayes reader of the type from the
demo attribute tokens alone (the reader the variant's sharing rate is chosen by, before any
training: ``icr calibrate shared-rate``).

Every type ``l`` owns a first-order Markov chain over the grammar tokens; ``lam`` mixes a shared
chain ``Q`` with the type's own chain ``R_l``: ``P_l = (1-lam) Q + lam R_l`` (initial
distribution and transition matrix alike), so ``lam = 0`` makes all types' grammar statistics
identical.

Formats (one example holds several tuples; ``order`` = ``"sga"`` or ``"gsa"``):

- PT   ``[BOS] s g1..gk a_l(s) [SEP] s' g'.. a'(s') [SEP] ...`` (or ``g.. s a`` per tuple),
  each tuple with its own subject, type and k ~ U[grammar_len_min, grammar_len_max] grammar
  tokens from chain ``l``. Loss on every position whose *next* token is a grammar or an
  attribute token. Factual recall is read at the position before each attribute.
- ICL  ``[BOS] s1 a(s1) [SEP] ... sK a(sK) [SEP] sq`` -> ``a(sq)``: one shared type, distinct
  subjects, no grammar. The answer is predicted at ``query_pos`` (the last token, ``sq``).
- ICL+Grm like ICL with a grammar run of length ~ U[iclgrm_len_min, iclgrm_len_max] (0 allowed)
  between each subject and attribute (``iclgrm_order="sga"``, SPEC's placement, whatever the PT
  ``order``) or before the subject (``iclgrm_order="gsa"``, a variant); the run is drawn
  from the shared type's chain (``iclgrm_chain="type"``), the shared chain ``Q`` (``"shared"``,
  no type information) or uniformly (``"uniform"``). ``iclgrm_query_grammar`` decides whether
  the query also gets a grammar run (the answer is then predicted at its last token).

Finetuning batches (``sample_finetune``) draw K ~ U[finetune_k_min, finetune_k_max or
max_demos] per batch. Loss (``icl_loss``): ``"query"`` only the answer of the query; ``"all"``
also the attributes of demos 2..K (each predicted from the demos before it).

Vectorised numpy; a batch is a pure function of the generator passed in, the knowledge base,
chains and subject split of the seed passed to ``build``."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from mechinterp_icr.config import ModelConfig, check, check_choice, check_range, register_task
from mechinterp_icr.tasks.base import IGNORE, Batch, Vocab
from mechinterp_icr.tasks.cr_eval import _scores as _scores  # re-exported (tests use it)
from mechinterp_icr.tasks.cr_eval import evaluate_icl, evaluate_pt, ideal_reader_table
from mechinterp_icr.tasks.cr_vocab import _table_bytes, _value_table
from mechinterp_icr.tasks.cr_vocab import ideal_type_accuracy as _ideal_type_accuracy

# evaluate_icl, evaluate_pt, ideal_reader_table (and _scores): tasks.cr_eval, re-exported here
__all__ = ["BOS", "PAD", "ROLES", "SEP", "CRTask", "CRTaskConfig", "evaluate_icl", "evaluate_pt",
           "ideal_reader_table"]

PAD, BOS, SEP = 0, 1, 2

# Role code of every position (``meta["roles"]``), for attention role summaries.
ROLES = {"pad": 0, "bos": 1, "sep": 2, "subject": 3, "grammar": 4, "attribute": 5,
         "query_subject": 6, "query_grammar": 7}


# choice fields: one Literal type each, also what __post_init__ checks against
TupleOrder = Literal["sga", "gsa"]
GrammarChain = Literal["type", "shared", "uniform"]
IclLoss = Literal["query", "all"]


@register_task("cr")
@dataclass(frozen=True)
class CRTaskConfig:
    """Contextual-recall data-generating process. See the module docstring."""

    n_subjects: int = 64  # M
    n_grammar: int = 16  # G
    n_types: int = 4  # L
    n_values: int = 16  # V (per type)
    lam: float = 0.9  # separation of the type chains from the shared chain
    dirichlet_alpha: float = 0.02  # concentration of the type chains' rows (small = peaked)
    shared_alpha: float = 1.0  # concentration of the shared chain's rows
    grammar_len_min: int = 2  # PT grammar length range (inclusive)
    grammar_len_max: int = 4
    order: TupleOrder = "gsa"  # "sga": s g.. a   |  "gsa": g.. s a   (per tuple)
    n_tuples: int = 4  # tuples per PT sequence
    n_demos: int = 4  # K: demos per ICL / ICL+Grm finetuning sequence
    max_demos: int = 8  # the context is sized for ICL with up to this many demos
    finetune_fraction: float = 0.5  # f: share of subjects used for finetuning
    iclgrm_len_min: int = 1  # ICL+Grm grammar length range (inclusive; 0 allowed)
    iclgrm_len_max: int = 2
    iclgrm_chain: GrammarChain = "shared"
    iclgrm_query_grammar: bool = True  # does the ICL+Grm query get a grammar run too
    iclgrm_order: TupleOrder = "sga"  # ICL+Grm tuples: "sga" (SPEC) | "gsa" (variant)
    icl_loss: IclLoss = "query"
    finetune_k_min: int = 1  # finetuning K ~ U[min, max] per batch (max 0 = max_demos;
    finetune_k_max: int = 0  # min = max = n_demos gives a fixed K)
    attr_share: float = 0.0  # shared-token variant: share of each type's value slots whose
    # token belongs to two types (0 = disjoint types, the default task; module docstring)

    def __post_init__(self) -> None:
        check_range("task.n_subjects", self.n_subjects, 4, 100_000, integer=True)
        check_range("task.n_grammar", self.n_grammar, 1, 10_000, integer=True)
        check_range("task.n_types", self.n_types, 1, 1_000, integer=True)
        check_range("task.n_values", self.n_values, 1, 10_000, integer=True)
        check_range("task.lam", self.lam, 0.0, 1.0)
        check_range("task.dirichlet_alpha", self.dirichlet_alpha, 0.0, 1e6, lo_open=True)
        check_range("task.shared_alpha", self.shared_alpha, 0.0, 1e6, lo_open=True)
        check_range("task.grammar_len_min", self.grammar_len_min, 1, 64, integer=True)
        check_range("task.grammar_len_max", self.grammar_len_max, self.grammar_len_min, 64,
                    integer=True)
        check_choice("task.order", self.order, TupleOrder)
        check_range("task.n_tuples", self.n_tuples, 1, 256, integer=True)
        check_range("task.finetune_fraction", self.finetune_fraction, 0.0, 1.0,
                    lo_open=True, hi_open=True)
        check_range("task.iclgrm_len_min", self.iclgrm_len_min, 0, 64, integer=True)
        check_range("task.iclgrm_len_max", self.iclgrm_len_max, self.iclgrm_len_min, 64,
                    integer=True)
        check_choice("task.iclgrm_chain", self.iclgrm_chain, GrammarChain)
        check(isinstance(self.iclgrm_query_grammar, bool), "task.iclgrm_query_grammar",
              self.iclgrm_query_grammar, "true or false")
        check_choice("task.iclgrm_order", self.iclgrm_order, TupleOrder)
        check_choice("task.icl_loss", self.icl_loss, IclLoss)
        n_ft, n_ho = self.split_sizes()
        check(n_ft >= 2 and n_ho >= 2, "task.finetune_fraction", self.finetune_fraction,
              f"a fraction leaving at least 2 finetune and 2 held-out subjects of "
              f"n_subjects = {self.n_subjects} (got {n_ft} / {n_ho})")
        kmax = min(n_ft, n_ho) - 1
        check_range("task.n_demos", self.n_demos, 1, kmax, integer=True)
        check_range("task.max_demos", self.max_demos, self.n_demos, kmax, integer=True)
        check_range("task.finetune_k_max", self.finetune_k_max, 0, self.max_demos, integer=True)
        check_range("task.finetune_k_min", self.finetune_k_min, 1, self.finetune_ks[1],
                    integer=True)
        check_range("task.attr_share", self.attr_share, 0.0, 1.0)
        check(self.attr_share == 0 or self.n_types >= 2, "task.attr_share", self.attr_share,
              f"0 when n_types = {self.n_types} (a token can only be shared between two "
              "types)")

    @property
    def n_shared_slots(self) -> int:
        """Value slots per type whose token is shared with another type: ``round(attr_share *
        n_values)``, half up (fewer for a type the odd-L schedule pairs with its dummy)."""
        return int(math.floor(self.attr_share * self.n_values + 0.5))

    @property
    def finetune_ks(self) -> tuple[int, int]:
        """(lowest, highest) K of a finetuning batch (K uniform over that range per batch)."""
        return self.finetune_k_min, self.finetune_k_max or self.max_demos

    def split_sizes(self) -> tuple[int, int]:
        n_ft = round(self.finetune_fraction * self.n_subjects)
        return n_ft, self.n_subjects - n_ft

    def vocab_size(self) -> int:  # d_vocab and n_ctx of the built task, without building it
        return 3 + self.n_subjects + self.n_grammar + self.n_types * self.n_values

    def format_len(self, K: int, grammar: bool) -> int:
        """Padded length of an ICL (grammar=False) or ICL+Grm sequence with K demos."""
        g = self.iclgrm_len_max if grammar else 0
        gq = g if (grammar and self.iclgrm_query_grammar) else 0
        return 1 + K * (3 + g) + 1 + gq

    pt_len = property(lambda self: 1 + self.n_tuples * (self.grammar_len_max + 3))

    def context_len(self) -> int:
        return max(self.pt_len, *(self.format_len(self.max_demos, g) for g in (False, True)))

    def build_bytes(self) -> int:  # upper bound on what build() allocates (tasks.cr_vocab)
        return _table_bytes(self)

    def default_model(self) -> ModelConfig:
        """The 2-layer, 1-head-per-layer model of SPEC section 1 (no LayerNorm, MLPs on)."""
        return ModelConfig(n_layers=2, n_heads=1, d_model=64, d_head=64, d_mlp=256,
                           normalization="none")

    def build(self, seed: int = 0) -> CRTask:
        return CRTask(self, seed)


def _dirichlet(rng: np.random.Generator, alpha: float, shape: tuple[int, ...]) -> np.ndarray:
    """Dirichlet rows over the last axis, robust to tiny alpha (no all-zero rows)."""
    g = rng.gamma(alpha, size=shape)  # tiny alpha can underflow a row to 0: one-hot instead
    s = g.sum(-1, keepdims=True)
    bad = (s[..., 0] <= 0) | ~np.isfinite(s[..., 0])
    if bad.any():
        idx = rng.integers(shape[-1], size=int(bad.sum()))
        g[bad] = 0.0
        g[bad, idx] = 1.0
        s = g.sum(-1, keepdims=True)
    return g / s


def _as_numpy(x) -> np.ndarray:
    return np.asarray(x.cpu() if isinstance(x, torch.Tensor) else x)


def _sample_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probs`` (N, G) by inverse CDF."""
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random(probs.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum((u >= cdf).sum(-1), probs.shape[-1] - 1)


class CRTask:
    """A built CR task: vocabulary, knowledge base, grammar chains, subject split, samplers.

    Value tables (module docstring): ``value_ids`` (n_types, V) token of a type's value slot;
    ``shared_slots`` (n_types, V) whether that token belongs to two types; ``type_member``
    (d_vocab, n_types) whether a token is one of a type's values; ``live_attr_ids`` the sorted
    attribute tokens that belong to some type (all of ``attr_ids`` by default; the variant's
    dead tokens are left out)."""

    def __init__(self, cfg: CRTaskConfig, seed: int = 0):
        self.cfg = cfg
        self.seed = int(seed)
        M, G, n_types, V = cfg.n_subjects, cfg.n_grammar, cfg.n_types, cfg.n_values
        self.subject_base = 3
        self.grammar_base = 3 + M
        self.attr_base = 3 + M + G
        names = ["[PAD]", "[BOS]", "[SEP]"] + [f"S{i}" for i in range(M)] + \
            [f"G{i}" for i in range(G)] + \
            [f"A{typ}_{v}" for typ in range(n_types) for v in range(V)]
        self.vocab = Vocab(names)
        self.subject_ids = np.arange(self.subject_base, self.subject_base + M)
        self.grammar_ids = np.arange(self.grammar_base, self.grammar_base + G)
        self.attr_ids = np.arange(self.attr_base, self.attr_base + n_types * V)

        kb_rng = np.random.default_rng([self.seed, 0xCB0])
        self.kb = kb_rng.integers(0, V, size=(M, n_types))  # (M, n_types) value slot
        self.value_ids, self.shared_slots = _value_table(cfg, self.seed, self.attr_base)
        self.type_member = np.zeros((len(self.vocab), n_types), dtype=bool)
        self.type_member[self.value_ids, np.arange(n_types)[:, None]] = True
        self.live_attr_ids = np.unique(self.value_ids)
        self._n_types_of = self.type_member.sum(1)  # (d_vocab,) types a token belongs to
        self._first_type = np.where(self._n_types_of > 0, self.type_member.argmax(1), -1)
        ch_rng = np.random.default_rng([self.seed, 0xC4A1])
        q_init = _dirichlet(ch_rng, cfg.shared_alpha, (G,))
        q_trans = _dirichlet(ch_rng, cfg.shared_alpha, (G, G))
        r_init = _dirichlet(ch_rng, cfg.dirichlet_alpha, (n_types, G))
        r_trans = _dirichlet(ch_rng, cfg.dirichlet_alpha, (n_types, G, G))
        lam = float(cfg.lam)
        self.shared_init, self.shared_trans = q_init, q_trans
        self.type_init = (1 - lam) * q_init[None] + lam * r_init  # (n_types, G)
        self.type_trans = (1 - lam) * q_trans[None] + lam * r_trans  # (n_types, G, G)
        sp_rng = np.random.default_rng([self.seed, 0x5B1])
        perm = sp_rng.permutation(M)
        n_ft, _ = cfg.split_sizes()
        self.finetune_subjects = np.sort(perm[:n_ft])
        self.heldout_subjects = np.sort(perm[n_ft:])

        K = cfg.max_demos
        self.pt_len = cfg.pt_len
        self.icl_len = {False: self.format_len(K, False), True: self.format_len(K, True)}
        self.n_ctx = cfg.context_len()

    # -- vocabulary --------------------------------------------------------------------------
    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    def subject_id(self, s):
        return np.asarray(s) + self.subject_base

    def grammar_id(self, g):
        return np.asarray(g) + self.grammar_base

    def attr_id(self, typ, v):
        """Token id of type typ's value slot v, ``value_ids[typ, v]`` (vectorised, broadcast)."""
        return self.value_ids[np.asarray(typ), np.asarray(v)]

    def attr_type_of_id(self, ids):
        """Per token id (vectorised; numpy or torch): the type it belongs to when it belongs
        to exactly one type, -2 when it belongs to several (a shared token of the variant),
        -1 when it belongs to none (non-attribute ids, ids outside the vocabulary and the
        variant's dead attribute tokens). By default every attribute token has one type.
        Use :meth:`has_type` to ask whether a token is one of a given type's values."""
        ids = _as_numpy(ids)
        ok = (ids >= 0) & (ids < self.d_vocab)
        safe = np.where(ok, ids, 0)
        n = self._n_types_of[safe]
        return np.where(ok & (n == 1), self._first_type[safe],
                        np.where(ok & (n > 1), -2, -1))

    def has_type(self, ids, types) -> np.ndarray:
        """Whether each token id is one of the values of the matching type (``ids`` and
        ``types`` broadcast; numpy or torch): ``type_member[ids, types]``, False for ids
        outside the vocabulary, non-attribute and dead ids, and types outside [0, n_types)."""
        ids, types = np.broadcast_arrays(_as_numpy(ids), _as_numpy(types))
        ok = (ids >= 0) & (ids < self.d_vocab) & (types >= 0) & (types < self.cfg.n_types)
        return ok & self.type_member[np.where(ok, ids, 0), np.where(ok, types, 0)]

    def answer_id(self, s, typ):
        """Token id of subject s's attribute of type typ (vectorised)."""
        s, typ = np.asarray(s), np.asarray(typ)
        return self.attr_id(typ, self.kb[s, typ])

    # -- grammar statistics --------------------------------------------------------------------
    def separation(self) -> dict[str, float]:
        """Mean pairwise total-variation distance between the types' transition rows (and
        initial distributions). 0 when ``lam = 0``."""
        n_types = self.cfg.n_types
        if n_types < 2:
            return {"tv_transition": 0.0, "tv_initial": 0.0}
        tv_t, tv_i = [], []
        for a, b in itertools.combinations(range(n_types), 2):
            tv_t.append(0.5 * np.abs(self.type_trans[a] - self.type_trans[b]).sum(-1).mean())
            tv_i.append(0.5 * np.abs(self.type_init[a] - self.type_init[b]).sum())
        return {"tv_transition": float(np.mean(tv_t)), "tv_initial": float(np.mean(tv_i))}

    def bayes_ceiling(self, len_min: int | None = None, len_max: int | None = None,
                      n_mc: int = 200_000) -> float:
        """Best accuracy of reading the type from a grammar run of length ~ U[len_min, len_max]
        drawn from the type chains (uniform type prior): E_g[max_l P(l | g)]. Exact by
        enumeration when G**k is small, Monte Carlo (fixed seed) otherwise."""
        lo = self.cfg.grammar_len_min if len_min is None else len_min
        hi = self.cfg.grammar_len_max if len_max is None else len_max
        G, n_types = self.cfg.n_grammar, self.cfg.n_types
        vals = []
        for k in range(lo, hi + 1):
            if k == 0:
                vals.append(1.0 / n_types)
            elif G ** k <= 2_000_000 // max(n_types, 1):
                p = self.type_init.T.copy()  # (N=G, n_types): joint prob of the run per type
                last = np.arange(G)
                for _ in range(k - 1):
                    step = self.type_trans[:, last, :].transpose(1, 2, 0)  # (N, G, n_types)
                    p = (p[:, None, :] * step).reshape(-1, n_types)
                    last = np.tile(np.arange(G), len(last))
                vals.append(float(p.max(-1).sum() / n_types))
            else:
                rng = np.random.default_rng([self.seed, 0xBA7E5, k])
                types = rng.integers(n_types, size=n_mc)
                g = self._grammar_runs(rng, np.full(n_mc, k), types, k, "type")
                logp = np.log(self.type_init[:, g[:, 0]] + 1e-300)  # (n_types, N)
                for j in range(1, k):
                    logp += np.log(self.type_trans[:, g[:, j - 1], g[:, j]] + 1e-300)
                vals.append(float((logp.argmax(0) == types).mean()))
        return float(np.mean(vals))

    # -- the ideal reader of the demos ---------------------------------------------------------
    def ideal_type_accuracy(self, K: int, n: int = 20000, seed: int = 0,
                            subjects=None, reader: str = "generative") -> float:
        """Type accuracy of the Bayes reader of ICL prompts from their K demo attribute tokens
        alone, by Monte Carlo over ``n`` prompts (``reader`` 'generative' or 'kb'):
        :func:`mechinterp_icr.tasks.cr_vocab.ideal_type_accuracy`, whose docstring says more."""
        return _ideal_type_accuracy(self, K, n=n, seed=seed, subjects=subjects, reader=reader)

    def _grammar_runs(self, rng, lengths, types, width, chain: str) -> np.ndarray:
        """Grammar indices (N, width) of runs of the given lengths (entries past the length
        are filler), from the type chains, the shared chain or uniform."""
        N = len(lengths)
        G = self.cfg.n_grammar
        out = np.zeros((N, max(width, 1)), dtype=np.int64)
        if width == 0 or N == 0:
            return out[:, :width]
        if chain == "uniform":
            return rng.integers(G, size=(N, width))
        if chain == "shared":
            init = np.broadcast_to(self.shared_init, (N, G))
        else:
            init = self.type_init[types]
        out[:, 0] = _sample_rows(rng, init)
        for j in range(1, width):
            if chain == "shared":
                rows = self.shared_trans[out[:, j - 1]]
            else:
                rows = self.type_trans[types, out[:, j - 1]]
            out[:, j] = _sample_rows(rng, rows)
        return out

    # -- assembling variable-length sequences ------------------------------------------------
    def format_len(self, K: int, grammar: bool) -> int:  # padded ICL (+Grm) length, K demos
        return self.cfg.format_len(K, grammar)

    @staticmethod
    def _compress(tok, role, loss, valid, T):
        """Slots (B, S) with a validity mask -> left-aligned (B, T) arrays, PAD on the right."""
        B = tok.shape[0]
        pos = np.cumsum(valid, axis=1) - 1
        rows = np.nonzero(valid)[0]
        cols = pos[valid]
        out_t = np.full((B, T), PAD, dtype=np.int64)
        out_r = np.zeros((B, T), dtype=np.int64)
        out_l = np.zeros((B, T), dtype=bool)
        out_t[rows, cols] = tok[valid]
        out_r[rows, cols] = role[valid]
        out_l[rows, cols] = loss[valid]
        return out_t, out_r, out_l, pos

    def _tuples(self, subj, types, glen, gram, with_attr, query=False, order=None):
        """Slots for one tuple per row: (B, W) token / role / valid / loss-target arrays.

        ``gram`` (B, gw) grammar indices of which the first ``glen`` are used; ``order``
        ("sga" / "gsa") places the grammar, the PT order ``cfg.order`` by default."""
        B = subj.shape[0]
        gw = gram.shape[1]
        s_tok = self.subject_id(subj)[:, None]
        g_tok = self.grammar_id(gram)
        g_valid = np.arange(gw)[None, :] < glen[:, None]
        srole = ROLES["query_subject"] if query else ROLES["subject"]
        grole = ROLES["query_grammar"] if query else ROLES["grammar"]
        parts_t, parts_r, parts_v = [], [], []
        subj_part = (s_tok, np.full((B, 1), srole), np.ones((B, 1), bool))
        gram_part = (g_tok, np.full((B, gw), grole), g_valid)
        order = self.cfg.order if order is None else order
        seq = [subj_part, gram_part] if order == "sga" else [gram_part, subj_part]
        if with_attr:
            a_tok = self.answer_id(subj, types)[:, None]
            seq.append((a_tok, np.full((B, 1), ROLES["attribute"]), np.ones((B, 1), bool)))
            seq.append((np.full((B, 1), SEP), np.full((B, 1), ROLES["sep"]),
                        np.ones((B, 1), bool)))
        for t, r, v in seq:
            parts_t.append(t)
            parts_r.append(r)
            parts_v.append(v)
        return (np.concatenate(parts_t, 1), np.concatenate(parts_r, 1),
                np.concatenate(parts_v, 1))

    def _to_batch(self, tok, role, loss, meta) -> Batch:
        tgt = np.full_like(tok, IGNORE)
        tgt[:, :-1] = np.where(loss[:, 1:], tok[:, 1:], IGNORE)
        meta = {k: (torch.as_tensor(v) if isinstance(v, np.ndarray) else v)
                for k, v in meta.items()}
        meta["roles"] = torch.as_tensor(role)
        return Batch(torch.as_tensor(tok), torch.as_tensor(tgt), meta)

    # -- PT ----------------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator, batch_size: int, split: str = "train") -> Batch:
        """PT batches (the pretraining distribution) for every split."""
        return self.sample_pt(rng, batch_size)

    def sample_pt(self, rng: np.random.Generator, batch_size: int, subjects=None) -> Batch:
        """PT sequences: ``n_tuples`` tuples, each with its own subject, type and grammar run.

        meta: ``attr_pos`` (B, n) positions that predict each attribute, ``type``,
        ``subject``, ``answer`` (B, n), ``grammar_len`` (B, n)."""
        c = self.cfg
        B, n = int(batch_size), c.n_tuples
        subjects = np.arange(c.n_subjects) if subjects is None else np.asarray(subjects)
        check(subjects.ndim == 1 and len(subjects) >= 1, "subjects", subjects,
              "a non-empty 1-d array of subject indices")
        subj = subjects[rng.integers(len(subjects), size=(B * n))]
        types = rng.integers(c.n_types, size=B * n)
        glen = rng.integers(c.grammar_len_min, c.grammar_len_max + 1, size=B * n)
        gram = self._grammar_runs(rng, glen, types, c.grammar_len_max, "type")
        t, r, v = self._tuples(subj, types, glen, gram, with_attr=True)
        W = t.shape[1]
        # loss on tokens that are grammar or attribute (predicted by the position before)
        loss = (r == ROLES["grammar"]) | (r == ROLES["attribute"])
        t, r, v, loss = (x.reshape(B, n * W) for x in (t, r, v, loss))
        bos = (np.full((B, 1), BOS), np.full((B, 1), ROLES["bos"]), np.ones((B, 1), bool),
               np.zeros((B, 1), bool))
        t, r, v, loss = (np.concatenate([a, b], 1) for a, b in zip(bos, (t, r, v, loss)))
        tok, role, lmask, _ = self._compress(t, r, loss, v, self.pt_len)
        attr_pos = np.nonzero(role == ROLES["attribute"])[1].reshape(B, n) - 1
        meta = {"format": "pt", "attr_pos": attr_pos, "type": types.reshape(B, n),
                "subject": subj.reshape(B, n),
                "answer": self.answer_id(subj, types).reshape(B, n),
                "grammar_len": glen.reshape(B, n)}
        return self._to_batch(tok, role, lmask, meta)

    # -- ICL / ICL+Grm ---------------------------------------------------------------------------
    def check_demos(self, K: int, subjects) -> None:
        c = self.cfg
        check_range("K (number of demos)", K, 1, c.max_demos, integer=True)
        check(K + 1 <= len(subjects), "K (number of demos)", K,
              f"at most {len(subjects) - 1}: K demos + 1 query need distinct subjects and only "
              f"{len(subjects)} are available")

    def sample_finetune(self, rng: np.random.Generator, batch_size: int, subjects=None,
                        grammar: bool = False, mixed_types: bool = False) -> Batch:
        """A finetuning batch: ICL / ICL+Grm (:meth:`sample_icl`) with K drawn uniformly from
        ``cfg.finetune_ks`` for the whole batch (one draw of ``rng`` per batch)."""
        lo, hi = self.cfg.finetune_ks
        K = int(rng.integers(lo, hi + 1)) if hi > lo else lo
        return self.sample_icl(rng, batch_size, K=K, subjects=subjects, grammar=grammar,
                               mixed_types=mixed_types)

    def sample_icl(self, rng: np.random.Generator, batch_size: int, K: int | None = None,
                   subjects=None, types=None, grammar: bool = False, *,
                   query_subjects=None, demo_subjects=None,
                   mixed_types: bool = False) -> Batch:
        """ICL (``grammar=False``) or ICL+Grm (``grammar=True``) sequences.

        ``subjects``: subject indices demos and query are drawn from (distinct per row; all
        subjects by default). ``types``: None (uniform per row), an int, or (B,) per row.
        ``query_subjects`` (B,) / ``demo_subjects`` (B, K) fix them explicitly (for patching).
        ``mixed_types``: every demo and the query get their own uniform type (no shared type
        in a prompt: the control of CR-2 / CR-3); ``types`` then gives the query's type.
        ICL+Grm tuples place the grammar by ``cfg.iclgrm_order`` whatever the PT order.

        Targets: the answer at ``query_pos``; with ``icl_loss='all'`` also demo attributes
        2..K. meta: ``query_pos``, ``type``, ``query_subject``, ``answer`` (B,),
        ``demo_subjects``, ``demo_attr_pos`` (B, K), ``grammar_len`` (B, K+1), ``roles``."""
        c = self.cfg
        B = int(batch_size)
        K = c.n_demos if K is None else int(K)
        types, chosen = self._icl_types_subjects(rng, B, K, subjects, types, demo_subjects,
                                                 query_subjects)
        if grammar:
            glen = rng.integers(c.iclgrm_len_min, c.iclgrm_len_max + 1, size=(B, K + 1))
            if not c.iclgrm_query_grammar:
                glen[:, K] = 0
            gw = c.iclgrm_len_max
        else:
            glen = np.zeros((B, K + 1), dtype=np.int64)
            gw = 0
        ty = np.repeat(types[:, None], K + 1, 1)
        if mixed_types:
            ty[:, :K] = rng.integers(c.n_types, size=(B, K))
        order = c.iclgrm_order if grammar else None
        gram = self._grammar_runs(rng, glen.reshape(-1), ty.reshape(-1), gw, c.iclgrm_chain)
        d_t, d_r, d_v = self._tuples(chosen[:, :K].reshape(-1), ty[:, :K].reshape(-1),
                                     glen[:, :K].reshape(-1),
                                     gram.reshape(B, K + 1, gw)[:, :K].reshape(B * K, gw),
                                     with_attr=True, order=order)
        W = d_t.shape[1]
        q_t, q_r, q_v = self._tuples(chosen[:, K], types, glen[:, K],
                                     gram.reshape(B, K + 1, gw)[:, K], with_attr=False,
                                     query=True, order=order)
        t = np.concatenate([np.full((B, 1), BOS), d_t.reshape(B, K * W), q_t], 1)
        r = np.concatenate([np.full((B, 1), ROLES["bos"]), d_r.reshape(B, K * W), q_r], 1)
        v = np.concatenate([np.ones((B, 1), bool), d_v.reshape(B, K * W), q_v], 1)
        loss = np.zeros_like(v)
        if c.icl_loss == "all":
            # attributes of demos 2..K: the first demo's type cannot be known
            is_attr = r == ROLES["attribute"]
            first = np.zeros_like(is_attr)
            first[:, 1:1 + W] = True
            loss = is_attr & ~first
        T = self.format_len(K, grammar)
        tok, role, lmask, _ = self._compress(t, r, loss, v, T)
        length = v.sum(1)
        query_pos = length - 1
        answer = self.answer_id(chosen[:, K], types)
        # append the answer target at the query position
        tgt_tok = tok.copy()
        tgt = np.full_like(tok, IGNORE)
        tgt[:, :-1] = np.where(lmask[:, 1:], tgt_tok[:, 1:], IGNORE)
        tgt[np.arange(B), query_pos] = answer
        attr_pos = np.nonzero(role == ROLES["attribute"])[1].reshape(B, K) - 1
        meta = {"format": "iclgrm" if grammar else "icl", "K": K, "mixed_types": mixed_types,
                "query_pos": torch.as_tensor(query_pos), "type": torch.as_tensor(types),
                "query_subject": torch.as_tensor(chosen[:, K]),
                "answer": torch.as_tensor(answer),
                "demo_subjects": torch.as_tensor(chosen[:, :K].copy()),
                "demo_attr_pos": torch.as_tensor(attr_pos),
                "grammar_len": torch.as_tensor(glen), "roles": torch.as_tensor(role)}
        return Batch(torch.as_tensor(tok), torch.as_tensor(tgt), meta)

    def _icl_types_subjects(self, rng: np.random.Generator, B: int, K: int, subjects, types,
                            demo_subjects, query_subjects) -> tuple[np.ndarray, np.ndarray]:
        """(types (B,), subjects (B, K+1): K demos then the query, distinct per row) of an ICL
        batch: drawn from ``rng`` (types first, when not given) unless given."""
        c = self.cfg
        subjects = np.arange(c.n_subjects) if subjects is None else np.asarray(subjects)
        self.check_demos(K, subjects)
        if types is None:
            types = rng.integers(c.n_types, size=B)
        else:
            types = np.broadcast_to(np.asarray(types, dtype=np.int64), (B,)).copy()
            check(bool(((types >= 0) & (types < c.n_types)).all()), "types", types,
                  f"type indices in [0, {c.n_types - 1}]")
        pick = rng.random((B, len(subjects))).argsort(axis=1)[:, :K + 1]
        chosen = subjects[pick]  # (B, K+1) distinct per row
        if demo_subjects is not None:
            chosen[:, :K] = np.asarray(demo_subjects).reshape(B, K)
        if query_subjects is not None:
            chosen[:, K] = np.asarray(query_subjects).reshape(B)
        return types, chosen

    def describe(self) -> dict[str, Any]:
        """Numbers worth reporting next to results: separation, Bayes ceilings, split sizes."""
        c = self.cfg
        return {**self.separation(), "bayes_ceiling_pt": self.bayes_ceiling(),
                "bayes_ceiling_iclgrm_type_chain": self.bayes_ceiling(
                    c.iclgrm_len_min, c.iclgrm_len_max),
                "n_finetune_subjects": len(self.finetune_subjects),
                "n_heldout_subjects": len(self.heldout_subjects), "n_ctx": self.n_ctx,
                "d_vocab": self.d_vocab}
