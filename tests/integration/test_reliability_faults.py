"""Fault injection (issue 13), kept as tests.

Fast (default suite): resume past damaged checkpoints ends bit-identical, stale temp files and
duplicate metric lines are cleaned, a finished or renamed run resumes, and every CLI command
turns damage, bad input, disk full and permission errors into one line and exit code 2,
leaving earlier results in place.

Slow (``pytest -m slow``; each prints its counts): fuzzed configs through ``icr train``,
every damage kind x every command, kill -9 during checkpoint writes with bitwise resume, disk
full via RLIMIT_FSIZE with bitwise resume, and concurrent writers.
"""

import errno
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from helpers import build_model_cfg, build_train_cfg

from mechinterp_icr.cli import main
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir, RunError
from mechinterp_icr.training.loop import train_phase

pytestmark = pytest.mark.timeout(600)

# a tiny `icr train` run: 1 layer, 9-token induction sequences, a checkpoint every 2 steps
TINY = ["--set", "model.n_layers=1", "--set", "model.d_model=16", "--set", "model.d_head=16",
        "--set", "model.d_mlp=32", "--set", "task.half_len=4", "--set", "task.n_tokens=8",
        "--set", "train.batch_size=8", "--set", "train.eval_batch_size=8",
        "--set", "train.checkpoint_schedule=linear", "--set", "train.checkpoint_every=2",
        "--set", "train.progress=false"]


def icr(*args):
    """Run the CLI in-process; returns (exit code, output, unexpected exception or None)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    bug = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    return res.exit_code, res.output, bug


def one_error_line(code, out, bug):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return (code == 2 and bug is None and "Traceback" not in out and len(lines) >= 1
            and lines[-1].startswith("error: "))


def weights(run: Path, name: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"{name}.safetensors"))


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def metric_keys(run: Path) -> list[tuple[str, int]]:
    return [(r["phase"], r["step"]) for r in RunDir(run).read_metrics()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished tiny run (6 steps, checkpoints 0, 2, 4, 6) with an eval.json."""
    run = tmp_path_factory.mktemp("tiny") / "run"
    code, out, bug = icr("train", "--out", run, *TINY, "--set", "train.steps=6")
    assert code == 0, (out, bug)
    code, out, bug = icr("eval", run, "--checkpoints", "all", "--batches", 1)
    assert code == 0, (out, bug)
    return run


@pytest.fixture
def run(tiny_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(tiny_run, dst)
    return dst


# ---- resume ---------------------------------------------------------------------------------
def test_resume_falls_back_past_damaged_checkpoints_and_ends_bit_identical(tmp_path,
                                                                         induction_task):
    mc = build_model_cfg(d_vocab=induction_task.d_vocab, n_ctx=induction_task.n_ctx,
                         n_layers=1, d_model=16, d_head=16)
    cfg = build_train_cfg(steps=20, batch_size=8, checkpoint_every=5)
    full = build_model(mc, seed=0)
    train_phase(full, induction_task.sample, cfg, RunDir(tmp_path / "a", create=True), "train", 0)
    run = RunDir(tmp_path / "b", create=True)
    train_phase(build_model(mc, seed=0), induction_task.sample, cfg, run, "train", 0,
                stop_after=17)  # "killed" after step 17: checkpoints 0, 5, 10, 15
    w = run.checkpoint_stem("train", 15).with_suffix(".safetensors")
    w.write_bytes(w.read_bytes()[:-10])  # latest truncated
    side = run.checkpoint_stem("train", 10).with_suffix(".json")
    side.write_text(side.read_text().replace('"phase_order": 0', '"phase_order": "x"'))
    (run.checkpoint_dir / ".train-0000020.safetensors.tmp999999999").write_bytes(b"half")
    with open(run.metrics_path, "a") as fh:
        fh.write('{"phase": "train", "ste')  # a line cut by the kill
    resumed = build_model(mc, seed=0)
    res = train_phase(resumed, induction_task.sample, cfg, run, "train", 0)
    assert res.resumed_from == 5
    assert [s.split(":")[0] for s in res.skipped] == ["train-0000015", "train-0000010"]
    assert "truncated" in res.skipped[0] and "phase_order" in res.skipped[1]
    assert res.removed_temp_files == [".train-0000020.safetensors.tmp999999999"]
    for (n, a), b in zip(full.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), n
    keys = metric_keys(run.path)
    assert len(keys) == len(set(keys)) and keys == metric_keys(tmp_path / "a")
    assert not run.checkpoints()[-1].problem and all(not c.problem for c in run.checkpoints())


def test_resume_from_step_0_logs_step_0_once(tmp_path, induction_task):
    mc = build_model_cfg(d_vocab=induction_task.d_vocab, n_ctx=induction_task.n_ctx,
                         n_layers=1, d_model=16, d_head=16)
    cfg = build_train_cfg(steps=12, batch_size=8, checkpoint_every=10)
    run = RunDir(tmp_path / "r", create=True)
    train_phase(build_model(mc, seed=0), induction_task.sample, cfg, run, "train", 0,
                stop_after=5)  # only checkpoint 0
    res = train_phase(build_model(mc, seed=0), induction_task.sample, cfg, run, "train", 0)
    assert res.resumed_from == 0
    assert metric_keys(run.path) == [("train", 0), ("train", 10), ("train", 12)]


def test_finished_and_renamed_runs(run, tmp_path):
    code, out, _ = icr("train", "--out", run, *TINY, "--set", "train.steps=6")
    assert code == 0 and "already finished (6 steps)" in out and "nan" not in out
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    run.rename(moved)
    code, out, _ = icr("train", "--out", moved, *TINY, "--set", "train.steps=6")
    assert code == 0 and "already finished" in out
    # a shorter schedule is refused, and named; a longer one extends the finished run
    code, out, bug = icr("train", "--out", moved, *TINY, "--set", "train.steps=4")
    assert one_error_line(code, out, bug) and "train.steps" in out
    code, out, _ = icr("train", "--out", moved, *TINY, "--set", "train.steps=8")
    assert code == 0 and "resumed from step 6" in out


def test_new_phase_gets_the_next_order_and_becomes_last(run):
    code, out, _ = icr("train", "--out", run, *TINY, "--set", "train.steps=6", "--phase", "aa")
    assert code == 0, out
    assert RunDir(run).select("last")[0].name == "aa-0000006"
    assert RunDir(run).phase_order("aa") == 1


# ---- the CLI on damage and bad input ---------------------------------------------------------
def test_bad_inputs_exit_2_and_keep_the_previous_result(run):
    eval_json = run / "analyses" / "eval.json"
    before = eval_json.read_bytes()
    for args in (["eval", run, "--checkpoints", ""], ["eval", run, "--checkpoints", ","],
                 ["eval", run, "--checkpoints", "phase:train:lst"],
                 ["eval", run, "--checkpoints", "phase:nope"], ["eval", run, "--batches", 0],
                 ["view", run, "--prompt", ""], ["view", run, "--example", 10**12],
                 ["view", run, "--example", -1], ["view", run, "--prompt", "T1", "--example", 1],
                 ["view", run, "--checkpoint", "all"], ["eval", run.parent / "nope"],
                 ["checkpoints", run / "config.json"]):
        code, out, bug = icr(*args)
        assert one_error_line(code, out, bug), (args, out, bug)
    assert eval_json.read_bytes() == before
    assert not (run / "analyses" / "views").exists()


def test_damaged_latest_checkpoint_through_every_command(run):
    eval_json = run / "analyses" / "eval.json"
    before = eval_json.read_bytes()
    w = run / "checkpoints" / "train-0000006.safetensors"
    w.write_bytes(w.read_bytes()[:-7])
    code, out, bug = icr("checkpoints", run)
    assert code == 0 and bug is None and "DAMAGED" in out and "train-0000004" in out
    for args in (["eval", run], ["eval", run, "--checkpoints", "all"], ["view", run]):
        code, out, bug = icr(*args)
        assert one_error_line(code, out, bug) and "train-0000006" in out, (args, out)
    assert eval_json.read_bytes() == before
    code, out, bug = icr("train", "--out", run, *TINY, "--set", "train.steps=6")
    assert code == 0 and bug is None, out
    assert "skipped damaged checkpoint train-0000006" in out and "resumed from step 4" in out
    code, out, bug = icr("eval", run, "--checkpoints", "last", "--batches", 1)
    assert code == 0, out


def test_bad_sidecar_field_breaks_only_its_checkpoint(run):
    side = run / "checkpoints" / "train-0000002.json"
    meta = json.loads(side.read_text())
    meta["metrics"] = [1, 2]
    side.write_text(json.dumps(meta))
    code, out, _ = icr("checkpoints", run, "--json")
    assert code == 0 and "problem" in out
    code, out, bug = icr("eval", run, "--checkpoints", "last", "--batches", 1)
    assert code == 0, (out, bug)
    code, out, bug = icr("view", run, "--checkpoint", "train-0000004")
    assert code == 0, (out, bug)


@pytest.mark.parametrize("kind", ["weights fifo", "weights /dev/zero", "config empty",
                                  "config not json", "config fifo"])
@pytest.mark.timeout(120)  # a hang fails the test here, not the whole suite
def test_special_files_never_hang_or_fill_memory(run, kind):
    if kind.startswith("weights"):
        w = run / "checkpoints" / "train-0000006.safetensors"
        w.unlink()
        os.mkfifo(w) if kind == "weights fifo" else w.symlink_to("/dev/zero")
    else:
        c = run / "config.json"
        c.unlink()
        {"config empty": lambda: c.write_text(""),
         "config not json": lambda: c.write_text("{'a': 1"),
         "config fifo": lambda: os.mkfifo(c)}[kind]()
    for args in (["eval", run], ["view", run],
                 ["train", "--out", run, *TINY, "--set", "train.steps=6"]):
        code, out, bug = icr(*args)
        if kind.startswith("weights") and args[0] == "train":
            assert code == 0 and "skipped damaged checkpoint train-0000006" in out, out
        else:
            assert one_error_line(code, out, bug), (args, out, bug)


def test_disk_full_and_permissions_are_one_line(tmp_path, monkeypatch):
    import mechinterp_icr.store.checkpoint as ck

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ck, "atomic_write_bytes", full)
    out_dir = tmp_path / "new"
    code, out, bug = icr("train", "--out", out_dir, *TINY, "--set", "train.steps=2")
    assert one_error_line(code, out, bug) and "disk full" in out, (out, bug)
    assert not out_dir.exists()  # a failed start leaves nothing behind
    monkeypatch.undo()

    def denied(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(self.checkpoint_dir))

    monkeypatch.setattr(RunDir, "checkpoints", denied)
    code, out, bug = icr("checkpoints", tmp_path)
    assert one_error_line(code, out, bug) and "permission denied" in out


def test_a_bug_still_shows_its_traceback(tmp_path, monkeypatch):
    def bug(self):
        raise KeyError("a bug")

    monkeypatch.setattr(RunDir, "checkpoints", bug)
    code, _, exc = icr("checkpoints", tmp_path)
    assert code == 1 and isinstance(exc, KeyError)


# ---- sidecars checked against their weights and names (issue 41) ---------------------------
def _rewrite(run: Path, name: str, edit_meta=None, edit_tensors=None) -> None:
    """Damage a checkpoint consistently: the sidecar's sha256, n_bytes and shapes are updated
    to the edited weights, so only the validator can tell."""
    import hashlib

    from safetensors.torch import save

    stem = run / "checkpoints" / name
    meta = json.loads(stem.with_suffix(".json").read_text())
    tensors = weights(run, name)
    if edit_tensors:
        tensors = edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    blob = save(tensors)
    stem.with_suffix(".safetensors").write_bytes(blob)
    meta.update(sha256=hashlib.sha256(blob).hexdigest(), n_bytes=len(blob))
    stem.with_suffix(".json").write_text(json.dumps(meta))


def _group(key, value):
    return lambda m: m["optimizer"]["param_groups"][0].__setitem__(key, value)


SIDECAR_DAMAGE = {
    "amsgrad true": (_group("amsgrad", True), None),
    "betas xy": (_group("betas", "xy"), None),
    "params permuted same length": (
        lambda m: m["optimizer"]["param_groups"][0]["params"].reverse(), None),
    "params repeated same length": (
        lambda m: m["optimizer"]["param_groups"][0].__setitem__(
            "params", [0] * len(m["optimizer"]["param_groups"][0]["params"])), None),
    "optimizer tensor wrong shape": (None, lambda t: {
        **t, "optim.0.exp_avg": torch.zeros(3, 3)}),
    "optimizer tensors removed": (None, lambda t: {
        k: v for k, v in t.items() if not k.startswith("optim.")}),
    "one parameter's optimizer state removed": (None, lambda t: {
        k: v for k, v in t.items() if not k.startswith("optim.1.")}),
    "optimizer tensor int64": (None, lambda t: {
        **t, "optim.0.exp_avg": t["optim.0.exp_avg"].long()}),
    "weights float16": (None, lambda t: {
        k: v.half() if k.startswith("model.") and v.is_floating_point() else v
        for k, v in t.items()}),
    "weights int64": (None, lambda t: {
        k: v.long() if k.startswith("model.") and v.is_floating_point() else v
        for k, v in t.items()}),
}


@pytest.fixture(scope="module")
def extended_reference(tiny_run, tmp_path_factory):
    """The tiny run extended cleanly from 6 to 8 steps: what every repaired run must equal."""
    ref = tmp_path_factory.mktemp("ref") / "run"
    shutil.copytree(tiny_run, ref)
    code, out, bug = icr("train", "--out", ref, *TINY, "--set", "train.steps=8")
    assert code == 0, (out, bug)
    return weights(ref, "train-0000008")


@pytest.mark.parametrize("kind", list(SIDECAR_DAMAGE))
def test_damaged_sidecar_with_matching_sha_is_reported_by_verify_and_skipped_on_resume(
        run, kind, extended_reference):
    edit_meta, edit_tensors = SIDECAR_DAMAGE[kind]
    _rewrite(run, "train-0000006", edit_meta, edit_tensors)
    code, out, bug = icr("checkpoints", run)  # the quick listing still works
    assert code == 0 and bug is None, out
    code, out, bug = icr("checkpoints", run, "--verify")
    line = next(ln for ln in out.splitlines() if ln.startswith("train-0000006"))
    assert code == 0 and bug is None and "DAMAGED" in line, out
    code, out, bug = icr("train", "--out", run, *TINY, "--set", "train.steps=8")
    assert code == 0 and bug is None and "Traceback" not in out, (kind, out, bug)
    assert "skipped damaged checkpoint train-0000006" in out and "resumed from step 4" in out
    assert same_weights(weights(run, "train-0000008"), extended_reference)  # nothing wrong kept


def test_copy_named_train_99999999999_is_damaged_and_the_extension_runs(run,
                                                                       extended_reference):
    ck = run / "checkpoints"
    for ext in (".json", ".safetensors"):
        shutil.copy(ck / f"train-0000006{ext}", ck / f"train-99999999999{ext}")
    code, out, bug = icr("checkpoints", run)
    assert code == 0 and "DAMAGED" in out and "sidecar says step 6" in out, out
    code, out, bug = icr("train", "--out", run, *TINY, "--set", "train.steps=8")
    assert code == 0 and bug is None, out
    assert "already finished" not in out and "resumed from step 6" in out
    assert "skipped damaged checkpoint train-99999999999" in out
    assert same_weights(weights(run, "train-0000008"), extended_reference)


# ---- low items of issue 41 -------------------------------------------------------------------
def test_init_run_colon_with_an_empty_checkpoint_is_refused_not_last(run, tmp_path):
    code, out, bug = icr("train", "--out", tmp_path / "new", *TINY, "--set", "train.steps=2",
                         "--init", f"{run}:")
    assert one_error_line(code, out, bug) and "empty" in out, out
    assert not (tmp_path / "new").exists()


def test_lock_symlink_is_not_followed(tmp_path):
    run = RunDir(tmp_path / "r", create=True)
    outside = tmp_path / "outside"
    (run.path / ".lock").symlink_to(outside)
    with pytest.raises(RunError, match="symbolic link"):
        with run.writer_lock():
            pass
    assert not outside.exists()


def test_train_out_into_a_non_empty_folder_that_holds_no_run_is_refused(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes")
    code, out, bug = icr("train", "--out", folder, *TINY, "--set", "train.steps=2")
    assert one_error_line(code, out, bug) and "no run" in out, out
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, bug = icr("train", "--out", empty, *TINY, "--set", "train.steps=2")
    assert code == 0, (out, bug)


# ================================= slow: the full fault matrix ==============================
def report(capsys, line):
    with capsys.disabled():
        print(f"\n[fault injection] {line}")


BAD_CONFIGS = [
    ["model.d_vocab=10000000", "model.d_model=8192"], ["task.half_len=10000"],
    ["model.n_layers=64", "model.d_model=8192", "model.d_mlp=65536"],
    ["train.eval_batch_size=10000000"], ["train.batch_size=1000000"],
    ["train.trainable=nomatch"], ["model.n_ctx=3"], ["model.d_vocab=2"], ["task=null"],
    ["task={}"], ["task=[]"], ['task={"kind":"nope"}'], ["model.d_model=1" + "1" * 5000],
    ["model.d_model=" + "[" * 5000], ["train.lr=" + "9" * 400], ["train.lr=nan"],
    ["train.lr=-Infinity"], ["train.steps=-1"], ["train.steps=1.5"], ["train.steps=true"],
    ["train.betas=[1,2,3]"], ["train.betas=5"], ["model.act_fn=tanh"], ["model=3"],
    ["train=null"], ["resources=null"], ["resources.max_gib=-1"], ["seed=-1"], ["name=a/b"],
    ["nope=1"], ["model.nope=1"], ["model"], ["=3"], ["train.steps=10000000",
                                                      "train.checkpoint_every=1",
                                                      "train.checkpoint_schedule=linear"],
]


@pytest.mark.slow
def test_slow_fuzzed_configs_through_icr_train(tmp_path, monkeypatch, capsys):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from mechinterp_icr.pipeline import resolve_run_config

    monkeypatch.chdir(tmp_path)
    base = resolve_run_config("induction", 0, [])
    from mechinterp_icr.config import to_dict

    keys = sorted(f"{s}.{k}" for s, v in to_dict(base).items() if isinstance(v, dict)
                  for k in v) + ["task", "model", "train", "resources", "seed", "name"]
    leaf = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
            | st.sampled_from([10**400, 10**12, -(10**12), 10_000_000, 0, "", "nomatch"]))
    values = st.recursive(leaf, lambda c: st.lists(c, max_size=3)
                          | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6)
    counts = {"configs": 0, "refused": 0, "accepted": 0, "tracebacks": 0, "bombs": 0}

    safe = ["train.steps=0", "resources.max_gib=0.5", "train.progress=false"]

    def attempt(items, first=False):
        counts["configs"] += 1
        # a fuzzed config that is accepted trains 0 steps under a 0.5 GiB ceiling (nothing
        # large is allocated); the listed bad ones come last so they are what is judged
        sets = safe + items if first else items + safe
        code, out, bug = icr("train", "--out", "run", *sum((["--set", i] for i in sets), []))
        if bug is not None or "Traceback" in out or code not in (0, 2):
            counts["tracebacks"] += 1
            pytest.fail(f"{items}: exit {code} {bug!r}\n{out[-2000:]}")
        counts["refused" if code == 2 else "accepted"] += 1
        counts["bombs"] += "max_gib" in out or "max_disk_gib" in out
        stray = [p.name for p in tmp_path.iterdir() if p.name != "run"]
        assert not stray, f"{items} wrote outside the run: {stray}"
        if (tmp_path / "run").exists():
            shutil.rmtree(tmp_path / "run")

    for items in BAD_CONFIGS:
        attempt(items, first=True)
        assert counts["accepted"] == 0, items

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True,
              database=None)
    @given(key=st.sampled_from(keys), value=values)
    def fuzz(key, value):
        try:
            text = json.dumps(value)
        except (ValueError, OverflowError):
            text = str(value)
        attempt([f"{key}={text}"])

    fuzz()
    report(capsys, f"{counts['tracebacks']} tracebacks in {counts['configs']} configs "
                   f"({len(BAD_CONFIGS)} listed bad + fuzzed; {counts['refused']} refused with "
                   f"one line, {counts['accepted']} valid and trained 0 steps); "
                   f"{counts['bombs']} memory/disk bombs refused before allocation; "
                   "0 writes outside a run")


SLOW_DAMAGE = ["truncated", "corrupted", "missing weights", "missing sidecar", "sidecar empty",
               "sidecar not json", "sidecar deep", "field phase_order", "field metrics",
               "field n_bytes", "field sha256", "field optimizer", "weights fifo",
               "weights /dev/zero", "sidecar fifo", "sidecar /dev/zero", "weights a directory",
               "huge n_bytes", "config empty", "config invalid", "config bad field"]


def damage(run: Path, kind: str, name: str = "train-0000006") -> None:
    side = run / "checkpoints" / f"{name}.json"
    w = side.with_suffix(".safetensors")
    meta = json.loads(side.read_text())
    fields = {"field phase_order": ("phase_order", "x"), "field metrics": ("metrics", [1]),
              "field n_bytes": ("n_bytes", "12"), "field sha256": ("sha256", 5),
              "field optimizer": ("optimizer", 3), "huge n_bytes": ("n_bytes", 10**15)}
    if kind in fields:
        k, v = fields[kind]
        meta[k] = v
        side.write_text(json.dumps(meta))
    elif kind == "truncated":
        w.write_bytes(w.read_bytes()[:-9])
    elif kind == "corrupted":
        b = bytearray(w.read_bytes())
        b[len(b) // 2] ^= 0x55
        w.write_bytes(bytes(b))
    elif kind == "missing weights":
        w.unlink()
    elif kind == "missing sidecar":
        side.unlink()
    elif kind == "sidecar empty":
        side.write_text("")
    elif kind == "sidecar not json":
        side.write_text("{")
    elif kind == "sidecar deep":
        side.write_text("[" * 50_000)
    elif kind in ("weights fifo", "sidecar fifo"):
        p = w if kind.startswith("weights") else side
        p.unlink()
        os.mkfifo(p)
    elif kind in ("weights /dev/zero", "sidecar /dev/zero"):
        p = w if kind.startswith("weights") else side
        p.unlink()
        p.symlink_to("/dev/zero")
    elif kind == "weights a directory":
        w.unlink()
        w.mkdir()
    elif kind == "config empty":
        (run / "config.json").write_text("")
    elif kind == "config invalid":
        (run / "config.json").write_text("[" * 50_000)
    elif kind == "config bad field":
        c = json.loads((run / "config.json").read_text())
        c["model"]["d_model"] = "big"
        (run / "config.json").write_text(json.dumps(c))
    else:
        raise AssertionError(kind)


@pytest.mark.slow
def test_slow_every_damage_through_every_command(tiny_run, tmp_path, capsys):
    commands = [["checkpoints", "{run}"], ["checkpoints", "{run}", "--json"],
                ["eval", "{run}", "--batches", "1"], ["eval", "{run}", "--checkpoints", "all"],
                ["eval", "{run}", "--checkpoints", "phase:train:first"], ["view", "{run}"],
                ["view", "{run}", "--checkpoint", "train-0000002"],
                ["train", "--out", "{run}", *TINY, "--set", "train.steps=6"]]
    n, tracebacks, lost = 0, 0, 0
    for kind in SLOW_DAMAGE:
        run = tmp_path / kind.replace(" ", "_").replace("/", "")
        shutil.copytree(tiny_run, run)
        damage(run, kind)
        before = (run / "analyses" / "eval.json").read_bytes()
        for cmd in commands:
            code, out, bug = icr(*[str(run) if a == "{run}" else a for a in cmd])
            n += 1
            if bug is not None or code not in (0, 2) or "Traceback" in out:
                tracebacks += 1
                pytest.fail(f"{kind} / {cmd}: exit {code} {bug!r}\n{out[-2000:]}")
            if code == 2:
                assert one_error_line(code, out, bug), (kind, cmd, out)
            ej = run / "analyses" / "eval.json"
            if not ej.exists() or json.loads(ej.read_text()) == []:
                lost += 1
        if kind == "weights a directory":  # not ours to delete: resume says so, in one line
            code, out, bug = icr("train", "--out", run, *TINY, "--set", "train.steps=6")
            assert one_error_line(code, out, bug) and "is a directory" in out, out
        elif not kind.startswith("config"):  # resume repaired the run: every command works
            assert (run / "checkpoints" / "train-0000006.json").is_file()
            code, out, bug = icr("eval", run, "--checkpoints", "all", "--batches", 1)
            assert code == 0, (kind, out, bug)
        else:
            assert (run / "analyses" / "eval.json").read_bytes() == before
    report(capsys, f"{tracebacks} tracebacks in {n} commands on {len(SLOW_DAMAGE)} kinds of "
                   f"damage ({len(commands)} commands each); {lost} results lost; no hang")


def _train_cmd(out: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "mechinterp_icr.cli", "train", "--out", str(out), *TINY,
            "--set", f"train.steps={steps}", "--set", "train.checkpoint_every=1"]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _reference(tmp_path: Path, steps: int) -> Path:
    ref = tmp_path / "reference"
    r = subprocess.run(_train_cmd(ref, steps), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ref


def _check_same(run: Path, ref: Path, steps: int) -> None:
    name = f"train-{steps:07d}"
    assert same_weights(weights(run, name), weights(ref, name)), "resumed run differs"
    keys = metric_keys(run)
    assert len(keys) == len(set(keys)), "duplicate (phase, step) metric lines"
    assert keys == metric_keys(ref)
    assert not list(run.rglob("*.tmp*")), "temporary files left"
    assert all(not c.problem for c in RunDir(run).checkpoints())


@pytest.mark.slow
def test_slow_kill_9_during_checkpoint_writes_then_bitwise_resume(tmp_path, capsys):
    steps, kills = 120, 6
    ref = _reference(tmp_path, steps)
    run = tmp_path / "killed"
    rng = random.Random(0)
    done_kills, seen = 0, set()
    for _ in range(kills):
        p = subprocess.Popen(_train_cmd(run, steps), env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # wait until it is writing checkpoints, then kill at a random moment
        t_end = time.time() + 120
        while time.time() < t_end and p.poll() is None and not list(
                (run / "checkpoints").glob(".*.tmp*") if (run / "checkpoints").is_dir() else []):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.5))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            done_kills += 1
        p.communicate()
        # no checkpoint is lost or left half-written by a kill: every listed one verifies
        from mechinterp_icr.store.checkpoint import verify_checkpoint

        cks = RunDir(run).checkpoints() if run.is_dir() else []
        for c in cks:
            verify_checkpoint(c.stem, full=True)
        names = {c.name for c in cks}
        assert seen <= names, f"checkpoints lost: {sorted(seen - names)}"
        seen = names
    r = subprocess.run(_train_cmd(run, steps), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    _check_same(run, ref, steps)
    report(capsys, f"{done_kills} kill -9s during checkpoint writes; 0 checkpoints lost or "
                   f"damaged ({len(seen)} verified after the last kill); resumed run "
                   "bit-identical to an uninterrupted one; 0 duplicate metric lines; 0 temp "
                   "files left")


def _limit_fsize(nbytes):
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return pre


@pytest.mark.slow
def test_slow_disk_full_then_bitwise_resume(tmp_path, capsys):
    steps = 20
    ref = _reference(tmp_path, steps)
    limits = [2_000, 6_000, 12_000, 20_000, 60_000]  # bytes any one file may reach
    n_full, n_fresh_clean = 0, 0
    for lim in limits:
        run = tmp_path / f"full{lim}"
        r = subprocess.run(_train_cmd(run, steps), env=_env(), capture_output=True, text=True,
                           preexec_fn=_limit_fsize(lim))
        assert "Traceback" not in r.stderr, r.stderr
        if r.returncode == 2:
            n_full += 1
            assert r.stderr.strip().splitlines()[-1].startswith("error: file size limit"), \
                r.stderr
            if not (run / "checkpoints").is_dir() or not list(
                    (run / "checkpoints").glob("*.json")):
                assert not run.exists(), "a failed start left files behind"
                n_fresh_clean += 1
        else:
            assert r.returncode == 0, r.stderr
        r = subprocess.run(_train_cmd(run, steps), env=_env(), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        _check_same(run, ref, steps)
    assert n_full >= 3
    report(capsys, f"{n_full} of {len(limits)} runs hit the file size limit (exit 2, one line, "
                   f"{n_fresh_clean} failed starts left no directory); all {len(limits)} "
                   "resumed bit-identical; 0 data lost")


@pytest.mark.slow
def test_slow_concurrent_writers(tmp_path, capsys):
    steps = 60
    ref = _reference(tmp_path, steps)
    run = tmp_path / "shared"
    procs = [subprocess.Popen(_train_cmd(run, steps), env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    readers = [subprocess.Popen([sys.executable, "-m", "mechinterp_icr.cli", cmd, str(run)],
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for cmd in ("checkpoints", "eval")]
    outs = [(p.wait(), *p.communicate()) for p in procs + readers]
    assert all(code in (0, 2) and "Traceback" not in err for code, _, err in outs), outs
    refused = sum(1 for code, _, err in outs[:3] if code == 2 and "another process" in err)
    r = subprocess.run(_train_cmd(run, steps), env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _check_same(run, ref, steps)
    report(capsys, f"3 concurrent writers and 2 readers: 0 tracebacks, {refused} writers "
                   "refused by the lock, final run bit-identical, 0 duplicate metric lines")
