"""The task engine on a local Ray (2 CPUs) gives the records the in-process run gives."""

import json

import pytest

from mechinterp_icr.jobs import Task, TaskFailed, run_tasks

pytestmark = pytest.mark.slow  # starting Ray costs 10-20 s


def _plan(bad: bool = False):
    # builtins pickle by reference, so Ray workers can run them without the test module
    return [Task("a", json.loads, {"s": '{"a": 1}'}),
            Task("b", json.loads, {"s": '{"b": 2}'}, after=("a",)),
            Task("c", json.loads, {"s": "{broken" if bad else '{"c": 3}'}),
            Task("d", json.loads, {"s": '{"d": 4}'}, after=("c",))]


def test_ray_matches_in_process_and_reports_failures(tmp_path):
    serial = run_tasks(_plan(), tmp_path / "w1", workers=1, log=lambda m: None)
    parallel = run_tasks(_plan(), tmp_path / "w2", workers=2, log=lambda m: None)
    assert serial == parallel == {"a": {"a": 1}, "b": {"b": 2}, "c": {"c": 3}, "d": {"d": 4}}
    with pytest.raises(TaskFailed) as e:
        run_tasks(_plan(bad=True), tmp_path / "bad", workers=2, log=lambda m: None)
    assert set(e.value.failures) == {"c", "d"} and "JSONDecodeError" in e.value.failures["c"]
    assert (tmp_path / "bad" / "b.json").exists()


def test_address_path_against_a_local_head(tmp_path):
    """`--ray-address` submits to an existing cluster: a head started by `ray start --head`."""
    import shutil
    import socket
    import subprocess
    import sys
    from pathlib import Path

    ray_cli = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = subprocess.run([ray_cli, "start", "--head", f"--port={port}", "--num-cpus=2",
                            "--include-dashboard=false", "--disable-usage-stats"],
                           capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-2000:]
    try:
        out = run_tasks(_plan(), tmp_path / "cluster", workers=1,
                        ray_address=f"127.0.0.1:{port}", log=lambda m: None)
        assert out == {"a": {"a": 1}, "b": {"b": 2}, "c": {"c": 3}, "d": {"d": 4}}
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True, timeout=120)
