import math

import numpy as np
import pytest
import torch

from mechinterp_icr.interp.cache import cache_activations, iter_checkpoint_caches, map_checkpoints
from mechinterp_icr.interp.cascade import half_gain_step


def test_half_gain_step():
    steps = [0, 10, 20, 30, 40]
    assert half_gain_step(steps, [0.1, 0.2, 0.5, 0.9, 0.9]) == 20
    assert half_gain_step(steps, [0.0, 0.6, 0.6, 1.0, 1.0]) == 10
    assert math.isnan(half_gain_step(steps, [0.5, 0.4, 0.3, 0.2, 0.1]))  # no gain


def test_cache_batches_and_checkpoints(tmp_path):
    from mechinterp_icr.pipeline import resolve_run_config, train_single_phase

    cfg = resolve_run_config("induction", 0, ["train.steps=10", "train.progress=false",
                                              "train.checkpoint_schedule=linear",
                                              "train.checkpoint_every=5", "train.eval_every=0",
                                              "model.attn_only=true", "model.d_model=16",
                                              "model.d_head=8", "task.half_len=4"])
    train_single_phase(cfg, tmp_path / "r")
    task = cfg.task.build(0)
    toks = task.sample(np.random.default_rng(0), 10).tokens
    seen = []
    for ck, cache in iter_checkpoint_caches(tmp_path / "r", "all", toks,
                                            ["blocks.0.attn.hook_pattern", "hook_embed"],
                                            batch_size=3, return_logits=True):
        assert set(cache) == {"blocks.0.attn.hook_pattern", "hook_embed", "logits"}
        assert cache["hook_embed"].shape[0] == 10
        seen.append(ck.step)
    assert seen == [0, 5, 10]
    from mechinterp_icr.models.factory import build_model

    m = build_model(cfg.model, seed=0)
    full = cache_activations(m, toks, "blocks.1.hook_resid_pre", batch_size=10)
    part = cache_activations(m, toks, "blocks.1.hook_resid_pre", batch_size=4)
    assert torch.allclose(full["blocks.1.hook_resid_pre"], part["blocks.1.hook_resid_pre"],
                          atol=1e-6)
    rows = map_checkpoints(tmp_path / "r", "last", lambda ck, m: {"n": m.cfg.n_layers})
    assert rows == [{"checkpoint": "train-0000010", "phase": "train", "step": 10, "n": 2}]


def test_cascade_probes_and_timing_on_an_untrained_model():
    """The probe rows logged per checkpoint and their timing, without any training."""
    from mechinterp_icr.experiments.cr.cascade import mechanism_model_config
    from mechinterp_icr.experiments.cr.config import CascadeConfig
    from mechinterp_icr.interp.cascade import cascade_timing, checkpoint_probes
    from mechinterp_icr.models.factory import build_model
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig(n_subjects=16, n_values=4, n_types=2, n_demos=2, max_demos=3).build(0)
    model = build_model(mechanism_model_config(task, CascadeConfig(d_model=16, d_head=8)))
    batch = task.sample_icl(np.random.default_rng(0), 16, subjects=task.heldout_subjects)
    row = checkpoint_probes(task, batch)(model)
    assert {"h0_ov_contrast", "h0_ov_margin", "h1_kq_mass", "h1_kq_logit", "h0_ov", "h1_kq",
            "icl_heldout_exact"} <= set(row)
    # fake checkpoints: the OV probe (ov_margin) rises at step 2, the KQ probe (kq_logit) at
    # step 4, then a plateau
    rows = [{**row, "step": s, "h0_ov_margin": ov, "h1_ov_margin": ov, "h0_kq_logit": kq,
             "h1_kq_logit": kq}
            for s, ov, kq in ((0, 0.0, 0.1), (2, 1.0, 0.1), (4, 1.0, 0.9), (6, 1.0, 0.9),
                              (8, 1.0, 0.9))]
    t = cascade_timing(model, task, rows, batch)
    assert t["steps"] == [0, 2, 4, 6, 8] and t["relation_head"] in (0, 1)
    assert (t["t_onset_ov"], t["t_onset_kq"], t["ov_first"], t["lead_steps"]) == (2, 4, 1.0, 2)


@pytest.mark.slow
def test_cascade_runs_end_to_end(tmp_path):
    from mechinterp_icr.experiments.cr.cascade import run_cascade
    from mechinterp_icr.experiments.cr.config import CascadeConfig
    from mechinterp_icr.tasks.cr import CRTaskConfig

    tc = CRTaskConfig(n_subjects=32, n_values=8)
    r = run_cascade(tc.build(0), 0, CascadeConfig(pt_steps=300, ft_steps=60, ft_lr=3e-3,
                                                  ft_lrs=(3e-3,), dense_until=10,
                                                  checkpoint_every=5), tmp_path / "c", tc)
    v = r["by_lr"]["0.003"]
    assert len(v["steps"]) == len(v["ov"]) == len(v["kq"]) >= 10
    assert v["relation_head"] in (0, 1) and set(r["models"]) == {"0.003"}
