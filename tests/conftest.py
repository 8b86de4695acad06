"""Shared test builders (SAELens style: build_*(**overrides)) and settings."""

import os
import warnings

import pytest
import torch

os.environ.setdefault("MECHINTERP_ICR_NO_PNG", "1")  # tests do not need kaleido PNGs
warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


def build_model_cfg(**overrides):
    from mechinterp_icr.config import ModelConfig

    base = dict(n_layers=2, n_heads=1, d_model=32, d_head=32, d_mlp=64, attn_only=True,
                d_vocab=17, n_ctx=17)
    base.update(overrides)
    return ModelConfig(**base)


def build_train_cfg(**overrides):
    from mechinterp_icr.config import TrainConfig

    base = dict(steps=60, batch_size=32, lr=3e-3, eval_every=0, progress=False,
                checkpoint_schedule="linear", checkpoint_every=20)
    base.update(overrides)
    return TrainConfig(**base)


@pytest.fixture
def induction_task():
    from mechinterp_icr.tasks.induction import InductionTaskConfig

    return InductionTaskConfig(n_tokens=16, half_len=8).build()
