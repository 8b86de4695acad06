"""The units of the constructed memory over random embeddings, evaluated sparsely.

A relation unit ``(s, r, a)`` adds ``relu(c . E_s + c . E_a - theta_rel - gate)^2`` to the
logit of ``r`` (``c`` the copy block at the step-1 position, ``gate`` 0 or the memory's gate
per sequence). With ``theta_rel > 0`` and ``gate >= 0`` the unit can be non-zero only when
``c . E_s`` or ``c . E_a`` exceeds half of ``theta_rel + gate``: if both are at most half, their
sum is at most the threshold and the unit is exactly 0 in value and in gradient. Over random
embeddings only the subjects and answers the attention copies (the context's) and a thin tail
of the others pass that test, a few percent of the ``n R`` units at the registered widths, so
:func:`relation_block` evaluates those units only. It equals the dense sum over every unit to
float64 rounding (a test pins it against the dense form, values and gradients).

An answer unit ``(s, r, a)`` adds ``relu(c . E_s + x . E_r - theta_ans - gate)^2`` to the logit
of ``a`` (``x`` the current token's embedding): :func:`answer_block` computes the n products
``c . E_s`` and the R products ``x . E_r`` and evaluates only the pairs (s, r) whose sum passes
the threshold (at the step-2 position only the query relation's units of a few subjects).

The relation block's test products ``c . E`` are computed without gradient and in float32
(half the cost of float64; a dot product of length d errs by at most about ``d u |c| |E|``,
``u = 2^-24``, and four times that is subtracted from the test's threshold, so the candidates
are a superset of the units that fire); the candidates' inputs are recomputed in the input's
precision as row-wise dot products, so the backward pass costs the candidates only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["SPARSE_MIN_UNITS", "UnitIndex", "answer_block", "answer_block_dense",
           "relation_block", "relation_block_dense"]

# below this many units the dense form is as fast or faster (its cost is B x units; the sparse
# one pays for the candidate search): at n = 128 (768 units) dense is faster at every batch
# size, at n = 512 (3072 units) the sparse form is 3-6x faster from 64 sequences up
SPARSE_MIN_UNITS = 2048


@dataclass(frozen=True)
class UnitIndex:
    """The units grouped by subject and by answer (CSR): ``by_s[ptr_s[i]: ptr_s[i + 1]]`` are
    the units of subject ``i`` and ``by_a[ptr_a[j]: ptr_a[j + 1]]`` those of answer ``j``;
    ``table[s, r]`` is the unit of (s, r), -1 where there is none."""

    by_s: torch.Tensor
    ptr_s: torch.Tensor
    by_a: torch.Tensor
    ptr_a: torch.Tensor
    table: torch.Tensor

    @classmethod
    def build(cls, s_idx: torch.Tensor, r_idx: torch.Tensor, a_idx: torch.Tensor, n: int,
              R: int, m: int) -> UnitIndex:
        """From the units' subject (0..n-1), relation (0..R-1) and answer (0..m-1) indices
        (one unit per (s, r) at most, as the memory stores one answer per pair)."""
        def csr(keys: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
            order = torch.argsort(keys, stable=True)
            ptr = torch.zeros(size + 1, dtype=torch.long)
            ptr[1:] = torch.cumsum(torch.bincount(keys, minlength=size), 0)
            return order, ptr
        by_s, ptr_s = csr(s_idx, n)
        by_a, ptr_a = csr(a_idx, m)
        table = torch.full((n, R), -1, dtype=torch.long)
        table[s_idx, r_idx] = torch.arange(len(s_idx))
        return cls(by_s, ptr_s, by_a, ptr_a, table)


def _expand(rows: torch.Tensor, keys: torch.Tensor, order: torch.Tensor, ptr: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, unit) pairs: every unit of each ``keys[i]`` (CSR ``order``/``ptr``) with
    ``rows[i]``."""
    start, count = ptr[keys], ptr[keys + 1] - ptr[keys]
    total = int(count.sum())
    first = torch.cumsum(count, 0) - count
    offset = torch.arange(total) - first.repeat_interleave(count)
    return rows.repeat_interleave(count), order[start.repeat_interleave(count) + offset]


def relation_block_dense(c: torch.Tensor, E_s: torch.Tensor, E_a: torch.Tensor,
                         s_idx: torch.Tensor, r_idx: torch.Tensor, a_idx: torch.Tensor,
                         R: int, theta: float, gate: torch.Tensor) -> torch.Tensor:
    """Every unit evaluated: ``(B, R)``, the sum over units of relation r of
    ``relu(c . E_s + c . E_a - theta - gate)^2`` (``E_s`` (n, d) the subject embeddings,
    ``E_a`` (m, d) the answers', units given by their subject, relation and answer indices)."""
    x = (c @ E_s.T)[:, s_idx] + (c @ E_a.T)[:, a_idx]
    act = F.relu(x - theta - gate[:, None]).pow(2)
    return torch.zeros(c.shape[0], R, dtype=c.dtype).index_add(1, r_idx, act)


def relation_block(c: torch.Tensor, E_s: torch.Tensor, E_a: torch.Tensor,
                   s_idx: torch.Tensor, r_idx: torch.Tensor, a_idx: torch.Tensor,
                   R: int, theta: float, gate: torch.Tensor,
                   index: UnitIndex | None = None, rows: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """:func:`relation_block_dense`, evaluating only the units that can be non-zero (module
    docstring); ``index``: :meth:`UnitIndex.build` of the units, ``rows``: each unit's
    ``E_s + E_a`` (U, d) (both made here when None; a caller evaluating the same units
    repeatedly keeps them). With
    ``theta <= 0`` or a negative gate no unit can be ruled out, and below
    :data:`SPARSE_MIN_UNITS` units the dense form is cheaper: every unit is evaluated."""
    if len(s_idx) < SPARSE_MIN_UNITS or theta <= 0 or bool((gate < 0).any()):
        return relation_block_dense(c, E_s, E_a, s_idx, r_idx, a_idx, R, theta, gate)
    if index is None:
        index = UnitIndex.build(s_idx, r_idx, a_idx, E_s.shape[0], R, E_a.shape[0])
    B = c.shape[0]
    with torch.no_grad():
        half = (theta + gate) / 2
        bs, ss = _float32_above(c.detach(), E_s, half)
        ba, aa = _float32_above(c.detach(), E_a, half)
    b1, u1 = _expand(bs, ss, index.by_s, index.ptr_s)
    b2, u2 = _expand(ba, aa, index.by_a, index.ptr_a)
    U = len(s_idx)
    key = torch.unique(torch.cat([b1 * U + u1, b2 * U + u2]))  # sorted: by row, then unit
    b, u = key // U, key % U
    if rows is None:
        rows = E_s[s_idx] + E_a[a_idx]
    x = (c[b] * rows[u]).sum(-1)  # c . (E_s + E_a), one gather per candidate
    act = F.relu(x - theta - gate[b]).pow(2)
    return torch.zeros(B * R, dtype=c.dtype).index_add(0, b * R + r_idx[u], act).view(B, R)


def _float32_above(c: torch.Tensor, E: torch.Tensor, thr: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) pairs with ``c . E_j > thr[row]`` for every pair that passes in float64:
    the products in float32 against the threshold less their rounding-error bound."""
    scale = c.norm(dim=1) * float(E.norm(dim=1).max())
    low = (thr - 4 * (c.shape[1] + 2) * 2.0 ** -24 * scale)[:, None]
    return torch.nonzero(c.float() @ E.float().T > low, as_tuple=True)


def answer_block_dense(c: torch.Tensor, x: torch.Tensor, E_s: torch.Tensor,
                       E_r: torch.Tensor, s_idx: torch.Tensor, r_idx: torch.Tensor,
                       a_idx: torch.Tensor, m: int, theta: float, gate: torch.Tensor
                       ) -> torch.Tensor:
    """Every unit evaluated: ``(B, m)``, the sum over units of answer a of
    ``relu(c . E_s + x . E_r - theta - gate)^2`` (``x`` (B, d) the current tokens'
    embeddings, ``E_r`` (R, d) the relations')."""
    y = (c @ E_s.T)[:, s_idx] + (x @ E_r.T)[:, r_idx]
    act = F.relu(y - theta - gate[:, None]).pow(2)
    return torch.zeros(c.shape[0], m, dtype=c.dtype).index_add(1, a_idx, act)


def answer_block(c: torch.Tensor, x: torch.Tensor, E_s: torch.Tensor, E_r: torch.Tensor,
                 s_idx: torch.Tensor, r_idx: torch.Tensor, a_idx: torch.Tensor, m: int,
                 theta: float, gate: torch.Tensor, index: UnitIndex | None = None
                 ) -> torch.Tensor:
    """:func:`answer_block_dense`, evaluating only the units that can fire: (s, r) with
    ``c . E_s > theta + gate - x . E_r`` (the products are the dense form's, so each unit's
    value is the dense form's exactly; the test has a 1e-9 margin for their rounding). Below
    :data:`SPARSE_MIN_UNITS` units every unit is evaluated."""
    if len(s_idx) < SPARSE_MIN_UNITS:
        return answer_block_dense(c, x, E_s, E_r, s_idx, r_idx, a_idx, m, theta, gate)
    R = E_r.shape[0]
    if index is None:
        index = UnitIndex.build(s_idx, r_idx, a_idx, E_s.shape[0], R, m)
    B = c.shape[0]
    P, xr = c @ E_s.T, x @ E_r.T  # (B, n), (B, R)
    with torch.no_grad():
        low = theta + gate[:, None] - xr.detach() - 1e-9  # (B, R)
        b, s, r = torch.nonzero(P.detach()[:, :, None] > low[:, None, :], as_tuple=True)
        u = index.table[s, r]
        keep = u >= 0  # a pair the memory holds
        b, s, r, u = b[keep], s[keep], r[keep], u[keep]
    act = F.relu(P[b, s] + xr[b, r] - theta - gate[b]).pow(2)
    return torch.zeros(B * m, dtype=c.dtype).index_add(0, b * m + a_idx[u], act).view(B, m)
