"""icr analyse NAME RUN [ARGS]: every script of analyses/ and probes/ by name, from any
working directory, through the script itself; each result kept under its selection and
options, so two analyses of the same run with different selections leave both tables, and
RUN/analyses/index.json names the latest."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _icr(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyse") / "runs" / "ind"
    r = _icr("train", "--task", "induction", "--out", out, "--preset", "tiny",
             "--set", "train.steps=20", "--set", "train.checkpoint_every=10")
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory outside the repository, figures without PNG (fast)."""
    monkeypatch.setenv("MECHINTERP_ICR_NO_PNG", "1")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_every_script_is_listed_and_takes_help(elsewhere):
    names = {p.stem for d in ("analyses", "probes") for p in (ROOT / d).glob("*.py")
             if not p.name.startswith("_")}
    r = _icr("analyse")
    assert r.exit_code == 0
    assert {line.split()[0] for line in r.output.splitlines()[1:]} == names
    for name in sorted(names):
        r = _icr("analyse", name, "--help")
        assert r.exit_code == 0, (name, r.output)
        assert f"usage: {name}.py" in r.output, name


def test_an_unknown_analysis_is_one_line_exit_2(elsewhere):
    r = _icr("analyse", "logit-lens")
    assert r.exit_code == 2
    assert "'logit-lens'" in r.output and "logit_lens" in r.output and "task_vectors" in r.output
    r = _icr("analyse", "dla", "no/such/run")
    assert r.exit_code == 2 and "does not exist" in r.output


def test_two_selections_from_another_directory_leave_both_tables(induction_run, elsewhere):
    import os

    run = Path(os.path.relpath(induction_run, elsewhere))
    assert not run.is_absolute() and run.is_dir()  # a path relative to the caller's cwd
    for sel in ("first", "last"):
        r = _icr("analyse", "logit_lens", run, "--checkpoints", sel, "--n", "16")
        assert r.exit_code == 0, r.output
    folder = induction_run / "analyses"
    index = json.loads((folder / "index.json").read_text())["logit_lens"]
    assert len(index["results"]) == 2
    tables = {r["options"]["checkpoints"]: json.loads((folder / f"logit_lens--{r['tag']}.json")
                                                      .read_text()) for r in index["results"]}
    assert {r["checkpoint"] for r in tables["first"]} == {"train-0000000"}
    assert {r["checkpoint"] for r in tables["last"]} == {"train-0000020"}
    assert index["latest"].startswith("logit_lens--last-")
    assert json.loads((folder / "logit_lens.json").read_text()) == tables["last"]
    assert (folder / index["latest"].replace(".json", ".html")).is_file()
    # the same selection again replaces its own result; another option is another result
    assert _icr("analyse", "logit_lens", run, "--checkpoints", "first", "--n", "16").exit_code == 0
    assert _icr("analyse", "logit_lens", run, "--checkpoints", "first", "--n", "8").exit_code == 0
    index = json.loads((folder / "index.json").read_text())["logit_lens"]
    assert sorted(r["options"]["n"] for r in index["results"]) == [8, 16, 16]
    assert not list(elsewhere.iterdir())  # nothing written into the caller's directory


def test_head_roles_names_no_head_below_the_threshold_and_draws_steps(tmp_path, elsewhere):
    run = tmp_path / "cr"
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "pretrain", "--preset", "tiny",
             "--set", "train.steps=20", "--set", "train.checkpoint_every=10")
    assert r.exit_code == 0, r.output
    r = _icr("analyse", "head_roles", run, "--checkpoints", "all", "--n", "16")
    assert r.exit_code == 0, r.output
    rows = json.loads((run / "analyses" / "head_roles.json").read_text())
    for row in rows:  # a 20-step PT model moves (almost) no answer
        for role in ("relation", "subject"):
            assert row[f"{role}_top_head"].startswith("L")
            want = row[f"{role}_top_head"] if row[f"{role}_moved"] >= 0.5 else "none"
            assert row[f"{role}_head"] == want
    assert any(row["subject_head"] == "none" for row in rows)
    html = (run / "analyses" / "head_roles_steps.html").read_text()
    assert "moved share" in html and "phases in sequence" in html
    r = _icr("analyse", "head_roles", run, "--checkpoints", "last", "--n", "16",
             "--role-threshold", "0")
    rows = json.loads((run / "analyses" / "head_roles.json").read_text())
    assert all(row["relation_head"] != "none" for row in rows)


def test_ir_rows_print_no_transformerlens_chatter(tmp_path, elsewhere, capfd):
    run = tmp_path / "ir"
    r = _icr("train", "--task", "ir", "--out", run, "--phase", "raw-pgd", "--preset", "tiny")
    assert r.exit_code == 0, r.output
    r = _icr("analyse", "ir_attention_rows", run, "--checkpoints", "all", "--n", "16")
    assert r.exit_code == 0, r.output
    assert "Moving model" not in r.output + "".join(capfd.readouterr())


def test_checkpoints_never_cut_metrics_silently(induction_run):
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.pipeline import metric_lines

    m = [{"a": 1.0, "b": 2, "c": 3, "d": 4, "e": 5, "note": "x"}, {"a": 0.5}]
    assert metric_lines(m, None) == ["a=1, b=2, c=3, d=4 (+1 more: --metrics all)", "a=0.5"]
    assert metric_lines(m, "all")[0].endswith("e=5")
    assert metric_lines(m, "e,a") == ["e=5, a=1", "a=0.5"]
    with pytest.raises(ConfigError, match="'zz'.*among a, b, c, d, e"):
        metric_lines(m, "zz")
    r = _icr("checkpoints", induction_run, "--metrics", "nope")
    assert r.exit_code == 2 and "--metrics = 'nope' is not allowed" in r.output
