"""CR-4 science regression at the quick profile's size (slow: trains a 2-layer model).

Run with ``pytest -m slow tests/integration/test_taskvec_slow.py``.
"""

from dataclasses import replace

import pytest

from mechinterp_icr.config import RunConfig
from mechinterp_icr.experiments import cr
from mechinterp_icr.experiments.cr import taskvec as ct


@pytest.mark.slow
def test_type_subspace_appears_with_icl_finetuning(tmp_path):
    from mechinterp_icr.tasks.cr import CRTaskConfig

    task = CRTaskConfig()
    base = RunConfig(name="seed0", seed=0, task=task,
                     model=replace(task.default_model(), d_vocab=task.build(0).d_vocab,
                                   n_ctx=64))
    # the main model size and the quick profile's PT / finetuning lengths
    tvc = replace(cr.profile("quick").taskvec, lam_model="small", lam_d_model=64, lam_d_mlp=256,
                lam_pt_steps=500,
                lam_pt_lr=2e-3, lam_ft_steps=200, lams=(), ks=(1, 4), n_shuffles=16)
    path = ct.train_lam_run(base, 0.9, tmp_path / "seed0", tvc)
    res = ct.analyse_seed(path, 0, tvc, log=None)
    pt, ft = res["phases"]["pretrain"], res["phases"]["ft-icl"]
    assert ft["acc_pc"] >= 0.95 and ft["transfer_acc_pc"] >= 0.95
    assert pt["acc_pc"] <= 0.5 and pt["transfer_acc_pc"] <= 0.5
    assert pt["acc_full"] >= 0.7  # the full probe already reads the type after PT
    assert abs(ft["acc_shuffle_pc"] - 0.25) <= 0.1
    assert ft["hook"] == "blocks.1.hook_resid_mid"  # before the last MLP reads it out
    assert ft["patch_gain"] >= 0.5 and ft["random_patch_gain"] <= 0.1
