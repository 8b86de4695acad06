"""Task CR's shared-token variant: its value table and the ideal reader of the demos.

Shared-token variant (``attr_share = r`` in (0, 1], SPEC section 1, CR-8): each attribute
token may belong to more than one type. The vocabulary and its id layout do not change (same
``d_vocab``, same model); only the table ``value_ids`` does. ``n_sh = round(r * V)`` (half up,
``cfg.n_shared_slots``) of each type's V slots are *shared*: their token belongs to exactly two
types. Which slots: a seeded permutation ``perm_l`` of the slots per type (its own rng stream,
``default_rng([seed, 0x5A7])``), the j-th shared slot of type ``l`` being ``perm_l[j]``. Who
shares with whom: a round-robin (circle-method) schedule of perfect matchings of the L types
(L - 1 rounds; for odd L a dummy type is added, L rounds, and a type matched with the dummy
keeps a private token in that round, so it has fewer than ``n_sh`` shared slots). Shared slot
j of every type uses round ``j % n_rounds``: the pair ``(l, l')`` of that round, ``l < l'``,
gets one token, ``A{l}_{perm_l[j]}`` from the lower type's block, placed in slot ``perm_l[j]``
of ``l`` and slot ``perm_l'[j]`` of ``l'``. ``l'``'s own token of that slot is then *dead*: it
belongs to no type and never appears in data. A pair meets in one round only, and a round is
reused only for other j (other slots of the lower type), so the V tokens of a type are
distinct. A shared token keeps the name of its home block. The construction is a pure function
of (cfg, seed); ``attr_share = 0`` gives the default task bit for bit (same kb, chains, split,
samples and scores).

``ideal_type_accuracy`` is the Bayes reader of the type from the demo attribute tokens alone
(the reader the variant's sharing rate is chosen by, before any training:
``icr calibrate shared-rate``); ``CRTask.ideal_type_accuracy`` delegates to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mechinterp_icr.config import check_choice, check_range

if TYPE_CHECKING:
    from mechinterp_icr.tasks.cr import CRTask, CRTaskConfig


def _distinct_draws(rng: np.random.Generator, n: int, K: int, N: int) -> np.ndarray:
    """(n, K) indices into range(N), distinct within a row, each row a uniform ordered
    K-subset: rejection of repeated draws when that is cheap (K^2 <= N), else random keys
    sorted in chunks."""
    if K * K <= N:
        idx = rng.integers(N, size=(n, K))
        todo = np.arange(n)
        while len(todo):
            srt = np.sort(idx[todo], 1)
            todo = todo[(srt[:, 1:] == srt[:, :-1]).any(1)]
            idx[todo] = rng.integers(N, size=(len(todo), K))
        return idx
    out = np.empty((n, K), dtype=np.int64)
    step = max(1, 4_000_000 // N)
    for i in range(0, n, step):
        b = min(step, n - i)
        out[i:i + b] = rng.random((b, N)).argsort(1)[:, :K]
    return out




def _round_robin(n_types: int) -> list[list[tuple[int, int | None]]]:
    """Circle-method round-robin over ``n_types`` types: a list of rounds, each a perfect
    matching given as pairs ``(a, b)`` with ``a < b``, or ``(a, None)`` for the type matched
    with the dummy added when ``n_types`` is odd. n_types - 1 rounds when it is even, n_types
    when it is odd; every pair of types meets in exactly one round."""
    players: list[int | None] = list(range(n_types)) + ([None] if n_types % 2 else [])
    n = len(players)
    rounds = []
    for r in range(n - 1):
        rest = players[1:]
        arr = [players[0]] + rest[r:] + rest[:r]
        pairs = []
        for i in range(n // 2):
            a, b = arr[i], arr[n - 1 - i]
            if a is None:
                a, b = b, a
            pairs.append((a, b) if b is None else (min(a, b), max(a, b)))
        rounds.append(pairs)
    return rounds


def _value_table(cfg: CRTaskConfig, seed: int, attr_base: int) -> tuple[np.ndarray, np.ndarray]:
    """(value_ids, shared): the (n_types, V) token id of every type's value slot and whether that
    slot's token is shared with another type (module docstring, shared-token variant)."""
    n_types, V = cfg.n_types, cfg.n_values
    ids = attr_base + np.arange(n_types)[:, None] * V + np.arange(V)[None, :]
    shared = np.zeros((n_types, V), dtype=bool)
    n_sh = cfg.n_shared_slots
    if n_sh == 0 or n_types < 2:
        return ids, shared
    rng = np.random.default_rng([int(seed), 0x5A7])
    # perm[typ, j]: the j-th shared slot of type typ
    perm = np.stack([rng.permutation(V) for _ in range(n_types)])
    rounds = _round_robin(n_types)
    for j in range(n_sh):
        for a, b in rounds[j % len(rounds)]:
            if b is None:
                continue  # matched with the dummy: a keeps its private token in this slot
            ids[b, perm[b, j]] = ids[a, perm[a, j]]  # the lower type's token, in both
            shared[a, perm[a, j]] = shared[b, perm[b, j]] = True
    assert all(len(np.unique(row)) == V for row in ids), "a type with a repeated value token"
    return ids, shared


def _table_bytes(cfg: CRTaskConfig) -> int:
    """An upper bound on the bytes ``cfg.build()`` allocates, from the config alone, so a task
    too large for the memory ceiling is refused before any table exists. Every table of
    ``CRTask`` is counted with its temporaries: the vocabulary (a name string, a list slot,
    an index entry and an int per token: about 200 bytes), ``type_member`` (d_vocab x L bool)
    and the per-token arrays derived from it (int64), the knowledge base (M x L int64), the
    value tables and the shared-slot permutations (L x V), the type chains (L x G x G
    float64, drawn, normalised and mixed: 6 copies) and the subject split.
    ``tests/unit/test_reliability_estimates.py`` measures the real allocation against it."""
    M, G, L, V = cfg.n_subjects, cfg.n_grammar, cfg.n_types, cfg.n_values
    d = cfg.vocab_size()
    vocab = 200 * d
    membership = d * L + 5 * 8 * d  # type_member; counts, argmax, where temporaries
    values = 8 * 8 * L * V + 2 * L * V  # value_ids, index grids, unique, perms; shared
    kb = 8 * M * L + 4 * 8 * M  # knowledge base; permutation, split
    chains = 6 * 8 * L * G * G + 6 * 8 * L * G + 8 * 8 * G * G
    return int(vocab + membership + values + kb + chains + (1 << 16))


def ideal_type_accuracy(task: CRTask, K: int, n: int = 20000, seed: int = 0,
                        subjects=None, reader: str = "generative") -> float:
    """Type accuracy of the Bayes reader of ICL prompts from their K demo attribute tokens
    alone (no subject identities, no grammar), by Monte Carlo over ``n`` prompts drawn as
    ``sample_icl`` draws them: a uniform type l and K distinct subjects from ``subjects``
    (default: the held-out subjects), demo tokens ``answer_id(s_i, l)``.

    ``reader='generative'`` (the one the shared-token rate is chosen by, SPEC CR-8): the
    reader knows the data-generating process, not this knowledge base - every subject's
    type-l value is uniform over the type's V slots, so P(a | l) = [a is a value of l] / V
    and the posterior is uniform over the types every demo token belongs to. At K = 1 this
    is about 1 - n_shared_slots / (2 V) (the knowledge base's draws of the shared values
    spread it by a few hundredths between task seeds).

    ``reader='kb'`` (reported beside): the reader also knows this knowledge base's counts.
    The posterior is P(l | a_1..a_K) ~ prior(l) P(a_1..a_K | l) with the uniform prior and
    the exact likelihood for this knowledge base: demos are K draws without replacement
    from the subjects, so P(a_1..a_K | l) ~ prod_i (c_l(a_i) - m_i), where c_l(a) counts
    the subjects whose type-l attribute is token a and m_i the earlier demos with the same
    token as demo i (the denominator N (N-1) .. is the same for every type). With distinct
    tokens this is the product of the empirical frequencies c_l(a_i) / N. A prompt scores
    1 / (number of types tied at the top) when the true type is among them, else 0.

    1.0 for the default task (disjoint types), about 1 - n_shared_slots / (2 V) at K = 1
    in the variant with many subjects (more with few: the counts of a shared token's two
    types differ by chance and the reader takes the larger). The prompts are a pure
    function of (task seed, ``seed``, K)."""
    c = task.cfg
    subjects = task.heldout_subjects if subjects is None else np.asarray(subjects)
    task.check_demos(K, subjects)
    check_range("n (ideal reader prompts)", n, 1, 100_000_000, integer=True)
    check_choice("reader", reader, ["generative", "kb"])
    n_types, N = c.n_types, len(subjects)
    live = task.live_attr_ids
    ans = np.searchsorted(live, task.answer_id(subjects[:, None], np.arange(n_types)[None, :]))
    counts = np.zeros((n_types, len(live)), dtype=np.int64)  # c_l(a) over the subjects used
    np.add.at(counts, (np.broadcast_to(np.arange(n_types), ans.shape), ans), 1)
    rng = np.random.default_rng([task.seed, 0x1DEA, int(seed), int(K)])
    types = rng.integers(n_types, size=n)
    idx = _distinct_draws(rng, n, K, N)  # (n, K) positions in ``subjects``
    toks = ans[idx, types[:, None]]  # (n, K) demo tokens (indices into ``live``)
    if reader == "generative":  # membership only: the types every demo token belongs to
        counts = task.type_member[live].T.astype(np.int64)  # (n_types, n_live)
        m = np.zeros(toks.shape, dtype=np.int64)
    else:
        earlier = np.tril(np.ones((K, K), dtype=bool), -1)
        m = ((toks[:, :, None] == toks[:, None, :]) & earlier).sum(-1)  # (n, K)
    left = counts[:, toks] - m[None]  # (n_types, n, K) tokens of each type still available
    with np.errstate(divide="ignore"):
        logp = np.log(np.maximum(left, 0)).sum(-1)  # (n_types, n)
    top = logp >= logp.max(0, keepdims=True) - 1e-9
    hit = top[types, np.arange(n)]
    return float((hit / top.sum(0)).mean())


def type_chance(task: CRTask) -> float:
    """The type accuracy of an uninformed attribute guess: a live attribute token drawn
    uniformly is a value of the prompt's type (uniform over the L types) with this
    probability. 1/L in the default task (disjoint vocabularies); above 1/L in the shared-token
    variant, where a token of two types is right for both."""
    live = np.asarray(task.live_attr_ids)
    return float(task.type_member[live].mean())
