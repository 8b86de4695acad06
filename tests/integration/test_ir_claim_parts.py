"""Parts of the IR claims that can be checked on tiny inputs: the IR-5 step-1 fast path, the
logistic crossing, the IR-1 shuffled-triple control, the IR-3 stopping rule, the IR-8 probes,
scores and induction task."""


import math

import numpy as np
import pytest
import torch

from mechinterp_icr.claims.ir5_rule import crossing, isotonic_fit
from mechinterp_icr.config import apply_overrides
from mechinterp_icr.experiments.ir import profile
from mechinterp_icr.experiments.ir.config import task_config
from mechinterp_icr.experiments.ir.controls import (
    induction_probes,
    induction_targets,
    prefix_matching_score,
)
from mechinterp_icr.experiments.ir.ir5 import step1_expected
from mechinterp_icr.experiments.ir.train import gap_stop_rule, tagged_rng
from mechinterp_icr.interp.ir_attention import ir_accuracy
from mechinterp_icr.models.ir import FastIR, IRModelSpec, memory_retrieval, token_embeddings
from mechinterp_icr.tasks.induction import InductionTaskConfig


def test_step1_expected_equals_the_full_fast_path():
    cfg = profile("quick")
    tk = task_config(cfg, 32).build(3)
    sp = IRModelSpec(embedding="random", d_embed=16)
    fast = FastIR(tk, sp, seed=3)
    with torch.no_grad():
        fast.B.copy_(torch.randn(tk.n_ctx, tk.n_ctx, dtype=torch.float64))
    ev = tk.sample(tagged_rng(3, "t"), 64)
    with torch.no_grad():
        ref = ir_accuracy(fast.cot_logits(ev.tokens), ev)["step1_prob"]
        assert step1_expected(fast, ev) == pytest.approx(ref, abs=1e-12)


def test_step1_model_follows_the_full_loss_on_step_1():
    """IR-5's Step1IR (constant step-2 block) gives the step-1 rows and expected accuracy of
    PGD on the full CoT loss at every step, for the full memory and a learned subset."""
    from mechinterp_icr.experiments.ir.ir5 import Step1IR, learned_memory, step1_logits
    from mechinterp_icr.training.pgd import PGDConfig, pgd_fast

    cfg = profile("quick")
    tk = task_config(cfg, 32).build(2)
    sp = IRModelSpec(embedding="random", d_embed=16)
    E = token_embeddings(tk, sp, 2)
    train, ev = tk.sample(tagged_rng(2, "tr"), 24), tk.sample(tagged_rng(2, "ev"), 64)
    pgd = PGDConfig(big_lr=1.0, sigma=0.01, lr=0.05, steps=6)
    for learned in (False, True):
        ref, new = FastIR(tk, sp, seed=2, E=E), Step1IR(tk, sp, seed=2, E=E)
        if learned:
            assert learned_memory(ref, train) == learned_memory(new, train) < 32 * 6
        with torch.no_grad():
            b1 = ref.cot_blocks(ev.tokens)[0]
            assert torch.allclose(step1_logits(new, ev.tokens), b1, rtol=1e-12, atol=1e-9)
        r1 = pgd_fast(ref, train, pgd, 7)
        r2 = pgd_fast(new, train, pgd, 7)
        for a, b in zip(r1, r2):
            assert a["row1"] == pytest.approx(b["row1"], abs=1e-10)
        with torch.no_grad():
            assert step1_expected(new, ev) == pytest.approx(step1_expected(ref, ev), abs=1e-10)


def test_isotonic_fit_pools_adjacent_violators():
    assert isotonic_fit([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]
    assert isotonic_fit([3, 2, 1]) == [2, 2, 2]
    assert isotonic_fit([0.1, 0.2]) == [0.1, 0.2]
    assert isotonic_fit([4, 1], [1, 3]) == [1.75, 1.75]


def test_crossing_reads_the_fitted_curve_not_one_lucky_run():
    # a plateau just under the target with runs scattered around it: single runs pass 0.921
    # at N = 4, 16 and 64, the fit does not
    plateau = {1: (0.816, 0.866), 2: (0.917, 0.871), 4: (0.922, 0.886), 8: (0.895, 0.876),
               16: (0.854, 0.926), 32: (0.918, 0.917), 64: (0.926, 0.927),
               256: (0.908, 0.914), 1024: (0.923, 0.918)}
    assert crossing({str(N): list(v) for N, v in plateau.items()}, 0.921) is None
    assert math.isnan(crossing({}, 0.5))  # nothing measured: no number, not censored


def test_shuffled_memory_fails_retrieval():
    cfg = profile("quick")
    tk = task_config(cfg, 64).build(0)
    sp = IRModelSpec()
    E = token_embeddings(tk, sp, 0)
    assert min(memory_retrieval(tk, sp, None, E).values()) == 1.0
    assert max(memory_retrieval(tk, sp, None, E, shuffle_seed=0).values()) <= 0.1
    part = memory_retrieval(tk, sp, None, E, max_triples=50)
    assert part["relation_acc"] == 1.0


def test_gap_stop_rule_stops_once_the_gap_stops_falling():
    cfg = apply_overrides(profile("quick"), ["steps=10", "stop_every=10", "stop_max=100",
                                             "stop_tol=0.01"])
    checks, stop = gap_stop_rule(cfg)
    assert min(checks) == 11 and max(checks) == 101
    row = lambda g: [0.25 + g, 0.25 - g, 0.25, 0.25, 0.0]  # noqa: E731
    assert not stop({"step": 11, "row1": row(0.2)})
    assert not stop({"step": 15, "row1": row(0.2)})
    assert not stop({"step": 21, "row1": row(0.1)})  # fell by 0.1
    assert stop({"step": 31, "row1": row(0.098)})  # gap 2g fell by 0.004 < 0.01
    # a gap still growing is not settled: the rule keeps the run going
    checks, stop = gap_stop_rule(cfg)
    assert not stop({"step": 11, "row1": row(0.01)})
    assert not stop({"step": 21, "row1": row(0.05)})  # grew by 0.08
    assert stop({"step": 31, "row1": row(0.052)})  # moved by 0.004 < 0.01


def test_run_fast_reads_the_final_accuracies_on_the_final_batch():
    from dataclasses import replace as _replace

    from mechinterp_icr.experiments.ir.config import model_spec, task_config
    from mechinterp_icr.experiments.ir.train import (
        FINAL_KEYS,
        batch_accuracy,
        final_batch,
        final_record,
        run_fast,
    )
    from mechinterp_icr.training.pgd import PGDConfig

    cfg = apply_overrides(profile("quick"), ["final_eval=300"])
    tk = task_config(cfg, 32).build(0)
    ev = tk.sample(tagged_rng(0, "eval", 32), 100)
    train = tk.sample(tagged_rng(0, "train", 32), 64)
    big = final_batch(cfg, tk, 0, "t")
    assert len(big.tokens) == 300
    pgd = PGDConfig(big_lr=1.0, sigma=0.01, lr=0.05, steps=5)
    fast, recs = run_fast(tk, model_spec(cfg), train, ev, pgd, 0, final_ev=big)
    last = final_record(recs)
    assert last["final_eval"] == 300 and last["step"] == 6
    # the final record holds the big batch's accuracies of the final state, the small batch's
    # are kept beside them
    acc_big, acc_ev = batch_accuracy(fast, big, chunk=128), batch_accuracy(fast, ev)
    assert set(FINAL_KEYS) <= set(acc_big)
    for k in acc_big:  # every accuracy from the big batch, none left from the small one
        assert last[k] == pytest.approx(acc_big[k], abs=1e-12)
    for k in acc_ev:
        assert last[f"ev_{k}"] == pytest.approx(acc_ev[k], abs=1e-12)
    assert not [k for k in last if k.startswith("step") and k not in acc_big
                and k not in ("step", "step2_mass_sq")]
    _, plain = run_fast(tk, model_spec(cfg), train, ev, _replace(pgd), 0)
    assert "final_eval" not in final_record(plain)


def test_induction_task_of_varying_period_and_offset():
    t = InductionTaskConfig(n_tokens=16, max_period=4, min_period=2, max_offset=3,
                            seq_len=12).build()
    b = t.sample(np.random.default_rng(0), 32)
    assert b.tokens.shape == (32, 13) and (b.tokens[:, 0] == 0).all()
    for tok, tg in zip(b.tokens, b.targets):
        for pos in torch.nonzero(tg >= 0).squeeze(-1).tolist():
            earlier = [j for j in range(1, pos) if tok[j] == tok[pos]]
            assert earlier and tok[earlier[-1] + 1] == tg[pos]  # induction solves it


def test_prefix_matching_score_of_perfect_and_uniform_heads():
    toks = induction_probes(6, 8, 12, 0)
    M = induction_targets(toks)
    L = toks.shape[1]
    uni = torch.tril(torch.ones(L, L, dtype=torch.float64))
    uni = (uni / uni.sum(-1, keepdim=True)).expand(len(toks), L, L)
    assert prefix_matching_score(uni, toks)["score_minus_baseline"] == pytest.approx(0)
    perfect = uni.clone()
    rows = M.sum(-1) > 0
    perfect[rows] = M[rows] / M[rows].sum(-1, keepdim=True)
    assert prefix_matching_score(perfect, toks)["score_minus_baseline"] > 0.7


# --------------------------------------------------------------------------------------------
# the metric-derivation functions: each control is wired to the record and the conditions the
# registry names (a control wired to the wrong state or conditions fails one of these)
# --------------------------------------------------------------------------------------------
def _rec(step, row, acc=1.0, prob=0.99, swap=0.95, step2=0.999, **kw):
    return {"step": step, "row1": list(row), "step1_acc": acc, "step1_prob": prob,
            "step1_prob_swap": swap, "step2_prob": step2, "step2_acc": 1.0,
            "swap_p": swap, "step2_mass_sq": 1.0, **kw}


UNIFORM_CTX = (0.25, 0.25, 0.25, 0.25, 0.0)
PAIRWISE = (0.2, 0.2, 0.3, 0.3, 0.0)


def test_k3_metrics_control_is_the_swap_bound_of_the_large_step():
    from mechinterp_icr.experiments.ir.stages import k3_metrics

    row3 = (1 / 6,) * 6 + (0.0,)
    # large step: uniform rows meet gap and s3 whatever happens, so the control is the swap
    # bound at the tie (0.5 < 0.90); the final state solves the swaps
    recs = [_rec(0, (1 / 7,) * 7), _rec(1, row3, swap=0.5), _rec(50, row3)]
    m = k3_metrics(recs)
    assert m["large_step_rows_met"] == 1.0 and m["large_step_swap_expected_acc"] == 0.5
    assert m["large_step_solved"] == 0.0
    assert m["rows_met"] == 1.0 and m["solved"] == 1.0 and m["small_steps"] == 49
    gap = (0.2, 0.1333, 1 / 6, 1 / 6, 1 / 6, 1 / 6, 0.0)
    m = k3_metrics([recs[0], _rec(1, gap), recs[2]])
    assert m["large_step_rows_met"] == 0.0  # gap 0.067 > 0.02
    assert m["large_step_swap_expected_acc"] == 0.95  # reaches the bound: the control fails
    # registered runs carry the large-step state's expected step 1 without swaps: the control
    # counts only where that state is confident there (as IR-2's zero-data control)
    conf = k3_metrics([recs[0], _rec(1, row3, swap=0.5, prob_noswap=0.999), recs[2]])
    assert conf["large_step_swap_expected_acc"] == 0.5
    assert conf["large_step_confident_without_swaps"] == 1.0
    unsure = k3_metrics([recs[0], _rec(1, row3, swap=0.5, prob_noswap=0.6), recs[2]])
    assert unsure["large_step_swap_expected_acc"] is None  # not measured: cannot hold
    assert unsure["large_step_swap_expected_acc_measured"] == 0.5
    assert unsure["large_step_confident_without_swaps"] == 0.0


def test_sample_complexity_per_seed_stores_the_runs_and_names_missing_or_doubled_rows():
    from mechinterp_icr.claims.ir5_rule import ir5_seed
    from mechinterp_icr.experiments.ir.ir5 import rule_kwargs, sample_complexity_per_seed

    cfg = apply_overrides(profile("quick"), ["sample_complexity.n=[32,64,128,256]",
                                             "sample_complexity.Ns=[1,2,4,8]",
                                             "sample_complexity.runs=1",
                                             "sample_complexity.plateau_runs=1",
                                             "sample_complexity.learned_runs=1"])
    acc = {"1": [0.5], "2": [0.8], "4": [0.9], "8": [0.9]}

    def row(n, arm):
        return {"seed": 0, "n": n, "arm": arm, "d_embed": n // 2, "z": 0.3 if arm == "memory"
                else 0.01, "acc": acc, "ceiling": 0.92, "retrieval": 1.0}

    rows = [row(n, arm) for n in cfg.sample_complexity.n for arm in ("memory", "learned")]
    m = sample_complexity_per_seed(cfg, rows, [0])["0"]
    assert set(m["ir5_by_n"]) == {"32", "64", "128", "256"}
    assert m["ir5_by_n"]["64"]["memory"] == {"z": 0.3, "acc": acc}
    assert ir5_seed(m, 0.5, **rule_kwargs(cfg))["unmeasurable"] == {}
    # a missing row and a doubled one: that n is not measurable, named
    m = sample_complexity_per_seed(cfg, rows[2:] + [row(128, "learned")], [0])["0"]
    got = ir5_seed(m, 0.5, **rule_kwargs(cfg))
    why, why_l = got["unmeasurable"], got["learned_unmeasurable"]
    assert set(why) == {"32"} and "not measured" in why["32"]  # the memory row missing
    assert set(why_l) == {"32", "128"}  # learned: missing at 32, doubled at 128


def test_learned_memory_holds_exactly_the_triples_its_data_show():
    from mechinterp_icr.experiments.ir.ir5 import learned_memory, seen_triples

    cfg = profile("quick")
    tk = task_config(cfg, 32).build(1)
    batch = tk.sample(tagged_rng(1, "t"), 20)
    idx = seen_triples(tk, batch)
    want = set()
    for row, tg in zip(batch.tokens.tolist(), batch.targets.tolist()):
        r = row[5] - 32
        for s in (row[0], row[2], row[4]):
            want.add(s * 6 + r)
        # every written triple is a fact the sequence shows: its answers and the step-2 target
        assert tk.kb.f[row[0], r] + 38 == row[1] and tk.kb.f[row[4], r] + 38 == tg[5]
    assert sorted(want) == idx.tolist()
    fast = FastIR(tk, IRModelSpec(embedding="random", d_embed=16), seed=1)
    assert learned_memory(fast, batch) == len(want)
    assert (fast.s_tok * 6 + fast.r_tok - 32).tolist() == idx.tolist()


def test_sample_complexity_rows_of_both_arms_on_a_tiny_sweep():
    from mechinterp_icr.experiments.ir.ir5 import sample_complexity_row

    cfg = apply_overrides(profile("quick"), [
        "sample_complexity.n=[16,32]", "sample_complexity.Ns=[1,4,8]", "sample_complexity.runs=2",
        "sample_complexity.plateau_runs=1", "sample_complexity.learned_runs=2",
        "sample_complexity.learned_N_max=4096", "sample_complexity.learned_fit_max=16",
        "sample_complexity.steps=3", "sample_complexity.eval=32"])
    mem = sample_complexity_row(cfg, 0, 32, "memory")
    lrn = sample_complexity_row(cfg, 0, 32, "learned")
    assert mem["d_embed"] == lrn["d_embed"] == 16 and mem["ceiling"] == lrn["ceiling"]
    assert "retrieval" in mem and "retrieval" not in lrn
    # runs per N: 2 below the plateau points, 1 at the two largest N
    assert {N: len(v) for N, v in mem["acc"].items()} == {"1": 2, "4": 1, "8": 1}
    # the learned arm starts with no unit (its zero-data accuracy is the model's with none: a
    # uniform output over the vocabulary) and ends its grid at the first N where every run
    # reaches its stopping target, long before learned_N_max
    assert lrn["z"] < 0.05 < mem["z"]
    Ns = [int(N) for N in lrn["acc"]]
    assert Ns == [2 ** k for k in range(len(Ns))] and Ns[-1] < 4096
    assert min(lrn["acc"][str(Ns[-1])]) >= lrn["stop_target"]
    assert all(min(v) < lrn["stop_target"] for N, v in lrn["acc"].items() if int(N) < Ns[-1])
    assert all(0 < u <= 3 * int(N) for N, us in lrn["units"].items() for u in us)
    with pytest.raises(ValueError, match="arm"):
        sample_complexity_row(cfg, 0, 32, "bogus")


def test_choose_d_takes_the_smallest_width_meeting_retrieval_on_every_seed():
    from mechinterp_icr.experiments.ir.ir5_dn import choose_d, main, retrieval_at

    cfg = profile("quick")
    res = choose_d(cfg, 64, seeds=(100, 101), dn_min=0.95)
    d = res["d"]
    assert d is not None and d < 64 and d % 16 == 0
    assert all(v >= 0.95 for v in res["per_seed"].values())
    below = [t for t in res["tried"] if t["d"] < d]
    assert all(not t["qualifies"] for t in below) and res["tried"][-1]["d"] == d
    assert retrieval_at(cfg, 64, d, 100)["retrieval"] == res["per_seed"]["100"]
    assert choose_d(cfg, 32, seeds=(100,), dn_min=1.0)["d"] is None  # nothing below n
    assert main(["--n", "64", "--seeds", "100", "--min", "0.95"]) == 1  # not registered


def _tiny_main():
    from mechinterp_icr.experiments.ir.stages import main_setting

    cfg = apply_overrides(profile("quick"), ["n=16", "eval_size=64", "escape_eval=16"])
    return cfg, main_setting(cfg, 0)


def test_pgd_vs_gd_metrics_wire_each_control_to_its_state():
    from mechinterp_icr.experiments.ir.stages import RUN_KINDS, pgd_vs_gd_metrics

    cfg, main = _tiny_main()
    runs = {}
    for d, a in RUN_KINDS:
        big = _rec(1, UNIFORM_CTX, swap=0.5 + (0.01 if d == "raw" else 0.0),
                   prob_noswap=0.97 if (d, a) == ("raw", "gd") else 0.5)
        runs[(d, a)] = (None, [_rec(0, (0.2,) * 5), big,
                               _rec(30, PAIRWISE, swap=0.95 if a == "pgd" else 0.6)])
    ir2, ir3, ir4 = pgd_vs_gd_metrics(cfg, runs, main, 0)
    assert ir2["saddle_swap_expected_acc"] == 0.51  # the raw PGD run right after the step
    assert ir2["swap_expected_acc"] == 0.95 and ir2["ir2_met"] == 1.0
    assert ir3["large_step_pair_mass_diff"] == pytest.approx(0.0)  # the large step's row
    assert ir3["pair_mass_diff"] == pytest.approx(0.2)  # the final row
    assert ir4["saddle_tie_dev_sym"] == pytest.approx(0.0)
    assert ir4["saddle_tie_dev_raw"] == pytest.approx(0.01)
    assert ir4["no_swap_tie_dev"] == pytest.approx(0.47)  # raw GD, single-confusing batch
    assert ir4["pgd_escaped"] == 1.0 and ir4["escape_raw_gd"] is None
    # the zero-data control counts only where it meets IR-2's other conditions
    counts, ns = ir2["zero_data_other_conditions_met"], ir2["zero_data_no_swap"]
    assert counts == float(ns["step1_expected_acc"] >= 0.98 and
                           ns["step2_expected_acc"] >= 0.99)
    assert (ir2["zero_data_swap_expected_acc"] is None) == (counts == 0.0)


def test_pretrained_metrics_control_and_comparator(monkeypatch):
    from mechinterp_icr.experiments.ir import stages

    cfg = profile("quick")
    pre_recs = [_rec(0, (0.2,) * 5), _rec(1, (0.24, 0.24, 0.26, 0.26, 0.0)),
                _rec(1000, PAIRWISE)]
    con_recs = [_rec(0, (0.2,) * 5), _rec(1, UNIFORM_CTX),
                _rec(1000, (0.25, 0.15, 0.3, 0.3, 0.0))]  # comparator: gap 0.1
    monkeypatch.setattr(stages, "pretrained_records",
                        lambda cfg, seed, pre, constructed=False: (con_recs if constructed
                                                                   else pre_recs))
    monkeypatch.setattr(stages, "memory_retrieval",
                        lambda *a, **k: {"relation_acc": 1.0, "answer_acc": 1.0})
    pre = stages.PretrainedSetting(None, None, None, None)
    m = stages.pretrained_metrics(cfg, 0, pre, [])
    assert m["within_pair_gap"] == pytest.approx(0.0) and m["ir2_met"] == 1.0
    assert m["large_step_pair_mass_diff"] == pytest.approx(0.04)  # pretrained, large step
    assert m["constructed_rows_met"] == 0.0  # the comparator's final gap 0.1 > 0.02
    assert m["constructed"]["within_pair_gap"] == pytest.approx(0.1)


def test_a_diverged_run_makes_its_row_not_measurable():
    """A run whose accuracy is not finite can neither create a crossing nor move N: its n is
    named as not measurable."""
    from helpers import build_ir5_seed

    from mechinterp_icr.claims.ir5_rule import ir5_seed

    m = build_ir5_seed()
    m["ir5_by_n"]["256"]["learned"]["acc"]["4"][1] = float("nan")
    got = ir5_seed(m, 0.5, flat=0.02, min_frac=0.95, retrieval_min=0.99)
    assert got["unmeasurable"] == {}  # the memory arm is still read
    assert list(got["learned_unmeasurable"]) == ["256"]
    assert "without a number" in got["learned_unmeasurable"]["256"]
    assert got["learned_slope"] != got["learned_slope"]  # its control: not measured
