"""The IR reproduction as jobs: the plan (names, dependencies, picklable inputs), the same
summary whatever order the jobs run in, a rerun that skips every job, a failed job
reported by name with its dependents not run, and (slow: local Ray) the same summary with one
worker and with two."""

import json
import pickle

import pytest
import torch
from helpers import IR_TINY, comparable_summary

from mechinterp_icr.claims import Summary
from mechinterp_icr.config import apply_overrides, to_dict
from mechinterp_icr.experiments import ir
from mechinterp_icr.experiments.ir.controls import OW_RUNS
from mechinterp_icr.experiments.ir.stages import HOOKED_RUNS
from mechinterp_icr.jobs import Job, JobFailed, run_jobs

# the tiny IR overrides with two gap settings, so every kind of job is in the plan twice
TINY = [k if not k.startswith("gap_n=") else "gap_n=[16,32]" for k in IR_TINY]
SEEDS = [0, 1]


def _cfg():
    return apply_overrides(ir.profile("quick"), TINY)


def _summary(cfg):
    s = Summary("ir", "quick", SEEDS)
    s.config = to_dict(cfg)
    return s


def _reproduce(out, workers=1):
    cfg = _cfg()
    s = _summary(cfg)
    ir.reproduce(cfg, out, SEEDS, s, workers=workers)
    s.write(out)
    return json.loads((out / "summary.json").read_text())


def comparable(data: dict, out_dir) -> dict:
    """Claims and tables without what differs between runs by nature (timings, paths)."""
    return comparable_summary(data, out_dir)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("ir_w1")
    return out, _reproduce(out)


def test_plan_cuts_every_stage_per_seed_and_setting_with_picklable_inputs(tmp_path):
    cfg = ir.profile("quick")
    jobs = ir.plan(cfg, tmp_path, [0, 1, 2])
    after = {t.name: t.after for t in jobs}
    for s in (0, 1, 2):
        for stage in ("main", "ir8_tok", "ir9", "ir6_memory", "induction", "k3"):
            assert after[f"seed{s}/{stage}"] == ()
        assert after[f"seed{s}/overwrite"] == (f"seed{s}/main",)
        assert after[f"seed{s}/ir6"] == (f"seed{s}/ir6_memory",)
        for n in cfg.gap_n:
            assert after[f"gap/n{n}/seed{s}"] == ()
        for n in cfg.sample_complexity.n:
            assert after[f"sample/n{n}/seed{s}"] == ()
            assert after[f"sample_learned/n{n}/seed{s}"] == ()
    ht = [n for n in after if "/ht" in n]
    assert ht == [f"seed0/ht/{r}" for r in HOOKED_RUNS] + [
        f"seed0/ht_overwrite/{r}" for r in OW_RUNS]
    assert after["seed0/ht_overwrite/ht_raw_qk_pgd"] == ("seed0/ht/ht_raw_qk_pgd",)
    assert len(jobs) == 3 * (8 + len(cfg.gap_n) + 2 * len(cfg.sample_complexity.n)) + 10
    paper = {t.name for t in ir.plan(ir.profile("paper"), tmp_path, [3, 4, 5, 6])}
    assert {n for n in paper if n.startswith("sample/n128/")} == {
        "sample/n128/seed3", "sample/n128/seed4", "sample/n128/seed5", "sample/n128/seed6"}
    for t in jobs:  # Ray ships the function by reference and the inputs by pickle
        assert t.fn.__module__ == "mechinterp_icr.experiments.ir.jobs"
        assert pickle.loads(pickle.dumps(t.kwargs)) == t.kwargs


def test_job_order_does_not_change_the_summary(serial, tmp_path):
    """The plan run backwards in one process (later seeds first, dependents as soon as they
    can) gives the same summary: nothing a job computes depends on what ran before it."""
    out, first = serial
    cfg = _cfg()
    jobs = ir.plan(cfg, tmp_path, SEEDS)[::-1]
    records = run_jobs(jobs, tmp_path / "jobs" / "ir", workers=1, log=lambda m: None)
    assert list(records) == [t.name for t in jobs]
    s = _summary(cfg)
    ir.summarise(cfg, tmp_path, SEEDS, records, s)
    again = json.loads((tmp_path / "summary.json").read_text())
    assert comparable(again, tmp_path) == comparable(first, out)


def test_rerun_skips_every_job(serial, capfd):
    out, first = serial
    records = sorted((out / "jobs" / "ir").rglob("*.json"))
    runs = sorted(p for p in (out / "runs").rglob("*") if p.is_file())
    assert len(records) == len(ir.plan(_cfg(), out, SEEDS)) and runs
    before = {p: p.stat().st_mtime_ns for p in records + runs}
    capfd.readouterr()
    again = _reproduce(out)
    err = capfd.readouterr().err
    n = len(records)
    assert f"{n} of {n} already done" in err and "[job]" not in err
    assert {p: p.stat().st_mtime_ns for p in records + runs} == before  # nothing written
    # the summary is a function of the records, the qk run's numbers included
    assert again["claims"] == first["claims"] and again["tables"] == first["tables"]
    assert again["timings_s"]["IR-6 pretrained memory"] == pytest.approx(
        first["timings_s"]["IR-6 pretrained memory"])


def _broken(**kwargs):
    raise RuntimeError("memory on fire")


def test_failed_job_is_named_and_its_dependents_do_not_run(tmp_path):
    torch.set_num_threads(1)
    keep = {"seed0/ir6_memory", "seed0/ir6", "seed0/k3", "gap/n16/seed0"}
    jobs = [Job(t.name, _broken, t.kwargs, t.after) if t.name == "seed0/ir6_memory" else t
            for t in ir.plan(_cfg(), tmp_path, [0]) if t.name in keep]
    logged = []
    with pytest.raises(JobFailed) as e:
        run_jobs(jobs, tmp_path / "jobs" / "ir", workers=1, log=logged.append)
    failures = e.value.failures
    assert set(failures) == {"seed0/ir6_memory", "seed0/ir6"}
    assert "memory on fire" in failures["seed0/ir6_memory"]
    assert "seed0/ir6_memory: RuntimeError: memory on fire" in str(e.value)
    assert "[job] seed0/ir6: not run (a job it depends on failed)" in logged
    # the jobs that do not need the memory finished and kept their records
    for name in ("seed0/k3", "gap/n16/seed0"):
        assert (tmp_path / "jobs" / "ir" / f"{name}.json").exists(), name
    assert not (tmp_path / "runs" / "ir" / "seed0" / "ir6_memory.safetensors").exists()


@pytest.mark.slow  # starting Ray costs 10-20 s
def test_two_workers_give_the_same_summary_as_one(serial, tmp_path):
    out1, first = serial
    second = _reproduce(tmp_path, workers=2)
    assert comparable(second, tmp_path) == comparable(first, out1)
    assert set(second["claims"]) == {f"IR-{i}" for i in range(1, 10)}
