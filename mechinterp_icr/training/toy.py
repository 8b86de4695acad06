"""Tiny trained models for tests, benchmarks and examples (induction: seconds on one core)."""

from __future__ import annotations

from mechinterp_icr.config import ModelConfig, TrainConfig
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.tasks.induction import InductionTaskConfig
from mechinterp_icr.training.loop import train_phase

__all__ = ["tiny_induction_model"]


def tiny_induction_model(n_layers: int = 2, n_heads: int = 2, steps: int = 200, seed: int = 0,
                         attn_only: bool = True, normalization: str = "none", run=None,
                         n_tokens: int = 16, half_len: int = 6, checkpoint_every: int = 50):
    """(model, task) trained on repeated random tokens; checkpoints into ``run`` if given."""
    task = InductionTaskConfig(n_tokens=n_tokens, half_len=half_len).build()
    mc = ModelConfig(n_layers=n_layers, n_heads=n_heads, d_model=32, d_head=16, d_mlp=64,
                     attn_only=attn_only, normalization=normalization,
                     d_vocab=task.d_vocab, n_ctx=task.n_ctx)
    model = build_model(mc, seed=seed, device="cpu")
    tc = TrainConfig(steps=steps, batch_size=32, lr=3e-3, eval_every=0, progress=False,
                     checkpoint_schedule="linear" if run is not None else "none",
                     checkpoint_every=checkpoint_every)
    train_phase(model, task.sample, tc, run, "train", seed)
    return model, task
