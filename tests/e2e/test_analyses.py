"""The analysis scripts as a user runs them: on a run of a task kind a script does not support
it exits with code 2 and one line naming the run's task kind and what the script supports
(no traceback); the scripts that apply to the run finish and write their table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ICR = Path(sys.executable).parent / "icr"

# script -> the task kinds it supports (the others must be refused)
CR_ONLY = ["attention_roles", "circuits", "head_roles"]
IR_ONLY = ["ir_attention_rows", "ir_overwrite_rows"]


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analyses" / f"{name}.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyses") / "induction"
    res = subprocess.run(
        [str(ICR), "train", "--task", "induction", "--out", str(out),
         "--set", "train.steps=30", "--set", "train.progress=false",
         "--set", "train.checkpoint_schedule=linear", "--set", "train.checkpoint_every=15",
         "--set", "model.d_model=32", "--set", "model.n_heads=2", "--set", "model.d_head=16",
         "--set", "model.attn_only=true"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _refused(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


@pytest.mark.parametrize("name,supported", [(n, "cr") for n in CR_ONLY] +
                         [(n, "ir") for n in IR_ONLY])
def test_scripts_refuse_other_task_kinds(induction_run, name, supported):
    msg = _refused(_script(name, str(induction_run), "--checkpoints", "last"))
    assert f"{name}.py" in msg and f"supports {supported} runs" in msg
    assert "'induction'" in msg
    assert not (induction_run / "analyses" / f"{name}.json").exists()


def test_bad_run_and_selection_are_refused(induction_run, tmp_path):
    msg = _refused(_script("patching_sweep", str(tmp_path / "missing")))
    assert "does not exist" in msg
    msg = _refused(_script("patching_sweep", str(induction_run), "--checkpoints", "phase:nope"))
    assert "phase:nope" in msg and "checkpoint" in msg


def test_patching_sweep_runs_on_induction(induction_run):
    res = _script("patching_sweep", str(induction_run), "--checkpoints", "first,last",
                  "--n", "4", "--seed", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads((induction_run / "analyses" / "patching_sweep.json").read_text())
    assert {r["checkpoint"] for r in rows} == {"train-0000000", "train-0000030"}
    assert {"layer", "pos", "head", "recovery", "attribution_recovery"} <= set(rows[0])


def test_a_damaged_checkpoint_met_during_the_analysis_is_one_line(induction_run, tmp_path):
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(induction_run, run)
    weights = sorted((run / "checkpoints").glob("*.safetensors"))[-1]
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: found when it is loaded
    msg = _refused(_script("patching_sweep", str(run), "--checkpoints", "last", "--n", "4"))
    assert weights.stem in msg
