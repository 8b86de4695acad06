"""``icr calibrate cr9-noise`` on a tiny CR config: one PT + ICL finetuning per seed at the
registered lam, the SD of their eta^2 and the 5-seed drop tolerance; a second call resumes
from the kept records and gives the same numbers."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main

TINY = ["task.n_subjects=16", "task.n_grammar=4", "task.n_types=2", "task.n_values=4",
        "task.n_tuples=3", "task.n_demos=2", "task.max_demos=3", "task.grammar_len_max=3",
        "model.d_model=32", "model.d_head=32", "model.d_mlp=64", "eval_n=64",
        "eval_n_by_k=64", "eval_ks=[1,2,3]", "pretrain.steps=60", "finetune.steps=20",
        "taskvec.n_heldout=160", "taskvec.n_finetune=120", "taskvec.n_subject_split=80",
        "taskvec.ks=[1,3]", "taskvec.n_per_k=80", "taskvec.n_shuffles=2",
        "taskvec.n_random_dirs=2"]


def test_cr9_noise_measures_the_sd_and_resumes(tmp_path):
    from mechinterp_icr.claims.derive import cr9_tolerance

    args = ["calibrate", "cr9-noise", "--seeds", "200,201", "--out", str(tmp_path)]
    for item in TINY:
        args += ["--set", item]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "cr9_noise.json").read_text())
    eta = np.array(res["ft_eta2"])
    assert res["seeds"] == [200, 201] and res["lam"] == 0.9 and len(eta) == 2
    assert np.all((eta >= 0) & (eta <= 1))
    assert res["std"] == pytest.approx(float(eta.std(ddof=1)))
    assert res["tolerance_5_seeds"] == pytest.approx(cr9_tolerance(res["std"], 5))
    assert f"SD {res['std']:.4f} over 2 seeds" in r.output and "CR-4 lam sweep" in r.output
    assert sorted(p.name for p in (tmp_path / "jobs" / "cr" / "cr9-noise").iterdir()) == [
        "seed200.json", "seed201.json"]
    again = CliRunner().invoke(main, args, catch_exceptions=False)  # resumes: no training
    assert again.exit_code == 0 and "CR-4 lam sweep" not in again.output, again.output
    assert json.loads((tmp_path / "cr9_noise.json").read_text()) == res
