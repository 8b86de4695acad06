"""Registered IR claims (SPEC section 2). Thresholds are SPEC's; metric names are the keys the
IR experiment writes per seed (``experiments/ir/claims.py``)."""

from __future__ import annotations

from mechinterp_icr.claims.protocol import ClaimSpec, Condition, ControlSpec

__all__ = ["IR_SPECS"]


def _c(metric, op, threshold, rule="every_seed", text="", min_fraction=1.0):
    return Condition(metric, op, threshold, rule, min_fraction, text)


def _neg(name, metric, op, threshold, rule="every_seed"):
    return ControlSpec(name, "negative", _c(metric, op, threshold, rule))


def _pos(name, metric, op, threshold, rule="every_seed"):
    return ControlSpec(name, "positive", _c(metric, op, threshold, rule))


IR_SPECS = (
    ClaimSpec(
        "IR-1",
        "The constructed memory retrieves every triple in both directions used (s,a -> r up to "
        "ties; s,r -> a) with accuracy 1.0; the step-1 ceiling of the hand-set rows reported.",
        conditions=(_c("memory_acc", ">=", 1.0),),
        controls=(_neg("memory with shuffled triples", "shuffled_memory_acc", ">", 0.1),),
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
                  _neg("trained on zero sequences", "zero_data_swap_expected_acc", ">=",
                       0.90)),
    ),
    ClaimSpec(
        "IR-3",
        "The step-1 row over (s1,a1,s2,a2,s3) converges to (a,a,1/2-a,1/2-a,0): within-pair "
        "gap <= 0.02, pair masses differ by >= 0.05, mass on s3 <= 0.02, with IR-2 met.",
        conditions=(
            _c("within_pair_gap", "<=", 0.02, text="within-pair gap"),
            _c("pair_mass_diff", ">=", 0.05, text="pair masses differ"),
            _c("mass_s3", "<=", 0.02, text="mass on s3"),
            _c("ir2_met", ">=", 1.0, text="IR-2 met"),
        ),
        controls=(_neg("right after the large step", "large_step_pair_mass_diff", ">=",
                       0.05),),
    ),
    ClaimSpec(
        "IR-4",
        "Right after the large step swap-confusing sequences tie (P(r*) within 0.5 +- 0.02) on "
        "pair-symmetric and raw data; PGD escapes (swap expected accuracy >= 0.9) within the "
        "budget; on slightly asymmetric pair-symmetric data plain GD takes >= 2x as many steps "
        "as PGD on at least 4 of 5 seeds.",
        conditions=(
            _c("saddle_tie_dev_sym", "<=", 0.02, text="tie on pair-symmetric data"),
            _c("saddle_tie_dev_raw", "<=", 0.02, text="tie on raw data"),
            _c("pgd_escaped", ">=", 1.0, text="PGD escapes within the budget"),
            _c("gd_over_pgd_escape_eps", ">=", 2.0, rule="fraction", min_fraction=0.8,
               text="GD/PGD escape steps on eps-asymmetric data"),
        ),
        controls=(_neg("data with p_swap = 0 (must not tie)", "no_swap_tie_dev", "<=", 0.02),),
    ),
    ClaimSpec(
        "IR-5",
        "Sample complexity on random embeddings (d(n) < n): N(n_max) > N(n_min), a polylog fit "
        "beats the linear one, and N(n_max)/N(n_min) <= (log n_max / log n_min)^2.",
        conditions=(
            _c("N_grows", ">=", 1.0, text="N(n_max) > N(n_min)"),
            _c("polylog_beats_linear", ">=", 1.0, text="polylog R^2 > linear R^2"),
            _c("growth_over_bound", "<=", 1.0,
               text="N(n_max)/N(n_min) over (log n_max/log n_min)^2"),
        ),
        controls=(_neg("zero sequences reach the target at some n", "zero_data_reaches", ">=",
                       1.0),),
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
        controls=(_neg("right after the large step (meets the row conditions)",
                       "large_step_rows_met", ">=", 1.0),),
    ),
    ClaimSpec(
        "IR-8",
        "The learned head is not an induction head: an induction-style row drops step-1 "
        "accuracy to <= 0.5 while the learned row gives >= 0.99, and its baseline-subtracted "
        "prefix-matching score is <= 0.1.",
        conditions=(
            _c("induction_row_step1_acc", "<=", 0.5, text="induction-style row"),
            _c("learned_row_step1_acc", ">=", 0.99, text="learned row"),
            _c("ir_head_score_minus_baseline", "<=", 0.1, text="baseline-subtracted score"),
        ),
        controls=(_pos("induction-head model, project score minus baseline",
                       "induction_model_score_minus_baseline", ">=", 0.5),
                  _pos("induction-head model, TransformerLens head_detector minus baseline",
                       "induction_model_tl_score_minus_baseline", ">=", 0.5)),
    ),
)
