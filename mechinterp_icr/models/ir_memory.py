"""The pretrained memory of IR-6: a dense MLP trained on triple completion, ``(s, a) -> r``
and ``(s, r) -> a``, from residual-stream inputs mixed with random distractor mass as
attention would leave it (moved out of :mod:`mechinterp_icr.models.ir`, which keeps the
constructed memory and the fast exact model)."""

from __future__ import annotations

import math
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from mechinterp_icr.models.ir import IRLayout, IRModelSpec, Memory
from mechinterp_icr.tasks.ir import REL, SUBJ, IRTask

__all__ = ["pretrain_memory"]


def _pretrain_inputs(task: IRTask, E: torch.Tensor, rng: np.random.Generator, B: int,
                     jitter: float = 0.0):
    """Residual-stream inputs of triple completion: (s, a) -> r and (s, r) -> a, each mixed
    with random distractor mass as attention would leave it."""
    V, T = task.d_vocab, task.n_ctx
    L = IRLayout(V, T, E.shape[1])
    n, R = task.cfg.n_subjects, task.cfg.n_relations
    tr = task.triples[rng.integers(0, len(task.triples), B)]
    s_tok, r_tok, a_tok = tr[:, 0], n + tr[:, 1], n + R + tr[:, 2]
    x = torch.zeros(B, L.d_model, dtype=torch.float64)
    half = B // 2
    # relation completion at a subject position: copy = al (E_s + E_a) + the rest spread
    # (Dirichlet weights) over three random tokens, as attention would leave it; the current
    # token q is a random subject
    al = torch.from_numpy(rng.uniform(0.2, 0.5, half))
    q = torch.from_numpy(rng.integers(0, n, half))
    others = torch.from_numpy(rng.integers(0, V, (half, 3)))
    w = torch.from_numpy(rng.dirichlet(np.ones(3), half)) * (1 - 2 * al)[:, None]
    if jitter > 0:
        u = torch.from_numpy(rng.uniform(-jitter, jitter, half))
        al_s, al_a = al * (1 + u), al * (1 - u)
    else:
        al_s = al_a = al
    x[:half, L.copy] = al_s[:, None] * E[s_tok[:half]] + al_a[:, None] * E[a_tok[:half]] + \
        torch.einsum("bk,bkd->bd", w, E[others])
    x[:half, L.tok] = E[q]
    x[:half, L.type.start + SUBJ] = 1.0
    # answer completion at a relation position: copy = be E_s + rest on a random token
    be = torch.from_numpy(rng.uniform(0.6, 1.0, B - half))
    o = torch.from_numpy(rng.integers(0, V, B - half))
    x[half:, L.copy] = be[:, None] * E[s_tok[half:]] + (1 - be)[:, None] * E[o]
    x[half:, L.tok] = E[r_tok[half:]]
    x[half:, L.type.start + REL] = 1.0
    y = torch.from_numpy(np.concatenate([r_tok[:half], a_tok[half:]]))
    return x, y


def pretrain_memory(task: IRTask, spec: IRModelSpec, E: torch.Tensor, seed: int = 0,
                    log: list | None = None) -> Memory:
    """A relu^2 MLP trained (AdamW, float32) on triple completion, then returned frozen in
    float64 (the dtype of the fast path and of the HookedTransformer it is written into).

    Inputs are residual vectors (tok, type and copy blocks; position and out blocks are not
    read), targets the missing element of the triple; the loss is cross-entropy of
    ``out / T`` over the whole vocabulary, as in finetuning.
    """
    V, T = task.d_vocab, task.n_ctx
    L = IRLayout(V, T, E.shape[1])
    H = spec.pretrain_hidden or 2 * len(task.triples)
    gen = torch.Generator().manual_seed(int(seed) * 7919 + zlib.crc32(b"ir-pretrain"))
    # float32 training: 4x faster than float64 at n = 256 (the optimizer's update of the dense
    # weights is a large part of a step); the trained weights are returned in float64
    dt = torch.float32
    W_in = (torch.randn(L.d_model, H, generator=gen, dtype=torch.float64) /
            math.sqrt(2 * E.shape[1])).to(dt)
    W_in[L.pos] = 0
    W_in[L.out] = 0
    W_in.requires_grad_(True)
    b_in = torch.zeros(H, dtype=dt, requires_grad=True)
    W_out = (torch.randn(H, V, generator=gen, dtype=torch.float64) / math.sqrt(H)).to(dt)
    W_out.requires_grad_(True)
    read = torch.zeros(L.d_model, 1, dtype=dt)
    read[L.tok] = read[L.type] = read[L.copy] = 1.0
    opt = torch.optim.AdamW([W_in, b_in, W_out], lr=spec.pretrain_lr, weight_decay=0.0)
    # cosine decay to 0 over the run: the inputs are redrawn every step (random distractor
    # mass), so a constant step size keeps the memory in a noise floor below the retrieval
    # that the knowledge base's planted collisions allow
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / max(1, spec.pretrain_steps))))
    rng = np.random.default_rng([int(seed), zlib.crc32(b"ir-pretrain-data")])
    for step in range(spec.pretrain_steps):
        x, y = _pretrain_inputs(task, E, rng, spec.pretrain_batch, spec.pretrain_pair_jitter)
        # x holds a handful of non-zeros per row: a sparse product (the dense one is most of
        # the cost at n >= 128)
        h = torch.sparse.mm(x.to(dt).to_sparse(), W_in * read) + b_in
        logits = F.relu(h).pow(2) @ W_out / task.cfg.temperature
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if log is not None and (step % 100 == 0 or step == spec.pretrain_steps - 1):
            acc = float((logits.argmax(-1) == y).double().mean())
            log.append({"step": step, "loss": float(loss.detach()), "acc": acc})
    with torch.no_grad():
        return Memory("pretrained", (W_in * read).detach().double(), b_in.detach().double(),
                      W_out.detach().double())
