"""The attention-only Relation-head + Subject-head construction of SPEC section 1 (CR-6).

A 1-layer, 2-head, attention-only ``HookedTransformer`` (built by ``models.factory``) whose
weights are set by hand. Residual stream (``d_model = 2 * d_vocab + 2``), all blocks orthonormal:

- ``in``  block (d_vocab): one-hot token identity, written by ``W_E``;
- ``out`` block (d_vocab): one-hot *output* directions ``u(t)``, read by ``W_U`` (scaled by
  ``out_scale``); only the heads write here, so the skip connection never votes;
- ``const`` (1): 1 for every token (``W_E``), the query vector of both heads;
- ``ramp`` (1): the position ``p`` (``W_pos``), a recency bonus for the keys.

Heads (score = q . k, the 1/sqrt(d_head) scale is undone in ``W_Q``):

- **Subject head (head 1)**, both variants: score ``beta * [key is a subject] + gamma * p``:
  attends to the most recent subject (in ICL the query subject itself; in PT the tuple's
  subject). OV: ``S_s -> -sum u(a)`` over every attribute that is *not* one of s's attributes.
- **Relation head (head 0)**
  - PT: score ``beta * [key is a relation token] + gamma * p`` (the current tuple's relation
    token); OV: ``G_l -> +sum_v u(A{l}_{v})``. PT format here is the one-token "relation"
    variant allowed by SPEC: ``[BOS] s r_l a [SEP] s' r_l' a' [SEP] ...`` with ``r_l = G_l``,
    the attribute predicted at the relation token.
  - ICL: score ``beta * [key is an attribute]`` (uniform over the in-context attributes);
    OV: ``A{l}_{v} -> sum_v' u(A{l}_{v'})``.

Together: the right attribute gets +1, the subject's attributes of other types 0, the other
values of the right type 0 and everything else -1 (times ``out_scale``): the unique argmax.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, ModelConfig, check_choice
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.tasks.base import IGNORE, Batch

__all__ = [
    "RELATION_HEAD",
    "zero_head_ov",
    "SUBJECT_HEAD",
    "build_construction",
    "construction_model_config",
    "evaluate_icl_ties",
    "evaluate_pt_relation",
    "sample_pt_relation",
    "tie_aware_scores",
]

RELATION_HEAD, SUBJECT_HEAD = 0, 1


def construction_model_config(task) -> ModelConfig:
    D = 2 * task.d_vocab + 2
    return ModelConfig(n_layers=1, n_heads=2, d_model=D, d_head=D, d_mlp=1, attn_only=True,
                       normalization="none", d_vocab=task.d_vocab, n_ctx=task.n_ctx)


@torch.no_grad()
def build_construction(task, variant: str = "icl", beta: float = 30.0, gamma: float = 5.0,
                       out_scale: float = 10.0, device: str = "cpu"):
    """The constructed model for ``task`` (a CRTask): ``variant`` ``"pt"`` or ``"icl"``."""
    check_choice("construction.variant", variant, ["pt", "icl"])
    c = task.cfg
    if getattr(c, "attr_share", 0.0) > 0:
        raise ConfigError(f"task.attr_share = {c.attr_share} is not allowed for the "
                          "construction; expected 0 (its Relation head writes a type's whole "
                          "value block, A{l}_0 .. A{l}_{V-1}, which needs the default task's "
                          "disjoint types)")
    if variant == "pt" and c.n_grammar < c.n_types:
        raise ConfigError(f"task.n_grammar = {c.n_grammar} is not allowed for the PT "
                          f"construction; expected at least n_types = {c.n_types} (G_l is the "
                          "relation token of type l)")
    model = build_model(construction_model_config(task), seed=0, device=device)
    nv = task.d_vocab
    D = model.cfg.d_model
    IN, OUT, CONST, RAMP = 0, nv, 2 * nv, 2 * nv + 1
    scale = math.sqrt(model.cfg.d_head)  # TL divides scores by sqrt(d_head)
    for p in model.parameters():
        p.zero_()

    W_E = torch.zeros(nv, D)
    W_E[torch.arange(nv), IN + torch.arange(nv)] = 1.0
    W_E[:, CONST] = 1.0
    model.embed.W_E.copy_(W_E)
    W_pos = torch.zeros(model.cfg.n_ctx, D)
    W_pos[:, RAMP] = torch.arange(model.cfg.n_ctx, dtype=torch.float32)
    model.pos_embed.W_pos.copy_(W_pos)
    W_U = torch.zeros(D, nv)
    W_U[OUT + torch.arange(nv), torch.arange(nv)] = out_scale
    model.unembed.W_U.copy_(W_U)

    subj = torch.as_tensor(task.subject_ids)
    attr = torch.as_tensor(task.attr_ids)
    rel_tokens = torch.as_tensor(task.grammar_ids[:c.n_types])
    attn = model.blocks[0].attn
    W_Q = torch.zeros(2, D, D)
    W_K = torch.zeros(2, D, D)
    W_V = torch.zeros(2, D, D)
    W_O = torch.zeros(2, D, D)
    # query: the const direction -> head coordinate 0 (times the TL scale)
    W_Q[:, CONST, 0] = scale
    # -- Subject head: keys = subjects (+ recency) ------------------------------------------
    h = SUBJECT_HEAD
    W_K[h, IN + subj, 0] = beta
    W_K[h, RAMP, 0] = gamma
    W_V[h, IN + subj, IN + subj] = 1.0  # copy the subject identity into head space
    for s in range(c.n_subjects):
        own = task.answer_id(np.full(c.n_types, s), np.arange(c.n_types))
        row = torch.full((nv,), 0.0)
        row[attr] = -1.0
        row[torch.as_tensor(own)] = 0.0
        W_O[h, IN + int(subj[s]), OUT:OUT + nv] = row
    # -- Relation head ------------------------------------------------------------------------
    h = RELATION_HEAD
    V = c.n_values
    if variant == "pt":
        W_K[h, IN + rel_tokens, 0] = beta
        W_K[h, RAMP, 0] = gamma
        W_V[h, IN + rel_tokens, IN + rel_tokens] = 1.0
        for l in range(c.n_types):
            W_O[h, IN + int(rel_tokens[l]), OUT + attr[l * V:(l + 1) * V]] = 1.0
    else:
        W_K[h, IN + attr, 0] = beta
        W_V[h, IN + attr, IN + attr] = 1.0
        for l in range(c.n_types):
            for v in range(V):
                W_O[h, IN + int(attr[l * V + v]), OUT + attr[l * V:(l + 1) * V]] = 1.0
    attn.W_Q.copy_(W_Q)
    attn.W_K.copy_(W_K)
    attn.W_V.copy_(W_V)
    attn.W_O.copy_(W_O)
    model.eval()
    return model


def sample_pt_relation(task, rng: np.random.Generator, batch_size: int, subjects=None,
                       n_tuples: int | None = None) -> Batch:
    """PT in the one-token relation variant: ``[BOS] s G_l a [SEP] ...`` (``G_l`` names the type).

    Targets: the attribute at each relation token. meta: ``attr_pos``, ``type``,
    ``subject``, ``answer`` (B, n)."""
    c = task.cfg
    n = c.n_tuples if n_tuples is None else int(n_tuples)
    n = min(n, (task.n_ctx - 1) // 4)
    B = int(batch_size)
    subjects = np.arange(c.n_subjects) if subjects is None else np.asarray(subjects)
    subj = subjects[rng.integers(len(subjects), size=(B, n))]
    types = rng.integers(c.n_types, size=(B, n))
    ans = task.answer_id(subj, types)
    tok = np.zeros((B, 1 + 4 * n), dtype=np.int64)
    tok[:, 0] = 1  # [BOS]
    tok[:, 1::4] = task.subject_id(subj)
    tok[:, 2::4] = task.grammar_id(types)
    tok[:, 3::4] = ans
    tok[:, 4::4] = 2  # [SEP]
    tgt = np.full_like(tok, IGNORE)
    attr_pos = 2 + 4 * np.arange(n)[None, :].repeat(B, 0)
    tgt[np.arange(B)[:, None], attr_pos] = ans
    meta = {"format": "pt_relation", "attr_pos": torch.as_tensor(attr_pos),
            "type": torch.as_tensor(types), "subject": torch.as_tensor(subj),
            "answer": torch.as_tensor(ans)}
    return Batch(torch.as_tensor(tok), torch.as_tensor(tgt), meta)


@torch.no_grad()
def evaluate_pt_relation(model, task, seed: int = 0, n: int = 512, subjects=None) -> dict:
    """Exact (full-vocabulary argmax) accuracy at every relation token of the PT-relation
    format, plus ``typed`` (argmax among the true type's values)."""
    b = sample_pt_relation(task, np.random.default_rng(seed), n, subjects=subjects)
    dev = next(model.parameters()).device
    logits = model(b.tokens.to(dev)).cpu()
    Bn = torch.arange(b.tokens.shape[0])[:, None]
    lg = logits[Bn, b.meta["attr_pos"]]  # (B, n, V)
    exact = (lg.argmax(-1) == b.meta["answer"]).float().mean()
    V = task.cfg.n_values
    typed_ids = task.attr_base + b.meta["type"][..., None] * V + torch.arange(V)
    typed = (torch.gather(lg, -1, typed_ids).argmax(-1) + task.attr_base
             + b.meta["type"] * V == b.meta["answer"]).float().mean()
    return {"exact": float(exact), "typed": float(typed)}


def tie_aware_scores(task, logits: torch.Tensor, answer: torch.Tensor,
                     tol: float = 1e-6) -> dict[str, torch.Tensor]:
    """Per prompt, from answer logits (B, d_vocab): ``exact`` = 1/(number of tokens tied at
    the top) when the answer is among them, else 0 (the expected accuracy of a uniformly
    random tie-break: a plain argmax picks the lowest tied id, e.g. [PAD]); ``exact_argmax``
    (plain argmax), ``restricted`` (argmax among attribute tokens, ties shared the same way)
    and ``n_top`` (tokens within ``tol`` of the top logit)."""
    V, L = task.cfg.n_values, task.cfg.n_types
    lg = logits.double()

    def shared(x, ans):
        top = x >= x.max(-1, keepdim=True).values - tol
        n_top = top.sum(-1)
        hit = top[torch.arange(len(ans)), ans]
        return hit.double() / n_top, n_top

    ex, n_top = shared(lg, answer)
    attr = lg[:, task.attr_base:task.attr_base + L * V]
    rs, _ = shared(attr, answer - task.attr_base)
    return {"exact": ex, "exact_argmax": (lg.argmax(-1) == answer).double(),
            "restricted": rs, "n_top": n_top.double()}


@torch.no_grad()
def evaluate_icl_ties(model, task, seed: int, subjects=None, n: int = 512) -> dict:
    """Held-out-style ICL accuracy with ties shared (:func:`tie_aware_scores`) over ``n``
    prompts of ``task.sample_icl`` (seeded): mean ``exact``, ``exact_argmax``,
    ``restricted`` and ``n_top``, and ``tied`` (share of prompts with more than one token at
    the top)."""
    b = task.sample_icl(np.random.default_rng([int(seed), 0x71E]), n, subjects=subjects)
    dev = next(model.parameters()).device
    qp = torch.as_tensor(b.meta["query_pos"]).long()
    logits = model(b.tokens.to(dev)).cpu()[torch.arange(n), qp]
    sc = tie_aware_scores(task, logits, torch.as_tensor(b.meta["answer"]).long())
    out = {k: float(v.mean()) for k, v in sc.items()}
    out["tied"] = float((sc["n_top"] > 1).double().mean())
    return out


@torch.no_grad()
def zero_head_ov(model, head: int, layer: int = 0):
    """``model`` with ``head``'s OV circuit zeroed (``W_V``, ``b_V`` and ``W_O`` of that head;
    in place, returned). The CR-6 control zeroes the Relation head of the ICL construction:
    the Subject head alone only pushes down the attributes that are not the query subject's,
    so the query subject's L attributes and every non-attribute token (subjects, grammar,
    [PAD], [BOS], [SEP]: about 83 tokens at the quick sizes) tie at the top logit 0; a plain
    argmax then picks the lowest id ([PAD]), which is why that control is scored with ties
    shared (:func:`tie_aware_scores`)."""
    attn = model.blocks[layer].attn
    attn.W_V[head].zero_()
    attn.W_O[head].zero_()
    if getattr(attn, "b_V", None) is not None:
        attn.b_V[head].zero_()
    return model
