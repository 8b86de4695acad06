"""`icr config` and `icr reproduce` validation through the runner: every key of every stage is
listed and settable, unknown profiles and keys are refused with exit code 2 before any work."""

import json

import pytest
from click.testing import CliRunner

from mechinterp_icr import cli, runner
from mechinterp_icr.config import ConfigError


def _run(*args):
    return CliRunner().invoke(cli.main, list(args))


def test_cli_and_runner_agree_on_targets():
    assert set(cli._TARGETS) == set(runner.TARGETS)


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_config_lists_every_key_and_each_is_settable(target):
    res = _run("config", target)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if " = " in ln and not ln.startswith("#")]
    assert len(lines) > 20
    keys = dict(ln.split(" = ", 1) for ln in lines)
    cfg = runner.resolve_config(target, "quick")
    # every printed key is settable: setting all of them to their printed values at once is
    # accepted and changes nothing; a key set to its paper-profile value changes the config
    again = runner.resolve_config(target, "quick", [f"{k}={v}" for k, v in keys.items()])
    assert again == cfg
    paper = dict(runner.config_keys(runner.resolve_config(target, "paper")))
    key = next(k for k in keys if json.dumps(paper[k]) != keys[k])
    moved = runner.resolve_config(target, "quick", [f"{key}={json.dumps(paper[key])}"])
    assert moved != cfg and dict(runner.config_keys(moved))[key] == paper[key]


@pytest.mark.parametrize("target", ["cr", "ir"])
def test_profiles_differ_and_round_trip(target):
    from mechinterp_icr.config import from_dict, to_dict

    quick, paper = (runner.resolve_config(target, p) for p in ("quick", "paper"))
    assert quick != paper
    for cfg in (quick, paper):
        assert from_dict(type(cfg), json.loads(json.dumps(to_dict(cfg)))) == cfg


def test_cr_stage_settings_reach_every_stage():
    """CR-4 (task vectors) and CR-7 (cascade) settings are part of the one CR config."""
    keys = dict(runner.config_keys(runner.resolve_config("cr", "quick")))
    assert any(k.startswith("taskvec.") for k in keys)
    assert any(k.startswith("cascade.") for k in keys)


@pytest.mark.parametrize("args,needle", [
    (["config", "cr", "--profile", "nope"], "profile"),
    (["config", "cr", "--set", "task.nope=1"], "nope"),
    (["config", "all", "--set", "task.lam=0.5"], "cr.task.lam"),
    (["config", "cr", "--set", "ir.n=64"], "not being run"),
    (["reproduce", "cr", "--profile", "nope", "--out", "{tmp}"], "profile"),
    (["reproduce", "ir", "--set", "bogus=1", "--out", "{tmp}"], "bogus"),
])
def test_bad_config_exits_2_with_one_line_and_writes_nothing(tmp_path, args, needle):
    out = tmp_path / "out"
    res = _run(*[a.replace("{tmp}", str(out)) for a in args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_all_with_prefixed_keys_splits_by_target():
    by = runner.split_overrides(["cr", "ir"], ["cr.task.lam=0.5", "ir.seed_offset=1"])
    assert by == {"cr": {"task.lam": 0.5}, "ir": {"seed_offset": 1}}
    with pytest.raises(ConfigError, match="starts with its target"):
        runner.split_overrides(["cr", "ir"], ["task.lam=0.5"])
