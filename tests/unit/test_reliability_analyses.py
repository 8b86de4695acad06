"""Reliability v2 (issue 41), the analysis scripts: ``--n``, ``--seed`` and their kin are
bounded (zero, negative or huge refused in one line, exit 2, before anything is loaded or
allocated; within the cap, a count whose forward pass exceeds the run's resources.max_gib is
refused by the estimate), no result is replaced by an empty one, and what is written is strict
JSON."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import load_repo_script

from mechinterp_icr.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def common(monkeypatch):
    return load_repo_script("analyses/_common.py", monkeypatch)


@pytest.mark.parametrize("args", [["--n", "0"], ["--n", "-5"], ["--n", "100000000"],
                                  ["--n", "abc"], ["--seed", "-1"], ["--seed", "1e3"],
                                  ["--threads", "0"], ["--max-panels", "0"],
                                  ["--min-gap", "nan"], ["--min-gap", "inf"]])
def test_analysis_flags_out_of_range_are_one_line_exit_2(common, capsys, args):
    ap = common.parser("doc")
    common.add_heatmap_args(ap)
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["RUN", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert args[0] in err[0]


def test_results_are_strict_json_and_never_replaced_by_nothing(common, tmp_path, capsys):
    from mechinterp_icr.store.rundir import RunDir

    run = RunDir(tmp_path / "run", create=True)
    out = common.save_json(run, "x", [{"a": float("nan"), "b": [float("inf"), 1.5]}])
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == [{"a": None, "b": [None, 1.5]}]
    with pytest.raises(SystemExit) as e:
        common.save_json(run, "x", [])
    assert e.value.code == 2 and json.loads(out.read_text()) == [{"a": None, "b": [None, 1.5]}]


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("an") / "induction"
    res = CliRunner().invoke(main, [
        "train", "--task", "induction", "--out", str(out), "--set", "train.steps=2",
        "--set", "train.progress=false", "--set", "model.n_layers=1",
        "--set", "model.d_model=16", "--set", "model.d_head=16", "--set", "model.attn_only=true",
        "--set", "task.half_len=4", "--set", "task.n_tokens=8"])
    assert res.exit_code == 0, res.output
    return out


def _script(name, *args):
    return subprocess.run([sys.executable, str(ROOT / "analyses" / f"{name}.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.timeout(300)
def test_logit_lens_n_100000000_and_n_0_are_refused_and_keep_the_result(induction_run):
    res = _script("logit_lens", str(induction_run), "--checkpoints", "last", "--n", "8")
    assert res.returncode == 0, res.stderr[-2000:]
    result = induction_run / "analyses" / "logit_lens.json"
    before = result.read_bytes()
    assert all(not isinstance(v, float) or math.isfinite(v)
               for r in json.loads(before) for v in r.values())
    said = {}
    for n in ("100000000", "900000", "0", "-3"):  # 900000: within the cap, over the estimate
        res = _script("logit_lens", str(induction_run), "--checkpoints", "last", "--n", n)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
            (n, res.stderr[-2000:])
        assert "--n" in lines[0] and "Traceback" not in res.stderr
        assert result.read_bytes() == before
        said[n] = lines[0]
    assert "resources.max_gib" in said["900000"] and "1,000,000" in said["100000000"]


@pytest.mark.parametrize("value", ["L0H0@999", "L0H7@1", "L2H0@1", "L0H0", "L0H0@x", "L0H0@-1"])
def test_patching_heatmap_track_refuses_a_cell_the_model_or_prompts_lack(monkeypatch, capsys,
                                                                         value):
    mod = load_repo_script("analyses/patching_heatmap.py", monkeypatch)
    assert mod.tracked("L1H0@5, L0H1@0", 2, 2, 12) == ["L1H0@5", "L0H1@0"]
    with pytest.raises(SystemExit) as e:
        mod.tracked(value, 2, 2, 12)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert err[0].startswith(f"error: --track = {value!r} is not allowed") and "P < 12" in err[0]
