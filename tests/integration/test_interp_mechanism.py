"""End-to-end: CR-5/6/7 claims on a tiny CR reproduction (slow: about a minute on one core)."""

import json

import pytest
import torch


@pytest.mark.slow
def test_add_mechanism_claims_tiny(tmp_path):
    from helpers import CR_TINY as TINY

    from mechinterp_icr.experiments import cr
    from mechinterp_icr.experiments.cr_mechanism import add_mechanism_claims

    torch.set_num_threads(1)
    summary = cr.reproduce("quick", tmp_path, [0], TINY + ["sweep=[]"])
    add_mechanism_claims(summary, tmp_path, [tmp_path / "runs" / "cr" / "seed0"], [0], "quick")
    summary.write(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    for cid in ("CR-5", "CR-6", "CR-7"):
        c = data["claims"][cid]
        assert "0" in c["per_seed"] and isinstance(c["holds"], bool)
    assert data["claims"]["CR-6"]["per_seed"]["0"]["own_format_min"] >= 0.99
    c7 = data["claims"]["CR-7"]["per_seed"]["0"]
    assert {"t_half_ov", "t_half_kq", "ov_first"} <= set(c7)
    assert (tmp_path / "runs" / "cr-mech" / "seed0" / "metrics.jsonl").exists()
    assert (tmp_path / "figures" / "cr7_cascade.html").exists()
