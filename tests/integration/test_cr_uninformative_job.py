"""The ``uninf-demos`` job on a tiny trained CR run of the shared-token variant: it evaluates
the stored checkpoints on the same held-out ICL prompts as the training job's evaluation (its
real-demo numbers are the stored ones, bit for bit), runs after the training and with its
inputs (so it reruns when the training does), and the variant's CR-1 and CR-3 read its
contrasts."""

import json

import pytest
import torch
from helpers import CR_TINY

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import apply_overrides
from mechinterp_icr.experiments import cr
from mechinterp_icr.experiments.cr.claims import cr123_seed_metrics
from mechinterp_icr.experiments.cr.records import read_record
from mechinterp_icr.experiments.cr.reproduce import add_shared_variant, shared_config
from mechinterp_icr.experiments.cr.uninformative import PHASE_METRICS
from mechinterp_icr.jobs import run_jobs

TINY = CR_TINY + ["sweep=[]", "allweights_arm=false", "pretrain.steps=100",
                  "finetune.steps=20"]


def test_uninf_job_measures_the_stored_models_on_the_stored_prompts(tmp_path):
    torch.set_num_threads(1)
    cfg = apply_overrides(cr.profile("quick"), TINY)
    vcfg = shared_config(cfg)
    plan = {t.name: t for t in cr.plan(cfg, tmp_path, [0])}
    train, uninf = plan["shared/seed0/train"], plan["shared/seed0/uninf-demos"]
    assert uninf.after == (train.name,) and uninf.kwargs == train.kwargs
    assert plan["seed0/uninf-demos"].after == ("seed0/train",)
    records = run_jobs([train, uninf], tmp_path / "jobs" / "cr", log=lambda m: None)

    rec = read_record(records, "uninf-demos", 0, variant="shared")
    tr = read_record(records, "train", 0, variant="shared")
    stored = cr123_seed_metrics(tr.phases, tr.task, vcfg.task.n_demos, vcfg.eval_ks,
                                vcfg.task.n_types)
    assert set(rec.phases) == set(PHASE_METRICS)
    assert (rec.K, rec.n) == (vcfg.task.n_demos, vcfg.eval_n_by_k)
    for phase, (cid, metric) in PHASE_METRICS.items():
        got = rec.phases[phase]
        assert got["real"] == stored[cid][metric], phase  # the same model and prompts
        assert 0.0 <= got["uninformative"] <= 1.0 and 0.0 < got["demo_query_type"] < 1.0

    records["shared/seed0/cr4"] = {"status": "skipped", "timings": {}}
    summary = Summary("cr", "quick", [0])
    summary.echo = False
    add_shared_variant(summary, vcfg, tmp_path, [0], records)
    data = json.loads(json.dumps({k: c.to_dict([0]) for k, c in summary.claims.items()}))
    c1, c3 = data["CR-1 (shared tokens)"], data["CR-3 (shared tokens)"]
    pt = rec.phases["pretrain"]
    assert c1["per_seed"]["0"]["heldout_icl_best_attr_type_uninf"] == pt["uninformative"]
    assert c1["derived"]["0"]["heldout_icl_type_contrast"] == pt["contrast"]
    assert c1["conditions"][1]["met"] is not None  # the variant's bound is read
    ft, mixed = rec.phases["ft-icl"], rec.phases["ft-iclgrm-mixed"]
    assert c1["controls"][0]["per_seed"]["0"] == pytest.approx(ft["contrast"] - 0.05)
    assert c3["controls"][0]["per_seed"]["0"] == pytest.approx(mixed["contrast"] - 0.05)
    assert "not measured" not in c1["notes"] and "not read" not in c1["notes"]
