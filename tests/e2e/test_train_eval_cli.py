"""icr train extends a finished run and starts a phase from another run's checkpoint; icr
eval reports the task's own metrics per phase and never picks an all-weights arm by default;
config errors are one line with exit code 2."""

import json

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from mechinterp_icr.cli import main

SMALL = ["--set", "train.batch_size=16", "--set", "train.progress=false", "--set",
         "train.checkpoint_schedule=linear", "--set", "train.checkpoint_every=5", "--set",
         "model.d_model=16", "--set", "model.d_head=8", "--set", "model.n_layers=1"]
IND = SMALL + ["--set", "task.n_tokens=8", "--set", "task.half_len=4"]


def _icr(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _weights(path):
    return {k: v for k, v in load_file(path).items() if k.startswith("model.")}


def test_a_finished_run_is_extended_to_a_larger_train_steps(tmp_path):
    run, full = tmp_path / "run", tmp_path / "full"
    assert _icr("train", "--task", "induction", "--out", run, *IND, "--set",
                "train.steps=10").exit_code == 0
    r = _icr("train", "--task", "induction", "--out", run, *IND, "--set", "train.steps=20")
    assert r.exit_code == 0, r.output
    assert "resumed from step 10" in r.output
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 20
    assert _icr("train", "--task", "induction", "--out", full, *IND, "--set",
                "train.steps=20").exit_code == 0
    a = _weights(run / "checkpoints" / "train-0000020.safetensors")
    b = _weights(full / "checkpoints" / "train-0000020.safetensors")
    assert all((a[k] == b[k]).all() for k in a)  # constant lr: same as training 20 at once
    r = _icr("train", "--task", "induction", "--out", run, *IND, "--set", "train.steps=15")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "not shortened" in r.output and "steps:0-15" in r.output
    r = _icr("train", "--task", "induction", "--out", run, *IND, "--set", "train.steps=30",
             "--set", "train.lr=0.5")  # another difference too: refused, config kept
    assert r.exit_code == 2 and "train.lr" in r.output
    assert json.loads((run / "config.json").read_text())["train"]["steps"] == 20


def test_a_phase_starts_from_another_runs_checkpoint(tmp_path):
    pt, ft = tmp_path / "pt", tmp_path / "ft"
    assert _icr("train", "--task", "induction", "--out", pt, *IND, "--set",
                "train.steps=10", "--phase", "pretrain").exit_code == 0
    r = _icr("train", "--task", "induction", "--out", ft, *IND, "--set", "train.steps=5",
             "--phase", "finetune", "--init", f"{pt}:phase:pretrain:last")
    assert r.exit_code == 0, r.output
    side = json.loads((ft / "checkpoints" / "finetune-0000000.json").read_text())
    assert side["init_from"].endswith("pretrain-0000010")
    a = _weights(pt / "checkpoints" / "pretrain-0000010.safetensors")
    b = _weights(ft / "checkpoints" / "finetune-0000000.safetensors")
    assert all((a[k] == b[k]).all() for k in a)
    for bad, needle in [(f"{pt}:nope-0000001", "matches no checkpoint"),
                        (str(tmp_path / "missing"), "existing run directory")]:
        r = _icr("train", "--task", "induction", "--out", tmp_path / "x", *IND, "--init", bad)
        assert r.exit_code == 2 and r.output.count("\n") == 1 and needle in r.output
        assert not (tmp_path / "x").exists()
    r = _icr("train", "--task", "induction", "--out", tmp_path / "y", *IND, "--set",
             "model.d_model=32", "--init", str(pt))
    assert r.exit_code == 2 and "does not match" in r.output


@pytest.fixture(scope="module")
def cr_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "cr"
    cr = SMALL + ["--set", "train.steps=5", "--set", "task.n_subjects=8", "--set",
                  "task.n_types=2", "--set", "task.n_values=4", "--set", "task.n_grammar=4",
                  "--set", "task.n_tuples=2", "--set", "task.n_demos=2", "--set",
                  "task.max_demos=3"]
    for phase in ("pretrain", "ft-icl-allw"):
        r = _icr("train", "--task", "cr", "--out", out, *cr, "--phase", phase)
        assert r.exit_code == 0, r.output
    return out


def test_eval_reports_the_tasks_metrics_per_phase(cr_run):
    r = _icr("eval", cr_run, "--batches", "1")
    assert r.exit_code == 0, r.output
    rows = json.loads((cr_run / "analyses" / "eval.json").read_text())
    assert [row["phase"] for row in rows] == ["pretrain"]  # no all-weights arm by default
    assert {"heldout_icl_exact_K1", "heldout_icl_type_K3", "heldout_icl_restricted_K2",
            "pt_typed"} <= set(rows[0])
    assert "K=1" in r.output and "heldout_icl_exact" in r.output
    r = _icr("eval", cr_run, "--checkpoints", "last", "--batches", "1")
    assert r.exit_code == 0 and "ft-icl-allw" not in r.output
    r = _icr("eval", cr_run, "--checkpoints", "phase:ft-icl-allw:last", "--batches", "1")
    assert r.exit_code == 0 and "ft-icl-allw-0000005" in r.output  # asked for: given
    r = _icr("eval", cr_run, "--checkpoints", "phase:nope")
    assert r.exit_code == 2 and r.output.count("\n") == 1


class _FakeWandb:
    """Stands in for the wandb module: records init and log calls."""

    def __init__(self):
        import importlib.machinery

        self.inits, self.logs, self.finished = [], [], 0
        # libraries that look for wandb (importlib.util.find_spec) when torch or
        # TransformerLens is first imported read its spec
        self.__spec__ = importlib.machinery.ModuleSpec("wandb", None)

    def init(self, **kw):
        self.inits.append(kw)
        fake = self

        class Run:
            def log(self, data, step=None):
                fake.logs.append((step, data))

            def finish(self):
                fake.finished += 1

        return Run()


def test_track_wandb_logs_every_metrics_record_offline(tmp_path, monkeypatch):
    import sys

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = tmp_path / "run"
    r = _icr("train", "--task", "induction", "--out", run, *IND, "--set", "train.steps=10",
             "--track", "wandb")
    assert r.exit_code == 0, r.output
    assert len(fake.inits) == 1 and fake.inits[0]["mode"] == "offline"
    assert fake.inits[0]["dir"] == str(run) and fake.inits[0]["config"]["train"]["steps"] == 10
    logged = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s for s, _ in fake.logs] == [m["step"] for m in logged] == [0, 5, 10]
    assert "train/eval_acc" in fake.logs[-1][1] and fake.finished == 1
    # off by default; a refused start opens no tracker run
    r = _icr("train", "--task", "induction", "--out", tmp_path / "bad", *IND, "--set",
             "train.trainable=nomatch", "--track", "wandb")
    assert r.exit_code == 2 and len(fake.inits) == 1 and not (tmp_path / "bad").exists()
    assert _icr("train", "--task", "induction", "--out", tmp_path / "plain", *IND, "--set",
                "train.steps=5").exit_code == 0
    assert len(fake.inits) == 1


def test_python_train_is_the_cli_path(tmp_path):
    """``experiments.phases.train`` is what ``icr train`` runs, for every task kind: the
    same settings give the same checkpoints, and it refuses what the command refuses."""
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.experiments.phases import train

    items = [IND[i + 1] for i in range(0, len(IND), 2)] + ["train.steps=10"]
    res = train("induction", tmp_path / "py", overrides=items)
    assert res.name == "train" and res.phase.steps == 10 and res.row is None
    assert _icr("train", "--task", "induction", "--out", tmp_path / "cli", *IND, "--set",
                "train.steps=10").exit_code == 0
    a = _weights(tmp_path / "py" / "checkpoints" / "train-0000010.safetensors")
    b = _weights(tmp_path / "cli" / "checkpoints" / "train-0000010.safetensors")
    assert all((a[k] == b[k]).all() for k in a)
    with pytest.raises(ConfigError, match="--profile = 'paper' is not allowed"):
        train("induction", tmp_path / "p", overrides=items, profile="paper")
    with pytest.raises(ConfigError, match="--phase = 'nope' is not allowed"):
        train("cr", tmp_path / "c", "nope")
    assert not (tmp_path / "p").exists() and not (tmp_path / "c").exists()


@pytest.mark.parametrize("task,phase,sets,section", [
    ("cr", "mech-pretrain", ["cascade.pt_steps=4"], "cascade"),
    ("ir", "sym-pgd", [], "hooked"),
])
def test_track_wandb_logs_the_papers_phases_with_their_settings(tmp_path, monkeypatch, task,
                                                                 phase, sets, section):
    """Every phase of both papers goes to the tracker (the IR phases did not), with the
    phase's resolved settings as the wandb config."""
    import sys

    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run = tmp_path / "run"
    args = [a for s in sets for a in ("--set", s)]
    r = _icr("train", "--task", task, "--out", run, "--phase", phase, "--preset", "tiny",
             *args, "--track", "wandb")
    assert r.exit_code == 0, r.output
    config = fake.inits[0]["config"]
    assert len(fake.inits) == 1 and section in config and fake.finished == 1
    assert config["command"]["phase"] == phase and config["command"]["task"] == task
    logged = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(fake.logs) == len(logged) > 0
    # every record on one rising step axis (wandb drops a step lower than its last), under
    # its own phase, with its own step
    steps = [s for s, _ in fake.logs]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    for (_, data), rec in zip(fake.logs, logged):
        assert data[f"{rec['phase']}/step"] == rec["step"]
    if task == "ir":  # PGD: the big step, then the small steps from step 0 again
        assert {rec["phase"] for rec in logged} >= {"big", "pgd"}
