"""The job engine on a local Ray (2 CPUs) gives the records the in-process run gives."""

import json

import pytest

from mechinterp_icr.jobs import Job, JobFailed, run_jobs

pytestmark = pytest.mark.slow  # starting Ray costs 10-20 s


def _plan(bad: bool = False):
    # builtins pickle by reference, so Ray workers can run them without the test module
    return [Job("a", json.loads, {"s": '{"a": 1}'}),
            Job("b", json.loads, {"s": '{"b": 2}'}, after=("a",)),
            Job("c", json.loads, {"s": "{broken" if bad else '{"c": 3}'}),
            Job("d", json.loads, {"s": '{"d": 4}'}, after=("c",))]


def test_ray_matches_in_process_and_reports_failures(tmp_path):
    serial = run_jobs(_plan(), tmp_path / "w1", workers=1, log=lambda m: None)
    parallel = run_jobs(_plan(), tmp_path / "w2", workers=2, log=lambda m: None)
    assert serial == parallel == {"a": {"a": 1}, "b": {"b": 2}, "c": {"c": 3}, "d": {"d": 4}}
    with pytest.raises(JobFailed) as e:
        run_jobs(_plan(bad=True), tmp_path / "bad", workers=2, log=lambda m: None)
    assert set(e.value.failures) == {"c", "d"} and "JSONDecodeError" in e.value.failures["c"]
    assert (tmp_path / "bad" / "b.json").exists()


def test_address_path_against_a_local_head(tmp_path, monkeypatch):
    """`--ray-address` submits to an existing cluster: a head started by `ray start --head`.

    The head runs with --block in its own process group, which the test ends itself; `ray
    stop` would also kill any other Ray cluster on the machine."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    ray_cli = str(Path(sys.executable).parent / "ray")
    # a test cluster of its own: no token shared with another Ray cluster on the machine
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    head = subprocess.Popen([ray_cli, "start", "--head", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:  # wait until the head accepts connections
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None and time.time() < deadline, "ray head did not start"
            time.sleep(1)
        out = run_jobs(_plan(), tmp_path / "cluster", workers=1,
                       ray_address=f"127.0.0.1:{port}", log=lambda m: None)
        assert out == {"a": {"a": 1}, "b": {"b": 2}, "c": {"c": 3}, "d": {"d": 4}}
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
