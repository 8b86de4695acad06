"""benchmarks/stage_profile.py: stage job-seconds and shares from a summary."""

import json

from helpers import load_repo_script


def test_stage_table_sorts_stages_and_leaves_bookkeeping_out(tmp_path, monkeypatch, capsys):
    mod = load_repo_script("benchmarks/stage_profile.py", monkeypatch)
    summary = {"timings_by_target": {
        "cr": {"pretrain": 30.0, "total": 999.0, "jobs (wall, all targets)": 50.0},
        # the key's name in summaries written before jobs were called jobs
        "ir": {"IR-5": 60.0, "IR-1": 10.0, "tasks (wall, all targets)": 50.0}}}
    rows = mod.stage_table(summary)
    assert [(r["target"], r["stage"]) for r in rows] == [("ir", "IR-5"), ("cr", "pretrain"),
                                                         ("ir", "IR-1")]
    assert abs(rows[0]["share"] - 0.6) < 1e-12
    p = tmp_path / "summary.json"
    p.write_text(json.dumps(summary))
    assert mod.main([str(p), "--top", "2"]) == 0
    assert "the heaviest 2: ir IR-5 (60%), cr pretrain (30%)" in capsys.readouterr().out
    assert mod.main([str(tmp_path / "missing.json")]) == 2


def test_job_breakdown_files_each_sample_under_its_first_category(monkeypatch):
    """benchmarks/job_breakdown.py: a stack sample's category, innermost frame first."""
    mod = load_repo_script("benchmarks/job_breakdown.py", monkeypatch)
    pkg = "/x/mechinterp_icr"
    fwd = [(f"{pkg}/models/ir.py", "cot_blocks"), (f"{pkg}/training/pgd.py", "grad_step")]
    assert mod.classify(fwd) == "forward"
    assert mod.classify([("/v/torch/autograd/graph.py", "_engine_run_backward"), *fwd]) == \
        "backward"
    assert mod.classify([("/v/torch/optim/adam.py", "step")]) == "optimizer"
    # a forward pass inside an evaluation callback is evaluation
    assert mod.classify([*fwd, (f"{pkg}/experiments/ir/ir5.py", "step1_expected")]) == \
        "evaluation"
    assert mod.classify([(f"{pkg}/experiments/ir/train.py", "fast_metrics")]) == "evaluation"
    assert mod.classify([("/v/safetensors/torch.py", "save_file")]) == "I/O"
    assert mod.classify([(f"{pkg}/tasks/cr.py", "_grammar_runs"),
                         (f"{pkg}/tasks/cr.py", "sample_pt")]) == "data"
    # a model's forward pass called from a task helper is forward, not data
    assert mod.classify([("/v/transformer_lens/x.py", "forward"),
                         (f"{pkg}/tasks/base.py", "target_logits")]) == "forward"
    # names that merely contain an evaluation word are not evaluations
    assert mod.classify([(f"{pkg}/training/loop.py", "reevaluated_steps_x")]) == "forward"
    # a stage named like an evaluation that trains first: its training steps are forward
    stage = (f"{pkg}/experiments/ir/stages.py", "pretrained_metrics")
    loop = (f"{pkg}/training/pgd.py", "pgd_fast")
    assert mod.classify([(f"{pkg}/models/ir.py", "cot_blocks"), loop, stage]) == "forward"
    assert mod.classify([("/v/torch/autograd/graph.py", "_engine_run_backward"), loop,
                         stage]) == "backward"
    # ... while the evaluation callback the loop calls is evaluation
    assert mod.classify([(f"{pkg}/models/ir.py", "cot_blocks"),
                         (f"{pkg}/experiments/ir/train.py", "evaluate"), loop, stage]) == \
        "evaluation"
    # a checkpoint written by the training loop is I/O
    assert mod.classify([(f"{pkg}/store/checkpoint.py", "save_checkpoint"),
                         (f"{pkg}/training/loop.py", "_train_steps")]) == "I/O"


def test_job_breakdown_selects_the_jobs_with_their_dependencies_first(monkeypatch):
    mod = load_repo_script("benchmarks/job_breakdown.py", monkeypatch)
    from mechinterp_icr.jobs import Job

    def fn():
        return {}

    plan = [Job("a/seed0", fn), Job("b/seed0", fn, after=("c/seed0",)), Job("c/seed0", fn),
            Job("d/seed0", fn)]
    jobs, want = mod.select(plan, ["b/*"])
    assert [t.name for t in jobs] == ["c/seed0", "b/seed0"] and want == {"b/seed0"}


def test_train_step_ops_splits_a_registered_step_into_shares(monkeypatch):
    """benchmarks/train_step_ops.py: the registered models train through the project's loop,
    and a step's operator time is split into matmul / optimizer / other shares that add to 1."""
    mod = load_repo_script("benchmarks/train_step_ops.py", monkeypatch)
    labels = []
    for label, build, sample, tc in mod.models():
        ms, share = mod.op_shares(build, sample, tc, steps=2)
        labels.append(label)
        assert ms > 0 and set(share) == {"matmul", "optimizer", "other"}
        assert abs(sum(share.values()) - 1) < 1e-9 and share["matmul"] > 0.1
    assert labels == ["CR main model", "CR-5/CR-7 mechanism model"]
