import json

import pytest
import torch
from helpers import build_model_cfg

from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from mechinterp_icr.store.rundir import RunDir, RunError


def _saved(tmp_path):
    m = build_model(build_model_cfg(), seed=0)
    stem = tmp_path / "ck" / "train-0000010"
    save_checkpoint(stem, m, {"step": 10, "phase": "train"})
    return m, stem


def test_round_trip_and_no_tmp_files(tmp_path):
    m, stem = _saved(tmp_path)
    m2 = build_model(build_model_cfg(), seed=1)
    data = load_checkpoint(stem, m2)
    assert data.meta["step"] == 10
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
    assert sorted(p.name for p in stem.parent.iterdir()) == ["train-0000010.json",
                                                               "train-0000010.safetensors"]


def test_truncated_weights_refused(tmp_path):
    _, stem = _saved(tmp_path)
    w = stem.with_suffix(".safetensors")
    w.write_bytes(w.read_bytes()[:-100])
    m = build_model(build_model_cfg(), seed=3)
    before = [p.clone() for p in m.parameters()]
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(stem, m)
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_corrupted_weights_refused(tmp_path):
    _, stem = _saved(tmp_path)
    w = stem.with_suffix(".safetensors")
    data = bytearray(w.read_bytes())
    data[-5] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(stem, build_model(build_model_cfg(), seed=0))


def test_truncated_sidecar_refused(tmp_path):
    _, stem = _saved(tmp_path)
    side = stem.with_suffix(".json")
    side.write_text(side.read_text()[:40])
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(stem)


def test_mismatched_model_refused(tmp_path):
    _, stem = _saved(tmp_path)
    other = build_model(build_model_cfg(d_model=48, d_head=48), seed=0)
    with pytest.raises(CheckpointError, match="does not match the requested model.*shape"):
        load_checkpoint(stem, other)


def test_pickle_file_is_never_executed(tmp_path):
    # a file with a checkpoint's name but pickle content is refused by hash/format checks
    _, stem = _saved(tmp_path)
    import pickle

    stem.with_suffix(".safetensors").write_bytes(pickle.dumps({"evil": 1}))
    with pytest.raises(CheckpointError):
        load_checkpoint(stem)
    side = json.loads(stem.with_suffix(".json").read_text())
    assert "sha256" in side


def test_missing_run_dir_message(tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        RunDir(tmp_path / "nope")


def test_selection(tmp_path):
    run = RunDir(tmp_path / "r", create=True)
    m = build_model(build_model_cfg(), seed=0)
    for phase, order in (("pretrain", 0), ("ft", 1)):
        for step in (0, 5, 10):
            save_checkpoint(run.checkpoint_stem(phase, step), m,
                            {"step": step, "phase": phase, "phase_order": order})
    names = [c.name for c in run.select("all")]
    assert names[0] == "pretrain-0000000" and names[-1] == "ft-0000010" and len(names) == 6
    assert [c.name for c in run.select("last")] == ["ft-0000010"]
    assert [c.step for c in run.select("phase:ft")] == [0, 5, 10]
    assert [c.name for c in run.select("phase:pretrain:last")] == ["pretrain-0000010"]
    assert len(run.select("steps:5-10")) == 4
    with pytest.raises(RunError, match="matches no checkpoint"):
        run.select("phase:nope")


def test_verify_checkpoint_quick_and_full(tmp_path):
    from mechinterp_icr.store.checkpoint import verify_checkpoint

    _, stem = _saved(tmp_path)
    assert verify_checkpoint(stem, full=False)["step"] == 10
    w = stem.with_suffix(".safetensors")
    data = bytearray(w.read_bytes())
    data[-5] ^= 0xFF  # same size: only the full check reads the bytes
    w.write_bytes(bytes(data))
    assert verify_checkpoint(stem, full=False)["step"] == 10
    with pytest.raises(CheckpointError, match="corrupted"):
        verify_checkpoint(stem)
    w.write_bytes(bytes(data[:-1]))
    with pytest.raises(CheckpointError, match="truncated"):
        verify_checkpoint(stem, full=False)
