"""Each rule's registered machine noise (SPEC 0, "robust to the machine"): how far the number a
rule's seed rule compares moves when the same code and seeds run under another float rounding.

Measured once on the published pair (``figures/summary.json``, the decision run, against
``figures/rerun/summary.json``, its rerun under another kernel setting) with
``icr compare figures figures/rerun --noise`` (:func:`mechinterp_icr.claims.rerun.
machine_noise`): per seed for a rule on a tail of the seeds (every seed, a fraction: the
largest per-seed difference), of the statistic itself for a mean or pooled rule. A rule whose
noise is more than half its margin to the threshold in the decision run may not rest on a
tail statistic (docs/registry.md, change log); ``docs/claims.md`` lists every value.

Keys: the claim id as ``summary.json`` names it (a variant such as ``CR-2 (shared tokens)``
has its own noise) -> ``"condition METRIC"`` or ``"control NAME"`` -> noise. Rules a run could
not read on both sides (CR-8's, whose claim is not measurable in the default task) have no
entry.
"""

from __future__ import annotations

__all__ = ["MACHINE_NOISE", "MEASURED"]

# what the values below were measured on (a dated change-log entry in docs/registry.md)
MEASURED = ("2026-12-06 on the published pair: figures/ (the decision run; CR at b6d571f, "
            "its uninf-demos jobs and IR at cac71ac, natively on a 2-core AVX512 machine) "
            "against figures/rerun/ (the same code "
            "and seeds at dea8309 under avx2 rounding, on an AVX2-only machine, whose native "
            "kernels these are); differences below 1e-9 are written 0")

MACHINE_NOISE: dict[str, dict[str, float]] = {
    'CR-1': {
        'condition pt_typed_recall': 0.0,
        'condition heldout_icl_type_over_bound': 0.00586,
        'control ICL-finetuned model': 0.00928,
    },
    'CR-1 (shared tokens)': {
        'condition pt_typed_recall': 0.00293,
        'condition heldout_icl_type_over_bound': 0.00713,
        'control ICL-finetuned model': 0.0229,
    },
    'CR-2': {
        'condition heldout_icl_exact': 0.0,
        'condition mean_curve_max_drop_over_k': 0.0042,
        'control PT-only model': 0.0713,
        'control finetuned on mixed-type demos': 0.0308,
    },
    'CR-2 (shared tokens)': {
        'condition heldout_icl_exact': 0.00469,
        'condition mean_curve_max_drop_over_k': 0.0121,
        'control PT-only model': 0.0337,
        'control finetuned on mixed-type demos': 0.0264,
    },
    'CR-3': {
        'condition heldout_icl_exact': 0.00361,
        'control ICL+Grm finetuned on mixed-type demos': 0.0366,
    },
    'CR-3 (shared tokens)': {
        'condition heldout_icl_exact': 0.00488,
        'control ICL+Grm finetuned on mixed-type demos': 0.021,
    },
    'CR-4': {
        'condition ft_acc_pc': 0.00333,
        'condition ft_transfer_acc_pc': 0.01,
        'condition ft_patch_gain': 0.00466,
        'control PT-only probe': 0.0467,
        'control PT-only patch': 0.0467,
        'control label shuffle (distance from chance)': 0.00208,
        'control norm-matched random vector patch': 0.000664,
    },
    'CR-4 (shared tokens)': {
        'condition ft_acc_pc': 0.0333,
        'condition ft_transfer_acc_pc': 0.0266,
        'condition ft_patch_gain': 0.00602,
        'control PT-only probe': 0.03,
        'control PT-only patch': 0.0767,
        'control label shuffle (distance from chance)': 0.0026,
        'control norm-matched random vector patch': 0.00332,
    },
    'CR-5': {
        'condition relation_role': 0.0,
        'condition subject_role': 0.0,
        'condition relation_margin': 0.0,
        'condition subject_margin': 0.0,
        'condition distinct_heads': 0.0,
        ('control Subject head patched from other demo subjects, same query '
         'subject (pooled over seeds)'): 0.0,
        ('control Subject head patched from other demo subjects, same query '
         'subject (every seed)'): 0.0,
        'control role code on the ICL construction (Relation)': 0.0,
        'control role code on the ICL construction (Subject)': 0.0,
    },
    'CR-6': {
        'condition own_format_min': 0.0,
        'condition pt_construction_icl_heldout_exact': 0.0,
        'control ICL construction with the Relation OV zeroed': 0.0,
    },
    'CR-7': {
        'condition ov_preset_kq_speedup_lr_3e-3': 0.0,
        'condition ov_preset_kq_speedup_lr_6e-3': 0.0,
        'condition ov_frozen_kq_speedup_lr_3e-3': 0.00883,
        'condition ov_frozen_kq_speedup_lr_6e-3': 0.0,
        'condition kq_preset_ov_speedup_lr_3e-3': 0.0,
        'condition kq_preset_ov_speedup_lr_6e-3': 0.0,
        'condition kq_frozen_ov_speedup_lr_3e-3': 0.0,
        'condition kq_frozen_ov_speedup_lr_6e-3': 0.0,
        'control placebo: OV-first synthetic schedule read as OV first': 0.0,
        'control placebo: KQ-first synthetic schedule read as KQ first': 0.0,
        'control placebo: simultaneous schedule read as OV first': 0.0,
        'control placebo: KQ one checkpoint ahead read as OV first': 0.0,
        'control placebo, shapes swapped: OV-first schedule read as OV first': 0.0,
        'control placebo, shapes swapped: KQ-first schedule read as KQ first': 0.0,
        ('control placebo: same start, OV linear and KQ convex, read as OV '
         'first at every onset fraction'): 0.0,
        'control placebo arms, one-way cascade: OV preset: KQ at least twice as fast': 0.0,
        ('control placebo arms, one-way cascade: OV frozen: KQ at least twice as late, '
         'or never'): 0.0,
        'control placebo arms, one-way cascade: KQ preset: OV not sped up twice': 0.0,
        'control placebo arms, one-way cascade: KQ frozen: OV not delayed twice': 0.0,
        'control placebo arms, mutual coupling: passes both (iv) and (v)': 0.0,
    },
    'CR-8': {
        'condition paired_partial_eta2_rise_k': 0.085,
        'control PT-only model paired against the mixed-type finetune: rise over K': 0.0088,
    },
    'CR-8 (shared tokens)': {
        'condition paired_partial_eta2_rho_k': 0.0,
        'condition paired_partial_eta2_rise_k': 0.033,
        'condition ft_exact_rise_k': 0.000667,
        'control PT-only model paired against the mixed-type finetune: rise over K': 0.0171,
    },
    'CR-9': {
        'condition ft_rise_from_lam_s': 0.0185,
        'condition ft_rise_from_lam_s_lo95': 0.00461,
        'condition mean_curve_drop_over_tol_lam': 0.0185,
        'control mixed-type ICL finetune: eta^2 rise from lam_s': 0.000449,
    },
    'IR-1': {
        'condition memory_acc': 0.0,
        'control memory with shuffled triples': 0.0,
    },
    'IR-2': {
        'condition step1_argmax_acc': 0.0,
        'condition step1_expected_acc': 0.0,
        'condition swap_expected_acc': 0.0,
        'condition step2_expected_acc': 0.0,
        'control saddle (after the large step and the perturbation)': 0.0,
        ('control zero sequences from the hand-set uniform-context rows (counts '
         'where it meets the other conditions without swaps)'): 0.0,
    },
    'IR-3': {
        'condition within_pair_gap': 0.0,
        'condition pair_mass_diff': 0.0,
        'condition mass_s3': 0.0,
        'condition ir2_met': 0.0,
        'control right after the large step': 0.0,
    },
    'IR-4': {
        'condition saddle_tie_dev_sym': 0.0,
        'condition saddle_tie_dev_raw': 0.0,
        'condition pgd_escaped': 0.0,
        'control single-pair-confusing data, p_swap = 0 (must not tie)': 0.0,
    },
    'IR-5': {
        'condition slope_minus_s_poly': 0.000124,
        'condition mean_slope_hi95_minus_s_poly': 3.34e-05,
        'condition memory_reached_at_n_max': 0.0,
        ('control learned memory (writes the triples its finetuning sequences '
         'show; same n, d, data and budgets): slope of log N on log n >= 0.8'): 0.0,
        'control learned memory: N reached at >= 4 measurable n': 0.0,
        'control zero sequences reach the target at some n': 0.0,
        'control the gain P(n) - z(n) is below 0.3 at some n': 0.0,
    },
    'IR-6': {
        'condition within_pair_gap': 2.04e-06,
        'condition pair_mass_diff': 4.06e-06,
        'condition mass_s3': 5.78e-07,
        'condition ir2_met': 0.0,
        "control constructed memory, same n, data and steps (meets IR-3's rows)": 0.0,
        'control pretrained model right after the large step (pair masses differ)': 1.72e-06,
    },
    'IR-7': {
        'condition within_pair_gap': 0.0,
        'condition mass_s3': 0.0,
        'condition solved': 0.0,
        ('control right after the large step (reaches the swap bound on 3-cycle '
         'swap-confusing sequences)'): 0.0,
    },
    'IR-8': {
        'condition tok_head_score_minus_baseline': 4.16e-09,
        'control induction-head model, project score minus baseline': 0.00615,
        'control induction-head model, TransformerLens head_detector minus baseline': 0.0106,
    },
    'IR-9': {
        'condition ir9_final_gap': 0.0,
        'control the same start at learning rate 0 (the gap must stay >= 0.04)': 0.0,
        ('control placebo: a synthetic gap decaying from the start gap to 0 is '
         'read as converged'): 0.0,
        'control placebo: a synthetic gap flat at the start gap is read as converged': 0.0,
    },
}
