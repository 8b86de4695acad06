"""icr train --preset tiny: every phase of both papers and the induction task gets small
settings, the command's own --set items win over the preset's, and an unknown preset is one
line with exit 2. The tiny CR PT -> ft-icl and the tiny mechanism model run here with fewer
steps than the preset's (the README's full tiny commands are timed in docs/workbench.md)."""

import json

import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main
from mechinterp_icr.experiments.phases import recipes
from mechinterp_icr.experiments.presets import preset_overrides

pytestmark = pytest.mark.e2e


def _icr(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("task", ["cr", "ir"])
def test_every_phase_has_tiny_settings(task):
    for rec in recipes(task):
        items = preset_overrides("tiny", task, rec.name)
        assert items, rec.name
        keys = [i.partition("=")[0] for i in items]
        assert len(keys) == len(set(keys)), rec.name
    assert preset_overrides("tiny", "induction", None)


def test_the_commands_own_settings_win_over_the_preset():
    got = preset_overrides("tiny", "cr", "pretrain", ["pretrain.steps=7", "task.n_types=3"])
    assert got[-2:] == ["pretrain.steps=7", "task.n_types=3"]
    assert not any(i.startswith(("train.steps=", "task.n_types=")) for i in got[:-2])
    assert preset_overrides(None, "cr", "pretrain", ["x=1"]) == ["x=1"]
    ft = preset_overrides("tiny", "cr", "ft-icl", ["finetune.lr=0.01"])
    assert "train.lr=0.005" not in ft and ft[-1] == "finetune.lr=0.01"


def test_unknown_preset_is_one_line_exit_2(tmp_path):
    r = _icr("train", "--task", "cr", "--out", tmp_path / "r", "--preset", "huge")
    assert r.exit_code == 2 and "huge" in r.output and "tiny" in r.output
    assert not (tmp_path / "r").exists()


def _config(run):
    return json.loads((run / "config.json").read_text())


def test_tiny_cr_pretrain_then_finetune_in_one_run(tmp_path):
    run = tmp_path / "cr"
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "pretrain", "--preset", "tiny",
             "--set", "train.steps=40")
    assert r.exit_code == 0, r.output
    cfg = _config(run)
    assert cfg["task"]["n_subjects"] == 16 and cfg["model"]["d_model"] == 32
    assert cfg["train"]["steps"] == 40
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "ft-icl", "--preset", "tiny",
             "--set", "train.steps=6")
    assert r.exit_code == 0, r.output
    assert "trained 6 steps of 'ft-icl'" in r.output


def test_tiny_mechanism_model_both_phases(tmp_path):
    run = tmp_path / "mech"
    for phase in ("mech-pretrain", "mech-ft-icl"):
        r = _icr("train", "--task", "cr", "--out", run, "--phase", phase, "--preset", "tiny",
                 "--set", "cascade.pt_steps=20", "--set", "cascade.ft_steps=5")
        assert r.exit_code == 0, r.output
    cfg = _config(run)
    assert cfg["model"]["n_heads"] == 2 and cfg["model"]["d_head"] == 16
    names = [p.stem for p in (run / "checkpoints").glob("*.json")]
    assert "ft-icl-0000005" in names and "pretrain-0000020" in names
