"""CR-4, CR-8, CR-9: task vectors, linear probes and causal tests at one hook (SPEC section 1).

Given a CR run directory ``<out>/runs/cr/seed<N>/`` (phases ``pretrain``, ``ft-icl``, and,
when present, ``ft-iclgrm`` and ``ft-icl-mixed``), :func:`analyse_seed` measures at the last
checkpoint of each phase, at ONE hook fixed in advance: ``blocks.{n-1}.hook_resid_mid`` at the
query position (after the last attention layer, before the last MLP; never the final residual
stream, which is the model's own prediction):

- task vectors of held-out-subject ICL prompts (all types), at that hook and, for reference,
  at every layer boundary (the final residual stream included);
- the top-(L-1)-PC probe (PCA on the training split only, ``n_pc`` components) and the full
  probe on a by-prompt split fixed before fitting; accuracy on the test part, with the
  model's own output-type accuracy on the same prompts beside it;
- a by-subject split (held-out subjects halved; the two halves' prompts are generated apart);
- transfer: trained on finetune-subject prompts, tested on held-out-subject prompts;
- the additive causal patch (mean[l'] - mean[l] added at the hook of a type-l prompt) and
  its norm-matched random-vector control;
- **necessity** (:func:`_necessity`): the component in the span of the type-mean differences
  replaced by the training mean's, and the same on random subspaces (the control);
- label shuffle (mean over permutations), a probe on random directions (reported only),
  geometry (eta^2, silhouette, within/between cosine, participation);
- CR-8: eta^2, partial eta^2 (query subject removed), exact and output-type accuracy for
  every K (:func:`separation_vs_k`), also for the mixed-type finetune (the control);
- CR-9: PT + ICL finetune (and the mixed-type finetune, the control) at every lam of
  ``taskvec.lams``: the main run's config with only ``task.lam`` changed (the main lam is the
  main run itself), in ``<out>/runs/cr-taskvec/lam<lam>/seed<N>`` (:func:`lam_point`).

Sizes come from the ``taskvec`` section of the CR config (:class:`TaskvecConfig`). Everything
is a pure function of the seeds. The reproduction's jobs and the claims from their records
are in :mod:`.taskvec_stage`; the claims themselves in :mod:`.claims_taskvec`; the figures in
``viz.cr_figures``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig, check, check_choice
from mechinterp_icr.experiments.cr.config import TaskvecConfig
from mechinterp_icr.interp import probes as pr
from mechinterp_icr.interp import taskvec as tv
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.pipeline import load_run_model
from mechinterp_icr.store.io import atomic_write_json
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.loop import train_phase
from mechinterp_icr.viz.cr_figures import COLOR_BY, write_task_vector_views

__all__ = [
    "PHASE_FT",
    "PHASE_FT_GRM",
    "PHASE_PT",
    "analyse_checkpoint",
    "analyse_seed",
    "lam_point",
    "lam_run_config",
    "lam_sweep",
    "logit_lens_type",
    "orient_to_types",
    "pca_points",
    "probe_curve",
    "probe_run",
    "separation_vs_k",
    "train_lam_run",
]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"
SWEEP_TEST_FRACTION = 0.5  # the probe's test share of the K sweep's and lam runs' prompts
PHASE_FT_MIXED = "ft-icl-mixed"  # CR-8 / CR-9's negative control: no shared type in a prompt


def _rng_seed(seed: int, tag: int) -> int:
    return int(np.random.default_rng([int(seed), 0xC4, tag]).integers(2**31 - 1))


# --------------------------------------------------------------------------------------------
# One checkpoint
# --------------------------------------------------------------------------------------------
def _tvset(model, task, n, seed, tag, subjects, K=None, names=None):
    return tv.icl_task_vectors(model, task, n, K=K, subjects=subjects, seed=_rng_seed(seed, tag),
                               names=names)


def _subject_matrix(s: tv.TaskVectorSet) -> np.ndarray:
    return np.concatenate([s.query_subject[:, None], s.demo_subjects], 1)


def _patch(model, task, H: tv.TaskVectorSet, split: pr.Split, b: int, seed: int,
           scale: float, rows, mode: str = "add") -> dict[str, float]:
    """Add (mean[l'] - mean[l]) (means of the training prompts), or a random vector of that
    norm (``mode='random'``), at hook b of the query position of ``rows``; l' != l drawn per
    prompt. Success = the answer becomes a_{l'}(s_q)."""
    L = task.cfg.n_types
    Xtr, ytr = H.at(b)[split.train], H.types[split.train]
    means = np.stack([Xtr[ytr == l].mean(0) for l in range(L)])
    rng = np.random.default_rng([seed, 0x7A7])
    src = H.types[rows]
    tgt = (src + 1 + rng.integers(L - 1, size=len(rows))) % L
    tgt_ans = task.answer_id(H.query_subject[rows], tgt)
    toks = torch.as_tensor(H.tokens[rows])
    qp = torch.as_tensor(H.query_pos[rows])
    out = tv.transplant_accuracy(model, toks, qp, src, tgt, tgt_ans, means, H.layer_names[b],
                                 mode=mode, scale=scale, original_answers=H.answer[rows],
                                 random_seed=_rng_seed(seed, 0x2A))
    # chance correction (as CR-5's moved_gain): the unpatched model's hit rate on the same
    # targets, subtracted (a PT model that already emits a_{l'}(s_q) is not moved by a patch)
    out["unpatched_hit"] = float((H.pred[rows] == tgt_ans).mean())
    out["gain"] = out["transplant_success"] - out["unpatched_hit"]
    return out


def _patches(model, task, H: tv.TaskVectorSet, split: pr.Split, b: int, final: int,
             seed: int, tvc: TaskvecConfig) -> dict[str, Any]:
    """The additive causal patch at hook b, its norm-matched random-vector control, and (for
    reference) the same patch at the final residual stream (boundary ``final``), on the test
    prompts of ``split``."""
    te = split.test
    pa = _patch(model, task, H, split, b, seed, tvc.transplant_scale, te)
    pz = _patch(model, task, H, split, b, seed, tvc.transplant_scale, te, mode="random")
    pf = _patch(model, task, H, split, final, seed, tvc.transplant_scale, te)
    return {"patch_gain": pa["gain"], "patch_success": pa["transplant_success"],
            "patch_unpatched_hit": pa["unpatched_hit"],
            "patch_kept_original": pa["kept_original"],
            "random_patch_gain": pz["gain"],
            "random_patch_success": pz["transplant_success"],
            "random_patch_kept_original": pz["kept_original"],
            "final_patch_gain": pf["gain"],
            "final_patch_success": pf["transplant_success"],
            "patch_chance": 1.0 / (task.cfg.n_types * task.cfg.n_values)}


def _necessity(model, task, H: tv.TaskVectorSet, split: pr.Split, b: int, seed: int,
               tvc: TaskvecConfig, base_type_acc: float) -> dict[str, Any]:
    """CR-4 necessity at hook b: the component of the query-position activation in U (the
    span of the type-mean differences of the training prompts) replaced by the training
    mean's; the model's output-type accuracy on the test prompts, and the same for
    ``tvc.n_random_subspaces`` random subspaces of U's dimension (the control: their mean drop
    of output-type accuracy). The random subspaces lie outside U and are drawn with the
    training activations' covariance, so each carries a share of the variance comparable to
    U's (an isotropic draw would remove only about dim / d_model of it and could not show an
    activation that breaks whatever is removed). Beside each: the share of answers that are
    still attribute tokens (a replacement that knocks the model off its answer vocabulary
    is not a type code's necessity)."""
    te = split.test
    Xtr, ytr = H.at(b)[split.train], H.types[split.train]
    U, mu = tv.type_subspace(Xtr, ytr)
    cov = np.cov(np.asarray(Xtr, dtype=np.float64).T)
    toks, qp = torch.as_tensor(H.tokens[te]), H.query_pos[te]
    hook = H.layer_names[b]
    live = np.asarray(task.live_attr_ids)

    def read(basis):
        pred = tv.subspace_mean_replace_predictions(model, toks, qp, hook, basis, mu)
        return (tv.output_type_accuracy(task, pred, H.types[te]),
                float(np.isin(pred, live).mean()))

    nec, nec_attr = read(U)
    rand = [read(tv.random_subspace(U.shape[0], U.shape[1], _rng_seed(seed, 0x300 + i),
                                    cov=cov, exclude=U))
            for i in range(tvc.n_random_subspaces)]
    var = float(np.trace(cov)) or 1.0
    return {"necessity_type_acc": nec, "necessity_drop": base_type_acc - nec,
            "necessity_dim": int(U.shape[1]), "necessity_attr_share": nec_attr,
            "necessity_variance_share": float(np.trace(U.T @ cov @ U)) / var,
            "random_subspace_type_acc": float(np.mean([r[0] for r in rand])),
            "random_subspace_drop": float(np.mean([base_type_acc - r[0] for r in rand])),
            "random_subspace_drops": [base_type_acc - r[0] for r in rand],
            "random_subspace_attr_share": float(np.mean([r[1] for r in rand]))}


@torch.no_grad()
def logit_lens_type(model, task, X: np.ndarray, types: np.ndarray) -> dict[str, float]:
    """Direct-to-vocabulary read of residual vectors ``X`` (N, d_model): the final norm (if
    any) and the unembedding applied as if the rest of the network were skipped. Returns the
    type accuracy of the full-vocabulary argmax (``lens_type_acc``) and of the best attribute
    (``lens_attr_type_acc``)."""
    x = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    if getattr(model.cfg, "normalization_type", None) is not None and hasattr(model, "ln_final"):
        x = model.ln_final(x[:, None, :])[:, 0]
    lg = x @ model.W_U.detach().cpu() + model.b_U.detach().cpu()
    live = np.asarray(task.live_attr_ids)
    best_attr = live[lg[:, live].argmax(-1).numpy()]
    return {"lens_type_acc": tv.output_type_accuracy(task, lg.argmax(-1).numpy(), types),
            "lens_attr_type_acc": tv.output_type_accuracy(task, best_attr, types)}


def analyse_checkpoint(model, task, seed: int, tvc: TaskvecConfig, full: bool = True
                       ) -> dict[str, Any]:
    """All CR-4 numbers of one model at the read-out hook ``blocks.{n-1}.hook_resid_mid``
    (fixed in advance, :func:`interp.taskvec.readout_hook`), with every other boundary (and
    the final residual stream) reported beside it. ``full=False``: only the by-prompt probes
    (for the per-checkpoint curve and the lam runs)."""
    t0 = time.perf_counter()
    names, labels = tv.readout_names(model.cfg.n_layers)
    b = names.index(tv.readout_hook(model.cfg.n_layers))
    H = _tvset(model, task, tvc.n_heldout, seed, 1, task.heldout_subjects, names=names)
    ids = H.prompt_ids()
    split = pr.split_by_prompt(ids, tvc.test_fraction, tvc.dev_fraction, seed=seed,
                               stratify=H.types)
    pr.check_no_leak(split, ids)
    test_rows = []
    for k, name in enumerate(names):
        X = H.at(k)
        test_rows.append({"boundary": k, "hook": name, "label": labels[k],
                          "acc_pc": pr.probe_accuracy(X, H.types, split, "pca", tvc.n_pc, seed),
                          "acc_full": pr.probe_accuracy(X, H.types, split, "full", tvc.n_pc, seed),
                          "type_variance_fraction": tv.type_variance_fraction(X, H.types)})
    te = split.test
    # the read-out hook's own direct-to-vocabulary read (it already holds most of the
    # prediction in a 2-layer model), and the probe before the last attention layer
    # (blocks.{n-1}.hook_resid_pre = the boundary just before the read-out hook)
    lens = logit_lens_type(model, task, H.at(b)[te], H.types[te])
    out: dict[str, Any] = {
        "hook": names[b], "boundary": b, "boundary_label": labels[b],
        "icl_exact": float((H.pred[te] == H.answer[te]).mean()),
        "output_type_acc": tv.output_type_accuracy(task, H.pred[te], H.types[te]),
        "acc_pc": test_rows[b]["acc_pc"], "acc_full": test_rows[b]["acc_full"],
        "eta2": test_rows[b]["type_variance_fraction"],
        "hook_lens_type_acc": lens["lens_type_acc"],
        "hook_lens_attr_type_acc": lens["lens_attr_type_acc"],
        "pre_attn_hook": f"blocks.{model.cfg.n_layers - 1}.hook_resid_pre",
        "pre_attn_acc_pc": test_rows[b - 1]["acc_pc"],
        "pre_attn_eta2": test_rows[b - 1]["type_variance_fraction"],
        "final_acc_pc": test_rows[-1]["acc_pc"], "final_label": labels[-1],
        "layers": test_rows, "split_sizes": split.sizes(),
    }
    if not full:
        out["seconds"] = time.perf_counter() - t0
        return out
    Xb = H.at(b)
    ctrl = pr.evaluate_probes(Xb, H.types, split, tvc.n_pc, seed, n_shuffles=tvc.n_shuffles,
                              n_random=tvc.n_random_dirs, prompt_ids=ids)
    out.update(_necessity(model, task, H, split, b, seed, tvc, out["output_type_acc"]))
    out.update({"acc_shuffle_pc": ctrl["acc_shuffle_pc"],
                "acc_shuffle_full": ctrl["acc_shuffle_full"],
                "acc_random_dir": ctrl["acc_random_dir"], "chance": ctrl["chance"],
                "shuffle_gap": abs(ctrl["acc_shuffle_pc"] - ctrl["chance"]),
                "pc_minus_random": out["acc_pc"] - ctrl["acc_random_dir"]})
    n_test = len(te)
    out["acc_pc_wilson95"] = list(pr.wilson_ci(int(round(out["acc_pc"] * n_test)), n_test))
    out.update({f"geom_{k}": v for k, v in tv.geometry(Xb, H.types, tvc.n_pc).items()})

    # by-subject split: held-out subjects halved, each half's prompts generated apart
    hs = np.random.default_rng([seed, 0x5B]).permutation(task.heldout_subjects)
    A, B = np.sort(hs[: len(hs) // 2]), np.sort(hs[len(hs) // 2:])
    K = task.cfg.n_demos
    if min(len(A), len(B)) >= K + 1:
        SA = _tvset(model, task, tvc.n_subject_split, seed, 2, A, names=[names[b]])
        SB = _tvset(model, task, tvc.n_subject_split, seed, 3, B, names=[names[b]])
        S = tv.TaskVectorSet.concat([SA, SB])
        sp = pr.split_from_sets(len(SA), len(SB), S.prompt_ids(), _subject_matrix(S), "subject")
        out["acc_pc_by_subject"] = pr.probe_accuracy(S.at(0), S.types, sp, "pca", tvc.n_pc, seed)
    # transfer at the same hook: fit on finetune-subject prompts, test on held-out-subject ones
    F = _tvset(model, task, tvc.n_finetune, seed, 4, task.finetune_subjects, names=names)
    T = tv.TaskVectorSet.concat([F, H.subset(te)])
    tsp = pr.split_from_sets(len(F), n_test, T.prompt_ids(), _subject_matrix(T), "transfer")
    out["transfer_acc_pc"] = pr.probe_accuracy(T.at(b), T.types, tsp, "pca", tvc.n_pc, seed)
    out["transfer_acc_full"] = pr.probe_accuracy(T.at(b), T.types, tsp, "full", tvc.n_pc, seed)
    out.update(_patches(model, task, H, split, b, len(names) - 1, seed, tvc))
    out["seconds"] = time.perf_counter() - t0
    return out


def orient_to_types(Z: np.ndarray, types) -> np.ndarray:
    """``Z`` (N, k) with each column's sign chosen to put the mean of the lowest type's points
    on its positive side: a component's sign is arbitrary, so panels of different checkpoints
    and phases then face the same way."""
    first = np.asarray(types) == np.min(types)
    return Z * np.where(Z[first].mean(0) < 0, -1.0, 1.0)


def pca_points(model, task, seed: int, tvc: TaskvecConfig, hook: str, n: int = 400
               ) -> dict[str, Any]:
    """2-D PCA coordinates of held-out task vectors at one hook (for the scatter). A PC's
    sign is arbitrary, so each is oriented by :func:`orient_to_types`."""
    H = _tvset(model, task, n, seed, 9, task.heldout_subjects, names=[hook])
    p = tv.pca(H.at(0), 2)
    Z = orient_to_types(p.transform(H.at(0)), H.types)
    return {"x": Z[:, 0].tolist(), "y": Z[:, 1].tolist(), "type": H.types.tolist(),
            "var_ratio": p.explained_variance_ratio_.tolist()}


def separation_vs_k(model, task, seed: int, tvc: TaskvecConfig, hook: str
                    ) -> list[dict[str, Any]]:
    """Separation (eta^2, the share of variance explained by the type, and CR-8's partial
    eta^2 with the query subject's variance removed) of held-out task vectors at ``hook`` for
    every K in ``tvc.ks`` (those that fit the context and the held-out subjects), with the
    probe and the model's accuracy beside it. Diagnostics beside eta^2:
    ``query_subject_share`` (the share of the variance at ``hook`` explained by the query
    subject; about (n_subjects - 1) / (n - 1) for pure noise) and
    ``write_type_variance_fraction`` (eta^2 of the last attention layer's write alone,
    :func:`interp.taskvec.write_hook`)."""
    rows = []
    n_ho = len(task.heldout_subjects)
    for K in tvc.ks:
        if K + 1 > n_ho or task.format_len(K, False) > model.cfg.n_ctx:
            continue
        H = _tvset(model, task, tvc.n_per_k, seed, 100 + K, task.heldout_subjects, K=K,
                   names=[hook, tv.write_hook(model.cfg.n_layers)])
        X = H.at(0)
        sp = pr.split_by_prompt(H.prompt_ids(), SWEEP_TEST_FRACTION, seed=seed,
                                stratify=H.types)
        rows.append({"K": K, "type_variance_fraction": tv.type_variance_fraction(X, H.types),
                     "partial_type_variance_fraction": tv.partial_type_variance_fraction(
                         X, H.types, H.query_subject),
                     "query_subject_share": tv.type_variance_fraction(X, H.query_subject),
                     "write_type_variance_fraction": tv.type_variance_fraction(H.at(1),
                                                                               H.types),
                     "silhouette": tv.silhouette(X, H.types),
                     **tv.cosine_within_between(X, H.types),
                     "acc_pc": pr.probe_accuracy(X, H.types, sp, "pca", tvc.n_pc, seed),
                     "icl_exact": H.accuracy,
                     "output_type_acc": tv.output_type_accuracy(task, H.pred, H.types)})
    return rows


# --------------------------------------------------------------------------------------------
# Small PT + finetune runs at several lam (the lam sweep)
# --------------------------------------------------------------------------------------------
def lam_run_config(base: RunConfig, lam: float, tvc: TaskvecConfig) -> RunConfig:
    """The main run's config with ``task.lam`` replaced. ``tvc.lam_model == 'main'``: nothing
    else changes (one configuration, as the specification in docs/claims.md asks); ``'small'``:
    the small lam-sweep model (``tvc.lam_d_model``, ``tvc.lam_d_mlp``, ``tvc.lam_pt_steps`` at
    ``tvc.lam_pt_lr``)."""
    task_cfg = replace(base.task, lam=float(lam))
    if tvc.lam_model == "main":
        return replace(base, name=f"lam{lam:g}-seed{base.seed}", task=task_cfg)
    model = replace(base.model, d_model=tvc.lam_d_model, d_head=tvc.lam_d_model,
                    d_mlp=tvc.lam_d_mlp)
    pt = TrainConfig(steps=tvc.lam_pt_steps, batch_size=64, lr=tvc.lam_pt_lr, eval_every=0,
                     checkpoint_schedule="none", progress=False)
    return RunConfig(name=f"lam{lam:g}-seed{base.seed}", seed=base.seed, task=task_cfg,
                     model=model, train=pt)


def _lam_train_configs(tvc: TaskvecConfig, pretrain: TrainConfig | None,
                       finetune: TrainConfig | None) -> tuple[TrainConfig, TrainConfig]:
    """(pretrain, finetune) of a lam run: the main run's (``'main'``; start and end
    checkpoints only, which does not change training) or the small ones (``'small'``)."""
    if tvc.lam_model == "small":
        return (TrainConfig(steps=tvc.lam_pt_steps, batch_size=64, lr=tvc.lam_pt_lr, eval_every=0,
                            checkpoint_schedule="none", progress=False),
                TrainConfig(steps=tvc.lam_ft_steps, batch_size=128, lr=1e-3,
                            trainable="attention", eval_every=0, checkpoint_schedule="none",
                            progress=False))
    if pretrain is None or finetune is None:
        raise ConfigError("taskvec.lam_model = 'main' is not allowed without the main run's "
                          "pretrain and finetune configs; pass them (or use 'small')")
    return (replace(pretrain, eval_every=0, checkpoint_schedule="none", progress=False),
            replace(finetune, eval_every=0, checkpoint_schedule="none", progress=False))


def train_lam_run(base: RunConfig, lam: float, run_path: Path, tvc: TaskvecConfig,
                  pretrain: TrainConfig | None = None, finetune: TrainConfig | None = None
                  ) -> Path:
    """Pretrain (all subjects, PT format) then finetune on ICL (finetune subjects; in
    ``'main'`` mode with the main pipeline's finetuning data, K drawn per batch from
    ``task.finetune_ks``); checkpoints ``pretrain`` and ``ft-icl`` (start and end only) in
    ``run_path``. Resumes."""
    pt, ft = _lam_train_configs(tvc, pretrain, finetune)
    rc = replace(lam_run_config(base, lam, tvc), train=pt)
    run = RunDir.open_for(run_path, rc)
    task = rc.task.build(rc.seed)
    model = build_model(rc.model, seed=rc.seed)
    train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), rc.train, run, PHASE_PT,
                rc.seed, run_config=rc, phase_order=0)
    subs = task.finetune_subjects
    if tvc.lam_model == "main":
        def sample(rng, bs):
            return task.sample_finetune(rng, bs, subjects=subs, grammar=False,
                                        mixed_types=False)
    else:
        def sample(rng, bs):
            return task.sample_icl(rng, bs, subjects=subs)
    pt_state = {k: v.clone() for k, v in model.state_dict().items()}
    train_phase(model, sample, ft, run, PHASE_FT, rc.seed, run_config=replace(rc, train=ft),
                phase_order=1)
    if tvc.lam_model == "main":  # CR-9's control: the mixed-type finetune from the same PT
        model.load_state_dict(pt_state)

        def sample_mixed(rng, bs):
            return task.sample_finetune(rng, bs, subjects=subs, grammar=False,
                                        mixed_types=True)
        train_phase(model, sample_mixed, ft, run, PHASE_FT_MIXED, rc.seed,
                    run_config=replace(rc, train=ft), phase_order=2)
    return run.path


def _lam_metrics(path: Path, seed: int, tvc: TaskvecConfig) -> dict[str, Any]:
    """eta^2 and the top-PC probe at the read-out hook of a lam run's PT and finetuned
    models (``tvc.n_per_k`` held-out prompts, half to fit the probe)."""
    run = RunDir(path)
    rc, task, build = load_run_model(run)
    out: dict[str, Any] = {"lam": float(rc.task.lam), "seed": seed,
                           "grammar_tv": task.separation()["tv_transition"]}
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_MIXED) if run.latest(p) is not None]
    for ck, model in run.iter_models(",".join(f"phase:{p}:last" for p in phases), build):
        hook = tv.readout_hook(model.cfg.n_layers)
        H = _tvset(model, task, tvc.n_per_k, seed, 1, task.heldout_subjects, names=[hook])
        sp = pr.split_by_prompt(H.prompt_ids(), SWEEP_TEST_FRACTION, seed=seed,
                                stratify=H.types)
        key = {PHASE_PT: "pt", PHASE_FT: "ft", PHASE_FT_MIXED: "mixed"}[ck.phase]
        out[f"{key}_eta2"] = tv.type_variance_fraction(H.at(0), H.types)
        out[f"{key}_type_variance_fraction"] = out[f"{key}_eta2"]  # (the probes/ script's name)
        out[f"{key}_acc_pc"] = pr.probe_accuracy(H.at(0), H.types, sp, "pca", tvc.n_pc, seed)
        out[f"{key}_icl_exact"] = H.accuracy
        out["hook"] = hook
    return out


def lam_point(base: RunConfig, lam: float, out_dir: Path, seed: int, tvc: TaskvecConfig,
              log=print, pretrain: TrainConfig | None = None,
              finetune: TrainConfig | None = None, main_run: Path | None = None
              ) -> dict[str, Any]:
    """One lam of the sweep for ``seed``: at the main run's lam (``tvc.lam_model == 'main'``
    and ``main_run`` given) the main run itself; otherwise a PT + ICL-finetune run at
    ``lam`` (in ``<out>/runs/cr-taskvec/lam<lam>/seed<N>``, resumed); and its separation
    numbers."""
    t = time.perf_counter()
    reuse = (tvc.lam_model == "main" and main_run is not None
             and abs(float(lam) - float(base.task.lam)) < 1e-12)
    if reuse:
        path = Path(main_run)
    else:
        path = Path(out_dir) / "runs" / "cr-taskvec" / f"lam{lam:g}" / f"seed{seed}"
        train_lam_run(base, lam, path, tvc, pretrain, finetune)
    row = _lam_metrics(path, seed, tvc)
    row.update({"seconds": time.perf_counter() - t, "lam_model": tvc.lam_model,
                "reused_main_run": reuse})
    if log:
        log(f"  CR-4 lam sweep seed {seed} lam {lam:g}: ft eta^2 {row['ft_eta2']:.3f} at "
            f"{row['hook']}, ft top-PC probe {row['ft_acc_pc']:.3f} ({row['seconds']:.1f}s)")
    return row


def lam_sweep(base: RunConfig, out_dir: Path, seed: int, tvc: TaskvecConfig,
              log=print, pretrain: TrainConfig | None = None,
              finetune: TrainConfig | None = None, main_run: Path | None = None
              ) -> list[dict[str, Any]]:
    """PT + ICL-finetune runs at every ``tvc.lams`` for one seed, and their separation."""
    return [lam_point(base, lam, out_dir, seed, tvc, log, pretrain, finetune, main_run)
            for lam in tvc.lams]


# --------------------------------------------------------------------------------------------
# One seed, and the CR-4 stage
# --------------------------------------------------------------------------------------------
def probe_curve(run, task, build, seed: int, tvc: TaskvecConfig, phase: str = PHASE_FT
                ) -> list[dict[str, Any]]:
    """Top-PC / full probe accuracy at every (sub-sampled) checkpoint of ``phase``."""
    cks = [c for c in run.checkpoints() if c.phase == phase]
    if len(cks) > tvc.curve_max_checkpoints:
        idx = np.unique(np.round(np.linspace(0, len(cks) - 1, tvc.curve_max_checkpoints)))
        cks = [cks[int(i)] for i in idx]
    small = replace(tvc, n_heldout=max(400, tvc.n_heldout // 2))
    rows = []
    for ck, model in run.iter_models(",".join(c.name for c in cks), build):
        r = analyse_checkpoint(model, task, seed, small, full=False)
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step,
                     "acc_pc": r["acc_pc"], "acc_full": r["acc_full"], "eta2": r["eta2"],
                     "final_acc_pc": r["final_acc_pc"], "hook": r["hook"],
                     "icl_exact": r["icl_exact"], "output_type_acc": r["output_type_acc"]})
    return rows


def analyse_seed(run_path: Path, seed: int, tvc: TaskvecConfig, log=print) -> dict[str, Any]:
    """CR-4 numbers of one CR run directory (phases pretrain, ft-icl, ft-iclgrm)."""
    run = RunDir(run_path)
    _, task, build = load_run_model(run)
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if run.latest(p) is not None]
    check(PHASE_PT in phases and PHASE_FT in phases, "run", str(run_path),
          f"a CR run directory with phases {PHASE_PT!r} and {PHASE_FT!r} (has {run.phases()})")
    res: dict[str, Any] = {"seed": seed, "run": str(run_path), "phases": {}, "k_sweep": {},
                           "pca": {}}
    sel = ",".join(f"phase:{p}:last" for p in phases)
    for ck, model in run.iter_models(sel, build):
        r = analyse_checkpoint(model, task, seed, tvc)
        r["checkpoint"] = ck.name
        res["phases"][ck.phase] = r
        res["pca"][ck.phase] = {**pca_points(model, task, seed, tvc, r["hook"]),
                                "boundary_label": r["boundary_label"]}
        res["k_sweep"][ck.phase] = separation_vs_k(model, task, seed, tvc, r["hook"])
        if log:
            log(f"  CR-4 seed {seed} {ck.name}: top-PC probe {r['acc_pc']:.3f} at {r['hook']} "
                f"(model output type {r['output_type_acc']:.3f}), transfer "
                f"{r['transfer_acc_pc']:.3f}, patch {r['patch_success']:.3f} (random "
                f"{r['random_patch_success']:.3f}), shuffle {r['acc_shuffle_pc']:.3f}, random "
                f"dirs {r['acc_random_dir']:.3f} ({r['seconds']:.1f}s)")
    # CR-8's control: the mixed-type ICL finetune's K trend, measured the same way
    if run.latest(PHASE_FT_MIXED) is not None:
        hook = res["phases"][PHASE_FT]["hook"]
        for _, model in run.iter_models(f"phase:{PHASE_FT_MIXED}:last", build):
            res["k_sweep"][PHASE_FT_MIXED] = separation_vs_k(model, task, seed, tvc, hook)
    res["curve"] = probe_curve(run, task, build, seed, tvc)
    return res


# --------------------------------------------------------------------------------------------
# Entry points of the probes/ scripts
# --------------------------------------------------------------------------------------------
def probe_run(run_path: Path, selection: str, tvc: TaskvecConfig, seed: int = 0,
              full: bool = True, umap: bool = False, out_dir: Path | None = None,
              with_k: bool = False, log=print, color_by: str = "type") -> dict[str, Any]:
    """CR-4 numbers for every checkpoint of ``selection`` in one CR run directory.

    Writes ``<run>/analyses/task_vectors.json`` and figures (PCA scatter per checkpoint, its
    signs aligned across checkpoints by :func:`orient_to_types`, coloured by ``color_by``:
    ``type``, ``query-subject`` or ``correct``; a UMAP view with ``umap``) into ``out_dir``
    (default ``<run>/analyses``).
    """
    check_choice("--color-by", color_by, COLOR_BY)
    run = RunDir(run_path)
    _, task, build = load_run_model(run)
    out_dir = Path(out_dir) if out_dir is not None else run.analyses_dir
    rows, views = [], []
    for ck, model in run.iter_models(selection, build):
        r = analyse_checkpoint(model, task, seed, tvc, full=full)
        r.update({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step})
        if with_k:
            r["k_sweep"] = separation_vs_k(model, task, seed, tvc, r["hook"])
        rows.append(r)
        H = _tvset(model, task, 400, seed, 9, task.heldout_subjects, names=[r["hook"]])
        X = H.at(0)
        if umap:
            Z, var = tv.umap_embed(X, seed=seed), None
        else:
            pc = tv.pca(X, 2)
            Z, var = pc.transform(X), pc.explained_variance_ratio_.tolist()
        labels = {"type": H.types, "query-subject": H.query_subject,
                  "correct": (H.pred == H.answer).astype(int)}[color_by]
        # var: the PCs' shares, axis titles; signs aligned across the panels
        views.append((ck.name, r, orient_to_types(Z, H.types), labels, var))
        if log:
            extra = (f", transfer {r['transfer_acc_pc']:.3f}, shuffle {r['acc_shuffle_pc']:.3f}"
                     f", random dirs {r['acc_random_dir']:.3f}, eta^2 {r['eta2']:.3f}"
                     if full else "")
            log(f"{ck.name:24s} at {r['boundary_label']:5s} top-PC {r['acc_pc']:.3f} "
                f"full {r['acc_full']:.3f}{extra}  (model ICL exact {r['icl_exact']:.3f}, "
                f"output type {r['output_type_acc']:.3f})")
    figs = write_task_vector_views(views, task.cfg.n_types, umap, out_dir, color_by)
    result = {"run": str(run.path), "selection": selection, "rows": rows, "figures": figs,
              "params": {k: getattr(tvc, k) for k in tvc.__dataclass_fields__}}
    atomic_write_json(out_dir / "task_vectors.json", result)
    return result
