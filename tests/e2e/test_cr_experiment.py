"""CR reproduction pipeline: the config (profiles, overrides, validation before any work, JSON
round trip) and a tiny end-to-end run of every stage, CR-1 .. CR-7."""

import json
from dataclasses import replace

import pytest
import torch
from helpers import CR_TINY as TINY

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import ConfigError, apply_overrides, from_dict, to_dict
from mechinterp_icr.experiments import cr
from mechinterp_icr.experiments.cr.config import SweepSetting


def _cfg(overrides, profile="quick"):
    return apply_overrides(cr.profile(profile), overrides)


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
    (["sweep=[\"x|finetune.trainable=nonsense\"]"], "sweep setting"),
    (["taskvec.n_pc=0"], "taskvec.n_pc = 0"),
    (["taskvec.lams=[0.5,2]"], "taskvec.lams"),
    (["taskvec.nope=1"], "taskvec.nope"),
    (["cascade.ft_lr=0"], "cascade.ft_lr = 0"),
    (["mechanism.n_pairs=0"], "mechanism.n_pairs = 0"),
    (["taskvec.lam_delta=2"], "taskvec.lam_delta"),
    (["taskvec.n_random_subspaces=0"], "taskvec.n_random_subspaces = 0"),
    (["shared_variant_share=1.5"], "shared_variant_share = 1.5"),
    (["task.attr_share=-0.1"], "task.attr_share = -0.1"),
    (["cascade.onset_fractions_reported=[0.5,1]"], "cascade.onset_fractions_reported"),
    (["cascade.causal_arms=maybe"], "cascade.causal_arms"),
])
def test_bad_overrides_are_refused_by_the_config(override, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        _cfg(override)


def test_unknown_profile_rejected():
    with pytest.raises(ConfigError, match="profile = 'huge'.*'quick', 'paper'"):
        cr.profile("huge")


def test_profiles_resolve_round_trip_and_sweep_settings_parse():
    assert cr.PROFILES == ("quick", "paper")
    for p in cr.PROFILES:
        cfg = cr.profile(p)
        assert isinstance(cfg, cr.CRConfig)
        assert cfg.finetune.trainable == "attention"
        assert cfg.model.n_layers == 2 and cfg.model.n_heads == 1
        assert cfg.model.normalization == "none"
        assert from_dict(cr.CRConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg
        for s in cfg.sweep:
            assert isinstance(s, SweepSetting) and s.label
            assert SweepSetting.parse(str(s)) == s  # the command-line form round-trips
    quick, paper = cr.profile("quick"), cr.profile("paper")
    assert quick.taskvec.lams == paper.taskvec.lams and len(quick.taskvec.lams) >= 4
    assert quick.taskvec.lam_seeds == paper.taskvec.lam_seeds == 0  # every seed
    assert quick.cascade.ft_lrs == paper.cascade.ft_lrs == (3e-3, 6e-3)
    # every n / step budget / lr a CR-4..7 verdict depends on is the same in both profiles
    assert quick.mechanism.n_pairs == paper.mechanism.n_pairs == 64
    assert quick.taskvec == replace(paper.taskvec, curve_max_checkpoints=8)
    assert (quick.pretrain.steps, quick.pretrain.lr, quick.finetune.steps) == \
        (paper.pretrain.steps, paper.pretrain.lr, paper.finetune.steps)
    assert quick.taskvec.lam_model == "main"
    # every stage is reachable by a dotted key
    cfg = _cfg(["taskvec.n_pc=4", "cascade.checkpoint_every=5", "mechanism.n_pairs=8",
                "taskvec.lams=[0,1]"])
    assert (cfg.taskvec.n_pc, cfg.cascade.checkpoint_every, cfg.mechanism.n_pairs) == (4, 5, 8)
    assert cfg.taskvec.lams == (0.0, 1.0)


def test_tiny_end_to_end(tmp_path):
    torch.set_num_threads(1)
    cfg = _cfg(TINY)
    summary = Summary("cr", "quick", [0])
    cr.reproduce(cfg, tmp_path, [0], summary)
    data = json.loads((tmp_path / "summary.json").read_text())
    shared = [f"CR-{i} (shared tokens)" for i in (1, 2, 3, 4, 8)]
    for cid in ("CR-1", "CR-2", "CR-3", "CR-4", "CR-5", "CR-6", "CR-7", "CR-8", "CR-9",
                *shared):
        c = data["claims"][cid]
        assert set(c) >= {"statement", "per_seed", "mean", "ci95", "threshold", "holds"}
        assert isinstance(c["holds"], bool) and "0" in c["per_seed"], cid
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
    assert set(data["timings_s"]) >= {"pretrain", "finetune", "evaluate", "sweep", "figures",
                                      "cr4_taskvec", "cr4_figures", "CR-6 construction",
                                      "CR-5 head roles", "CR-7 cascade", "attention views",
                                      "total"}
    # the later stages: CR-4 tables, the construction, the cascade's run and figures
    assert {r["K"] for r in data["tables"]["cr4_k_sweep"]} == {1, 2}
    assert data["claims"]["CR-6"]["per_seed"]["0"]["own_format_min"] >= 0.99
    assert data["claims"]["CR-6"]["per_seed"]["0"]["zeroed_relation_ov_icl_exact"] <= 0.5
    c7 = data["claims"]["CR-7"]["per_seed"]["0"]
    assert {"ov_first_lr_3e-3", "ov_first_lr_6e-3", "t_onset_ov_lr_3e-3", "placebo_ov_first",
            "placebo_kq_first"} <= set(c7)
    assert c7["placebo_ov_first"] == c7["placebo_kq_first"] == 1.0
    assert c7["placebo_simultaneous_ov_first"] == c7["placebo_kq_leads_ov_first"] == 0.0
    c5 = data["claims"]["CR-5"]["per_seed"]["0"]
    assert {"relation_role", "subject_role", "relation_margin", "pt_relation_role",
            "subject_same_query_changed", "construction_relation"} <= set(c5)
    assert c5["construction_relation"] >= 0.9 and c5["construction_subject"] >= 0.9
    for cid in ("CR-4", "CR-5", "CR-6", "CR-7"):
        assert data["claims"][cid]["controls"] and data["claims"][cid]["verdict"], cid
    assert (tmp_path / "runs" / "cr-mech" / "seed0" / "metrics.jsonl").exists()
    for stem in ("cr_icl_by_k", "cr3_sweep", "cr4_overview", "cr7_cascade", "cr8_by_k"):
        assert (tmp_path / "figures" / f"{stem}.html").exists(), stem
    # the shared-token variant: its own runs, figures and the ideal reader's table
    assert (tmp_path / "shared-tokens" / "runs" / "cr" / "seed0" / "config.json").exists()
    assert (tmp_path / "figures" / "shared-tokens" / "cr8_by_k.html").exists()
    ideal = data["tables"]["CR shared-token ideal reader"]
    assert [r["K"] for r in ideal] == [1, 2, 3] and ideal[0]["mean"] < 1.0
    assert "CR-9 (shared tokens)" not in data["claims"]
    # the uninformative-demo baselines (job uninf-demos): reported in the default task, the
    # type bounds of the variant's CR-1 and CR-3 control read them
    for table, cid in (("CR uninformative-demo baselines", "CR-1"),
                       ("CR shared-token uninformative-demo baselines", "CR-1 (shared tokens)")):
        rows = data["tables"][table]
        assert {r["phase"] for r in rows} == {"pretrain", "ft-icl", "ft-iclgrm-mixed"}
        c = data["claims"][cid]
        assert "heldout_icl_best_attr_type_uninf" in c["per_seed"]["0"]
        assert "heldout_icl_type_contrast" in c["derived"]["0"]
        assert c["conditions"][1]["met"] is not None, cid
    assert data["tables"]["CR attention views"]
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
    # without the job records, re-running resumes CR-1..3 from the checkpoints (finished
    # phases are not trained again) and reproduces the numbers
    import shutil

    shutil.rmtree(tmp_path / "jobs")
    again = Summary("cr", "quick", [0])
    cr.reproduce(cfg, tmp_path, [0], again)
    a2 = again.claims["CR-2"].per_seed["0"]["heldout_icl_exact"]
    assert a2 == pytest.approx(c2["heldout_icl_exact"])
    # a different config refuses to reuse the run directory, before any work
    with pytest.raises(ConfigError, match="different config"):
        cr.reproduce(_cfg(TINY + ["task.lam=0.5"]), tmp_path, [0], Summary("cr", "quick", [0]))


@pytest.mark.parametrize("grammar", [False, True])
def test_finetune_batches_use_only_finetune_subjects(grammar):
    import numpy as np

    from mechinterp_icr.experiments.cr.train import finetune_sampler
    from mechinterp_icr.training.loop import batch_rng

    task = cr.profile("quick").task.build(3)
    sample = finetune_sampler(task, grammar)
    ft = set(task.finetune_subjects.tolist())
    for step in range(5):
        b = sample(batch_rng(3, "ft-icl", step), 128)
        toks = b.tokens.numpy()
        subs = set((toks[np.isin(toks, task.subject_ids)] - task.subject_base).tolist())
        assert subs <= ft and len(subs) > len(ft) // 2
        assert set(b.meta["query_subject"].tolist()) <= ft
