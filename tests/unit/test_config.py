import json

import pytest

import mechinterp_icr.tasks  # noqa: F401  (registers the task kinds from_dict resolves)
from mechinterp_icr.config import (
    ConfigError,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    parse_overrides,
    to_dict,
)
from mechinterp_icr.tasks.induction import InductionTaskConfig


def test_round_trip_through_json():
    cfg = RunConfig(name="x", seed=3, task=InductionTaskConfig(n_tokens=9),
                    model=ModelConfig(d_model=48), train=TrainConfig(betas=(0.8, 0.9)))
    back = from_dict(RunConfig, json.loads(json.dumps(to_dict(cfg))))
    assert back == cfg
    assert isinstance(back.task, InductionTaskConfig)
    assert back.train.betas == (0.8, 0.9)


@pytest.mark.parametrize("field,value,fragment", [
    ("model.d_model", -3, "model.d_model = -3 is not allowed; expected an integer in [1, 8192]"),
    ("train.optimizer", "adam", "train.optimizer = 'adam' is not allowed; expected one of"),
    ("train.lr", 0, "train.lr = 0.0 is not allowed; expected a number in (0,"),
    ("model.normalization", "RMS", "model.normalization = 'RMS'"),
    ("task.n_tokens", 1, "task.n_tokens = 1 is not allowed"),
])
def test_rejection_names_field_value_and_allowed(field, value, fragment):
    cfg = RunConfig(task=InductionTaskConfig())
    with pytest.raises(ConfigError) as e:
        apply_overrides(cfg, {field: value})
    assert fragment in str(e.value)


def test_unknown_override_key_is_named():
    cfg = RunConfig(task=InductionTaskConfig())
    with pytest.raises(ConfigError, match="'d_modle' is not a known field"):
        apply_overrides(cfg, ["model.d_modle=3"])
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_overrides(["model.d_model"])


def test_overrides_parse_types():
    cfg = apply_overrides(RunConfig(task=InductionTaskConfig()),
                          ["model.d_model=48", "train.lr=0.01", "model.attn_only=true",
                           "train.trainable=attention"])
    assert cfg.model.d_model == 48 and cfg.train.lr == 0.01 and cfg.model.attn_only is True
    assert cfg.train.trainable == "attention"


def test_from_dict_rejects_unknown_field_and_kind():
    with pytest.raises(ConfigError, match="model.bogus"):
        from_dict(RunConfig, {"model": {"bogus": 1}})
    with pytest.raises(ConfigError, match="task.kind = 'nope'"):
        from_dict(RunConfig, {"task": {"kind": "nope"}})


def test_cli_rejects_bad_value_before_writing(tmp_path):
    from click.testing import CliRunner

    from mechinterp_icr.cli import main

    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["train", "--out", str(out), "--set", "train.steps=-1"])
    assert res.exit_code == 2
    assert "train.steps = -1 is not allowed" in res.output
    assert not out.exists()
