"""Reliability v2 (issue 41), sizes: every table a task builds is estimated from its config
before it is built, and the estimate is checked wherever a task or model could be built: the
CR phase recipes (``icr train --task cr``), ``icr reproduce`` / ``icr config``, and every
stored ``config.json`` read back (``icr eval``, ``mechinterp_icr.load``, the analyses)."""

import json
import tracemalloc

import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main
from mechinterp_icr.config import ConfigError, ModelConfig, RunConfig, task_build_bytes
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import CRTask, CRTaskConfig
from mechinterp_icr.tasks.induction import InductionTaskConfig
from mechinterp_icr.tasks.ir import IRTaskConfig

# the reproduction: type_member alone is |vocab| x n_types = 9.41 GiB
CR_BOMB = ["--set", "train.steps=2", "--set", "task.max_demos=4", "--set", "eval_ks=[1,2,3,4]",
           "--set", "task.n_subjects=100000", "--set", "task.n_values=10000",
           "--set", "task.n_types=1000"]


def icr(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    bug = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    return res.exit_code, res.output, bug


def one_error_line(code, out, bug):
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return code == 2 and bug is None and len(lines) == 1 and lines[0].startswith("error: ")


@pytest.fixture
def no_cr_build(monkeypatch):
    """Building a CR task fails the test: a refusal must come before it."""
    def boom(self, *a, **k):
        raise AssertionError("the CR task was built before the size check")

    monkeypatch.setattr(CRTask, "__init__", boom)


@pytest.mark.parametrize("cfg", [
    CRTaskConfig(), CRTaskConfig(n_subjects=20000, n_types=8, n_values=100),
    CRTaskConfig(n_types=300, n_values=50, n_grammar=30), CRTaskConfig(n_types=50, n_grammar=120),
    CRTaskConfig(n_types=20, n_values=200, attr_share=0.5),
    CRTaskConfig(n_subjects=2000, n_types=200, n_values=300, n_grammar=4),
    IRTaskConfig(), IRTaskConfig(n_subjects=2000, n_relations=20),
    # 200 relations: about 20 s under tracemalloc, so in the slow step
    pytest.param(IRTaskConfig(n_subjects=500, n_relations=200), marks=pytest.mark.slow),
    InductionTaskConfig(n_tokens=50000),
], ids=lambda c: f"{type(c).kind}-{task_build_bytes(c)}")
def test_task_estimate_covers_every_table_it_builds(cfg):
    cfg.build(0)  # first call: imports and caches, not the task's tables
    tracemalloc.start()
    try:
        cfg.build(0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    est = task_build_bytes(cfg)
    assert peak <= est <= 5 * peak + (1 << 20), (peak, est)


def test_task_sizes_from_the_config_equal_the_built_task():
    for cfg in (CRTaskConfig(), CRTaskConfig(n_types=3, n_values=7, max_demos=5,
                                             iclgrm_len_max=4, grammar_len_max=6)):
        task = cfg.build(0)
        assert (cfg.vocab_size(), cfg.context_len()) == (task.d_vocab, task.n_ctx)


def test_cr_task_table_bomb_icr_train_is_refused_naming_the_ceiling(tmp_path, no_cr_build):
    out = tmp_path / "r"
    code, text, bug = icr("train", "--task", "cr", "--out", out, *CR_BOMB,
                          "--set", "resources.max_gib=0.001")
    assert one_error_line(code, text, bug), (code, text, bug)
    assert "task's tables need an estimated" in text and "resources.max_gib = 0.001" in text
    assert not out.exists()
    code, text, bug = icr("train", "--task", "cr", "--out", out, *CR_BOMB)  # default ceiling
    assert one_error_line(code, text, bug) and "resources.max_gib = 8" in text


def test_cr_model_bomb_icr_train_is_refused_before_the_model_is_built(tmp_path, no_cr_build):
    code, text, bug = icr("train", "--task", "cr", "--out", tmp_path / "r",
                          "--set", "model.n_layers=64", "--set", "model.d_model=8192",
                          "--set", "model.d_mlp=65536")
    assert one_error_line(code, text, bug) and "resources.max_gib = 8" in text, text


def test_cr_config_builds_neither_task_nor_model(no_cr_build):
    from mechinterp_icr.experiments.cr.config import profile
    from mechinterp_icr.runner import resolve_config

    cfg = resolve_config("cr", "quick", ["model.d_model=8192", "model.d_mlp=65536"])
    assert cfg.model.d_mlp == 65536  # valid as a config; a run of it is refused by size
    with pytest.raises(ConfigError, match="model.n_ctx"):
        resolve_config("cr", "quick", ["model.n_ctx=3"])
    with pytest.raises(ConfigError, match="finetune.trainable"):
        resolve_config("cr", "quick", ["finetune.trainable=nothing_matches"])
    assert profile("quick").task.context_len() > 3


@pytest.mark.parametrize("cmd", ["reproduce", "config"])
def test_cr_task_table_bomb_icr_reproduce_and_config_are_refused(tmp_path, cmd, no_cr_build):
    extra = ["--out", tmp_path / "out", "--workers", "1"] if cmd == "reproduce" else []
    code, text, bug = icr(cmd, "cr", *extra, *CR_BOMB[2:])
    assert one_error_line(code, text, bug) and "resources.max_gib = 8" in text, text
    assert not (tmp_path / "out").exists()


def _edited_cr_run(tmp_path):
    """A run directory whose config.json was edited to a huge CR task (every field in range)."""
    run = RunDir(tmp_path / "run", create=True)
    run.write_config(RunConfig(name="run", task=CRTaskConfig(), model=ModelConfig()))
    p = run.path / "config.json"
    data = json.loads(p.read_text())
    data["task"].update(n_subjects=100000, n_values=10000, n_types=1000, max_demos=4)
    p.write_text(json.dumps(data))
    return run.path


def test_edited_config_json_with_a_huge_cr_task_icr_eval_and_load_refuse(tmp_path,
                                                                         no_cr_build):
    import mechinterp_icr as mi

    path = _edited_cr_run(tmp_path)
    code, text, bug = icr("eval", path)
    assert one_error_line(code, text, bug), (text, bug)
    assert "config.json" in text and "resources.max_gib = 8" in text
    with pytest.raises(ConfigError, match="resources.max_gib"):
        mi.load(path)
    code, text, bug = icr("view", path)
    assert one_error_line(code, text, bug)


def test_edited_config_json_with_a_huge_model_is_refused(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    run.write_config(RunConfig(name="run", task=InductionTaskConfig(), model=ModelConfig()))
    p = run.path / "config.json"
    data = json.loads(p.read_text())
    data["model"].update(n_layers=64, d_model=8192, d_mlp=65536, d_vocab=33, n_ctx=25)
    p.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="model and task need an estimated"):
        RunDir(run.path).read_config()
