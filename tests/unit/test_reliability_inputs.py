"""Reliability v2 (issue 41), files a user hands in: one bounded JSON reader
(``store.io.read_json_file``) for ``icr check FILE``, ``icr reproduce --eta-from FILE`` and
job records. A FIFO never hangs, ``/dev/zero`` never fills memory, hostile JSON is one line
and exit 2; ``icr check`` exits 1 only for problems found in a summary it could read."""

import json
import os

import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main
from mechinterp_icr.store.io import JSONFileError, json_depth, read_json_file

pytestmark = pytest.mark.timeout(60)  # a FIFO that blocked would fail here, not hang


def icr(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    bug = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    return res.exit_code, res.output, bug


def one_error_line(code, out, bug):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return (code == 2 and bug is None and "Traceback" not in out and len(lines) == 1
            and lines[0].startswith("error: "))


def _hostile(tmp_path, kind):
    p = tmp_path / "f.json"
    if kind == "/dev/zero":
        p.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "a directory":
        p.mkdir()
    elif kind == "missing":
        pass
    elif kind == "100000-deep nesting":
        p.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "200-deep nesting":
        p.write_text('{"claims": ' + "[" * 200 + "]" * 200 + "}")
    elif kind == "binary":
        p.write_bytes(b"\xff\xfe\x00\x01garbage")
    elif kind == "not json":
        p.write_text("{claims: 5")
    else:  # a JSON value of the wrong shape
        p.write_text(kind)
    return p


HOSTILE = ["/dev/zero", "fifo", "a directory", "missing", "100000-deep nesting",
           "200-deep nesting", "binary", "not json"]
WRONG_SHAPE = ['{"claims": 5}', "[1, 2]", "5", "null", '{"claims": [1]}',
               '{"claims": {"CR-1": {"per_seed": 5}}}',
               '{"claims": {"CR-1": {"controls": 3}}}',
               '{"claims": {"CR-1": {"conditions": [{"per_seed": [1]}]}}}']


@pytest.mark.parametrize("kind", HOSTILE + WRONG_SHAPE)
def test_icr_check_file_that_cannot_be_read_is_one_line_exit_2(tmp_path, kind):
    code, out, bug = icr("check", _hostile(tmp_path, kind))
    assert one_error_line(code, out, bug), (kind, code, out, bug)
    assert "summary" in out


def test_icr_check_problems_found_exit_1_and_a_clean_read_is_not_an_error(tmp_path):
    p = tmp_path / "summary.json"
    p.write_text(json.dumps({"claims": {"X-1": {"verdict": "maybe", "per_seed": {},
                                                "controls": []}}}))
    code, out, bug = icr("check", p)
    assert code == 1 and bug is None and "protocol problems over 1 claims" in out
    assert "X-1: verdict 'maybe'" in out


@pytest.mark.parametrize("kind", HOSTILE + ['{"seconds": 5}', '{"seconds": {"a": "x"}}',
                                            "[1]"])
def test_icr_reproduce_eta_from_file_that_cannot_be_read_is_one_line_exit_2(tmp_path, kind):
    out_dir = tmp_path / "out"
    code, out, bug = icr("reproduce", "cr", "--out", out_dir, "--workers", "1",
                         "--eta-from", _hostile(tmp_path, kind))
    assert one_error_line(code, out, bug) and "--eta-from" in out, (kind, out, bug)
    assert not out_dir.exists()  # refused before anything ran


def test_read_json_file_limits(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"a": [1, {"b": 2}]}))
    assert read_json_file(p) == {"a": [1, {"b": 2}]}
    with pytest.raises(JSONFileError, match="more than"):
        read_json_file(p, max_bytes=5)
    with pytest.raises(JSONFileError, match="deeper than 2"):
        read_json_file(p, max_depth=2)
    assert [json_depth(x, 10) for x in (1, [], {"a": 1}, [[[]]], {"a": [1, {"b": 2}]})] == \
        [0, 1, 1, 3, 3]
    assert json_depth(json.loads("[" * 500 + "]" * 500), 100) == 101  # stops at the limit


def test_job_records_that_are_special_files_are_ignored(tmp_path):
    from mechinterp_icr.jobs import _read_stored
    from mechinterp_icr.store.job_seconds import job_seconds

    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "ok.json").write_text(json.dumps({"name": "ok", "seconds": 1.5}))
    assert _read_stored(tmp_path / "fifo.json") is None
    assert _read_stored(tmp_path / "zero.json") is None
    assert job_seconds(tmp_path) == {"ok": 1.5}


# ---- a Ray job killed by Ray's memory monitor (issue 41) -------------------------------------
def _double(x: int) -> dict:
    return {"y": 2 * x}


class _Ref:
    def __init__(self, kind, fn, kwargs):
        self.kind, self.fn, self.kwargs = kind, fn, kwargs


class _FakeRay:
    """Just enough of Ray for jobs._run_ray: the first ``kills`` tasks are killed by the
    memory monitor."""

    class OutOfMemoryError(Exception):
        __module__ = "ray.exceptions"

    def __init__(self, kills):
        self.kills, self.submitted = kills, 0

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"CPU": 1}

    def remote(self, **_):
        fake = self

        class Remote:
            @staticmethod
            def remote(fn, kwargs, threads):
                fake.submitted += 1
                return _Ref("oom" if fake.submitted <= fake.kills else "ok", fn, kwargs)

        return lambda fn: Remote

    def wait(self, refs, num_returns=1, timeout=None):
        return refs[:1], refs[1:]

    def get(self, ref):
        kind, fn, kwargs = ref.kind, ref.fn, ref.kwargs
        if kind == "oom":
            raise self.OutOfMemoryError("Task was killed due to the node running low on "
                                        "memory.\nMemory on the node ...\nmany lines")
        return fn(**kwargs), None, 0.1


@pytest.mark.parametrize("kills", [1, 2])
def test_ray_job_killed_by_the_memory_monitor_is_retried_once_then_one_line(tmp_path,
                                                                            monkeypatch,
                                                                            kills):
    from mechinterp_icr import jobs

    fake = _FakeRay(kills)
    monkeypatch.setattr(jobs, "_import_ray", lambda: fake)
    logs = []
    job = jobs.Job("cr/seed0", _double, {"x": 3})
    if kills == 1:
        out = jobs.run_jobs([job], tmp_path, workers=2, log=logs.append)
        assert out == {"cr/seed0": {"y": 6}} and fake.submitted == 2
        assert any("cr/seed0: killed by Ray's memory monitor; retrying it once" in ln
                   for ln in logs)
        return
    with pytest.raises(jobs.JobFailed) as e:
        jobs.run_jobs([job], tmp_path, workers=2, log=logs.append)
    assert fake.submitted == 2
    err = e.value.failures["cr/seed0"]
    assert len(err.splitlines()) == 1 and "again after one retry" in err
    assert "fewer --workers" in err
