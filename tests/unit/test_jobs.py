"""The job engine (mechinterp_icr.jobs): dependency order, records, resume, failures."""

import json

import pytest

from mechinterp_icr.config import ConfigError
from mechinterp_icr.jobs import Job, JobFailed, record_path, run_jobs

CALLS: list[str] = []


def square(x: int, tag: str) -> dict:
    CALLS.append(tag)
    return {"x": x, "y": x * x}


def boom(tag: str) -> dict:
    CALLS.append(tag)
    raise ValueError(f"broken input {tag}")


def plan():
    return [Job("a", square, {"x": 2, "tag": "a"}),
            Job("b", square, {"x": 3, "tag": "b"}, after=("a",)),
            Job("sub/c", square, {"x": 4, "tag": "c"})]


def test_runs_in_dependency_order_and_stores_records(tmp_path):
    CALLS.clear()
    jobs = [plan()[1], plan()[0], plan()[2]]  # b listed before the job it depends on
    out = run_jobs(jobs, tmp_path, workers=1, log=lambda m: None)
    assert CALLS.index("a") < CALLS.index("b")
    assert list(out) == ["b", "a", "sub/c"]  # plan order
    assert out["sub/c"] == {"x": 4, "y": 16}
    stored = json.loads(record_path(tmp_path, "sub/c").read_text())
    assert stored["record"] == {"x": 4, "y": 16} and stored["name"] == "sub/c"


def test_rerun_skips_done_jobs_and_reruns_damaged_records(tmp_path):
    CALLS.clear()
    run_jobs(plan(), tmp_path, log=lambda m: None)
    CALLS.clear()
    msgs = []
    again = run_jobs(plan(), tmp_path, log=msgs.append)
    assert CALLS == [] and again["b"] == {"x": 3, "y": 9}
    assert any("3 of 3 already done" in m for m in msgs)
    record_path(tmp_path, "a").write_text("{trunc")
    CALLS.clear()
    run_jobs(plan(), tmp_path, log=lambda m: None)
    assert CALLS == ["a"]


def test_failure_is_reported_by_name_dependents_skipped_others_run(tmp_path):
    CALLS.clear()
    jobs = [Job("bad", boom, {"tag": "bad"}),
            Job("needs-bad", square, {"x": 1, "tag": "needs"}, after=("bad",)),
            Job("independent", square, {"x": 5, "tag": "ind"})]
    msgs = []
    with pytest.raises(JobFailed) as e:
        run_jobs(jobs, tmp_path, log=msgs.append)
    assert set(e.value.failures) == {"bad", "needs-bad"}
    assert "broken input bad" in str(e.value)
    assert "needs" not in CALLS and "ind" in CALLS
    assert record_path(tmp_path, "independent").exists()
    assert not record_path(tmp_path, "bad").exists()
    # once the input is fixed, a rerun runs only what did not finish
    CALLS.clear()
    fixed = [Job("bad", square, {"x": 0, "tag": "bad"}), jobs[1], jobs[2]]
    run_jobs(fixed, tmp_path, log=lambda m: None)
    assert CALLS == ["bad", "needs"]


@pytest.mark.parametrize("jobs,needle", [
    ([Job("a", square, {"x": 1, "tag": "a"}), Job("a", square, {"x": 1, "tag": "a"})],
     "unique job names"),
    ([Job("a", square, {"x": 1, "tag": "a"}, after=("zz",))], "zz"),
])
def test_bad_plans_are_refused_before_any_work(tmp_path, jobs, needle):
    CALLS.clear()
    with pytest.raises(ConfigError, match=needle):
        run_jobs(jobs, tmp_path, log=lambda m: None)
    assert CALLS == []


@pytest.mark.parametrize("name", ["", "../x", "/abs", "a;b"])
def test_job_names_are_relative_paths(name):
    with pytest.raises(ConfigError, match="job.name"):
        Job(name, square)


def test_changed_inputs_rerun_instead_of_reusing_a_stale_record(tmp_path):
    CALLS.clear()
    run_jobs([Job("a", square, {"x": 2, "tag": "a"})], tmp_path, log=lambda m: None)
    out = run_jobs([Job("a", square, {"x": 5, "tag": "a"})], tmp_path, log=lambda m: None)
    assert out["a"] == {"x": 5, "y": 25} and CALLS == ["a", "a"]


def test_status_lines_go_to_the_log(tmp_path):
    msgs = []
    run_jobs(plan(), tmp_path, log=msgs.append)
    assert sum("done in" in m for m in msgs) == 3


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="--workers"):
        run_jobs(plan(), tmp_path, workers=0)


def test_every_spelling_of_the_output_folder_gives_the_same_job_fingerprints(
        tmp_path, monkeypatch):
    """A resumed `icr reproduce` finds its records whether --out is `out`, `./out`, the
    absolute path or a detour: the runner gives each folder one spelling before planning."""
    from pathlib import Path

    from mechinterp_icr.jobs import fingerprint
    from mechinterp_icr.runner import canonical_out, pooled_plan, resolve_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    cfg = resolve_config("ir", "quick")
    fps = []
    for spelling in ("out", "./out", str(tmp_path / "out"), "sub/../out"):
        assert canonical_out(spelling) == Path("out")
        fps.append([fingerprint(t) for t in pooled_plan([("ir", cfg)], canonical_out(spelling),
                                                        [0])])
    assert fps[0] and all(f == fps[0] for f in fps)
    # without it the spellings differ (what a resumed run used to redo)
    raw = [fingerprint(t) for t in pooled_plan([("ir", cfg)], tmp_path / "out", [0])]
    assert raw != fps[0]
    assert canonical_out("/") == Path("/")  # outside the working directory: absolute


def test_a_cluster_run_keeps_the_output_folder_as_given(tmp_path, monkeypatch):
    """With --ray-address the folder stays absolute (workers on other nodes resolve a
    relative path against their own working directory); locally it gets one spelling."""
    from pathlib import Path

    from mechinterp_icr import runner

    seen = []

    def fake_run_jobs(jobs, records_dir, *a, **k):
        seen.append(records_dir)
        raise RuntimeError("stop")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "run_jobs", fake_run_jobs)
    cfg = runner.resolve_config("ir", "quick")
    for address in (None, "auto"):
        with pytest.raises(RuntimeError, match="stop"):
            runner.run_targets([("ir", cfg)], tmp_path / "out", [0], "quick",
                               ray_address=address)
    assert seen == [Path("out") / "jobs", tmp_path / "out" / "jobs"]


def test_gpu_share_fits_every_concurrent_job_on_the_gpus():
    """Ray hides the GPUs from a task that asks for none: with GPUs, each of the concurrent
    jobs asks for a share such that all of them fit at once on whole GPUs (Ray serves a
    fractional request from one GPU), never more than one GPU, in Ray's 1e-4 steps."""
    import math

    from mechinterp_icr.jobs import gpu_share

    assert gpu_share(0, 2) == 0.0 and gpu_share(1, 0) == 0.0 and gpu_share(0.5, 2) == 0.0
    assert gpu_share(1, 1) == 1.0 and gpu_share(1, 2) == 0.5 and gpu_share(4, 2) == 1.0
    assert gpu_share(2, 3) == 0.5  # not 2/3: two tasks of 0.67 would not share one GPU
    for n_gpus, slots in ((1, 3), (1, 7), (2, 3), (3, 8), (1, 16), (8, 2)):
        share = gpu_share(n_gpus, slots)
        fit_per_gpu = math.floor(1 / share + 1e-9)  # tasks one GPU holds at this share
        assert fit_per_gpu * n_gpus >= slots and 0 < share <= 1
        assert abs(share * 10_000 - round(share * 10_000)) < 1e-6
