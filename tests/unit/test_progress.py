"""The progress of a run of jobs: done / total, the running jobs, and an ETA from the
jobs' expected durations (an earlier run's records, else estimates by kind)."""

import io
import json

from mechinterp_icr.jobs import (
    Job,
    Progress,
    expected_seconds,
    job_kind,
    job_twin,
    record_path,
    run_jobs,
)


def _job(name):
    return Job(name, print, {})


def _quick() -> dict:
    return {"ok": 1}


def test_expected_durations_come_from_earlier_records_then_the_kind():
    assert job_kind("ir/sample/n128/seed3") == "ir/sample/n#/seed#"
    assert job_kind("cr/cr4-lam/0.3/seed1") == "cr/cr#-lam/#/seed#"
    assert job_twin("ir/sample/n128/seed3") == "ir/sample/n128/seed#"
    jobs = [_job(n) for n in ("a/seed0", "a/seed1", "b/seed0")]
    assert set(expected_seconds(jobs, {}).values()) == {60.0}  # defaults
    # the same job on another seed first, then the kind (any size)
    sizes = [_job(f"ir/sample/n{n}/seed1") for n in (128, 4096, 512)]
    exp = expected_seconds(sizes, {"ir/sample/n128/seed0": 5.0, "ir/sample/n4096/seed0": 200.0})
    assert exp == {"ir/sample/n128/seed1": 5.0, "ir/sample/n4096/seed1": 200.0,
                   "ir/sample/n512/seed1": 102.5}


def test_a_finished_job_updates_its_twins_before_its_kind():
    names = ["s/n128/seed0", "s/n4096/seed0", "s/n128/seed1", "s/n4096/seed1", "s/n512/seed1"]
    p = Progress([_job(n) for n in names], dict.fromkeys(names, 60.0), 1, io.StringIO(),
                 lambda: 0.0)
    p.start("s/n128/seed0")
    p.finish("s/n128/seed0", 4.0)
    assert p.expected["s/n128/seed1"] == 4.0  # its twin
    assert p.expected["s/n4096/seed1"] == 4.0  # the kind, while no twin has finished
    p.start("s/n4096/seed0")
    p.finish("s/n4096/seed0", 300.0)
    assert p.expected["s/n4096/seed1"] == 300.0 and p.expected["s/n128/seed1"] == 4.0
    assert p.expected["s/n512/seed1"] == 152.0  # the kind's mean


def test_expected_durations_read_stored_records(tmp_path):
    jobs = [_job(n) for n in ("a/seed0", "a/seed1", "b/seed0")]
    exp = expected_seconds(jobs, {"a/seed0": 30.0})
    assert exp == {"a/seed0": 30.0, "a/seed1": 30.0, "b/seed0": 30.0}  # kind, then overall
    # run_jobs reads an earlier run's record (other inputs) for its duration: the first
    # log line's ETA is b/seed0's 30 s (a/seed1 now expected as long as a/seed0 took)
    p = record_path(tmp_path, "a/seed0")
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"seconds": 30.0, "fingerprint": "other inputs", "record": {}}))
    lines = []
    run_jobs([Job(n, _quick, {}) for n in ("a/seed0", "a/seed1", "b/seed0")], tmp_path,
             log=lines.append)
    assert lines[0].startswith("[job] a/seed0: done in") and lines[0].endswith(
        "(1/3 done, 0 running, ETA 0m30s)")


def test_progress_status_and_eta_with_two_workers():
    now = [0.0]
    stream = io.StringIO()  # not a terminal: no line is drawn, the status rides on the log
    names = ["a/seed0", "a/seed1", "b/seed0"]
    p = Progress([_job(n) for n in names], {"a/seed0": 100.0, "a/seed1": 100.0,
                                            "b/seed0": 40.0}, 2, stream, lambda: now[0])
    assert p.status() == "0/3 done, 0 running, ETA 2m00s"  # 240 s of work over 2 workers
    p.start("a/seed0")
    p.start("b/seed0")
    now[0] = 30.0
    # left: a/seed1 100 + a/seed0 70 + b/seed0 10, over 2 workers
    assert p.eta() == 90.0
    assert "a/seed0 0m30s" in p.line() and "2 running" in p.line()
    p.finish("b/seed0", 30.0)
    now[0] = 120.0
    p.finish("a/seed0", 120.0)  # a/seed1 now expected to take what a/seed0 took
    assert p.expected["a/seed1"] == 120.0
    assert p.status() == "2/3 done, 0 running, ETA 1m00s"
    assert stream.getvalue() == ""


def test_progress_draws_one_line_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    p = Progress([_job("a/seed0")], {"a/seed0": 10.0}, 1, stream, lambda: 0.0)
    p.start("a/seed0")
    assert stream.getvalue().startswith("\r[jobs] 0/1 done, 1 running")
    p.finish("a/seed0", 1.0)
    p.close()
    assert stream.getvalue().endswith("\r")  # the line is cleared before the job's log line


def test_a_reference_runs_seconds_start_the_eta_of_a_fresh_folder(tmp_path):
    """`icr reproduce --eta-from`: where the output folder holds no record of a job, the
    reference run's seconds are its expected duration; a stored record still wins."""
    lines = []
    jobs = [Job("a/seed0", _quick, {}), Job("b/seed0", _quick, {})]
    run_jobs(jobs, tmp_path / "r1", log=lines.append, prior={"b/seed0": 100.0})
    # after a/seed0 finished, b/seed0 (not run yet) is expected to take its 100 s
    assert "(1/2 done, 0 running, ETA 1m40s)" in lines[0]
    # a stored record of b/seed0 (under other inputs) beats the reference run
    rec = record_path(tmp_path / "r2", "b/seed0")
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({"name": "b/seed0", "seconds": 10.0, "fingerprint": "old"}))
    lines.clear()
    run_jobs(jobs, tmp_path / "r2", log=lines.append, prior={"b/seed0": 100.0})
    assert "(1/2 done, 0 running, ETA 0m10s)" in lines[0]


def test_a_measured_expectation_is_not_replaced_by_its_kinds_mean():
    """A job whose expected duration is its own measurement (a stored record or the
    reference run) keeps it when a job of the same kind but another size finishes; a job
    with no measurement takes the kind's mean; the same job finishing on another seed
    updates both."""
    names = ["s/n128/seed0", "s/n4096/seed1", "s/n512/seed1"]
    p = Progress([_job(n) for n in names], {"s/n128/seed0": 5.0, "s/n4096/seed1": 200.0,
                                           "s/n512/seed1": 60.0}, 1, io.StringIO(),
                 lambda: 0.0, measured={"s/n128/seed0", "s/n4096/seed1"})
    p.start("s/n128/seed0")
    p.finish("s/n128/seed0", 4.0)
    assert p.expected["s/n4096/seed1"] == 200.0  # measured: kept
    assert p.expected["s/n512/seed1"] == 4.0  # an estimate: the kind's mean replaces it


def test_a_reference_run_of_other_seeds_informs_the_twins(tmp_path):
    """--eta-from with the published seeds 0-4 and a run on seed 7: the same job on the
    reference run's seeds gives seed 7's expectation."""
    lines = []
    jobs = [Job("a/seed7", _quick, {}), Job("b/n4096/seed7", _quick, {})]
    run_jobs(jobs, tmp_path / "r", log=lines.append,
             prior={"b/n4096/seed0": 90.0, "b/n4096/seed1": 110.0, "b/n128/seed0": 1.0})
    assert "(1/2 done, 0 running, ETA 1m40s)" in lines[0]


def test_job_seconds_files_round_trip_and_bad_ones_are_named(tmp_path):
    import pytest

    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.store.job_seconds import job_seconds, read_job_seconds, write_job_seconds

    recs = tmp_path / "jobs"
    run_jobs([Job("cr/seed0/train", _quick, {}), Job("ir/seed0/ir6", _quick, {})], recs,
             log=lambda m: None)
    (recs / "cr" / "damaged.json").write_text("{")  # a damaged file is left out
    secs = job_seconds(recs)
    assert set(secs) == {"cr/seed0/train", "ir/seed0/ir6"}
    f = write_job_seconds(recs, tmp_path / "job_seconds.json", source="abc")
    assert json.loads(f.read_text())["source"] == "abc" and read_job_seconds(f) == secs
    bad = tmp_path / "bad.json"
    for text, says in (("{", "not a readable JSON file"),
                       (b"\xff\xfe\x00", "not a readable JSON file"),
                       ('{"seconds": {"a": -1}}', "field 'seconds' must map job names"),
                       ('{"seconds": {"a": 1e999}}', "field 'seconds' must map job names"),
                       ('{"seconds": [1]}', "field 'seconds' must map job names")):
        if isinstance(text, bytes):
            bad.write_bytes(text)
        else:
            bad.write_text(text)
        with pytest.raises(ConfigError, match=says) as e:
            read_job_seconds(bad)
        assert "--eta-from" in str(e.value) and "bad.json" in str(e.value)
    with pytest.raises(ConfigError, match="not a readable JSON file"):
        read_job_seconds(tmp_path / "missing.json")


def test_reproduce_refuses_a_bad_eta_file_before_running_anything(tmp_path):
    from click.testing import CliRunner

    from mechinterp_icr.cli import main

    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["reproduce", "ir", "--out", str(out), "--eta-from",
                                  str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "--eta-from" in r.output and "missing.json" in r.output
    assert "Traceback" not in r.output
    assert not out.exists()
