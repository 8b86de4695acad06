"""The CR reproduction as jobs: the plan (names, dependencies, picklable inputs), a rerun that
skips every job, a failed job reported by name with its dependents not run, and (slow: local
Ray) the same summary with one worker and with two."""

import json
import pickle

import pytest
import torch
from helpers import CR_TINY, comparable_summary

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import apply_overrides, to_dict
from mechinterp_icr.experiments import cr
from mechinterp_icr.jobs import Job, JobFailed, run_jobs

# CR_TINY made smaller still (only determinism matters here), with a two-point lam sweep so
# that every kind of job is in the plan
FAST = CR_TINY + [
    "pretrain.steps=120", "finetune.steps=30", "allweights_arm=false", "sweep_seeds=2",
    "taskvec.lams=[0,0.9]",  # lam runs on the main config; lam 0.9 reuses the main run
    "cascade.pt_steps=60", "cascade.ft_steps=12",
]
SEEDS = [0, 1]


def _cfg():
    return apply_overrides(cr.profile("quick"), FAST)


def _reproduce(out, workers=1):
    cfg = _cfg()
    s = Summary("cr", "quick", SEEDS)
    s.config = to_dict(cfg)
    cr.reproduce(cfg, out, SEEDS, s, workers=workers)
    s.write(out)
    return json.loads((out / "summary.json").read_text())


def comparable(data: dict, out_dir) -> dict:
    """Claims and tables without what differs between runs by nature: timings and paths."""
    return comparable_summary(data, out_dir, drop_keys={"seconds", "run"},
                              drop_tables={"CR phase seconds"})


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("cr_w1")
    return out, _reproduce(out)


def test_plan_cuts_every_stage_per_seed_with_picklable_inputs(tmp_path):
    cfg = cr.profile("quick")
    jobs = cr.plan(cfg, tmp_path, [0, 1, 2])
    after = {t.name: t.after for t in jobs}
    for s in (0, 1, 2):
        assert after[f"seed{s}/train"] == ()
        assert after[f"seed{s}/cascade"] == ()  # needs the task only: starts at once
        for name in (f"seed{s}/cr4", f"seed{s}/mechanism", f"sweep/g-s-a-icl-grm/seed{s}",
                     f"seed{s}/uninf-demos"):
            assert after[name] == (f"seed{s}/train",), name
        assert after[f"shared/seed{s}/uninf-demos"] == (f"shared/seed{s}/train",)
        assert f"sweep/literal-sga-pt/seed{s}" not in after  # paper profile only
    assert [n for n in after if n.startswith("cr4-lam/")] == [  # the lam sweep: every seed
        f"cr4-lam/{lam:g}/seed{s}" for s in (0, 1, 2) for lam in cfg.taskvec.lams]
    for s in (0, 1, 2):  # lam runs on the main config; the main lam (0.9) is the main run
        assert after[f"cr4-lam/0.9/seed{s}"] == (f"seed{s}/train",)
        assert after[f"cr4-lam/0/seed{s}"] == ()
    assert after["views"] == ("seed0/train",)
    assert not any(n.startswith("sweep/default") for n in after)  # the main ft-iclgrm branch
    for t in jobs:  # Ray ships the function by reference and the inputs by pickle
        assert t.fn.__module__.startswith("mechinterp_icr.experiments.cr.")
        assert pickle.loads(pickle.dumps(t.kwargs)) == t.kwargs
    # settings that share a pretraining run after the first of them, which pretrains it
    paper = {t.name: t.after for t in cr.plan(cr.profile("paper"), tmp_path / "p", [0])}
    assert paper["sweep/literal-sga-pt/seed0"] == ()
    assert paper["sweep/sga-order-type-chain/seed0"] == ("sweep/literal-sga-pt/seed0",)
    assert paper["sweep/lam-0-1/seed0"] == ()
    assert paper["sweep/type-chain-grammar/seed0"] == ("seed0/train",)


def test_pooled_plan_names_every_job_by_its_target(tmp_path):
    from mechinterp_icr.experiments import ir
    from mechinterp_icr.runner import pooled_plan

    cfgs = [("cr", cr.profile("quick")), ("ir", ir.profile("quick"))]
    pool = pooled_plan(cfgs, tmp_path, [0, 1])
    own = {t: [x.name for x in m.plan(c, tmp_path, [0, 1])] for (t, c), m in
           zip(cfgs, (cr, ir))}
    assert [t.name for t in pool] == [f"{t}/{n}" for t in ("cr", "ir") for n in own[t]]
    names = {t.name for t in pool}
    for t in pool:
        assert all(a in names and a.split("/")[0] == t.name.split("/")[0] for a in t.after)
    assert dict((t.name, t.after) for t in pool)["cr/seed1/cr4"] == ("cr/seed1/train",)


@pytest.mark.slow  # the 2-seed serial run (about 50 s) is the slow step's
def test_one_pool_reads_and_writes_the_records_of_reproduce(serial, capfd):
    """run_targets (what `icr reproduce` calls) finds the records a target's reproduce wrote:
    same files, same fingerprints; and builds the same claims from them."""
    from mechinterp_icr.runner import run_targets

    out, first = serial
    kept = (out / "summary.json").read_text()
    capfd.readouterr()
    try:
        run_targets([("cr", _cfg())], out, SEEDS, "quick")
        again = json.loads((out / "summary.json").read_text())
    finally:  # the other tests compare with the fixture's summary
        (out / "summary.json").write_text(kept)
    err = capfd.readouterr().err
    n = len(cr.plan(_cfg(), out, SEEDS))
    assert f"{n} of {n} already done" in err and "[job]" not in err
    assert again["tables"]["cr: code revision of each job result"][0]["jobs"] == n
    assert comparable(again, out)["claims"] == comparable(first, out)["claims"]


@pytest.mark.slow  # the 2-seed serial run (about 50 s) is the slow step's
def test_rerun_skips_every_job(serial, capfd):
    out, first = serial
    records = sorted((out / "jobs" / "cr").rglob("*.json"))
    ckpts = sorted((out / "runs").rglob("*.safetensors"))
    assert len(records) > 10 and ckpts
    before = {p: p.stat().st_mtime_ns for p in records + ckpts}
    capfd.readouterr()
    again = _reproduce(out)
    err = capfd.readouterr().err
    n = len(cr.plan(_cfg(), out, SEEDS))
    assert f"{n} of {n} already done" in err and "[job]" not in err
    assert {p: p.stat().st_mtime_ns for p in records + ckpts} == before  # nothing written
    assert comparable(again, out) == comparable(first, out)
    # the summary is a function of the records: the per-stage job times are summed in
    assert again["timings_s"]["pretrain"] == pytest.approx(first["timings_s"]["pretrain"])


def _broken(**kwargs):
    raise RuntimeError("disk on fire")


def test_failed_job_is_named_and_its_dependents_do_not_run(tmp_path):
    torch.set_num_threads(1)
    cfg = apply_overrides(_cfg(), ["sweep_seeds=1"])
    jobs = [Job(t.name, _broken, t.kwargs, t.after) if t.name == "seed0/train" else t
            for t in cr.plan(cfg, tmp_path, [0])]
    logged = []
    with pytest.raises(JobFailed) as e:
        run_jobs(jobs, tmp_path / "jobs" / "cr", workers=1, log=logged.append)
    failures = e.value.failures
    assert "disk on fire" in failures["seed0/train"]
    assert "seed0/train: RuntimeError: disk on fire" in str(e.value)
    dependents = {t.name for t in jobs if "seed0/train" in t.after}
    # (the main lam's run is the main run: cr4-lam/0.9 waits for the seed's training)
    assert dependents == {"seed0/cr4", "seed0/mechanism", "sweep/type-chain/seed0", "views",
                          "cr4-lam/0.9/seed0", "seed0/uninf-demos"}
    assert set(failures) == {"seed0/train"} | dependents
    assert "[job] seed0/cr4: not run (a job it depends on failed)" in logged
    # the jobs that do not need the seed's training finished and kept their records
    for name in ("sweep/sga/seed0", "seed0/cascade", "cr4-lam/0/seed0"):
        assert (tmp_path / "jobs" / "cr" / f"{name}.json").exists(), name
    assert not (tmp_path / "runs" / "cr" / "seed0").exists()


@pytest.mark.slow  # starting Ray costs 10-20 s
def test_two_workers_give_the_same_summary_as_one(serial, tmp_path):
    out1, first = serial
    second = _reproduce(tmp_path, workers=2)
    assert comparable(second, tmp_path) == comparable(first, out1)
    assert set(second["claims"]) == {f"CR-{i}" for i in range(1, 10)} | {
        f"CR-{i} (shared tokens)" for i in (1, 2, 3, 4, 8)}
