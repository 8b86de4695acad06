"""icr train --phase trains the papers' phases with the reproduction's data and settings:
a tiny CR PT -> ft-icl from the command line gains held-out ICL over the PT-only model, the
phase equals the reproduction's own function bit for bit, unknown phases and bad starts are
refused with exit 2 before anything is written, and the IR PGD runs resume."""

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from mechinterp_icr.cli import main

pytestmark = pytest.mark.e2e

TINY = ["task.n_subjects=16", "task.n_grammar=4", "task.n_types=2", "task.n_values=4",
        "task.n_tuples=3", "task.n_demos=2", "task.max_demos=3", "task.grammar_len_max=3",
        "model.d_model=32", "model.d_head=32", "model.d_mlp=64", "model.n_ctx=0",
        "ckpt_eval_n=16"]
PT = TINY + ["train.steps=300", "train.lr=0.005"]
FT = ["train.steps=80", "train.lr=0.005", "ckpt_eval_n=16"]


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


def _icr(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _weights(path):
    return {k: v for k, v in load_file(path).items() if k.startswith("model.")}


@pytest.fixture(scope="module")
def pt_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("recipes") / "pt"
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "pretrain", *_sets(PT))
    assert r.exit_code == 0, r.output
    return run


def test_pt_then_ft_icl_from_the_cli_gains_heldout_icl(pt_run, tmp_path):
    ft = tmp_path / "ft"
    r = _icr("train", "--task", "cr", "--out", ft, "--phase", "ft-icl", "--init", pt_run,
             *_sets(FT))
    assert r.exit_code == 0, r.output
    assert f"started from {pt_run}:phase:pretrain:last" in r.output
    side = json.loads(sorted((ft / "checkpoints").glob("ft-icl-*.json"))[-1].read_text())
    assert side["finetune_format"] == "icl" and side["init_from"].endswith("pretrain-0000300")
    assert side["trainable"] and all(".attn." in n for n in side["trainable"])
    assert len(side["finetune_subjects"]) < 16  # the finetune subjects only

    def heldout(run):
        assert _icr("eval", run, "--batches", "1").exit_code == 0
        row = json.loads((run / "analyses" / "eval.json").read_text())[-1]
        return sum(row[f"heldout_icl_exact_K{k}"] for k in (1, 2, 3)) / 3

    before, after = heldout(pt_run), heldout(ft)
    assert after > before + 0.3, (before, after)  # measured 0.33 -> 0.93


def test_the_cli_phase_is_the_reproductions_phase_bit_for_bit(pt_run, tmp_path):
    from mechinterp_icr.config import apply_overrides
    from mechinterp_icr.experiments.cr.config import profile
    from mechinterp_icr.experiments.cr.train import (
        finetune_run,
        last_state,
        run_config_for,
    )
    from mechinterp_icr.store.rundir import RunDir

    ft = tmp_path / "ft"
    assert _icr("train", "--task", "cr", "--out", ft, "--phase", "ft-iclgrm", "--init",
                pt_run, *_sets(FT)).exit_code == 0
    cfg = apply_overrides(profile("quick"), [kv.replace("train.", "pretrain.") for kv in PT]
                          + [kv.replace("train.", "finetune.") for kv in FT]
                          + ["eval_ks=[1,2,3]"])
    rc, task = run_config_for(cfg, 0, "direct")
    direct = RunDir(tmp_path / "direct", create=True)
    direct.write_config(rc)
    finetune_run(cfg, task, rc, direct, last_state(pt_run), "ft-iclgrm", 0)
    a = _weights(sorted((ft / "checkpoints").glob("ft-iclgrm-*.safetensors"))[-1])
    b = _weights(sorted((tmp_path / "direct" / "checkpoints")
                        .glob("ft-iclgrm-*.safetensors"))[-1])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_branch_goes_into_the_pretrained_run_itself_and_resumes(pt_run):
    args = ("train", "--task", "cr", "--out", pt_run, "--phase", "ft-icl-mixed",
            *_sets(["train.steps=10"]))
    r = _icr(*args)
    assert r.exit_code == 0, r.output
    assert "already finished" in _icr(*args).output
    r = _icr(*args, "--set", "train.lr=0.01")  # other settings than its checkpoints'
    assert r.exit_code == 2 and "lr" in r.output and r.output.count("\n") == 1
    # the task comes from the run it starts from: the same value is fine, another is not
    assert _icr(*args, "--set", "task.n_subjects=16").exit_code == 0
    r = _icr(*args, "--set", "task.n_subjects=32")
    assert r.exit_code == 2 and "task.n_subjects" in r.output


def test_bad_phases_and_starts_are_refused_before_anything_is_written(pt_run, tmp_path):
    out = tmp_path / "x"
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "nope")
    assert r.exit_code == 2 and "pretrain, ft-icl, ft-iclgrm" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "ft-icl")  # nothing to start
    assert r.exit_code == 2 and "--init" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "mech-ft-icl", "--init", pt_run)
    assert r.exit_code == 2 and "mech-pretrain" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "ft-icl", "--init", pt_run,
             "--seed", "3")
    assert r.exit_code == 2 and "seed" in r.output
    r = _icr("train", "--task", "ir", "--out", out, "--phase", "raw-pgd", "--set", "nope=1")
    assert r.exit_code == 2 and "nope" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "pretrain", "--init", pt_run)
    assert r.exit_code == 2 and "--init is not allowed" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "pretrain", "--set",
             "cascade.pt_steps=3")
    assert r.exit_code == 2 and "cascade.pt_steps" in r.output
    r = _icr("train", "--task", "cr", "--out", out, "--phase", "ft-icl", "--init", pt_run,
             "--set", "train.steps=5", "--set", "finetune.steps=7")
    assert r.exit_code == 2 and "together" in r.output
    assert not out.exists()


def test_another_runs_pretraining_never_mixes_into_a_run(pt_run, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(pt_run, other)
    for p in (other / "checkpoints").glob("ft-*"):
        p.unlink()  # a run with only its own pretraining
    r = _icr("train", "--task", "cr", "--out", other, "--phase", "ft-icl", "--init", pt_run,
             *_sets(FT))
    assert r.exit_code == 2 and "holds its own" in r.output
    ft = tmp_path / "ft"
    args = ("train", "--task", "cr", "--out", ft, "--phase", "ft-icl", *_sets(FT))
    assert _icr(*args, "--init", pt_run).exit_code == 0
    r = _icr(*args, "--init", f"{pt_run}:pretrain-0000000")  # another start on resume
    assert r.exit_code == 2 and "started from" in r.output
    r = _icr("train", "--task", "cr", "--out", pt_run, "--phase", "pretrain", *_sets(PT),
             "--set", "train.steps=400")  # its branches started from the 300-step PT
    assert r.exit_code == 2 and "ft-" in r.output


def test_icr_phases_lists_every_recipe():
    from mechinterp_icr.experiments.phases import recipes

    r = _icr("phases", "--task", "cr")
    assert r.exit_code == 0
    assert [ln.split()[0] for ln in r.output.splitlines()] == [x.name for x in recipes("cr")]
    assert "ft-icl" in r.output and "[from pretrain]" in r.output
    assert _icr("phases", "--task", "ir").output.split()[0] == "sym-pgd"
    assert _icr("phases", "--task", "induction").exit_code == 2


def test_mechanism_model_pt_then_ft_logs_the_cascade_probes(tmp_path):
    run = tmp_path / "mech"
    task = [kv for kv in TINY if kv.startswith("task.")]
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "mech-pretrain",
             *_sets(task + ["cascade.pt_steps=20", "ckpt_eval_n=16"]))
    assert r.exit_code == 0, r.output
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "mech-ft-icl",
             *_sets(["cascade.ft_steps=12", "cascade.d_head=64"]))
    assert r.exit_code == 0, r.output
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    probes = [x for x in rows if x.get("phase") == "ft-icl" and "h0_ov_margin" in x]
    assert len(probes) == 13  # every step 0..12 is a checkpoint (dense_until 40)
    side = json.loads(sorted((run / "checkpoints").glob("ft-icl-*.json"))[-1].read_text())
    assert "embed.W_E" not in side["trainable"]  # the orthonormal embeddings stay frozen
    r = _icr("train", "--task", "cr", "--out", run, "--phase", "mech-pretrain",
             "--set", "train.steps=5")
    assert r.exit_code == 2 and "cascade.pt_steps" in r.output
    # the reproduction's phase names, so the batches are the reproduction's: the CLI's PT
    # equals experiments.cr.mechanism_model.mechanism_pretrain bit for bit
    from mechinterp_icr.config import apply_overrides
    from mechinterp_icr.experiments.cr import mechanism_model as C
    from mechinterp_icr.experiments.cr.config import profile

    cfg = apply_overrides(profile("quick"), task + ["cascade.pt_steps=20", "eval_ks=[1,2,3]"])
    t = cfg.task.build(0)
    model = C.build_mechanism_model(t, 0, cfg.cascade)
    C.mechanism_pretrain(model, t, 0, cfg.cascade, None)
    cli = _weights(run / "checkpoints" / "pretrain-0000020.safetensors")
    assert all(torch.equal(cli[f"model.{k}"], v) for k, v in model.state_dict().items())
    # another model or other frozen embeddings than the PT's are refused
    for bad in ("cascade.d_head=32", "cascade.embedding=learned"):
        r = _icr("train", "--task", "cr", "--out", tmp_path / "m2", "--phase", "mech-ft-icl",
                 "--init", run, "--set", bad)
        assert r.exit_code == 2 and bad.split("=")[0] in r.output, r.output


def test_an_ir_pgd_phase_trains_resumes_and_refuses_another_config(tmp_path):
    run = tmp_path / "ir"
    args = ("train", "--task", "ir", "--out", run, "--phase", "raw-pgd", "--set",
            "hooked.steps=6", "--set", "hooked.n=16", "--set", "hooked.eval=64", "--set",
            "hooked.N=32")
    r = _icr(*args)
    assert r.exit_code == 0, r.output
    phases = {p.name.split("-")[0] for p in (run / "checkpoints").glob("*.json")}
    assert phases == {"big", "pgd"}
    first = _weights(sorted((run / "checkpoints").glob("pgd-*.safetensors"))[-1])
    assert _icr(*args).exit_code == 0  # finished: reported again, not retrained
    again = _weights(sorted((run / "checkpoints").glob("pgd-*.safetensors"))[-1])
    assert all(torch.equal(first[k], again[k]) for k in first)
    r = _icr(*args[:-1], "hooked.N=64")
    assert r.exit_code == 2 and "different config" in r.output
    r = _icr(*args, "--set", "big_lr=0.5")  # not in config.json: in the checkpoints' PGD record
    assert r.exit_code == 2 and "big_lr" in r.output


def test_checkpoints_of_a_run_without_any_exits_2(tmp_path):
    from mechinterp_icr.config import RunConfig
    from mechinterp_icr.store.rundir import RunDir

    RunDir(tmp_path / "r", create=True).write_config(RunConfig())
    r = _icr("checkpoints", tmp_path / "r")
    assert r.exit_code == 2 and "no checkpoints" in r.output


def test_a_wrong_run_path_is_refused_before_torch_is_imported(tmp_path):
    code = ("import sys\nfrom mechinterp_icr.cli import main\n"
            "try:\n    main([sys.argv[1], sys.argv[2]])\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    for cmd in ("eval", "checkpoints", "explore", "view"):
        res = subprocess.run([sys.executable, "-c", code, cmd, str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (cmd, res.stderr[-1000:])
        assert "does not exist" in res.stderr


def test_train_refuses_a_bad_phase_profile_or_tracker_before_torch_is_imported(tmp_path):
    """icr train's refusals that need no model answer at once, in the order the command
    reads (--init's run, the phase of a paper's task, --profile of another task, --track),
    and write nothing."""
    code = ("import sys\nfrom mechinterp_icr.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    out = str(tmp_path / "r")
    for args, said in ((["--task", "cr", "--phase", "bogus"], "--phase = 'bogus'"),
                       (["--task", "induction", "--profile", "paper", "--phase", "9bad"],
                        "--profile = 'paper'"),
                       (["--task", "cr", "--phase", "ft-icl", "--init", str(tmp_path / "no")],
                        "--init = ")):
        res = subprocess.run([sys.executable, "-c", code, "train", "--out", out, *args],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (args, res.stderr[-1000:])
        assert said in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "r").exists()


def test_ir_memory_pretrain_then_pgd_on_top_of_it(tmp_path):
    run = tmp_path / "mem"
    small = ["--set", "pretrained.n=32", "--set", "pretrained.steps=60", "--set", "eval_size=128"]
    r = _icr("train", "--task", "ir", "--out", run, "--phase", "memory-pretrain", *small)
    assert r.exit_code == 0, r.output
    side = json.loads(next((run / "checkpoints").glob("memory-pretrain-*.json")).read_text())
    assert 0 <= side["memory"]["relation_acc"] <= 1 and side["memory_pretrain"]["steps"] == 60
    logged = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in logged if x["phase"] == "memory-log"] == [0, 59]
    mem = _weights(next((run / "checkpoints").glob("memory-pretrain-*.safetensors")))
    r = _icr("train", "--task", "ir", "--out", run, "--phase", "memory-pgd", *small,
             "--set", "pretrained.ft_steps=5")
    assert r.exit_code == 0, r.output
    from mechinterp_icr.store.rundir import RunDir

    assert RunDir(run).phases() == ["memory-pretrain", "big", "pgd"]
    after = _weights(sorted((run / "checkpoints").glob("pgd-*.safetensors"))[-1])
    assert torch.equal(mem["model.blocks.0.mlp.W_in"], after["model.blocks.0.mlp.W_in"])
    assert not torch.equal(mem["model.blocks.0.attn.W_K"], after["model.blocks.0.attn.W_K"])
    r = _icr("train", "--task", "ir", "--out", tmp_path / "x", "--phase", "memory-pgd")
    assert r.exit_code == 2 and "memory-pretrain" in r.output and not (tmp_path / "x").exists()
    r = _icr("train", "--task", "ir", "--out", run, "--phase", "memory-pgd", *small,
             "--set", "pretrained.ft_steps=5", "--set", "pretrained.ft_lr=9")
    assert r.exit_code == 2 and "lr" in r.output
