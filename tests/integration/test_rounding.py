"""--rounding: a named kernel setting changes float rounding, and a rerun under one setting is
bit-identical (SPEC 0, "robust to the machine": the machine acts like one more seed). The
setting is stamped on every checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mechinterp_icr.config import ConfigError
from mechinterp_icr.config.rounding import (
    ROUNDING_VARS,
    apply_rounding,
    current_rounding,
    rounding_env,
)

ICR = Path(sys.executable).parent / "icr"
TINY = ["--set", "train.steps=40", "--set", "train.batch_size=16", "--set",
        "train.progress=false", "--set", "model.d_model=32", "--set", "model.d_head=16",
        "--set", "model.n_layers=1", "--set", "task.n_tokens=16", "--set", "task.half_len=6"]


def _train(out: Path, rounding: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ROUNDING_VARS}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([str(ICR), "train", "--task", "induction", "--out", str(out),
                        "--rounding", rounding, *TINY], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    last = sorted((out / "checkpoints").glob("*.safetensors"))[-1]
    meta = json.loads(last.with_suffix(".json").read_text())
    assert meta["versions"]["rounding"] == rounding
    return {k: v for k, v in load_file(last).items()
            if k.startswith("model.") and v.is_floating_point()}


def test_one_setting_is_bit_identical_and_two_settings_differ(tmp_path):
    a = _train(tmp_path / "a", "avx2")
    b = _train(tmp_path / "b", "avx2")
    c = _train(tmp_path / "c", "default")
    assert all((a[k] == b[k]).all() for k in a)
    changed = sum(int((a[k] != c[k]).sum()) for k in a)
    total = sum(v.numel() for v in a.values())
    assert changed > total // 10, (changed, total)


def test_the_setting_is_named_from_the_environment():
    assert current_rounding({}) == "native"
    assert current_rounding({"ATEN_CPU_CAPABILITY": "avx2"}) == "avx2"
    assert current_rounding({"MKL_CBWR": "COMPATIBLE"}) == "mkl-compatible"
    assert current_rounding({"MKL_CBWR": "AVX2"}) == "custom: MKL_CBWR=AVX2"
    with pytest.raises(ConfigError, match="--rounding = 'fast'"):
        rounding_env("fast")


def test_a_process_with_torch_loaded_is_not_restarted(monkeypatch):
    import torch  # noqa: F401  (loaded: the variables can no longer take effect)

    for k in ROUNDING_VARS:
        monkeypatch.delenv(k, raising=False)
    apply_rounding(None)
    apply_rounding("native")  # already in force: nothing to do
    with pytest.raises(ConfigError, match="before torch is loaded"):
        apply_rounding("avx2")
