"""OV / QK circuits as ``transformer_lens.FactoredMatrix``, memory-recall probes, similarity to
the construction.

- ``full_ov(model, l, h)`` = ``W_E W_V W_O W_U`` (token -> logit), ``full_qk`` =
  ``W_E W_Q W_K^T W_E^T`` (query token x key token), ``pos_qk`` = ``W_pos W_Q W_K^T W_pos^T``
  (the position-position block). ``restrict(fm, rows, cols)`` is the dense block on token
  groups, computed as ``A[rows] @ B[:, cols]`` without forming the full matrix.
- Memory-recall probes (Bietti et al., *Birth of a Transformer*: is an association stored in a
  weight matrix?), for the CR task:
  - **OV probe** (``ov_probe``): for every attribute token ``a`` of type ``l``, rank the other
    attribute tokens by the head's full OV output ``W_E[a] W_OV W_U``.
    ``ov_precision`` = mean share of same-type attributes among the top ``V-1`` (chance
    ``(V-1)/(LV-1)``); ``ov_top1`` = share of attribute tokens whose best other attribute has
    the same type; ``ov_strict`` = share whose same-type attributes all rank above every other
    type's (the construction scores 1 on all three).
  - **KQ probe** (``kq_probe``): on ICL prompts, ``kq_top_attr`` = share of queries whose
    highest-attention key is an in-context attribute; ``kq_mass_attr`` = mean mass on them.
  - **Subject OV probe** (``subject_ov_probe``): share of (subject, type) pairs where the
    subject's own value ranks first among that type's values in ``W_E[s] W_OV W_U``.
- ``circuit_blocks``: the OV and QK blocks a figure draws (``analyses/ov_qk.py``), rows
  centred, including the position-position QK block ``full_qk`` leaves out.
- ``construction_similarity``: cosine between a trained head's row-centred OV blocks and the
  construction's (attribute x attribute for the Relation head, subject x attribute for the
  Subject head).
"""

from __future__ import annotations

import numpy as np
import torch
from transformer_lens import FactoredMatrix

__all__ = [
    "centred_cosine",
    "circuit_blocks",
    "construction_similarity",
    "full_ov",
    "full_qk",
    "head_probes",
    "kq_probe",
    "ov_probe",
    "pos_qk",
    "probes_over_checkpoints",
    "restrict",
    "subject_ov_probe",
]


def full_ov(model, layer: int, head: int) -> FactoredMatrix:
    """Token -> logit OV circuit ``W_E W_V W_O W_U`` (d_vocab x d_vocab)."""
    a = model.blocks[layer].attn
    return FactoredMatrix(model.W_E @ a.W_V[head], a.W_O[head] @ model.W_U)


def full_qk(model, layer: int, head: int) -> FactoredMatrix:
    """Query token x key token QK circuit ``W_E W_Q W_K^T W_E^T`` (no positions)."""
    a = model.blocks[layer].attn
    return FactoredMatrix(model.W_E @ a.W_Q[head], (model.W_E @ a.W_K[head]).T)


def pos_qk(model, layer: int, head: int) -> FactoredMatrix:
    """Position x position block ``W_pos W_Q W_K^T W_pos^T``."""
    a = model.blocks[layer].attn
    return FactoredMatrix(model.W_pos @ a.W_Q[head], (model.W_pos @ a.W_K[head]).T)


def restrict(fm: FactoredMatrix, rows, cols) -> torch.Tensor:
    """Dense block ``fm[rows][:, cols]`` (token-group x token-group)."""
    r = torch.as_tensor(np.asarray(rows), dtype=torch.long, device=fm.A.device)
    c = torch.as_tensor(np.asarray(cols), dtype=torch.long, device=fm.B.device)
    return (fm.A[r] @ fm.B[:, c]).detach().cpu()


@torch.no_grad()
def ov_probe(model, task, layer: int, head: int) -> dict[str, float]:
    """Does the head's OV map each attribute to its own type's attributes? (see module doc)"""
    L, V = task.cfg.n_types, task.cfg.n_values
    attr = task.attr_ids
    M = restrict(full_ov(model, layer, head), attr, attr)  # (LV, LV)
    n = L * V
    M = M.clone()
    M[torch.arange(n), torch.arange(n)] = -float("inf")  # rank the *other* attributes
    types = torch.arange(n) // V
    same = types[:, None] == types[None, :]  # (n, n)
    order = M.argsort(-1, descending=True)[:, :n - 1]  # self is last
    same_sorted = torch.gather(same, 1, order)  # (n, n-1)
    prec = same_sorted[:, :V - 1].float().mean(-1)
    top1 = same_sorted[:, 0].float()
    strict = same_sorted[:, :V - 1].all(-1).float()
    return {"ov_precision": float(prec.mean()), "ov_top1": float(top1.mean()),
            "ov_strict": float(strict.mean())}


@torch.no_grad()
def kq_probe(model, batch, layer: int, head: int) -> dict[str, float]:
    """On ICL prompts (``meta['roles']``, ``meta['query_pos']``): does the query attend to the
    in-context attributes?"""
    from mechinterp_icr.interp.attention import attention_row

    row = attention_row(model, batch.tokens, layer, head, batch.meta["query_pos"])  # (B, T)
    is_attr = batch.meta["roles"] == 5
    top = row.argmax(-1)
    B = row.shape[0]
    return {"kq_top_attr": float(is_attr[torch.arange(B), top].float().mean()),
            "kq_mass_attr": float((row * is_attr.float()).sum(-1).mean())}


@torch.no_grad()
def subject_ov_probe(model, task, layer: int, head: int) -> float:
    """Share of (subject, type) whose own value ranks first among the type's values in the
    head's OV output for the subject token."""
    L, V = task.cfg.n_types, task.cfg.n_values
    M = restrict(full_ov(model, layer, head), task.subject_ids, task.attr_ids)  # (S, LV)
    best = M.reshape(-1, L, V).argmax(-1).numpy()  # (S, L)
    return float((best == task.kb).mean())


def centred_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two matrices after centring every row (logits are shift-free)."""
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    return float((a * b).sum() / (a.norm() * b.norm() + 1e-12))


@torch.no_grad()
def construction_similarity(model, task, layer: int = 0) -> list[dict]:
    """Per head: cosine of its OV blocks with the construction's Relation (ICL variant) and
    Subject heads' blocks."""
    from mechinterp_icr.models.construction import RELATION_HEAD, SUBJECT_HEAD, build_construction

    ref = build_construction(task, "icl", device="cpu")
    attr, subj = task.attr_ids, task.subject_ids
    ref_rel = restrict(full_ov(ref, 0, RELATION_HEAD), attr, attr)
    ref_sub = restrict(full_ov(ref, 0, SUBJECT_HEAD), subj, attr)
    out = []
    for h in range(model.cfg.n_heads):
        fm = full_ov(model, layer, h)
        out.append({"layer": layer, "head": h,
                    "sim_relation_ov": centred_cosine(restrict(fm, attr, attr), ref_rel),
                    "sim_subject_ov": centred_cosine(restrict(fm, subj, attr), ref_sub)})
    return out


@torch.no_grad()
def head_probes(model, task, batch) -> list[dict]:
    """All probes for every head (one row per head)."""
    rows = []
    for l in range(model.cfg.n_layers):
        for h in range(model.cfg.n_heads):
            rows.append({"layer": l, "head": h, **ov_probe(model, task, l, h),
                         **kq_probe(model, batch, l, h),
                         "subject_ov": subject_ov_probe(model, task, l, h)})
    return rows


def probes_over_checkpoints(run, selection: str, n: int = 128, seed: int = 0) -> list[dict]:
    """``head_probes`` + ``construction_similarity`` per head for every selected checkpoint of
    a CR run (held-out-subject ICL prompts), one model in memory at a time."""
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    rd = run if isinstance(run, RunDir) else RunDir(run)
    _, task, _ = load_run_model(rd)
    batch = task.sample_icl(np.random.default_rng([seed, 0xC1C]), n,
                            subjects=task.heldout_subjects)

    def fn(ck, model):
        heads = head_probes(model, task, batch)
        for l in range(model.cfg.n_layers):
            for s in construction_similarity(model, task, l):
                for h in heads:
                    if h["layer"] == l and h["head"] == s["head"]:
                        h.update(sim_relation_ov=s["sim_relation_ov"],
                                 sim_subject_ov=s["sim_subject_ov"])
        return {"heads": heads}

    out = []
    for row in map_checkpoints(rd, selection, fn):
        for h in row.pop("heads"):
            out.append({**row, **h})
    return out


# the most tokens a circuit block keeps on an axis (a figure of a larger vocabulary would be
# unreadable; a CR task's groups are well under it)
MAX_BLOCK_TOKENS = 256


def _groups(model, task) -> list[tuple[str, np.ndarray]]:
    """The token groups a head's circuits are read on: a CR task's subjects, the attribute
    tokens of each type (``type 0``, ...; ids are type-major) and grammar tokens; any other
    task's whole vocabulary."""
    if all(hasattr(task, k) for k in ("subject_ids", "attr_ids", "grammar_ids")):
        types = np.asarray(task.attr_ids).reshape(int(task.cfg.n_types), -1)  # type-major
        return [("subjects", np.asarray(task.subject_ids)),
                *((f"type {i}", ids) for i, ids in enumerate(types)),
                ("grammar", np.asarray(task.grammar_ids))]
    return [("tokens", np.arange(int(model.cfg.d_vocab)))]


def _centre_rows(m: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Each row minus its mean (over the unmasked entries): what a softmax over the row reads."""
    if mask is None:
        return m - m.mean(-1, keepdim=True)
    mean = (m * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(mask.bool(), m - mean, torch.full_like(m, float("nan")))


@torch.no_grad()
def circuit_blocks(model, task, layer: int, head: int,
                   max_tokens: int = MAX_BLOCK_TOKENS) -> list[dict]:
    """The blocks of one head's OV and QK circuits as labelled dense matrices, each row
    centred (an OV row feeds a softmax over the vocabulary, a QK row one over the keys, so
    only differences within a row matter):

    - ``OV`` (``full_ov``, token -> logit): on a CR task attribute -> attribute (does an
      in-context attribute promote its own type's values?) and subject -> attribute (does a
      subject write its own attributes?); else token -> token;
    - ``QK`` (``full_qk``, query token x key token, positions left out): on a CR task subject
      queries against attribute, subject and grammar keys; else token x token;
    - ``QK positions`` (``pos_qk``, query position x key position; keys after the query are
      masked: NaN), which ``full_qk`` leaves out and which can carry a head's pattern alone.

    Each block: ``{"name", "what", "z" (rows x cols, a list of lists), "rows", "cols" (labels),
    "row_groups", "col_groups" ([(label, first index, last index)])}``. The token blocks are
    left out when a group has more than ``max_tokens`` tokens (a vocabulary of thousands of
    random-embedding tokens): the position block alone is returned."""
    groups = dict(_groups(model, task))
    too_big = any(len(ids) > max_tokens for ids in groups.values())
    names = getattr(getattr(task, "vocab", None), "names", None)

    def label(i):
        return names[int(i)] if names is not None and int(i) < len(names) else str(int(i))

    def block(name, what, fm, row_groups, col_groups, mask=None):
        rows = np.concatenate([groups[g] for g in row_groups])
        cols = np.concatenate([groups[g] for g in col_groups])
        z = _centre_rows(restrict(fm, rows, cols).float(), mask)

        def spans(gs):
            out, start = [], 0
            for g in gs:
                out.append((g, start, start + len(groups[g]) - 1))
                start += len(groups[g])
            return out

        return {"name": name, "what": what, "z": z.tolist(), "rows": [label(i) for i in rows],
                "cols": [label(i) for i in cols], "row_groups": spans(row_groups),
                "col_groups": spans(col_groups)}

    ov, qk = full_ov(model, layer, head), full_qk(model, layer, head)
    if too_big:
        out = []
    elif "subjects" in groups:
        attrs = [g for g in groups if g.startswith("type ")]
        out = [block("OV attribute -> attribute", "W_E W_OV W_U, rows centred", ov,
                     attrs, attrs),
               block("OV subject -> attribute", "W_E W_OV W_U, rows centred", ov,
                     ["subjects"], attrs),
               block("QK subject query x key token", "W_E W_QK W_E^T, rows centred", qk,
                     ["subjects"], [*attrs, "subjects", "grammar"])]
    else:
        out = [block("OV token -> token", "W_E W_OV W_U, rows centred", ov, ["tokens"],
                     ["tokens"]),
               block("QK query token x key token", "W_E W_QK W_E^T, rows centred", qk,
                     ["tokens"], ["tokens"])]
    n_ctx = int(model.cfg.n_ctx)
    pos = torch.arange(n_ctx)
    groups["positions"] = pos.numpy()
    causal = (pos[None, :] <= pos[:, None]).float()
    blk = block("QK positions", "W_pos W_QK W_pos^T, keys after the query masked, rows "
                "centred", pos_qk(model, layer, head), ["positions"], ["positions"], causal)
    blk["rows"] = blk["cols"] = [str(i) for i in range(n_ctx)]
    out.append(blk)
    return out
