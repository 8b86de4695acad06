"""Reliability of config validation (issue 13): hostile values give one ConfigError line,
never a traceback; memory and disk bombs are refused by the resource estimate before anything
is allocated or written; phase names cannot leave the run directory."""

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mechinterp_icr.tasks  # noqa: F401  (registers the task kinds)
from mechinterp_icr.cli import main
from mechinterp_icr.config import (
    GIB,
    ConfigError,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    check_resources,
    estimate_resources,
    parse_overrides,
    show,
    to_dict,
)
from mechinterp_icr.pipeline import complete_model_config, resolve_run_config
from mechinterp_icr.store.rundir import check_phase_name

# every dotted key of the default induction run config, plus whole sections and unknown keys
_BASE = to_dict(resolve_run_config("induction", 0, []))
KEYS = sorted([f"{s}.{k}" for s, v in _BASE.items() if isinstance(v, dict) for k in v]
              + [k for k, v in _BASE.items()] + ["task.kind", "model.nope", "nope", "train."])

_leaf = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
         | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
         | st.sampled_from([10**400, -1, 0, 1, 10_000_000, "", "all", "nomatch", "LN", "cr",
                            "induction"]))
VALUES = st.recursive(_leaf, lambda ch: st.lists(ch, max_size=3)
                      | st.dictionaries(st.text(max_size=8), ch, max_size=3), max_leaves=8)


def _one_line(msg: str) -> None:
    assert "\n" not in msg and len(msg) < 2100, msg[:300]


def _resolve(items):
    """What `icr train` does with --set items, short of writing."""
    return resolve_run_config("induction", 0, items)


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=VALUES, raw=st.booleans())
def test_fuzzed_overrides_give_config_error_or_a_valid_config(key, value, raw):
    try:
        text = json.dumps(value) if not raw else str(value)
    except (ValueError, OverflowError):
        text = str(value)
    try:
        cfg = _resolve([f"{key}={text}"])
    except ConfigError as e:
        _one_line(str(e))
        return
    # accepted: a complete config within its ceilings
    assert cfg.model.d_vocab > 0 and cfg.model.n_ctx > 0
    check_resources(cfg)


@pytest.mark.parametrize("items", [
    ["model.d_vocab=10000000", "model.d_model=8192"],
    ["task.half_len=10000"],
    ["model.n_layers=64", "model.d_model=8192", "model.d_mlp=65536"],
    ["train.eval_batch_size=10000000"],
    ["train.batch_size=1000000"],
    ["train.steps=10000000", "train.checkpoint_schedule=linear", "train.checkpoint_every=1"],
])
def test_memory_and_disk_bombs_are_refused_with_the_ceiling_named(items):
    with pytest.raises(ConfigError, match=r"resources\.max_(disk_)?gib") as e:
        _resolve(items)
    _one_line(str(e.value))
    assert "--set resources.max" in str(e.value)


@pytest.mark.parametrize("kind,items", [
    ("ir", ["task.n_subjects=1000000", "task.n_answers=1000000"]),
    ("cr", ["task.n_grammar=10000", "task.n_types=1000"]),
])
def test_task_table_bombs_are_refused_before_the_task_is_built(kind, items):
    with pytest.raises(ConfigError, match="task's tables need"):
        resolve_run_config(kind, 0, items)


def test_ceiling_can_be_raised_explicitly():
    items = ["task.half_len=2000"]
    with pytest.raises(ConfigError, match="max_gib"):
        _resolve(items)
    cfg = _resolve(items + ["resources.max_gib=1000"])
    est = estimate_resources(cfg.model, cfg.train)
    assert 8 * GIB < est.peak_bytes < 1000 * GIB


def test_estimate_of_the_default_run_is_small_and_grows_with_the_model():
    cfg = _resolve([])
    est = check_resources(cfg)
    assert est.peak_bytes < 0.5 * GIB and est.n_checkpoints >= 2
    bigger = estimate_resources(ModelConfig(d_model=512, d_head=512, d_vocab=33, n_ctx=25),
                                TrainConfig())
    assert bigger.peak_bytes > est.peak_bytes and bigger.n_params > est.n_params


def test_estimate_counts_parameters_exactly():
    from helpers import build_model_cfg

    from mechinterp_icr.config import count_params
    from mechinterp_icr.models.factory import build_model

    for mc in (build_model_cfg(), build_model_cfg(attn_only=False, normalization="LN", n_heads=2,
                                                  d_head=16)):
        m = build_model(mc, seed=0)
        assert count_params(mc) == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("items,needle", [
    (["task=null"], "task = None"),
    (["task={}"], "task.kind"),
    (['task={"kind": [1]}'], "task.kind"),
    (["model.n_ctx=5"], "model.n_ctx = 5"),
    (["model.d_vocab=3"], "model.d_vocab = 3"),
    (["model.d_model=1" + "1" * 5000], "4300 digits"),
    (["model.d_model=" + "[" * 5000], "nesting"),
    (["model.d_model=" + "[" * 20 + "]" * 20], "model.d_model"),
    (["train.lr=" + "9" * 400], "train.lr"),
    (["train.lr=1e400"], "train.lr"),
    (["train.betas=null"], "train.betas"),
    (["model=null"], "model"),
    (["resources.max_gib=0"], "resources.max_gib"),
    (["name=" + "x" * 300], "name"),
    (["seed=-1"], "seed"),
])
def test_hostile_values_are_one_line_config_errors(items, needle):
    with pytest.raises(ConfigError) as e:
        _resolve(items)
    _one_line(str(e.value))
    assert needle in str(e.value)


def test_show_bounds_hostile_values():
    assert len(show("x" * 10**6)) < 100
    assert "bits" in show(10**5000)
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert len(show(deep)) < 100
    assert show(1.5) == "1.5"


def test_parse_overrides_keeps_ordinary_values():
    got = parse_overrides(["a=1", "b=x", "c=true", "d=[1,2]", "e=0123", "f=-5"])
    assert got == {"a": 1, "b": "x", "c": True, "d": [1, 2], "e": "0123", "f": -5}


def test_resources_are_part_of_the_config_and_round_trip():
    cfg = apply_overrides(RunConfig(task=_resolve([]).task), ["resources.max_gib=64"])
    assert cfg.resources.max_gib == 64.0
    assert complete_model_config(cfg).resources.max_gib == 64.0


# phase names used by the pipelines today (icr train, CR branches, IR PGD, the IR-8 control)
PIPELINE_PHASES = ["train", "pretrain", "ft-icl", "ft-iclgrm", "ft-icl-allw", "ft-iclgrm-allw",
                   "big", "pgd", "gd", "induction", "ft"]


@pytest.mark.parametrize("phase", PIPELINE_PHASES + ["a", "A_1", "x" * 32])
def test_pipeline_phase_names_are_valid(phase):
    assert check_phase_name(phase) == phase


@pytest.mark.parametrize("phase", ["", "../../escape", "a/b", "tr ain", "-x", "x-", "a--b",
                                   "1abc", "x" * 33, "a.b", "a\0b", "ü", None, 5])
def test_bad_phase_names_are_refused(phase):
    with pytest.raises(ConfigError, match="phase"):
        check_phase_name(phase)


# ---- through the CLI: exit 2, one line, nothing written -------------------------------------
@pytest.mark.parametrize("args", [
    ["--set", "train.trainable=nomatch"],
    ["--set", "model.d_vocab=10000000", "--set", "model.d_model=8192"],
    ["--set", "task.half_len=10000"],
    ["--set", "task=null"],
    ["--set", "model.n_ctx=5"],
    ["--phase", "../../escape"],
    ["--phase", ""],
    ["--phase", "a/b"],
    ["--phase", "tr ain"],
    ["--set", "model.d_model=1" + "1" * 5000],
    ["--set", "model.d_model=" + "[" * 3000],
    ["--seed", "-3"],
])
def test_cli_train_refuses_before_writing(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["train", "--out", "run", *args])
    assert res.exit_code == 2, (res.output, res.exception)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert list(tmp_path.iterdir()) == []  # nothing written, inside or outside a run


def test_cli_train_refuses_in_an_existing_run_without_changing_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    res = CliRunner().invoke(main, ["train", "--out", str(run), "--set",
                                    "train.trainable=nomatch"])
    assert res.exit_code == 2
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


def test_cli_train_refuses_another_runs_directory_without_touching_it(tmp_path):
    from mechinterp_icr.store.rundir import RunDir

    run = tmp_path / "run"
    RunDir.open_for(run, _resolve(["train.steps=5"]))
    before = sorted(p.name for p in run.iterdir())
    res = CliRunner().invoke(main, ["train", "--out", str(run), "--set", "train.steps=5",
                                    "--set", "train.lr=0.5"])  # (a larger train.steps alone
    assert res.exit_code == 2 and "differs in train.lr" in res.output  # extends the run)
    assert sorted(p.name for p in run.iterdir()) == before == ["config.json"]
