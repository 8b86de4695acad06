import random

import numpy as np
import pytest
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


def test_parse_heads_reads_all_and_names_and_refuses_heads_outside_the_model():
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.models.factory import head_name, parse_heads

    assert parse_heads("all", 2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert parse_heads(" L1H0, L0H1,L1H0", 2, 2) == [(1, 0), (0, 1)]  # order kept, no repeats
    assert head_name(1, 0) == "L1H0"
    for bad in ("L2H0", "L0H2", "l0h0", "L0", "", "L99999999999H0"):
        with pytest.raises(ConfigError, match=r"--head = .* is not allowed; expected all or "
                                              r"LxHy with x < 2 and y < 2"):
            parse_heads(bad, 2, 2)


def test_checkpoint_slider_shows_one_checkpoint_at_a_time():
    """viz.circuit_figures.checkpoint_slider: every checkpoint's traces, the last visible, a
    step per checkpoint that shows only its own traces and sets its titles."""
    from mechinterp_icr.viz.circuit_figures import checkpoint_slider, circuit_figure

    def blocks(v):
        return [{"name": f"OV {n}", "what": "w", "z": [[v, -v], [0.5, 1.0]], "rows": ["a", "b"],
                 "cols": ["c", "d"], "row_groups": [("g", 0, 1)], "col_groups": [("g", 0, 1)]}
                for n in ("x", "y")]

    figs = [circuit_figure(blocks(v), f"checkpoint {v}")[0] for v in (1.0, 2.0, 3.0)]
    out = checkpoint_slider(figs, ["c1", "c2", "c3"])
    assert [t.visible for t in out.data] == [False] * 4 + [True] * 2
    steps = out.layout.sliders[0].steps
    assert [s.label for s in steps] == ["c1", "c2", "c3"] and out.layout.sliders[0].active == 2
    assert steps[0].args[0]["visible"] == [True] * 2 + [False] * 4
    assert steps[1].args[1]["title"]["text"] == "checkpoint 2.0"
    assert len(steps[1].args[1]["annotations"]) == 2  # the subplot titles of that checkpoint
    with pytest.raises(ValueError, match="one label per figure"):
        checkpoint_slider(figs, ["c1"])
