"""IR claims v3 on tiny inputs: the stopping rule's tolerance conventions (IR-3 / IR-6 / IR-7)
equal the runs they stand for, and IR-8's token-dependent model is trained and scored."""

import pytest
import torch

from mechinterp_icr.config import apply_overrides
from mechinterp_icr.experiments.ir import profile
from mechinterp_icr.experiments.ir.config import model_spec, task_config
from mechinterp_icr.experiments.ir.conventions import (
    fixed_length_variants,
    stop_step,
    stop_tol_variants,
)
from mechinterp_icr.experiments.ir.stages import stopped_run
from mechinterp_icr.experiments.ir.train import final_record, tagged_rng

TINY = ["steps=10", "stop_every=10", "stop_max=120", "eval_size=64"]


def _setting(cfg, seed=0, n=16):
    tk = task_config(cfg, n).build(seed)
    return tk, tk.sample(tagged_rng(seed, "train", n), 32), tk.sample(tagged_rng(seed, "ev"),
                                                                     64)


@pytest.mark.parametrize("tol", [2e-3, 2e-4])
def test_tolerance_variants_equal_the_runs_with_that_tolerance(tol):
    """Halved: the registered run continued; doubled: read from its records. Each equals a
    run made under that tolerance from the start (full-batch GD is deterministic)."""
    cfg = apply_overrides(profile("quick"), TINY + [f"stop_tol={tol}"])
    tk, train, ev = _setting(cfg)
    fast, recs = stopped_run(cfg, tk, model_spec(cfg), train, ev, 0)
    var = stop_tol_variants(cfg, fast, recs, train)
    assert var["tol"]["small_steps"] == final_record(recs)["step"] - 1
    for lab, f in (("tol/2", 0.5), ("2 tol", 2.0)):
        c2 = apply_overrides(cfg, [f"stop_tol={f * tol}"])
        _, r2 = stopped_run(c2, tk, model_spec(c2), train, ev, 0)
        assert var[lab]["small_steps"] == final_record(r2)["step"] - 1, lab
        assert var[lab]["within_pair_gap"] == pytest.approx(
            final_record(r2)["within_pair_gap"], abs=1e-10), lab
    assert var["2 tol"]["small_steps"] <= var["tol"]["small_steps"] <= \
        var["tol/2"]["small_steps"] <= cfg.stop_max


def test_fixed_length_variants_apply_the_rule_after_the_fact():
    cfg = apply_overrides(profile("quick"), TINY + ["stop_tol=0.01"])
    gap = {1: 0.1, 11: 0.08, 21: 0.05, 31: 0.045, 41: 0.044, 51: 0.0439}
    recs = [{"step": t, "row1": [0.25 + g / 2, 0.25 - g / 2, 0.25, 0.25, 0.0]}
            for t, g in gap.items()]
    assert stop_step({t: g for t, g in gap.items() if t >= 11}, cfg, 0.01) == 31
    v = fixed_length_variants(cfg, recs)
    assert v["tol"]["small_steps"] == 30 and v["tol"]["within_pair_gap"] == pytest.approx(0.045)
    assert v["2 tol"]["small_steps"] == 30  # |0.05 - 0.045| < 0.02 already at 31
    assert v["tol/2"]["small_steps"] == 40  # |0.045 - 0.044| < 0.005 at 41
    assert not v["tol"]["ran_to_length_bound"]
    never = fixed_length_variants(apply_overrides(cfg, ["stop_tol=1e-9"]), recs)
    assert never["tol"]["small_steps"] == 50 and never["tol"]["ran_to_length_bound"]


def test_token_dependent_pgd_in_segments_is_one_run_and_stops_once_solved():
    """tok_model's segments of small steps make the run one PGD call of the same length
    makes (full-batch SGD has no state), and the steps stop at the first solved check."""
    import dataclasses

    from mechinterp_icr.experiments.ir.ir8 import tok_model, tok_pgd
    from mechinterp_icr.experiments.ir.train import tagged_rng
    from mechinterp_icr.models.ir import build_ir_hooked
    from mechinterp_icr.training.pgd import pgd_hooked

    cfg = apply_overrides(profile("quick"), ["hooked.n=8", "token_model.N=16",
                                             "token_model.steps=6",
                                             "token_model.check_every=2", "token_model.eval=64"])
    model, task, _, checks = tok_model(cfg, 1)
    done = checks[-1][0]
    assert [c[0] for c in checks] == list(range(2, done + 1, 2))
    assert all(a < 0.99 for _, a in checks[:-1])  # it stopped at the first solved check
    assert done == 6 or checks[-1][1] >= 0.99
    one = build_ir_hooked(task, model_spec(cfg), seed=1)
    train = task.sample(tagged_rng(1, "ir8-train", cfg.hooked.n), cfg.token_model.N)
    pgd_hooked(one, train, dataclasses.replace(tok_pgd(cfg), steps=done), None, 1)
    for (k, p), q in zip(model.named_parameters(), one.parameters()):
        assert torch.allclose(p, q, atol=1e-6), k


def test_token_dependent_model_is_trained_and_scored():
    from mechinterp_icr.experiments.ir.ir8 import hooked_row_test, tok_metrics, tok_model

    cfg = apply_overrides(profile("quick"), ["hooked.n=8", "token_model.N=16",
                                             "token_model.steps=3",
                                             "token_model.eval=64", "induction.probes=8"])
    model, task, ev, checks = tok_model(cfg, 0)
    assert checks[-1][0] <= 3 and all(0 <= a <= 1 for _, a in checks)
    W_Q0 = model.blocks[0].attn.W_Q.detach().clone()
    from mechinterp_icr.models.ir import build_ir_hooked

    fresh = build_ir_hooked(task, model_spec(cfg), seed=0)
    # all of W_Q was trained (token block included), not only the position block
    assert not torch.equal(W_Q0, fresh.blocks[0].attn.W_Q)
    again, _, _, _ = tok_model(cfg, 0)  # the decision run is reproducible (perturbation: gelsd)
    for (k, p), q in zip(model.named_parameters(), again.parameters()):
        assert torch.equal(p, q), k
    a = hooked_row_test(model, ev)
    assert a["query_seen_before"] == 0.0  # an IR query never occurs earlier
    assert a["induction_row_step1_acc"] == max(a["offset_1_step1_acc"],
                                               a["offset_2_step1_acc"])
    m = tok_metrics(cfg, 0)
    assert m["solved"] == float(m["learned_row_step1_acc"] >= 0.99)
    assert -1 <= m["project"]["score_minus_baseline"] <= 1
    assert -1 <= m["transformer_lens"]["score_minus_baseline"] <= 1
    pat = m["mean_probe_pattern"]
    assert len(pat) == task.n_ctx - 1 and all(abs(sum(r) - 1) < 1e-4 for r in pat)


def test_ir5_and_ir8_figures_draw_both_arms_fits_and_both_heads():
    import math

    from helpers import build_ir5_seed

    from mechinterp_icr.experiments.ir.config import QUICK
    from mechinterp_icr.experiments.ir.ir5 import sample_complexity_table
    from mechinterp_icr.viz.ir5_figure import ir5_figure
    from mechinterp_icr.viz.ir_figures import probe_attention_figure

    per = {"0": build_ir5_seed(N_memory=lambda n: math.log(n)),
           "1": build_ir5_seed(N_learned=lambda n: None if n == 4096 else float(n))}
    table = sample_complexity_table(QUICK, per)  # the rows the summary stores
    row = next(r for r in table["rows"] if r["seed"] == "1" and r["n"] == 4096)
    assert row["N_learned"] is None and row["N_memory"] == 2.0
    assert set(row["N_by_q"]) == {"0.5", "0.3", "0.7", "0.9"}
    fig = ir5_figure(per)
    names = [t.name for t in fig.data]
    for label in ("memory (constructed)", "positive control (learned memory)"):
        assert f"{label}: seed mean, q = 0.5" in names
        assert f"{label}: seed mean, q = 0.9" in names
    assert any(n.startswith("slope s_poly = 0.311") for n in names)
    assert "slope 0.8 (the control's least growth)" in names
    # the censored learned N of seed 1 at n = 4096 is drawn as an x at its largest N
    marks = next(t for t in fig.data if t.name.startswith("positive control (learned memory), "
                                                          "per seed") and "x" in t.marker.symbol)
    assert marks.y[-1] == 8192
    pat = [[1.0 if j == max(0, t - 2) else 0.0 for j in range(6)] for t in range(6)]
    uni = [[1.0 / (t + 1) if j <= t else 0.0 for j in range(6)] for t in range(6)]
    ir8 = {"0": {"token_dependent": {"mean_probe_pattern": uni, "probe_shape": [0, 3],
                                     "project": {"score_minus_baseline": -0.01}},
                 "control": {"mean_probe_pattern": pat, "layer": 1,
                             "project": {"score_minus_baseline": 0.8}}}}
    fig = probe_attention_figure(ir8, ["0"])
    assert sum(t.type == "heatmap" for t in fig.data) == 2
    assert "-0.010" in fig.layout.annotations[0].text and "0.800" in \
        fig.layout.annotations[1].text
    assert probe_attention_figure({}, ["0"]) is None


def test_what_the_prefix_matching_score_gives_fixed_offset_heads():
    """What (b) can and cannot tell on the registered probes (periods 3 and 4, PROBE_SHAPES):
    heads attending a fixed 1, 3 or 4 tokens back score at most 0.1 above the uniform
    baseline, but a head attending two tokens back scores above even the induction-head
    control's 0.5 bar (on the period-3 probes that offset is the induction target). So (b)
    alone cannot tell an induction head from a fixed-offset one; IR-8's (a) tests the
    fixed-offset rows directly (docs/ir.md)."""
    from mechinterp_icr.experiments.ir.controls import induction_probes, prefix_matching_score

    L = 6  # the IR context (K = 2) minus one, as IR-8 scores
    toks = induction_probes(L, 40, 96, seed=0)
    scores = {}
    for off in (1, 2, 3, 4):
        pat = torch.zeros(len(toks), L, L)
        for t in range(L):
            pat[:, t, max(0, t - off)] = 1.0
        scores[off] = prefix_matching_score(pat, toks)["score_minus_baseline"]
    assert max(scores[1], scores[3], scores[4]) <= 0.1
    assert scores[2] >= 0.5


def test_the_ir8_heatmap_draws_a_seed_the_rule_reads():
    """A seed whose token-dependent model does not solve the task is not read by IR-8's rule
    (claims.derive.ir8_unreadable): the heatmap draws the first solved seed, the title's score
    range is over the solved seeds, and the caption names the unsolved one."""
    from mechinterp_icr.viz.ir_figures import probe_attention_figure

    uni = [[1.0 / (t + 1) if j <= t else 0.0 for j in range(6)] for t in range(6)]
    pat = [[1.0 if j == max(0, t - 2) else 0.0 for j in range(6)] for t in range(6)]

    def seed(solved, score, fill):
        return {"token_dependent": {"mean_probe_pattern": [[fill] * 6] * 6 if fill else uni,
                                    "probe_shape": [0, 3], "solved": solved,
                                    "query_seen_before": 0.0,
                                    "project": {"score_minus_baseline": score}},
                "control": {"mean_probe_pattern": pat, "layer": 1,
                            "project": {"score_minus_baseline": 0.8}}}

    ir8 = {"0": seed(0.0, 0.5, 0.9), "1": seed(1.0, -0.02, None), "2": seed(1.0, 0.01, None)}
    fig = probe_attention_figure(ir8, ["0", "1", "2"])
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert [list(r) for r in heat[0].z] == uni  # seed 1's pattern, not the unsolved seed 0's
    assert "-0.020..0.010" in fig.layout.annotations[0].text
    assert "seed 1 of the claim's" in fig.layout.title.text
    assert "not read by the rule: seed 0 (the token-dependent model does not solve the " \
        "task)" in fig.layout.title.text
    ir8["1"]["token_dependent"]["query_seen_before"] = 0.2  # solved, but not read either
    fig = probe_attention_figure(ir8, ["0", "1", "2"])
    assert "seed 2 of the claim's" in fig.layout.title.text
    assert "0.010..0.010" in fig.layout.annotations[0].text
