"""Training throughput of the project loop against a plain PyTorch reference, in one run.

    python benchmarks/train_throughput.py [--steps 150] [--repeats 3]

Times training steps of the project's default CR model shape (2 layers, 1 head, d_model 64,
d_mlp 256, no LayerNorm) through `mechinterp_icr.training.loop.train_phase` (HookedTransformer,
masked loss, deterministic algorithms, clipping) and through a plain PyTorch model of the same
shape with a minimal loop on the same batches. Prints steps/s of each, the ratio (project /
reference), and the project loop's achieved FLOP/s as a fraction of a large-matmul peak
measured in the same run. Timings alternate between the two loops to share machine noise;
the best of `--repeats` is reported for each.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from mechinterp_icr.config import ModelConfig, TrainConfig
from mechinterp_icr.models.factory import build_model, flops_per_token
from mechinterp_icr.tasks.base import IGNORE, Batch
from mechinterp_icr.training.loop import batch_rng, train_phase


class PlainBlock(nn.Module):
    def __init__(self, d: int, d_head: int, d_mlp: int):
        super().__init__()
        self.q = nn.Linear(d, d_head)
        self.k = nn.Linear(d, d_head)
        self.v = nn.Linear(d, d_head)
        self.o = nn.Linear(d_head, d)
        self.fc1 = nn.Linear(d, d_mlp)
        self.fc2 = nn.Linear(d_mlp, d)
        self.scale = 1.0 / math.sqrt(d_head)

    def forward(self, x):  # (B, T, C)
        T = x.shape[1]
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, H)
        att = (q @ k.transpose(1, 2)) * self.scale  # (B, T, T)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.o(att @ v)
        return x + self.fc2(F.relu(self.fc1(x)))


class PlainModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.emb = nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList(PlainBlock(cfg.d_model, cfg.d_head, cfg.d_mlp)
                                    for _ in range(cfg.n_layers))
        self.unembed = nn.Linear(cfg.d_model, cfg.d_vocab)

    def forward(self, tok):
        x = self.emb(tok) + self.pos(torch.arange(tok.shape[1], device=tok.device))
        for b in self.blocks:
            x = b(x)
        return self.unembed(x)


def make_sampler(d_vocab: int, n_ctx: int):
    def sample(rng: np.random.Generator, bs: int) -> Batch:
        toks = rng.integers(3, d_vocab, size=(bs, n_ctx))
        tgt = np.full_like(toks, IGNORE)
        tgt[:, 1::4] = toks[:, 2::4][:, : tgt[:, 1::4].shape[1]]
        return Batch(torch.from_numpy(toks), torch.from_numpy(tgt))

    return sample


def plain_loop(model, sample, cfg: TrainConfig, seed: int) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        b = sample(batch_rng(seed, "plain", step), cfg.batch_size)
        logits = model(b.tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.targets.reshape(-1),
                               ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()


def matmul_peak(n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--d-vocab", type=int, default=147, help="CR default: 3+64+16+4*16")
    ap.add_argument("--n-ctx", type=int, default=32)
    args = ap.parse_args()
    mcfg = ModelConfig(n_layers=2, n_heads=1, d_model=64, d_head=64, d_mlp=256,
                       d_vocab=args.d_vocab, n_ctx=args.n_ctx)
    tcfg = TrainConfig(steps=args.steps, batch_size=args.batch, lr=1e-3, eval_every=0,
                       progress=False, checkpoint_schedule="none")
    sample = make_sampler(args.d_vocab, args.n_ctx)
    # warm-up both
    train_phase(build_model(mcfg, 0), sample, TrainConfig(**{**tcfg.__dict__, "steps": 10}),
                None, "warm", 0)
    plain_loop(PlainModel(mcfg), sample, TrainConfig(**{**tcfg.__dict__, "steps": 10}), 0)
    t_proj, t_plain = [], []
    for r in range(args.repeats):
        m = build_model(mcfg, r)
        t = time.perf_counter()
        train_phase(m, sample, tcfg, None, "bench", r)
        t_proj.append(time.perf_counter() - t)
        p = PlainModel(mcfg)
        t = time.perf_counter()
        plain_loop(p, sample, tcfg, r)
        t_plain.append(time.perf_counter() - t)
    sps_proj = args.steps / min(t_proj)
    sps_plain = args.steps / min(t_plain)
    peak = matmul_peak()
    achieved = flops_per_token(mcfg) * args.batch * args.n_ctx * sps_proj
    print(f"threads: {torch.get_num_threads()}  model: 2L x 1H, d_model 64, d_mlp 256, "
          f"vocab {args.d_vocab}, batch {args.batch} x {args.n_ctx} tokens")
    print(f"project loop (HookedTransformer): {sps_proj:8.1f} steps/s")
    print(f"plain PyTorch reference:          {sps_plain:8.1f} steps/s")
    print(f"ratio project/reference:          {sps_proj / sps_plain:8.3f}")
    print(f"achieved {achieved / 1e9:.2f} GFLOP/s = {achieved / peak:.3f} of the 2048x2048 "
          f"matmul peak ({peak / 1e9:.1f} GFLOP/s measured now)")


if __name__ == "__main__":
    main()
