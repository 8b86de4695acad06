"""Registered IR claims (SPEC section 2). Thresholds are SPEC's; metric names are the keys the
IR experiment writes per seed (``experiments/ir/claims.py``). ``hyperparameters`` are the
``IRConfig`` keys (dotted for a section) each verdict depends on, with their registered
values (identical in the quick and paper profiles; ``profile_specific`` names what may differ).
Changes: dated entries in docs/registry.md, heading "IR-1..IR-9"."""

from __future__ import annotations

from typing import Any

from mechinterp_icr.claims.derive import ir8_unreadable, ir9_unreadable
from mechinterp_icr.claims.ir5_rule import (
    IR5_GRID_KEYS,
    IR5_TABLE,
    ir5_derive,
    ir5_table,
    ir5_unreadable,
)
from mechinterp_icr.claims.protocol import SIGNED_UNIT, UNIT, ClaimSpec, Condition
from mechinterp_icr.claims.protocol import condition as _c
from mechinterp_icr.claims.protocol import negative as _neg
from mechinterp_icr.claims.protocol import positive as _pos

__all__ = ["IR4_PERTURBATION_ROLE", "IR5", "IR5_SLOPE", "ir5_rule_kwargs", "IR8_SOLVED",
           "IR_ANALYSIS_CONSTANTS", "IR_METRIC_RANGES", "IR_SPECS", "STOP_TOL_FACTORS"]

# Analysis constants an IR verdict reads that are not config keys (SPEC 0): IR-8's
# induction-style offsets, probe shapes and the probes TransformerLens scores; the grid of the
# ideal-row ceiling (IR-2's and IR-5's targets); the d(n) selection rule of IR-5.
# tests/unit/test_registry.py pins each to the module constant the code uses.
IR_ANALYSIS_CONSTANTS = {
    "experiments.ir.ir8.OFFSETS": (1, 2),
    "experiments.ir.controls.PROBE_SHAPES": ((0, 3), (0, 4), (1, 3)),
    "experiments.ir.controls.TL_SCORE_PROBES": 64,
    "experiments.ir.train.CEILING_A_RANGE": (0.17, 0.33),
    "experiments.ir.train.CEILING_GRID": 17,
    "experiments.ir.train.CEILING_GRID_EXPECTED": 9,
    "experiments.ir.ir5_dn.DN_STEP": 16,
    "experiments.ir.ir5_dn.DN_MIN": 0.995,
    "experiments.ir.ir5_dn.DN_SELECTION_SEEDS": tuple(range(100, 110)),
    "experiments.ir.ir9.START_GAP": 0.05,
}


# what every verdict depends on: the task (knowledge base included: kb_single -1 = R(R-1)/2
# planted single-pair collisions, n_answers 0 = n) and the memory (theta_rel 0 = 2/(3K));
# the derived values are pinned by tests/unit/test_claims_ir.py
_TASK = {"R": 6, "p_single": 0.25, "p_swap": 0.25, "temperature": 0.02, "lam2": 10.0,
         "theta_ans": 1.1, "gate": 10.0, "theta_rel": 0.0, "kb_single": -1,
         "kb_swap_frac": 0.5, "n_answers": 0}
_PGD = {"big_lr": 1.0, "sigma": 0.01, "lr": 0.05, "steps": 200, "stop_every": 100,
        "stop_tol": 0.0005, "stop_max": 1000}
# evaluation sizes: the same in every profile (SPEC 0); a final state's accuracies are read on
# final_eval sequences (argmax >= 0.999 = at most 10 errors), the trajectory on eval_size
_EVAL = {"eval_size": 1000, "final_eval": 10000, "escape_eval": 300, "escape_at": 0.9}
_MAIN = {"n": 512, "N": 256, **_TASK, **_PGD, **_EVAL}


def _section(name: str, **values) -> dict:
    """Registered keys of one IRConfig section: ``name.key`` -> value."""
    return {f"{name}.{k}": v for k, v in values.items()}


# IR-4's second half (SPEC 2): plain GD takes >= 2x PGD's escape steps on eps-asymmetric data
# on >= 4 of 5 seeds -> "shown", otherwise "not tested"; not part of the rule (SPEC allows the
# half to be reported as not tested), so it is registered here and read by
# experiments/ir/claims.py:perturbation_role.
IR4_PERTURBATION_ROLE = Condition("gd_over_pgd_escape_eps", ">=", 2.0, "fraction", 0.8,
                                  "GD/PGD escape steps on eps-asymmetric data")

# IR-8 is decided only on a token-dependent model that solves the task: its step-1 argmax on
# token_model.eval fresh sequences, after the whole registered budget (no early stop: a run
# stopped at validation >= 0.99 and then tested against 0.99 centres the test on its own bar,
# SPEC 0), meets this; otherwise IR-8 is inconclusive (claims.derive.ir8_unreadable). A
# condition of the model, not of the claim: not part of the rule.
IR8_SOLVED = Condition("tok_learned_row_step1_acc", ">=", 0.99, text="solved")

# IR-5 (revised 2026-12-05; SPEC 2): the registered settings, and the rule's keyword arguments
# (claims/ir5_rule.py) read from them
IR5 = {**_TASK, "big_lr": 1.0, "sigma": 0.01, "lr": 0.05,
       **_section("sample_complexity",
                  n=(128, 256, 512, 1024, 2048, 4096),
                  d_n=(128, 256, 512, 1024, 2048, 4096),
                  d=(96, 80, 80, 80, 64, 80),
                  Ns=(1, 2, 4, 8, 16, 32, 64, 128, 256), runs=8, plateau_runs=16,
                  learned_runs=4, learned_N_max=8192, learned_fit_max=1024,
                  steps=50, eval=300, retrieval_min=0.99, retrieval_triples=4096,
                  q=0.5, conventions=(0.3, 0.7, 0.9), plateau_flat=0.02, plateau_min=0.95)}


# IR-5's per-seed slope condition (the spec below uses it; the rule reads its bar to decide a
# seed on the slope's best case where some n cannot be read, claims/ir5_rule.py)
IR5_SLOPE = _c("slope_minus_s_poly", "<=", 0.0, text="slope of log N(n) on log n minus s_poly")


def ir5_rule_kwargs() -> dict[str, Any]:
    """The registered keyword arguments of :func:`..ir5_rule.ir5_seed` (the plateau bars, the
    retrieval precondition, the slope condition's bar and the registered grid), read from
    :data:`IR5` and :data:`IR5_SLOPE`."""
    return {"flat": IR5["sample_complexity.plateau_flat"],
            "min_frac": IR5["sample_complexity.plateau_min"],
            "retrieval_min": IR5["sample_complexity.retrieval_min"],
            "slope_bar": IR5_SLOPE.threshold,
            "grid": {k: IR5[f"sample_complexity.{k}"] for k in IR5_GRID_KEYS}}


# IR-3 / IR-6 / IR-7: the within-pair gap is also reported with the stopping rule's tolerance
# stop_tol times these factors (the nearby conventions a reader would try; SPEC 0), and the
# report says where a verdict flips (experiments/ir/conventions.py). Not part of any rule.
STOP_TOL_FACTORS = (0.5, 1.0, 2.0)

IR_SPECS = (
    ClaimSpec(
        "IR-1",
        "The constructed memory retrieves every triple in both directions used (s,a -> r up to "
        "ties; s,r -> a) with accuracy 1.0; the step-1 ceiling of the hand-set rows reported.",
        conditions=(_c("memory_acc", ">=", 1.0),),
        controls=(_neg("memory with shuffled triples", "shuffled_memory_acc", ">", 0.1),),
        hyperparameters={"n": 512, **_TASK, "eval_size": 1000},
    ),
    ClaimSpec(
        "IR-2",
        "After PGD finetuning, on fresh sequences: argmax step-1 accuracy >= 0.999, expected "
        "step-1 accuracy >= 0.98 overall and >= 0.90 on swap-confusing sequences, step-2 "
        "expected accuracy >= 0.99.",
        conditions=(
            _c("step1_argmax_acc", ">=", 0.999, text="argmax step 1"),
            _c("step1_expected_acc", ">=", 0.98, text="expected step 1"),
            _c("swap_expected_acc", ">=", 0.90, text="expected step 1, swap-confusing"),
            _c("step2_expected_acc", ">=", 0.99, text="expected step 2"),
        ),
        controls=(_neg("saddle (after the large step and the perturbation)",
                       "saddle_swap_expected_acc", ">=", 0.90),
                  _neg("zero sequences from the hand-set uniform-context rows (counts where it "
                       "meets the other conditions without swaps)",
                       "zero_data_swap_expected_acc", ">=", 0.90)),
        hyperparameters=_MAIN,
    ),
    ClaimSpec(
        "IR-3",
        "The step-1 row over (s1,a1,s2,a2,s3) reaches (a,a,1/2-a,1/2-a,0) from the registered "
        "start: within-pair gap <= 0.02, pair masses differ by >= 0.05, mass on s3 <= 0.02, "
        "with IR-2 met. The start is uniform (gap 0) and the gap right after the large step is "
        "already 0.003-0.015: as measured, the pairs separate while each pair stays equal; "
        "whether equality attracts (the paper's 'converges') is IR-9's question, not tested "
        "here.",
        conditions=(
            _c("within_pair_gap", "<=", 0.02, text="within-pair gap"),
            _c("pair_mass_diff", ">=", 0.05, text="pair masses differ"),
            _c("mass_s3", "<=", 0.02, text="mass on s3"),
            _c("ir2_met", ">=", 1.0, text="IR-2 met"),
        ),
        controls=(_neg("right after the large step", "large_step_pair_mass_diff", ">=",
                       0.05),),
        hyperparameters={**_MAIN, "gap_n": (64, 128, 256, 512, 1024),
                         "sample_complexity.eval": 300},
    ),
    ClaimSpec(
        "IR-4",
        "Right after the large step swap-confusing sequences tie (P(r*) within 0.5 +- 0.02) on "
        "pair-symmetric and raw data; PGD escapes (swap expected accuracy >= 0.9) within the "
        "budget. The perturbation's role (plain GD >= 2x PGD's escape steps on eps-asymmetric "
        "data on >= 4 of 5 seeds) is reported as shown or 'not tested' (SPEC 2).",
        conditions=(
            _c("saddle_tie_dev_sym", "<=", 0.02, text="tie on pair-symmetric data"),
            _c("saddle_tie_dev_raw", "<=", 0.02, text="tie on raw data"),
            _c("pgd_escaped", ">=", 1.0, text="PGD escapes within the budget"),
        ),
        controls=(_neg("single-pair-confusing data, p_swap = 0 (must not tie)",
                       "no_swap_tie_dev", "<=", 0.02),),
        hyperparameters={**_MAIN, "gd_sym_steps": 400, "eps_asym": 0.02},
    ),
    ClaimSpec(
        "IR-5",
        "Sample complexity is an upper bound: on random embeddings of the registered width "
        "d(n) < n, the number of finetuning sequences N(n) at which the memory arm gets half "
        "its gain (from zero data to its plateau) grows at most like (log n)^2: on every seed "
        "the slope of log N on log n is <= s_poly (the slope of (log n)^2 over the n range) and "
        "the seed-mean slope's upper 95% bound is too; N reached at n_max on every seed. "
        "Decided against a learned memory that must show linear growth (positive control).",
        conditions=(
            IR5_SLOPE,
            _c("mean_slope_hi95_minus_s_poly", "<=", 0.0, rule="pooled",
               text="upper 95% bound of the seed-mean slope minus s_poly"),
            _c("memory_reached_at_n_max", ">=", 1.0, text="N reached at n_max"),
        ),
        controls=(_pos("learned memory (writes the triples its finetuning sequences show; same "
                       "n, d, data and budgets): slope of log N on log n >= 0.8",
                       "learned_slope", ">=", 0.8),
                  _pos("learned memory: N reached at >= 4 measurable n",
                       "learned_uncensored_n", ">=", 4.0),
                  _neg("zero sequences reach the target at some n", "zero_data_reaches", ">=",
                       1.0),
                  _neg("the gain P(n) - z(n) is below 0.3 at some n", "min_gain", "<", 0.3)),
        hyperparameters=IR5,
        derive=lambda cid, per_seed: ir5_derive(cid, per_seed, IR5["sample_complexity.q"],
                                                IR5["sample_complexity.conventions"],
                                                **ir5_rule_kwargs()),
        unreadable=lambda cid, per_seed: ir5_unreadable(cid, per_seed,
                                                        IR5["sample_complexity.q"],
                                                        **ir5_rule_kwargs()),
        tables=lambda cid, per_seed: {IR5_TABLE: ir5_table(
            per_seed, IR5["sample_complexity.q"], IR5["sample_complexity.conventions"],
            **ir5_rule_kwargs())},
    ),
    ClaimSpec(
        "IR-6",
        "With a pretrained MLP, at the registered n, the pairwise pattern still appears (gap "
        "<= 0.02, pair masses differ >= 0.05, s3 <= 0.05) with IR-2's accuracies.",
        conditions=(
            _c("within_pair_gap", "<=", 0.02, text="within-pair gap"),
            _c("pair_mass_diff", ">=", 0.05, text="pair masses differ"),
            _c("mass_s3", "<=", 0.05, text="mass on s3"),
            _c("ir2_met", ">=", 1.0, text="IR-2 accuracies"),
        ),
        controls=(_pos("constructed memory, same n, data and steps (meets IR-3's rows)",
                       "constructed_rows_met", ">=", 1.0),
                  _neg("pretrained model right after the large step (pair masses differ)",
                       "large_step_pair_mass_diff", ">=", 0.05)),
        hyperparameters={**_TASK, "big_lr": 1.0, "sigma": 0.01,
                         **_section("pretrained", n=256, steps=600, N=256, ft_steps=1000,
                                    ft_lr=0.25, lr=3e-3, batch=512, hidden=0, jitter=0.0),
                         "eval_size": 1000,
                         "final_eval": 10000},
    ),
    ClaimSpec(
        "IR-7",
        "With K = 3 in-context pairs at the registered N: within each pair gap <= 0.02, s3 "
        "<= 0.02, the task solved, every seed.",
        conditions=(
            _c("within_pair_gap", "<=", 0.02, text="within-pair gap"),
            _c("mass_s3", "<=", 0.02, text="mass on s3"),
            _c("solved", ">=", 1.0, text="task solved"),
        ),
        controls=(_neg("right after the large step (reaches the swap bound on 3-cycle "
                       "swap-confusing sequences)", "large_step_swap_expected_acc", ">=",
                       0.90),),
        hyperparameters={**_TASK, **_PGD, **_section("three_pairs", n=512, N=1024), **_EVAL},
    ),
    ClaimSpec(
        "IR-8",
        "The learned head is not an induction head, decided on the "
        "token-dependent model (all of W_Q, W_K trainable, the same 1-layer model and data, "
        "finetuned by the registered PGD for its whole budget; it must solve the task, step-1 "
        "argmax >= 0.99 on 10,000 fresh sequences, else inconclusive): its baseline-subtracted "
        "prefix-matching score on repeated-token probes is <= 0.1, while an induction-head model "
        "scores >= 0.5 above the same baseline. Reported, labelled structural: an "
        "induction-style step-1 row's accuracy (a row on one token cannot solve a two-pair "
        "task, so it cannot fail) and the position-only model's numbers.",
        conditions=(
            _c("tok_head_score_minus_baseline", "<=", 0.1, text="baseline-subtracted score"),
        ),
        controls=(_pos("induction-head model, project score minus baseline",
                       "induction_model_score_minus_baseline", ">=", 0.5),
                  _pos("induction-head model, TransformerLens head_detector minus baseline",
                       "induction_model_tl_score_minus_baseline", ">=", 0.5)),
        hyperparameters={**_TASK, "sigma": 0.01,
                         **_section("hooked", n=32, attn_big_lr=1.0, attn_lr=0.05,
                                    attn_clip=1.0),
                         **_section("token_model", N=256, steps=300, check_every=100,
                                    eval=10000),
                         **_section("induction", steps=600, tokens=32, length=16, probes=256,
                                    min_period=2, max_period=6, d_model=64, lr=3e-3,
                                    batch=64)},
        unreadable=ir8_unreadable,
    ),
    ClaimSpec(
        "IR-9",
        "Within-pair equality is an attractor (not a claim of the paper: the test its "
        "\"converges\" would need): from the main run's state right after the large step with "
        "a within-pair offset imposed on the position block (step-1 within-pair gap 0.05), the "
        "registered small steps bring the gap to <= 0.02 by the end of the registered budget "
        "(stop_max small steps) on every seed.",
        conditions=(_c("ir9_final_gap", "<=", 0.02, text="within-pair gap after the budget"),),
        controls=(_neg("the same start at learning rate 0 (the gap must stay >= 0.04)",
                       "ir9_frozen_final_gap", "<", 0.04),
                  _pos("placebo: a synthetic gap decaying from the start gap to 0 is read as "
                       "converged", "ir9_placebo_decay_read", ">=", 1.0),
                  _neg("placebo: a synthetic gap flat at the start gap is read as converged",
                       "ir9_placebo_flat_read", ">=", 1.0)),
        hyperparameters={**_TASK, **_PGD, "n": 512, "N": 256, "eval_size": 1000},
        unreadable=ir9_unreadable,
    ),
)


# The declared range of every metric an IR condition or control reads (None: unbounded): an
# interval over seeds is reported inside it (docs/registry.md, change log); no verdict reads
# an interval. Gaps, masses and |P(r*) - 1/2| are differences of attention masses or
# probabilities; *_met, solved, escaped, reaches, beats, sees are 0/1 per seed; R^2 of a
# least-squares fit with intercept. (Names no condition reads, e.g. IR-8's position-only
# induction_row_step1_acc, stay declared for summaries that still report them.)
IR_METRIC_RANGES: dict[str, tuple[float, float] | None] = {
    **dict.fromkeys(("memory_acc", "shuffled_memory_acc", "step1_argmax_acc",
                     "step1_expected_acc", "swap_expected_acc", "step2_expected_acc",
                     "saddle_swap_expected_acc", "zero_data_swap_expected_acc",
                     "within_pair_gap", "pair_mass_diff", "mass_s3", "ir2_met",
                     "large_step_pair_mass_diff", "saddle_tie_dev_sym", "saddle_tie_dev_raw",
                     "pgd_escaped", "no_swap_tie_dev", "memory_reached_at_n_max",
                     "zero_data_reaches", "constructed_rows_met", "solved",
                     "large_step_swap_expected_acc", "induction_row_step1_acc",
                     "learned_row_step1_acc", "tok_induction_row_step1_acc",
                     "tok_learned_row_step1_acc", "ir9_final_gap", "ir9_frozen_final_gap",
                     "ir9_placebo_decay_read", "ir9_placebo_flat_read"), UNIT),
    # attention scores minus their baseline
    **dict.fromkeys(("ir_head_score_minus_baseline", "ir_head_tl_score_minus_baseline",
                     "tok_head_score_minus_baseline", "tok_head_tl_score_minus_baseline",
                     "induction_model_score_minus_baseline",
                     "induction_model_tl_score_minus_baseline"), SIGNED_UNIT),
    # IR-5's gain (an accuracy difference); slopes of log N on log n; a count of sizes
    "min_gain": SIGNED_UNIT,
    **dict.fromkeys(("slope_minus_s_poly", "mean_slope_hi95_minus_s_poly", "learned_slope",
                     "learned_uncensored_n"), None),
    # GD/PGD escape steps
    "gd_over_pgd_escape_eps": None,
}
