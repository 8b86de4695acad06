import copy
import json
import math

import numpy as np
import pytest
import torch

from mechinterp_icr.interp.cache import cache_activations, iter_checkpoint_caches, map_checkpoints
from mechinterp_icr.interp.ovkq import half_gain_step


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
    from mechinterp_icr.experiments.cr.config import CascadeConfig
    from mechinterp_icr.experiments.cr.mechanism_model import mechanism_model_config
    from mechinterp_icr.interp.ovkq import cascade_timing, checkpoint_probes
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
    from mechinterp_icr.experiments.cr.config import CascadeConfig
    from mechinterp_icr.experiments.cr.mechanism_model import run_cascade
    from mechinterp_icr.tasks.cr import CRTaskConfig

    tc = CRTaskConfig(n_subjects=32, n_values=8)
    r = run_cascade(tc.build(0), 0, CascadeConfig(pt_steps=300, ft_steps=60, ft_lr=3e-3,
                                                  ft_lrs=(3e-3,), dense_until=10,
                                                  checkpoint_every=5), tmp_path / "c", tc)
    v = r["by_lr"]["0.003"]
    assert len(v["steps"]) == len(v["ov"]) == len(v["kq"]) >= 10
    assert v["relation_head"] in (0, 1) and set(r["models"]) == {"0.003"}


# ------------------------------------------------------------------------------------------
# CR-7: the shape-swapped placebo and the causal arms on a tiny task
# ------------------------------------------------------------------------------------------
def _tiny_task():
    from mechinterp_icr.tasks.cr import CRTaskConfig

    return CRTaskConfig(n_subjects=16, n_grammar=4, n_types=2, n_values=4, n_demos=2,
                        max_demos=3, n_tuples=2).build(0)


@pytest.mark.parametrize("n_points", [11, 21])
def test_shape_swapped_placebo_schedules_are_read_by_onset_not_by_shape(n_points):
    """OV on a cubic (convex) ramp and KQ linear, from the linear pair's ramp starts: each
    order is read correctly at the claim's onset fraction, although in the OV-first one the
    half-gain (speed) reading puts KQ first."""
    from mechinterp_icr.interp.ovkq import placebo_orders

    task = _tiny_task()
    batch = task.sample_icl(np.random.default_rng(0), 16, subjects=task.heldout_subjects)
    r = placebo_orders(task, batch, n_points, fractions=(0.05, 0.2, 0.5))
    assert r["placebo_swapped_ov_first"] == 1.0 and r["placebo_swapped_kq_first"] == 1.0
    assert r["placebo_ov_first"] == 1.0 and r["placebo_kq_first"] == 1.0
    assert r["placebo_simultaneous_ov_first"] == 0.0 and r["placebo_kq_leads_ov_first"] == 0.0
    sw = r["schedules"]["swapped_ov_first"]
    assert sw["t_onset_ov"] < sw["t_onset_kq"]
    assert sw["t_half_kq"] < sw["t_half_ov"]  # read by speed it would be KQ first
    assert sw["onsets"]["50"]["ov_first"] == 0.0
    # the shapes: OV convex (its increments grow), KQ linear (equal increments) while rising
    ov, kq = np.diff(sw["ov"]), np.diff(sw["kq"])
    rising_ov = ov[ov > 1e-9]
    assert len(rising_ov) >= 4 and np.all(np.diff(rising_ov) > 0)
    rising_kq = kq[kq > 1e-9]
    assert np.allclose(rising_kq, rising_kq[0], rtol=1e-4)
    kf = r["schedules"]["swapped_kq_first"]
    assert kf["t_onset_kq"] < kf["t_onset_ov"] and kf["read_correctly"] == 1.0


def _tiny_cascade_cfg(**kw):
    from mechinterp_icr.experiments.cr.config import CascadeConfig

    base = {"d_head": 8, "pt_steps": 20, "pt_batch": 16, "ft_steps": 6, "ft_batch": 16,
            "ft_lr": 6e-3, "ft_lrs": (6e-3,), "dense_until": 2, "checkpoint_every": 2,
            "probe_batch": 16, "ft_trainable": "all"}
    return CascadeConfig(**{**base, **kw})


def test_causal_arms_preset_and_freeze_only_the_relation_heads_part():
    """OV frozen: the Relation head's W_V / W_O stay at their PT values while the other
    head's (and the Relation head's W_K) train; KQ frozen: the same with W_Q, W_K, b_Q, b_K;
    a preset arm starts with that part equal to the normal run's end, everything else at
    PT."""
    from mechinterp_icr.experiments.cr.mechanism_model import (
        ARMS,
        KQ_PARAMS,
        OV_PARAMS,
        causal_arms,
        preset_head,
        train_mechanism_model,
    )
    from mechinterp_icr.interp.ovkq import cascade_timing

    torch.set_num_threads(1)
    task = _tiny_task()
    cc = _tiny_cascade_cfg()
    pt, _, ft, batch = train_mechanism_model(task, 0, cc, None)
    final, rows, _ = ft[6e-3]
    normal = cascade_timing(final, task, rows, batch, cc.onset_fraction, cc.plateau_tail,
                            cc.onset_fractions_reported)
    rel = normal["relation_head"]
    arms = causal_arms(pt, final, task, 0, cc, 6e-3, batch, rel, normal)
    assert set(arms["models"]) == set(ARMS) == set(arms["speedups"])
    P = dict(pt.named_parameters())
    F = dict(final.named_parameters())
    for arm, params, other in (("ov_frozen", OV_PARAMS, "blocks.0.attn.W_K"),
                               ("kq_frozen", KQ_PARAMS, "blocks.0.attn.W_V")):
        frozen = dict(arms["models"][arm].named_parameters())
        for n in params:
            assert torch.equal(frozen[n][rel], P[n][rel]), (arm, n)
        assert not torch.equal(frozen[params[0]][1 - rel], P[params[0]][1 - rel])
        assert not torch.equal(frozen[other][rel], P[other][rel])
    # the OV probe reads only the frozen weights; the KQ probe also reads the residual stream
    # at the query and keys, where the (shared) positional embeddings still train
    fo = arms["ov_frozen"]["ov"]
    assert fo == [fo[0]] * len(fo) and math.isnan(arms["ov_frozen"]["t_onset_ov"])
    # the preset start: only the Relation head's part comes from the normal run's end
    for params in (OV_PARAMS, KQ_PARAMS):
        start = copy.deepcopy(pt)
        preset_head(start, final, rel, params)
        for n, p in start.named_parameters():
            if n in params:
                assert torch.equal(p[rel], F[n][rel]) and torch.equal(p[1 - rel],
                                                                      P[n][1 - rel])
            else:
                assert torch.equal(p, P[n])
    # ... and the arms' probes at step 0: the preset part at the normal run's end
    assert arms["ov_preset"]["steps"] == normal["steps"]
    assert arms["ov_preset"]["ov"][0] == pytest.approx(normal["ov"][-1], abs=1e-9)
    assert arms["ov_preset"]["kq"][0] == pytest.approx(normal["kq"][0], abs=1e-9)
    assert arms["kq_preset"]["ov"][0] == pytest.approx(normal["ov"][0], abs=1e-9)
    assert arms["ov_preset"]["onsets"].keys() == normal["onsets"].keys() == {"5", "20", "50"}
    assert len(arms["kq_frozen"]["other_ov"]) == len(normal["steps"])
    assert 0.0 <= arms["kq_frozen"]["icl_heldout_exact"] <= 1.0
    from mechinterp_icr.interp.ovkq import level_step, onset_speedup, plateau_gain

    level = normal["kq"][0] + 0.1 * plateau_gain(normal["kq"])  # the normal run's onset level
    want = level_step(arms["ov_preset"]["steps"], arms["ov_preset"]["kq"], level * (1 - 1e-12))
    sp = arms["speedups"]["ov_preset"]
    assert sp == pytest.approx(normal["t_onset_kq"] / want if want == want else 0.0,
                               nan_ok=True)
    assert onset_speedup(arms["ov_preset"], normal, "kq") == pytest.approx(sp, nan_ok=True)
    with pytest.raises(Exception, match=r"head = 2 is not allowed.*0\.\.1"):
        preset_head(start, final, 2)


def test_run_cascade_records_the_arms_only_when_asked(tmp_path):
    from mechinterp_icr.experiments.cr.claims_mech import cr7_seed_metrics
    from mechinterp_icr.experiments.cr.evaluate import to_record
    from mechinterp_icr.experiments.cr.mechanism_model import ARMS, run_cascade

    torch.set_num_threads(1)
    task = _tiny_task()
    r = run_cascade(task, 0, _tiny_cascade_cfg(), tmp_path / "a")
    v = r["by_lr"]["0.006"]
    assert set(v["arms"]) == set(ARMS) == set(r["arm_models"]["0.006"])
    assert set(v["onsets"]) == {"5", "20", "50"}
    phases = {json.loads(x)["phase"] for x in (tmp_path / "a" / "metrics.jsonl").open()}
    assert {"ft-icl-lr0.006", "ft-icl-lr0.006-ov-preset", "ft-icl-lr0.006-ov-frozen",
            "ft-icl-lr0.006-kq-preset", "ft-icl-lr0.006-kq-frozen"} <= phases
    for k in ("pt_model", "models", "arm_models", "probe_batch"):
        r.pop(k)
    m = cr7_seed_metrics(to_record(r), {})
    assert {"ov_preset_kq_speedup_lr_6e-3", "ov_frozen_kq_speedup_lr_6e-3",
            "kq_preset_ov_speedup_lr_6e-3", "kq_frozen_ov_speedup_lr_6e-3",
            "kq_frozen_ov_speedup_at_50_lr_6e-3", "ov_first_at_5_lr_6e-3",
            "t_onset_kq_ov_preset_lr_6e-3"} <= set(m)
    off = run_cascade(task, 0, _tiny_cascade_cfg(causal_arms=False), tmp_path / "b")
    assert "arms" not in off["by_lr"]["0.006"] and off["arm_models"] == {}
    m = cr7_seed_metrics({k: off[k] for k in ("by_lr",)}, {})
    assert "ov_preset_kq_speedup_lr_6e-3" not in m


def test_an_arm_is_read_at_the_normal_runs_level_not_its_own_gain():
    """An arm whose KQ barely moves must not get an early onset from 10% of its own gain
    (adversarial review): it never reaches the normal run's onset level -> speed-up 0 (never),
    which fails a 'faster' rule whatever the budget."""
    from mechinterp_icr.interp.ovkq import onset_speedup

    steps = list(range(0, 300, 10))
    normal = {"steps": steps, "kq": [0.0 if s < 100 else min(5.0, (s - 100) / 20) for s in steps]}
    flat = {"steps": steps, "kq": [0.0, 0.03] + [0.05] * (len(steps) - 2)}
    assert onset_speedup(flat, normal, "kq") == 0.0
    fast = {"steps": steps, "kq": [min(5.0, s / 20) for s in steps]}
    assert onset_speedup(fast, normal, "kq") == pytest.approx(110 / 10)
