"""The IR model: 1 layer, 1 head, then an associative-memory MLP over (s, r, a) triples.

Residual stream, in blocks (``IRLayout``)::

    [ tok (d_e) | type (3) | copy (d_e) | pos (T) | out (V) ]

- ``tok``: the token's embedding ``E[x]`` (one-hot, ``d_e = V``, or random unit vectors of a
  smaller width ``d_e``); ``type``: one-hot subject / relation / answer; ``pos``: one-hot
  position. All embeddings are fixed.
- Attention: ``W_Q`` maps the ``pos`` block to head dims ``0..T-1`` as ``sqrt(d_head) * I`` and
  ``W_K``'s ``pos`` rows hold ``B^T``, so the score from query position t to key j is exactly
  ``B[t, j]``: ``B`` is the position-position block of ``W_KQ`` (the theory parameter; ``B = 0``
  is uniform causal attention). ``W_V``/``W_O`` copy the ``tok`` block into the ``copy`` block.
- MLP (TransformerLens ``act_fn="relu2"``, i.e. ``relu(x)^2``: convex above the threshold):
  per triple (s, r, a) one *relation unit* ``lam2 * relu(<E_s + E_a, copy> - theta_rel -
  G [type != subject])^2`` writing to the logit of r, and one *answer unit*
  ``lam2 * relu(<E_s, copy> + <E_r, tok> - theta_ans - G [type != relation])^2`` writing to
  the logit of a. Both write into the ``out`` block, which the unembedding reads as ``I / T``
  (T the decoding temperature). The math is in docs/ir.md.

:class:`FastIR` computes the same function without the dense matrices (gathers over the
triples); tests prove it equal to the HookedTransformer in logits and gradients. The
HookedTransformer is built only through :func:`mechinterp_icr.models.factory.build_model`.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mechinterp_icr.config import ModelConfig, check, check_choice, check_range
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.models.ir_units import UnitIndex, answer_block, relation_block
from mechinterp_icr.tasks.ir import ANS, REL, SUBJ, IRTask

__all__ = [
    "FastIR",
    "IRLayout",
    "IRModelSpec",
    "Memory",
    "build_ir_hooked",
    "constructed_memory",
    "get_pos_block",
    "ideal_pos_block",
    "ir_model_config",
    "memory_retrieval",
    "pos_block_mask",
    "resolve_theta",
    "set_pos_block",
    "token_embeddings",
]


# choice fields: one Literal type each, also what __post_init__ checks against
Embedding = Literal["onehot", "random"]
MemoryKind = Literal["constructed", "pretrained"]


@dataclass(frozen=True)
class IRModelSpec:
    embedding: Embedding = "onehot"  # random: unit Gaussian rows of width d_embed
    d_embed: int = 0  # width of random embeddings (ignored for one-hot)
    memory: MemoryKind = "constructed"
    theta_rel: float = 0.0  # 0 = auto: 2 / (3K) (1/3 for K = 2), between the mass of one
    # token (1/(2K)) and of one pair (1/K) under the ideal pairwise row
    theta_ans: float = 1.1
    gate: float = 10.0
    lam2: float = 10.0
    pretrain_hidden: int = 0  # pretrained memory width; 0 = 2 n R (one unit per triple, twice)
    pretrain_steps: int = 1000
    pretrain_lr: float = 3e-3
    pretrain_batch: int = 512
    pretrain_pair_jitter: float = 0.0  # 0: the (s, a) -> r inputs carry equal mass on s and a;
    # j > 0: masses al (1 + u) and al (1 - u), u ~ U(-j, j) (the memory also sees unequal pairs)

    def __post_init__(self) -> None:
        check_choice("model.embedding", self.embedding, Embedding)
        check_range("model.d_embed", self.d_embed, 0, 1_000_000, integer=True)
        check(self.embedding == "onehot" or self.d_embed >= 2, "model.d_embed", self.d_embed,
              "an integer >= 2 when model.embedding = 'random'")
        check_choice("model.memory", self.memory, MemoryKind)
        check_range("model.theta_rel", self.theta_rel, 0, 2)
        check_range("model.theta_ans", self.theta_ans, 0, 3, lo_open=True)
        check_range("model.gate", self.gate, 0, 1e4)
        check_range("model.lam2", self.lam2, 0, 1e6, lo_open=True)
        check_range("model.pretrain_hidden", self.pretrain_hidden, 0, 1_000_000, integer=True)
        check_range("model.pretrain_steps", self.pretrain_steps, 0, 1_000_000, integer=True)
        check_range("model.pretrain_lr", self.pretrain_lr, 0, 10, lo_open=True)
        check_range("model.pretrain_batch", self.pretrain_batch, 1, 1_000_000, integer=True)
        check_range("model.pretrain_pair_jitter", self.pretrain_pair_jitter, 0, 1)


def resolve_theta(spec: IRModelSpec, K: int) -> IRModelSpec:
    """``spec`` with ``theta_rel = 2 / (3K)`` filled in when it is 0 (auto)."""
    from dataclasses import replace

    return spec if spec.theta_rel > 0 else replace(spec, theta_rel=2.0 / (3.0 * K))


class IRLayout:
    """Block offsets of the residual stream."""

    def __init__(self, V: int, T: int, d_e: int):
        self.V, self.T, self.d_e = V, T, d_e
        # consecutive blocks: token one-hot, token type, copy (written by OV), position, output
        sizes = {"tok": d_e, "type": 3, "copy": d_e, "pos": T, "out": V}
        o = 0
        for name, size in sizes.items():
            setattr(self, name, slice(o, o + size))
            o += size
        self.d_model = o
        self.d_head = max(T, d_e)


def token_embeddings(task: IRTask, spec: IRModelSpec, seed: int) -> torch.Tensor:
    """(V, d_e) float64: identity, or random unit-norm Gaussian rows."""
    V = task.d_vocab
    if spec.embedding == "onehot":
        return torch.eye(V, dtype=torch.float64)
    gen = torch.Generator().manual_seed(int(seed) * 1000003 + zlib.crc32(b"ir-embed"))
    E = torch.randn(V, spec.d_embed, generator=gen, dtype=torch.float64)
    return E / E.norm(dim=1, keepdim=True)


@dataclass
class Memory:
    """Dense MLP weights over the residual blocks (used for the pretrained memory, and as the
    dense form of the constructed one). ``W_in`` (d_model, H), ``b_in`` (H,), ``W_out`` (H, V)
    writing into the ``out`` block. ``kind`` is "constructed" or "pretrained"."""

    kind: str
    W_in: torch.Tensor
    b_in: torch.Tensor
    W_out: torch.Tensor


def _triple_tokens(task: IRTask):
    n, R = task.cfg.n_subjects, task.cfg.n_relations
    tr = torch.from_numpy(task.triples)
    s_tok = tr[:, 0]
    r_tok = n + tr[:, 1]
    a_tok = n + R + tr[:, 2]
    return s_tok, r_tok, a_tok


def constructed_memory(task: IRTask, spec: IRModelSpec, E: torch.Tensor) -> Memory:
    """Dense form of the constructed memory (relation units first, then answer units)."""
    spec = resolve_theta(spec, task.cfg.n_pairs)
    V, T, d_e = task.d_vocab, task.n_ctx, E.shape[1]
    L = IRLayout(V, T, d_e)
    s_tok, r_tok, a_tok = _triple_tokens(task)
    nt = len(s_tok)
    W_in = torch.zeros(L.d_model, 2 * nt, dtype=torch.float64)
    b_in = torch.zeros(2 * nt, dtype=torch.float64)
    W_out = torch.zeros(2 * nt, V, dtype=torch.float64)
    rel, ans = slice(0, nt), slice(nt, 2 * nt)
    W_in[L.copy, rel] = (E[s_tok] + E[a_tok]).T
    W_in[L.type.start + REL, rel] = -spec.gate
    W_in[L.type.start + ANS, rel] = -spec.gate
    b_in[rel] = -spec.theta_rel
    W_in[L.copy, ans] = E[s_tok].T
    W_in[L.tok, ans] = E[r_tok].T
    W_in[L.type.start + SUBJ, ans] = -spec.gate
    W_in[L.type.start + ANS, ans] = -spec.gate
    b_in[ans] = -spec.theta_ans
    idx = torch.arange(nt)
    W_out[idx, r_tok] = spec.lam2
    W_out[nt + idx, a_tok] = spec.lam2
    return Memory("constructed", W_in, b_in, W_out)


def ir_model_config(task: IRTask, spec: IRModelSpec, d_mlp: int | None = None) -> ModelConfig:
    V, T = task.d_vocab, task.n_ctx
    d_e = V if spec.embedding == "onehot" else spec.d_embed
    L = IRLayout(V, T, d_e)
    if d_mlp is None:
        d_mlp = 2 * len(task.triples) if spec.memory == "constructed" else \
            (spec.pretrain_hidden or 2 * len(task.triples))
    return ModelConfig(n_layers=1, n_heads=1, d_model=L.d_model, d_head=L.d_head, d_mlp=d_mlp,
                       attn_only=False, normalization="none", act_fn="relu2",
                       positional_embedding="standard", d_vocab=V, n_ctx=T)


def pos_block_mask(model) -> dict[str, torch.Tensor]:
    """Gradient mask making only the position-position block of W_KQ (W_K's pos rows, head
    dims 0..T-1) trainable, for ``train_phase(..., grad_masks=...)``."""
    T = model.cfg.n_ctx
    L = _layout_of(model)
    m = torch.zeros_like(model.blocks[0].attn.W_K)
    m[0, L.pos, :T] = 1.0
    return {"blocks.0.attn.W_K": m}


def _layout_of(model) -> IRLayout:
    c = model.cfg
    d_e = (c.d_model - 3 - c.n_ctx - c.d_vocab) // 2
    return IRLayout(c.d_vocab, c.n_ctx, d_e)


@torch.no_grad()
def set_pos_block(model, B: torch.Tensor) -> None:
    """Write the position-position score block ``B[t, j]`` (query t, key j) into W_K."""
    T = model.cfg.n_ctx
    L = _layout_of(model)
    model.blocks[0].attn.W_K[0, L.pos, :T] = B.T.to(model.blocks[0].attn.W_K)


@torch.no_grad()
def add_pos_block_through_keys(model, dB: torch.Tensor) -> None:
    """Add ``dB[t, j]`` to the position-position scores by moving W_K's position rows only
    (``k_j += delta_j`` with ``q_t . delta_j / scale = dB[t, j]``), for a trainable W_Q."""
    L = _layout_of(model)
    a = model.blocks[0].attn
    q = a.W_Q[0, L.pos] + a.b_Q[0]  # (T, d_head)
    # driver gelsd: the CPU default (gelsy) returned a wrong solution for this [I | 0] system
    # in some fresh processes (|AX - B| 3e-2 vs 0), so runs were not reproducible
    delta = torch.linalg.lstsq(q / a.attn_scale, dB.to(q), driver="gelsd").solution  # (d_head, T)
    a.W_K[0, L.pos] += delta.T


@torch.no_grad()
def get_pos_block(model) -> torch.Tensor:
    """Scores B[t, j] realised by the position rows of W_Q and W_K (general W_Q too)."""
    L = _layout_of(model)
    a = model.blocks[0].attn
    q = a.W_Q[0, L.pos] + a.b_Q[0]  # (T, d_head)
    k = a.W_K[0, L.pos] + a.b_K[0]
    return (q @ k.T / a.attn_scale).double()


@torch.no_grad()
def build_ir_hooked(task: IRTask, spec: IRModelSpec, seed: int = 0,
                    memory: Memory | None = None, B: torch.Tensor | None = None,
                    E: torch.Tensor | None = None, device: str = "cpu",
                    dtype: torch.dtype = torch.float32):
    """The IR HookedTransformer (through ``build_model``) with the fixed embeddings, the copy
    OV circuit, the given (default constructed) memory and position block ``B`` (default 0 =
    uniform attention). Everything but the attention is frozen (requires_grad False).
    ``dtype=torch.float64`` gives the exact double-precision model (used by the equality test)."""
    E = token_embeddings(task, spec, seed) if E is None else E
    memory = constructed_memory(task, spec, E) if memory is None else memory
    cfg = ir_model_config(task, spec, d_mlp=memory.W_in.shape[1])
    model = build_model(cfg, seed=seed, device=device)
    if dtype != torch.float32:
        model = model.to(dtype, print_details=False)
    V, T, d_e = task.d_vocab, task.n_ctx, E.shape[1]
    L = IRLayout(V, T, d_e)
    for p in model.parameters():
        p.zero_()
    ty = torch.from_numpy(task.token_type)
    W_E = torch.zeros(V, L.d_model, dtype=torch.float64)
    W_E[:, L.tok] = E
    W_E[torch.arange(V), L.type.start + ty] = 1.0
    W_pos = torch.zeros(T, L.d_model, dtype=torch.float64)
    W_pos[torch.arange(T), L.pos.start + torch.arange(T)] = 1.0
    attn = model.blocks[0].attn
    W_Q = torch.zeros_like(attn.W_Q, dtype=torch.float64)
    W_Q[0, L.pos, :T] = math.sqrt(L.d_head) * torch.eye(T, dtype=torch.float64)
    W_V = torch.zeros_like(attn.W_V, dtype=torch.float64)
    W_V[0, L.tok, :d_e] = torch.eye(d_e, dtype=torch.float64)
    W_O = torch.zeros_like(attn.W_O, dtype=torch.float64)
    W_O[0, :d_e, L.copy] = torch.eye(d_e, dtype=torch.float64)
    W_out = torch.zeros(memory.W_out.shape[0], L.d_model, dtype=torch.float64)
    W_out[:, L.out] = memory.W_out
    W_U = torch.zeros(L.d_model, V, dtype=torch.float64)
    W_U[L.out, :] = torch.eye(V, dtype=torch.float64) / task.cfg.temperature
    sets = {"embed.W_E": W_E, "pos_embed.W_pos": W_pos, "blocks.0.attn.W_Q": W_Q,
            "blocks.0.attn.W_V": W_V, "blocks.0.attn.W_O": W_O,
            "blocks.0.mlp.W_in": memory.W_in, "blocks.0.mlp.b_in": memory.b_in,
            "blocks.0.mlp.W_out": W_out, "unembed.W_U": W_U}
    params = dict(model.named_parameters())
    for k, v in sets.items():
        params[k].copy_(v.to(params[k]))
    set_pos_block(model, torch.zeros(T, T) if B is None else B)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("blocks.0.attn."))
    model.eval()
    return model


def ideal_pos_block(T: int, K: int, a: float, big: float = 30.0) -> torch.Tensor:
    """Scores giving the step-1 row (a, a, 1/2-a, 1/2-a, 0) (K=2; for K>2 equal pair masses)
    and the step-2 row on s_q, up to exp(-big)."""
    B = torch.zeros(T, T, dtype=torch.float64)
    q1, q2 = 2 * K, 2 * K + 1
    if K == 2:
        w = torch.tensor([a, a, 0.5 - a, 0.5 - a], dtype=torch.float64)
    else:
        w = torch.full((2 * K,), 1.0 / (2 * K), dtype=torch.float64)
    B[q1, : 2 * K] = torch.log(w)
    B[q1, 2 * K] = -big
    B[q2, :] = -big
    B[q2, 2 * K] = 0.0
    return B


# --------------------------------------------------------------------------------------------
# Fast exact implementation
# --------------------------------------------------------------------------------------------
class FastIR(torch.nn.Module):
    """Exact functional form of the IR HookedTransformer with position-only attention.

    ``forward(tokens, positions)`` returns logits (B, P, V) at the given positions (default all)
    in float64. The only parameter is the position block ``B`` (T, T). The constructed memory
    is evaluated by gathers over the triples (no dense d_model x H matrices), a dense memory
    (pretrained) by block matmuls in ``dense_dtype``: float64 by default (the equality test
    against the HookedTransformer); IR-6's finetuning passes float32, the precision its
    memory was trained in (its weights are float32 values), which halves the cost of the
    matmuls that are most of a step; its rows move by less than 1e-5 (tested in
    tests/integration/test_ir_core.py) and its accuracies by at most 5e-5 in the reproduction
    (argmax ties are judged within rtol 1e-5 on float32 logits; docs/reproduce.md).
    """

    def __init__(self, task: IRTask, spec: IRModelSpec, seed: int = 0,
                 memory: Memory | None = None, E: torch.Tensor | None = None,
                 dense_dtype: torch.dtype = torch.float64):
        super().__init__()
        spec = resolve_theta(spec, task.cfg.n_pairs)
        self.task, self.spec = task, spec
        V, T = task.d_vocab, task.n_ctx
        self.V, self.T = V, T
        E = token_embeddings(task, spec, seed) if E is None else E
        self.onehot = spec.embedding == "onehot"
        self.register_buffer("E", E, persistent=False)
        self.register_buffer("ttype", torch.from_numpy(task.token_type).long(), persistent=False)
        s_tok, r_tok, a_tok = _triple_tokens(task)
        self.register_buffer("s_tok", s_tok, persistent=False)
        self.register_buffer("r_tok", r_tok, persistent=False)
        self.register_buffer("a_tok", a_tok, persistent=False)
        f_t = torch.from_numpy(task.kb.f).long()
        self.register_buffer("f_table", f_t, persistent=False)
        cnt = torch.zeros(task.cfg.n_relations, task.cfg.m, dtype=torch.float64)
        cnt.index_put_((torch.arange(task.cfg.n_relations)[None].expand_as(f_t).reshape(-1),
                        f_t.reshape(-1)), torch.ones(f_t.numel(), dtype=torch.float64),
                       accumulate=True)
        self.register_buffer("cnt_table", cnt, persistent=False)  # (R, m) #subjects with f=a
        self.dense = memory is not None and memory.kind != "constructed"
        if self.dense and self.onehot and not torch.equal(
                E, torch.eye(V, dtype=E.dtype, device=E.device)):
            raise ValueError("FastIR: a dense memory with one-hot embeddings is read by "
                             "gathers that need E to be the identity; got another E")
        if self.dense:
            L = IRLayout(V, T, E.shape[1])
            for name, w in (("W_tok", memory.W_in[L.tok]), ("W_type", memory.W_in[L.type]),
                            ("W_copy", memory.W_in[L.copy]), ("W_posm", memory.W_in[L.pos]),
                            ("b_in", memory.b_in), ("W_out", memory.W_out)):
                self.register_buffer(name, w.to(dense_dtype, copy=True), persistent=False)
        self.B = torch.nn.Parameter(torch.zeros(T, T, dtype=torch.float64))

    def attention(self, positions=None) -> torch.Tensor:
        """(P, T) attention rows at ``positions`` (position-only, so shared by all sequences)."""
        T = self.T
        pos = torch.arange(T) if positions is None else torch.as_tensor(positions)
        mask = torch.arange(T)[None, :] > pos[:, None]
        scores = self.B[pos].masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def forward(self, tokens: torch.Tensor, positions=None) -> torch.Tensor:
        T, V = self.T, self.V
        pos = torch.arange(T) if positions is None else torch.as_tensor(positions)
        A = self.attention(pos)  # (P, T)
        Bn = tokens.shape[0]
        cur = tokens[:, pos]  # (B, P)
        if self.dense and self.onehot:  # copy @ W_copy as a gather: sum_t A[p, t] W[tok_t]
            ts = torch.nonzero((A != 0).any(0).detach())[:, 0]  # the positions attended
            hc = torch.matmul(A[:, ts].to(self.W_copy.dtype), self.W_copy[tokens[:, ts]])
            return self._dense_out(hc, cur, pos)
        if self.onehot:
            copy = torch.zeros(Bn, len(pos), V, dtype=A.dtype)
            copy.scatter_add_(2, tokens[:, None, :].expand(Bn, len(pos), T).contiguous(),
                              A[None].expand(Bn, -1, -1).contiguous())
        else:
            copy = torch.einsum("pt,btd->bpd", A, self.E[tokens])  # (B, P, d_e)
        return self.memory_out(copy, cur, pos)

    def cot_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, 2, V) at the two CoT positions, equal to ``forward(tokens, [2K, 2K+1])``:
        for the constructed memory, :meth:`cot_blocks` placed in zeros (the step-1 logits
        outside the relation tokens and the step-2 ones outside the answers are exactly 0)."""
        q1 = self.task.step1_pos
        if self.dense:
            return self.forward(tokens, [q1, q1 + 1])
        b1, b2 = self.cot_blocks(tokens)
        n, R = self.task.cfg.n_subjects, self.task.cfg.n_relations
        out = torch.zeros(tokens.shape[0], 2, self.V, dtype=b1.dtype)
        out[:, 0, n: n + R] = b1
        out[:, 1, n + R:] = b2
        return out

    def cot_blocks(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Constructed memory: the step-1 logits of the relation tokens (B, R) and the step-2
        logits of the answer tokens (B, m); every other CoT logit is exactly 0 (the gate makes
        the answer units 0 at the step-1 position and the relation units 0 at step 2, so each
        position evaluates only the units that can be non-zero there)."""
        if self.onehot and self.spec.theta_ans >= 1.0 and self.spec.theta_rel > 0:
            return self._cot_blocks_sparse(tokens)
        spec, T = self.spec, self.T
        q1 = self.task.step1_pos
        n, R, m = self.task.cfg.n_subjects, self.task.cfg.n_relations, self.task.cfg.m
        A = self.attention([q1, q1 + 1])  # (2, T)
        Bn = tokens.shape[0]
        if self.onehot:
            copy = torch.zeros(Bn, 2, self.V, dtype=A.dtype)
            copy.scatter_add_(2, tokens[:, None, :].expand(Bn, 2, T).contiguous(),
                              A[None].expand(Bn, -1, -1).contiguous())
            rel_in = copy[:, 0, self.s_tok] + copy[:, 0, self.a_tok]
            ans_in = copy[:, 1, self.s_tok] + (tokens[:, q1 + 1, None] == self.r_tok).to(A.dtype)
        else:
            copy = torch.einsum("pt,btd->bpd", A, self.E[tokens])
        ty = self.ttype[tokens[:, q1: q1 + 2]].to(A.dtype)
        g_rel = spec.gate * (ty[:, 0] != SUBJ).to(A.dtype)[:, None]
        g_ans = spec.gate * (ty[:, 1] != REL).to(A.dtype)[:, None]
        if self.onehot:
            rel_act = F.relu(rel_in - spec.theta_rel - g_rel).pow(2)
            l1 = torch.zeros(Bn, R, dtype=A.dtype).index_add(1, self.r_tok - n, rel_act)
            ans_act = F.relu(ans_in - spec.theta_ans - g_ans).pow(2)
            l2 = torch.zeros(Bn, m, dtype=A.dtype).index_add(1, self.a_tok - n - R, ans_act)
        else:
            l1 = self.relation_block(copy[:, 0], g_rel[:, 0])
            l2 = self.answer_block(copy[:, 1], self.E[tokens[:, q1 + 1]], g_ans[:, 0])
        scale = spec.lam2 / self.task.cfg.temperature
        return l1 * scale, l2 * scale

    def _cot_blocks_sparse(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact CoT logits for one-hot embeddings touching only units that can fire.

        Valid for task sequences (subjects at even context positions, answers at odd ones),
        ``theta_rel > 0`` and ``theta_ans >= 1``. A relation unit (s, r, a) has input
        ``c[s] + c[a]`` (c = attention mass on a token), so it is 0 unless s or a is in the
        context: units of context subjects are summed directly; units of context answers whose
        subject is not in the context contribute ``(count(r, a) - in-context ones) *
        phi(c[a] - theta)``. An answer unit (s, r, a) fires at the ``r*`` position only when
        s is in the context and r = r* (``c[s] + 1 - theta_ans > 0``, with theta_ans >= 1).
        """
        task, spec = self.task, self.spec
        K, n, R = task.cfg.n_pairs, task.cfg.n_subjects, task.cfg.n_relations
        q1 = 2 * K
        A = self.attention([q1, q1 + 1])  # (2, T)
        Bn = tokens.shape[0]
        f = self.f_table  # (n, R)
        ps = torch.arange(0, 2 * K + 1, 2)
        pa = torch.arange(1, 2 * K, 2)
        S = tokens[:, ps]  # (B, K+1) subject ids
        Aq = tokens[:, pa] - (n + R)  # (B, K) answer indices
        cs, ca = A[0, ps], A[0, pa]  # (K+1,), (K,)
        fS = f[S]  # (B, K+1, R)
        match = (fS[..., None] == Aq[:, None, None, :]).to(A.dtype)  # (B, K+1, R, K)
        c_ans = match @ ca  # (B, K+1, R)
        ty1 = self.ttype[tokens[:, q1]]
        g1 = spec.gate * (ty1 != SUBJ).to(A.dtype)[:, None, None]
        term1 = F.relu(cs[None, :, None] + c_ans - spec.theta_rel - g1).pow(2).sum(1)  # (B, R)
        in_ctx = match.sum(1)  # (B, R, K)
        cnt = self.cnt_table[:, Aq].permute(1, 0, 2)  # (B, R, K)
        g1b = spec.gate * (ty1 != SUBJ).to(A.dtype)[:, None]
        phi_a = F.relu(ca[None, :] - spec.theta_rel - g1b).pow(2)  # (B, K)
        term2 = ((cnt - in_ctx) * phi_a[:, None, :]).sum(-1)  # (B, R)
        l1 = term1 + term2  # (B, R)
        rs = tokens[:, q1 + 1] - n  # (B,) r*
        ds = A[1, ps]  # (K+1,)
        ty2 = self.ttype[tokens[:, q1 + 1]]
        g2 = spec.gate * (ty2 != REL).to(A.dtype)[:, None]
        act = F.relu(ds[None, :] + 1.0 - spec.theta_ans - g2).pow(2)  # (B, K+1)
        a_star = fS.gather(2, rs.clamp(0, R - 1)[:, None, None].expand(-1, K + 1, 1)
                                   ).squeeze(-1)  # (B, K+1)
        act = act * ((rs >= 0) & (rs < R)).to(A.dtype)[:, None]
        l2 = torch.zeros(Bn, task.cfg.m, dtype=A.dtype).scatter_add(1, a_star, act)
        scale = spec.lam2 / task.cfg.temperature
        return l1 * scale, l2 * scale

    def relation_block(self, c: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Random embeddings: the relation units' activations summed per relation (B, R) for
        copy blocks ``c`` (B, d_e) and per-sequence gates ``gate`` (B,), unscaled; only the
        units that can be non-zero are evaluated (:func:`.ir_units.relation_block`, exact)."""
        n, R = self.task.cfg.n_subjects, self.task.cfg.n_relations
        index, rows = self._units()
        return relation_block(c, self.E[:n], self.E[n + R:], self.s_tok, self.r_tok - n,
                              self.a_tok - n - R, R, self.spec.theta_rel, gate, index, rows)

    def answer_block(self, c: torch.Tensor, x: torch.Tensor, gate: torch.Tensor
                     ) -> torch.Tensor:
        """Random embeddings: the answer units' activations summed per answer (B, m) for copy
        blocks ``c`` (B, d_e), current-token embeddings ``x`` (B, d_e) and gates ``gate``
        (B,), unscaled; only the units that can be non-zero are evaluated
        (:func:`.ir_units.answer_block`, exact)."""
        n, R = self.task.cfg.n_subjects, self.task.cfg.n_relations
        return answer_block(c, x, self.E[:n], self.E[n: n + R], self.s_tok, self.r_tok - n,
                            self.a_tok - n - R, self.V - n - R, self.spec.theta_ans, gate,
                            self._units()[0])

    def _units(self) -> tuple[UnitIndex, torch.Tensor]:
        """The unit index of the current units and their relation units' input rows
        ``E_s + E_a`` (U, d_e), rebuilt when the units or the embeddings change (the learned
        arm's subset, IR-1's shuffled answers)."""
        n, R = self.task.cfg.n_subjects, self.task.cfg.n_relations
        key = tuple((t.data_ptr(), t._version, t.numel())
                    for t in (self.s_tok, self.r_tok, self.a_tok, self.E))
        if getattr(self, "_unit_index_key", None) != key:
            self._unit_cache = (UnitIndex.build(self.s_tok, self.r_tok - n, self.a_tok - n - R,
                                                n, R, self.V - n - R),
                                self.E[self.s_tok] + self.E[self.a_tok])
            self._unit_index_key = key
        return self._unit_cache

    def _dense_out(self, hc: torch.Tensor, cur: torch.Tensor, pos) -> torch.Tensor:
        """Dense (pretrained) memory: logits from the copy block's hidden contribution ``hc``
        (..., H), the current token ids ``cur`` and the positions ``pos``."""
        pos = torch.as_tensor(pos)
        tok = self.W_tok[cur] if self.onehot else self.E[cur].to(self.W_tok.dtype) @ self.W_tok
        h = hc + tok + self.W_type[self.ttype[cur]] + self.W_posm[pos] + self.b_in
        return F.relu(h).pow(2) @ self.W_out / self.task.cfg.temperature

    def memory_out(self, copy: torch.Tensor, cur: torch.Tensor, pos) -> torch.Tensor:
        """Logits from the copy block ``copy`` (..., d_e), the current token ids ``cur`` (...)
        and the positions ``pos`` (broadcast against ``cur``)."""
        spec = self.spec
        ty = self.ttype[cur]
        pos = torch.as_tensor(pos)
        if self.dense:
            return self._dense_out(copy.to(self.W_copy.dtype) @ self.W_copy, cur, pos)
        g_rel = (spec.gate * (ty != SUBJ).to(copy.dtype))[..., None]
        g_ans = (spec.gate * (ty != REL).to(copy.dtype))[..., None]
        if not self.onehot:  # the two blocks from the units that can fire
            n, R, d = self.task.cfg.n_subjects, self.task.cfg.n_relations, copy.shape[-1]
            c2 = copy.reshape(-1, d)
            logits = torch.zeros(c2.shape[0], self.V, dtype=copy.dtype)
            logits[:, n: n + R] = self.relation_block(c2, g_rel.reshape(-1))
            logits[:, n + R:] = self.answer_block(c2, self.E[cur].reshape(-1, d),
                                                  g_ans.reshape(-1))
            return logits.view(*cur.shape, self.V) * (spec.lam2 / self.task.cfg.temperature)
        rel_in = copy[..., self.s_tok] + copy[..., self.a_tok]  # (..., n_triples)
        ans_in = copy[..., self.s_tok] + (cur[..., None] == self.r_tok).to(copy.dtype)
        rel_act = F.relu(rel_in - spec.theta_rel - g_rel).pow(2)
        ans_act = F.relu(ans_in - spec.theta_ans - g_ans).pow(2)
        logits = torch.zeros(*cur.shape, self.V, dtype=copy.dtype)
        d = logits.dim() - 1
        logits = logits.index_add(d, self.r_tok, rel_act).index_add(d, self.a_tok, ans_act)
        return logits * (spec.lam2 / self.task.cfg.temperature)


@torch.no_grad()
def memory_retrieval(task: IRTask, spec: IRModelSpec, memory: Memory | None,
                     E: torch.Tensor, max_triples: int = 0,
                     shuffle_seed: int | None = None) -> dict[str, Any]:
    """IR-1 check of a memory on clean two-element queries over every triple (a seeded sample
    of ``max_triples`` when > 0). relation: copy = (E_s + E_a)/4 at a subject position -> r
    (correct when r is among the maxima and every maximum is consistent with (s, a), i.e. up
    to ties with f(s, r') = a); answer: copy = E_s at a relation position, tok = E_r -> a.
    ``shuffle_seed``: IR-1's negative control, the constructed memory storing the triples with
    their answers permuted, scored against the true knowledge base."""
    fast = FastIR(task, spec, memory=memory, E=E)
    n, R = task.cfg.n_subjects, task.cfg.n_relations
    s_tok, r_tok, a_tok = _triple_tokens(task)
    if shuffle_seed is not None:
        gen = torch.Generator().manual_seed(int(shuffle_seed) + zlib.crc32(b"ir-shuffle"))
        fast.a_tok = a_tok[torch.randperm(len(a_tok), generator=gen)].clone()
    idx = torch.arange(len(s_tok))
    if 0 < max_triples < len(idx):
        gen = torch.Generator().manual_seed(zlib.crc32(b"ir-retrieval-sample"))
        idx = torch.randperm(len(idx), generator=gen)[:max_triples].sort().values
    s_tok, r_tok, a_tok, nt = s_tok[idx], r_tok[idx], a_tok[idx], len(idx)
    f = torch.from_numpy(task.kb.f)
    res = {}
    for which in ("relation", "answer"):
        correct = 0
        for lo in range(0, nt, 1024):
            sl = slice(lo, min(nt, lo + 1024))
            k = sl.stop - sl.start
            if which == "relation":
                copy = (E[s_tok[sl]] + E[a_tok[sl]]) / 4
                out = fast.memory_out(copy, s_tok[sl], torch.full((k,), task.step1_pos))
                mx = out.max(-1, keepdim=True).values
                top = out >= mx - 1e-9 * mx.abs().clamp(min=1)
                rel_top = top[:, n: n + R]
                consistent = f[s_tok[sl]] == (a_tok[sl] - n - R)[:, None]  # (k, R)
                ok = (top.sum(-1) == rel_top.sum(-1)) & ~(rel_top & ~consistent).any(-1) & \
                    rel_top[torch.arange(k), r_tok[sl] - n]
            else:
                copy = E[s_tok[sl]].clone()
                out = fast.memory_out(copy, r_tok[sl], torch.full((k,), task.step2_pos))
                ok = out.argmax(-1) == a_tok[sl]
            correct += int(ok.sum())
        res[f"{which}_acc"] = correct / nt
    return res
