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
