"""Reliability of the store (issue 13): damaged checkpoints are refused by name and never
hang or fill memory, a damaged sidecar does not break the listing, selections are strict,
resume bookkeeping (temp files, duplicate metric lines, phase order) and report escaping."""

import errno
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import build_model_cfg

from mechinterp_icr.config import ConfigError
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mechinterp_icr.store.io import (
    UnsafeFileError,
    read_regular_file,
    stale_temp_files,
    target_of_temp,
)
from mechinterp_icr.store.rundir import RunDir, RunError

pytestmark = pytest.mark.timeout(60)  # a FIFO that blocked would fail here, not hang


def _model(seed=0):
    return build_model(build_model_cfg(), seed=seed)


def _run_with_checkpoints(tmp_path, phases=(("pretrain", 0), ("ft", 1)), steps=(0, 5, 10)):
    run = RunDir(tmp_path / "r", create=True)
    m = _model()
    opt = torch.optim.AdamW(m.parameters())
    for phase, order in phases:
        for step in steps:
            save_checkpoint(run.checkpoint_stem(phase, step), m,
                            {"step": step, "phase": phase, "phase_order": order,
                             "metrics": {"train_loss": 1.0}}, opt)
    return run


# ---- guarded reads ---------------------------------------------------------------------------
def test_read_regular_file_refuses_fifo_device_and_oversize(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        read_regular_file(fifo, 100)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        read_regular_file(zero, 100)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UnsafeFileError, match="more than"):
        read_regular_file(big, 100)
    with pytest.raises(UnsafeFileError, match="truncated"):
        read_regular_file(big, 1000, expected_size=200)
    assert read_regular_file(big, 101) == b"x" * 101


# ---- damaged checkpoints ---------------------------------------------------------------------
def _damage(stem, kind):
    side, w = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    meta = json.loads(side.read_text())
    if kind == "truncated":
        w.write_bytes(w.read_bytes()[:-100])
    elif kind == "corrupted":
        b = bytearray(w.read_bytes())
        b[-5] ^= 0xFF
        w.write_bytes(bytes(b))
    elif kind == "missing weights":
        w.unlink()
    elif kind == "sidecar not json":
        side.write_text("{not json")
    elif kind == "sidecar empty":
        side.write_text("")
    elif kind == "sidecar binary":
        side.write_bytes(b"\xff\xfe\x00garbage")
    elif kind == "sidecar deep":
        side.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "sidecar a list":
        side.write_text("[1, 2]")
    elif kind.startswith("field "):
        field, value = kind.split(" ", 2)[1:]
        meta[field] = json.loads(value)
        side.write_text(json.dumps(meta))
    elif kind == "weights fifo":
        w.unlink()
        os.mkfifo(w)
    elif kind == "weights /dev/zero":
        w.unlink()
        w.symlink_to("/dev/zero")
    elif kind == "sidecar fifo":
        side.unlink()
        os.mkfifo(side)
    elif kind == "sidecar /dev/zero":
        side.unlink()
        side.symlink_to("/dev/zero")
    elif kind == "weights a directory":
        w.unlink()
        w.mkdir()
    elif kind == "huge n_bytes":
        meta["n_bytes"] = 10**15
        side.write_text(json.dumps(meta))
    elif kind == "optimizer groups":
        meta["optimizer"]["param_groups"] = meta["optimizer"]["param_groups"] * 2
        side.write_text(json.dumps(meta))
    else:
        raise AssertionError(kind)


DAMAGE = ["truncated", "corrupted", "missing weights", "sidecar not json", "sidecar empty",
          "sidecar binary", "sidecar deep", "sidecar a list", "field phase_order \"x\"",
          "field phase_order 1e400", "field metrics [1]", "field n_bytes \"12\"",
          "field sha256 5", "field step -1", "field shapes null", "field optimizer 3",
          "field phase {}", "weights fifo", "weights /dev/zero", "sidecar fifo",
          "sidecar /dev/zero", "weights a directory", "huge n_bytes", "optimizer groups"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_checkpoint_is_refused_by_name_and_listing_survives(tmp_path, kind):
    run = _run_with_checkpoints(tmp_path)
    stem = run.checkpoint_stem("ft", 10)
    _damage(stem, kind)
    m = _model(seed=3)
    opt = torch.optim.AdamW(m.parameters())
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(CheckpointError, match="ft-0000010"):
        load_checkpoint(stem, m, opt)
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))  # nothing loaded
    cks = run.checkpoints()  # the listing never raises
    assert [c.name for c in cks][-1] == "ft-0000010" or kind.startswith("sidecar")
    bad = [c for c in cks if c.problem]
    assert all(c.name == "ft-0000010" for c in bad)
    assert [c.name for c in run.select("phase:pretrain:last")] == ["pretrain-0000010"]
    assert run.select("phase:ft:first")[0].name == "ft-0000000"


def test_missing_sidecar_hides_the_checkpoint(tmp_path):
    run = _run_with_checkpoints(tmp_path)
    run.checkpoint_stem("ft", 10).with_suffix(".json").unlink()
    assert run.select("last")[0].name == "ft-0000005"
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(run.checkpoint_stem("ft", 10))


def test_damaged_sidecar_keeps_its_phase_order(tmp_path):
    run = _run_with_checkpoints(tmp_path, phases=(("zeta", 0), ("alpha", 1)))
    _damage(run.checkpoint_stem("alpha", 10), "sidecar not json")
    assert run.select("last")[0].name == "alpha-0000010"
    assert run.select("first")[0].name == "zeta-0000000"


# ---- selections -----------------------------------------------------------------------------
@pytest.mark.parametrize("sel,needle", [
    ("", "is empty"), (" , ", "is empty"), ("phase:ft:lst", "expected :first or :last"),
    ("phase:nope", "matches no checkpoint"), ("phase:", "matches no checkpoint"),
    ("lst", "is not a selection"), ("steps:5-3", "A <= B"), ("steps:x", "steps:A-B"),
    ("steps:-5", "steps:A-B"), ("ft-0000999", "matches no checkpoint"),
    ("last,nope", "is not a selection"),
])
def test_bad_selections_are_refused_with_the_allowed_forms(tmp_path, sel, needle):
    run = _run_with_checkpoints(tmp_path)
    with pytest.raises(RunError, match=needle) as e:
        run.select(sel)
    assert "\n" not in str(e.value)
    if needle not in ("A <= B", "steps:A-B", "matches no checkpoint"):
        assert "phase:NAME:last" in str(e.value)


def test_good_selections_are_unchanged(tmp_path):
    run = _run_with_checkpoints(tmp_path)
    assert [c.name for c in run.select("last")] == ["ft-0000010"]
    assert [c.name for c in run.select("first")] == ["pretrain-0000000"]
    assert len(run.select("all")) == 6 and len(run.select("steps:5-10")) == 4
    assert [c.name for c in run.select("ft-0000005,last")] == ["ft-0000005", "ft-0000010"]
    assert [c.name for c in run.select("ft-0000005.json")] == ["ft-0000005"]


def test_last_follows_the_recorded_phase_order_not_the_alphabet(tmp_path):
    run = _run_with_checkpoints(tmp_path, phases=(("zeta", 0), ("alpha", 1)))
    assert run.select("last")[0].name == "alpha-0000010"
    assert run.phase_order("zeta") == 0 and run.phase_order("alpha") == 1
    assert run.phase_order("new") == 2
    assert RunDir(tmp_path / "fresh", create=True).phase_order("train") == 0


# ---- resume bookkeeping ----------------------------------------------------------------------
def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temp_files_of_dead_writers_only(tmp_path):
    run = _run_with_checkpoints(tmp_path)
    dead = _dead_pid()
    stale = run.checkpoint_dir / f".ft-0000010.json.tmp{dead}"
    live = run.checkpoint_dir / f".ft-0000010.json.tmp{os.getpid()}"
    root = run.path / f".config.json.tmp{dead}"
    for p in (stale, live, root):
        p.write_text("half")
    assert stale_temp_files(run.checkpoint_dir) == [stale]
    removed = run.remove_stale_temp_files()
    assert sorted(removed) == sorted([stale, root]) and live.exists()
    assert target_of_temp(stale).name == "ft-0000010.json"


def test_truncate_metrics_drops_later_lines_duplicates_and_cut_lines(tmp_path):
    run = RunDir(tmp_path / "r", create=True)
    for phase, step in (("a", 0), ("a", 10), ("b", 0), ("a", 20), ("a", 30)):
        run.log_metrics({"phase": phase, "step": step, "x": 1.0})
    with open(run.metrics_path, "a") as fh:
        fh.write('{"phase": "a", "st')  # cut by a kill
    assert run.truncate_metrics("a", 10) == 3
    assert [(r["phase"], r["step"]) for r in run.read_metrics()] == [("a", 0), ("a", 10),
                                                                      ("b", 0)]
    assert run.truncate_metrics("a", 10) == 0  # nothing to do: not rewritten
    assert run.truncate_metrics("a", -1) == 2
    assert [(r["phase"], r["step"]) for r in run.read_metrics()] == [("b", 0)]


def test_config_check_ignores_name_and_resources_and_names_differences(tmp_path):
    from mechinterp_icr.pipeline import resolve_run_config

    cfg = resolve_run_config("induction", 0, ["train.steps=5"], name="orig")
    RunDir.open_for(tmp_path / "r", cfg)
    renamed = resolve_run_config("induction", 0, ["train.steps=5", "resources.max_gib=32"],
                                 name="copy")
    RunDir.open_for(tmp_path / "r", renamed)  # a renamed/copied run with other ceilings
    assert RunDir(tmp_path / "r").read_config().name == "orig"  # config.json kept
    other = resolve_run_config("induction", 0, ["train.steps=6", "model.d_model=32"])
    with pytest.raises(ConfigError, match=r"differs in model\.d_model, train\.steps"):
        RunDir.open_for(tmp_path / "r", other)


@pytest.mark.parametrize("content,exc,needle", [
    ("", RunError, "not valid JSON"), ("{", RunError, "not valid JSON"),
    ("[" * 100_000, RunError, "not valid JSON"), (b"\xff\xfe", RunError, "not valid JSON"),
    ('{"model": {"d_model": "x"}}', ConfigError, "config.json: model.d_model"),
    ('{"task": null, "bogus": 1}', ConfigError, "config.json: bogus"),
    ("fifo", RunError, "not a regular file"),
])
def test_damaged_config_json_is_one_error(tmp_path, content, exc, needle):
    run = RunDir(tmp_path / "r", create=True)
    p = run.path / "config.json"
    if content == "fifo":
        os.mkfifo(p)
    elif isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    with pytest.raises(exc, match=needle):
        run.read_config()


def test_run_dir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunError, match="not a directory"):
        RunDir(tmp_path / "f")
    with pytest.raises(RunError, match="not a directory"):
        RunDir(tmp_path / "f", create=True)


def test_writer_lock_admits_one_writer(tmp_path):
    run = RunDir(tmp_path / "r", create=True)
    with run.writer_lock():  # flock: a second open file description conflicts, also in-process
        with pytest.raises(RunError, match="another process"):
            with RunDir(run.path).writer_lock():
                pass
    with RunDir(run.path).writer_lock():  # released
        pass


# ---- CLI error lines ---------------------------------------------------------------------------
@pytest.mark.parametrize("err,needle", [
    (OSError(errno.ENOSPC, "No space left on device", "/r/checkpoints/.t-0000001.json.tmp42"),
     "disk full (/r/checkpoints/t-0000001.json)"),
    (OSError(errno.EFBIG, "File too large", "/r/x"), "file size limit"),
    (PermissionError(errno.EACCES, "Permission denied", "/r"), "permission denied (/r)"),
    (OSError(errno.EROFS, "Read-only file system", "/r"), "read-only"),
    (json.JSONDecodeError("Expecting value", "", 0), "invalid JSON"),
    (MemoryError(), "out of memory"),
    (ConfigError("a = 1 is not allowed"), "a = 1"),
])
def test_expected_errors_map_to_one_line(err, needle):
    from mechinterp_icr.cli import error_line

    line = error_line(err)
    assert line is not None and needle in line and "\n" not in line


def test_bugs_are_not_mapped():
    from mechinterp_icr.cli import error_line

    assert error_line(KeyError("x")) is None and error_line(ZeroDivisionError()) is None


# ---- report escaping --------------------------------------------------------------------------
def test_report_escapes_every_summary_string(tmp_path):
    from mechinterp_icr.viz.report import render_report

    evil = "<script>alert(1)</script>"
    summary = {"profile": evil, "seeds": [evil], "git_revision": evil, "claims": {
        evil: {"statement": evil, "metric": evil, "mean": 1.0, "ci95": [0.5, 1.5],
               "threshold": {"op": evil, "value": evil, "rule": "mean"}, "holds": True,
               "n_seeds": evil, "per_seed": {evil: {evil: 1.0}}, "extra_checks": {evil: True},
               "notes": evil, "figure": evil}},
        "tables": {evil: [{evil: evil}]}, "timings_by_target": {evil: {evil: 1.0}},
        "versions": {evil: evil}, "peak_memory_mb": evil}
    page = render_report(summary, tmp_path)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert 'id="&lt;script&gt;' in page and 'href="#&lt;script&gt;' in page


def test_atomic_write_csv_writes_scalar_columns_and_leaves_no_temp(tmp_path):
    from mechinterp_icr.store.io import atomic_write_csv, stale_temp_files

    rows = [{"a": 1, "b": None, "c": [1, 2], "d": "x"}, {"a": 2.5, "d": "y", "e": None}]
    atomic_write_csv(tmp_path / "sub" / "n.csv", rows, ["a", "e"])
    assert (tmp_path / "sub" / "n.csv").read_text().splitlines() == ["a,e", "1,", "2.5,"]
    out = atomic_write_csv(tmp_path / "sub" / "t.csv", rows)
    assert out.read_text().splitlines() == ["a,d", "1,x", "2.5,y"]  # first row decides
    atomic_write_csv(out, rows, ["d"], ["name"])
    assert out.read_text().splitlines() == ["name", "x", "y"]
    assert not stale_temp_files(tmp_path / "sub")
