"""CR reproduction pipeline: validation before any work, and a tiny end-to-end run."""

import json

import pytest
import torch
from helpers import CR_TINY as TINY

from mechinterp_icr.config import ConfigError
from mechinterp_icr.experiments import cr


@pytest.mark.parametrize("override,needle", [
    (["task.nope=1"], "not a known field"),
    (["bogus.x=1"], "not a config section"),
    (["task.lam=1.5"], "task.lam = 1.5"),
    (["task.n_demos=40"], "task.n_demos = 40"),
    (["model.n_ctx=8"], "model.n_ctx = 8"),
    (["eval_ks=[1,99]"], "eval_ks"),
    (["sweep=[\"x|task.nope=1\"]"], "sweep setting"),
    (["sweep=[\"x|model.d_model=8\"]"], "sweep"),
    (["finetune.trainable=nonsense_pattern"], "train.trainable"),
])
def test_validate_rejects_bad_overrides_before_work(tmp_path, override, needle):
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        cfg = cr.validate("quick", [0], override)
        # trainable patterns are only checkable against a model: reproduce checks them first
        cr.reproduce("quick", out, [0], override)
        del cfg
    assert not out.exists()


def test_unknown_profile_rejected():
    with pytest.raises(ConfigError, match="--profile"):
        cr.validate("huge", [0], [])


def test_profiles_resolve_and_sweep_settings_parse():
    for p in cr.PROFILES:
        cfg = cr.validate(p, [0, 1, 2], [])
        assert cfg.finetune.trainable == "attention"
        assert cfg.model.n_layers == 2 and cfg.model.n_heads == 1
        assert cfg.model.normalization == "none"
        for s in cfg.sweep:
            label, ov = cr.parse_sweep_setting(s)
            assert label and all(k.split(".")[0] in ("task", "finetune") for k in ov)


def test_tiny_end_to_end(tmp_path):
    torch.set_num_threads(1)
    summary = cr.reproduce("quick", tmp_path, [0], TINY)
    summary.write(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    for cid in ("CR-1", "CR-2", "CR-3"):
        c = data["claims"][cid]
        assert set(c) >= {"statement", "per_seed", "mean", "ci95", "threshold", "holds"}
        assert isinstance(c["holds"], bool)
    c1 = data["claims"]["CR-1"]["per_seed"]["0"]
    c2 = data["claims"]["CR-2"]["per_seed"]["0"]
    # pretraining stores the facts; ICL finetuning on half the subjects lifts held-out ICL
    assert c1["pt_typed_recall"] > 0.8
    assert 0.5 < c1["bayes_ceiling"] <= 1.0
    assert c2["heldout_icl_exact"] > c1["heldout_icl_exact"] + 0.3
    assert "allweights_heldout_icl_exact" in c2
    table = data["tables"]["CR-3 sweep"]
    assert [r["setting"] for r in table] == ["default", "type chain", "sga"]
    assert [r["own_pretraining"] for r in table] == [False, False, True]
    # the sga-order PT model predicts grammar after the query subject: no ICL at all
    assert table[2]["pt_only_heldout_icl_acc"] < 0.1
    assert "sga" in data["claims"]["CR-1"]["details"][
        "pt_only_heldout_icl_exact_other_pretraining"]
    assert all(0 <= r["heldout_plain_icl_acc"] <= 1 for r in table)
    assert set(data["timings_s"]) >= {"pretrain", "finetune", "evaluate", "sweep", "total"}
    # the run directory is readable by the toolkit: config + phases in order
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    run = RunDir(tmp_path / "runs" / "cr" / "seed0")
    rcfg, task, build = load_run_model(run)
    assert rcfg.task.kind == "cr" and task.d_vocab == rcfg.model.d_vocab
    assert run.phases()[:3] == ["pretrain", "ft-icl", "ft-iclgrm"]
    ft = [c.step for c in run.checkpoints() if c.phase == "ft-icl"]
    assert ft[:4] == [0, 1, 2, 3]  # dense early in finetuning
    ((_, model),) = list(run.iter_models("phase:ft-icl:last", build))
    from mechinterp_icr.tasks.cr import evaluate_icl

    r = evaluate_icl(model, task, 5, task.heldout_subjects, 2, 128)
    assert r["exact"] == pytest.approx(c2["heldout_icl_exact"], abs=0.2)
    # re-running resumes everything from the checkpoints and reproduces the numbers
    again = cr.reproduce("quick", tmp_path, [0], TINY)
    a2 = again.claims["CR-2"].per_seed["0"]["heldout_icl_exact"]
    assert a2 == pytest.approx(c2["heldout_icl_exact"])
    # a different config refuses to reuse the run directory
    with pytest.raises(ConfigError, match="different config"):
        cr.reproduce("quick", tmp_path, [0], TINY + ["task.lam=0.5"])


@pytest.mark.parametrize("grammar", [False, True])
def test_finetune_batches_use_only_finetune_subjects(grammar):
    import numpy as np

    from mechinterp_icr.training.loop import batch_rng

    task = cr.validate("quick", [0], []).task.build(3)
    sample = cr.finetune_sampler(task, grammar)
    ft = set(task.finetune_subjects.tolist())
    for step in range(5):
        b = sample(batch_rng(3, "ft-icl", step), 128)
        toks = b.tokens.numpy()
        subs = set((toks[np.isin(toks, task.subject_ids)] - task.subject_base).tolist())
        assert subs <= ft and len(subs) > len(ft) // 2
        assert set(b.meta["query_subject"].tolist()) <= ft
