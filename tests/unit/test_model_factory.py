import random

import numpy as np
import torch
from helpers import build_model_cfg

from mechinterp_icr.models.factory import build_model


def test_same_seed_same_weights_other_seed_differs():
    a = build_model(build_model_cfg(), seed=5)
    b = build_model(build_model_cfg(), seed=5)
    c = build_model(build_model_cfg(), seed=6)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    assert any(not torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))


def test_global_rngs_untouched():
    torch.manual_seed(123)
    np.random.seed(7)
    random.seed(9)
    t, n, r = torch.random.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    build_model(build_model_cfg(attn_only=False), seed=1)
    assert torch.equal(t, torch.random.get_rng_state())
    assert (n == np.random.get_state()[1]).all()
    assert r == random.getstate()


def test_init_statistics_and_shapes():
    cfg = build_model_cfg(d_model=64, d_head=16, n_heads=4, attn_only=False, d_mlp=128,
                          d_vocab=50, n_ctx=20, init_range=0.05)
    m = build_model(cfg, seed=0)
    assert m.W_Q.shape == (2, 4, 64, 16)
    assert abs(float(m.W_E.std()) - 0.05) < 0.01
    assert float(m.b_in.abs().max()) == 0.0
