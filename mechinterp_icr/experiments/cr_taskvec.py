"""CR-4: task vectors and linear probes across finetuning (SPEC section 1, issue 6).

Given the CR run directories ``<out>/runs/cr/seed<N>/`` (phases ``pretrain``, ``ft-icl``,
``ft-iclgrm``), :func:`add_taskvec_claim` measures for every seed, at the last checkpoint of
each phase:

- task vectors of held-out-subject ICL prompts (all types) at every layer boundary;
- the top-PC probe (PCA on the training split only, ``n_pc`` components) and the full probe
  on a by-prompt split fixed before fitting (train / dev / test); the boundary is chosen on
  the dev part, the accuracy reported on the test part;
- a by-subject split (held-out subjects halved; the two halves' prompts are generated apart);
- transfer: trained on finetune-subject prompts, tested on held-out-subject prompts;
- controls: label shuffle (mean over permutations) and random directions;
- geometry: type variance share, silhouette, within/between cosine, participation ratio;
- the causal transplant of mean task vectors (type l -> l') at every boundary;
- separation vs K (numbers of demos) on the same checkpoints, and vs the pretraining ``lam``
  on small extra PT + finetune runs trained here (``<out>/runs/cr-taskvec/lam<lam>/seed<N>``).

Everything is a pure function of the seeds; the claim goes into the Summary as ``CR-4``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechinterp_icr.claims import Claim, Summary
from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig, check, check_choice
from mechinterp_icr.interp import probes as pr
from mechinterp_icr.interp import taskvec as tv
from mechinterp_icr.store.io import atomic_write_text

__all__ = [
    "PHASE_FT",
    "PHASE_FT_GRM",
    "PHASE_PT",
    "PROFILES",
    "TaskvecParams",
    "add_taskvec_claim",
    "analyse_checkpoint",
    "analyse_seed",
    "lam_sweep",
    "params_for",
    "separation_vs_k",
    "train_lam_run",
]

PHASE_PT, PHASE_FT, PHASE_FT_GRM = "pretrain", "ft-icl", "ft-iclgrm"


@dataclass(frozen=True)
class TaskvecParams:
    """Sizes of the CR-4 measurement (per seed)."""

    n_heldout: int = 1200  # held-out-subject prompts (by-prompt split train/dev/test)
    n_finetune: int = 800  # finetune-subject prompts (transfer training set)
    n_subject_split: int = 600  # prompts per side of the by-subject split
    test_fraction: float = 0.25
    dev_fraction: float = 0.25
    n_pc: int = 3
    n_shuffles: int = 64  # label permutations of the top-PC shuffle control (full: 1/4)
    ks: tuple = (1, 2, 3, 4, 6, 8)
    n_per_k: int = 600
    lams: tuple = (0.0, 0.5, 0.9)
    lam_seeds: int = 1  # the lam sweep runs on the first this-many seeds
    lam_d_model: int = 32
    lam_d_mlp: int = 128
    lam_pt_steps: int = 500
    lam_pt_lr: float = 3e-3
    lam_ft_steps: int = 80
    curve_max_checkpoints: int = 8  # probe accuracy across finetuning checkpoints
    transplant_scale: float = 1.0
    pass_threshold: float = 0.95
    far_lower_margin: float = 0.2  # "far lower after PT": at least this much below
    control_margin: float = 0.1  # controls within this of chance


PROFILES = {
    "quick": TaskvecParams(),
    "paper": TaskvecParams(n_heldout=2400, n_finetune=1600, n_subject_split=1200,
                           n_per_k=1200, lams=(0.0, 0.25, 0.5, 0.75, 0.9, 1.0), lam_seeds=3,
                           lam_d_model=64, lam_d_mlp=256, lam_pt_steps=1500,
                           lam_pt_lr=2e-3, lam_ft_steps=200, curve_max_checkpoints=16),
}


def params_for(profile: str) -> TaskvecParams:
    check_choice("--profile", profile, sorted(PROFILES))
    return PROFILES[profile]


def _rng_seed(seed: int, tag: int) -> int:
    return int(np.random.default_rng([int(seed), 0xC4, tag]).integers(2**31 - 1))


# --------------------------------------------------------------------------------------------
# One checkpoint
# --------------------------------------------------------------------------------------------
def _tvset(model, task, n, seed, tag, subjects, K=None):
    return tv.icl_task_vectors(model, task, n, K=K, subjects=subjects, seed=_rng_seed(seed, tag))


def _subject_matrix(s: tv.TaskVectorSet) -> np.ndarray:
    return np.concatenate([s.query_subject[:, None], s.demo_subjects], 1)


def _transplant(model, task, H: tv.TaskVectorSet, split: pr.Split, b: int, seed: int,
                scale: float, rows) -> dict[str, float]:
    """Transplant mean task vectors (from the training prompts) into ``rows`` at boundary b."""
    L = task.cfg.n_types
    Xtr, ytr = H.at(b)[split.train], H.types[split.train]
    means = np.stack([Xtr[ytr == l].mean(0) for l in range(L)])
    rng = np.random.default_rng([seed, 0x7A7])
    src = H.types[rows]
    tgt = (src + 1 + rng.integers(L - 1, size=len(rows))) % L
    tgt_ans = task.answer_id(H.query_subject[rows], tgt)
    toks = torch.as_tensor(H.tokens[rows])
    qp = torch.as_tensor(H.query_pos[rows])
    return tv.transplant_accuracy(model, toks, qp, src, tgt, tgt_ans, means, H.layer_names[b],
                                  mode="add", scale=scale, original_answers=H.answer[rows])


def analyse_checkpoint(model, task, seed: int, P: TaskvecParams, full: bool = True
                       ) -> dict[str, Any]:
    """All CR-4 numbers of one model (see the module docstring). ``full=False``: only the
    by-prompt probes (for the per-checkpoint curve)."""
    t0 = time.perf_counter()
    L = task.cfg.n_types
    H = _tvset(model, task, P.n_heldout, seed, 1, task.heldout_subjects)
    names = H.layer_names
    labels = tv.boundary_labels(len(names) - 1)
    ids = H.prompt_ids()
    split = pr.split_by_prompt(ids, P.test_fraction, P.dev_fraction, seed=seed,
                               stratify=H.types)
    pr.check_no_leak(split, ids)
    dev_rows = []
    for k, name in enumerate(names):
        X = H.at(k)
        dev_rows.append({"boundary": k, "hook": name,
                         "acc_pc": pr.probe_accuracy(X, H.types, split, "pca", P.n_pc, seed,
                                                     on="dev"),
                         "acc_full": pr.probe_accuracy(X, H.types, split, "full", P.n_pc, seed,
                                                       on="dev")})
    b = pr.choose_boundary(dev_rows, "acc_pc")  # the boundary of the top-PC probe
    bf = pr.choose_boundary(dev_rows, "acc_full")  # the full probe's own best boundary
    test_rows = []
    for k, name in enumerate(names):
        X = H.at(k)
        test_rows.append({"boundary": k, "hook": name, "label": labels[k],
                          "acc_pc": pr.probe_accuracy(X, H.types, split, "pca", P.n_pc, seed),
                          "acc_full": pr.probe_accuracy(X, H.types, split, "full", P.n_pc, seed),
                          "acc_pc_dev": dev_rows[k]["acc_pc"],
                          "acc_full_dev": dev_rows[k]["acc_full"],
                          "type_variance_fraction": tv.type_variance_fraction(X, H.types)})
    out: dict[str, Any] = {
        "boundary": b, "boundary_label": labels[b], "icl_exact": H.accuracy,
        "acc_pc": test_rows[b]["acc_pc"], "acc_full_same_boundary": test_rows[b]["acc_full"],
        "acc_full": test_rows[bf]["acc_full"], "full_boundary_label": labels[bf],
        "layers": test_rows, "split_sizes": split.sizes(),
    }
    if not full:
        out["seconds"] = time.perf_counter() - t0
        return out
    Xb = H.at(b)
    ctrl = pr.evaluate_probes(Xb, H.types, split, P.n_pc, seed, n_shuffles=P.n_shuffles)
    out.update({"acc_shuffle_pc": ctrl["acc_shuffle_pc"],
                "acc_shuffle_full": ctrl["acc_shuffle_full"],
                "acc_random_dir": ctrl["acc_random_dir"], "chance": ctrl["chance"]})
    n_test = len(split.test)
    k_ok = int(round(out["acc_pc"] * n_test))
    out["acc_pc_wilson95"] = list(pr.wilson_ci(k_ok, n_test))
    out.update({f"geom_{k}": v for k, v in tv.geometry(Xb, H.types, P.n_pc).items()})

    # by-subject split: held-out subjects halved, each half's prompts generated apart
    hs = np.random.default_rng([seed, 0x5B]).permutation(task.heldout_subjects)
    A, B = np.sort(hs[: len(hs) // 2]), np.sort(hs[len(hs) // 2:])
    K = task.cfg.n_demos
    if min(len(A), len(B)) >= K + 1:
        SA = _tvset(model, task, P.n_subject_split, seed, 2, A)
        SB = _tvset(model, task, P.n_subject_split, seed, 3, B)
        S = tv.TaskVectorSet.concat([SA, SB])
        sp = pr.split_from_sets(len(SA), len(SB), S.prompt_ids(), _subject_matrix(S), "subject")
        out["acc_pc_by_subject"] = pr.probe_accuracy(S.at(b), S.types, sp, "pca", P.n_pc, seed)
        out["acc_full_by_subject"] = pr.probe_accuracy(S.at(b), S.types, sp, "full", P.n_pc,
                                                       seed)
    # transfer: finetune-subject prompts -> held-out-subject prompts (boundary chosen on a
    # dev part of the finetune-subject prompts)
    F = _tvset(model, task, P.n_finetune, seed, 4, task.finetune_subjects)
    fsplit = pr.split_by_prompt(F.prompt_ids(), 0.25, 0.0, seed=seed, stratify=F.types)
    f_rows = pr.probe_layers(F.vectors, F.types, fsplit, names, P.n_pc, seed, controls=False)
    bt = pr.choose_boundary(f_rows, "acc_pc")
    T = tv.TaskVectorSet.concat([F, H.subset(split.test)])
    tsp = pr.split_from_sets(len(F), n_test, T.prompt_ids(), _subject_matrix(T), "transfer")
    out["transfer_boundary"] = bt
    out["transfer_acc_pc"] = pr.probe_accuracy(T.at(bt), T.types, tsp, "pca", P.n_pc, seed)
    out["transfer_acc_full"] = pr.probe_accuracy(T.at(bt), T.types, tsp, "full", P.n_pc, seed)
    out["transfer_acc_pc_same_boundary"] = pr.probe_accuracy(T.at(b), T.types, tsp, "pca",
                                                             P.n_pc, seed)
    # causal transplant at every boundary: choose on dev, report on test
    tr_rows = []
    for k in range(len(names)):
        d = _transplant(model, task, H, split, k, seed, P.transplant_scale, split.dev)
        t = _transplant(model, task, H, split, k, seed, P.transplant_scale, split.test)
        tr_rows.append({"boundary": k, "label": labels[k], "dev": d["transplant_success"],
                        "test": t["transplant_success"], "kept_original": t["kept_original"]})
    bc = int(np.argmax([r["dev"] for r in tr_rows]))
    out["transplant"] = tr_rows
    out["transplant_boundary"] = bc
    out["transplant_success"] = tr_rows[bc]["test"]
    out["transplant_chance"] = 1.0 / (L * task.cfg.n_values)
    out["seconds"] = time.perf_counter() - t0
    return out


def pca_points(model, task, seed: int, P: TaskvecParams, boundary: int, n: int = 400
               ) -> dict[str, Any]:
    """2-D PCA coordinates of held-out task vectors at one boundary (for the scatter)."""
    H = _tvset(model, task, n, seed, 9, task.heldout_subjects)
    p = tv.pca(H.at(boundary), 2)
    Z = p.transform(H.at(boundary))
    return {"x": Z[:, 0].tolist(), "y": Z[:, 1].tolist(), "type": H.types.tolist(),
            "var_ratio": p.explained_variance_ratio.tolist()}


def separation_vs_k(model, task, seed: int, P: TaskvecParams, boundary: int
                    ) -> list[dict[str, Any]]:
    """Separation of held-out task vectors at ``boundary`` for every K in ``P.ks``."""
    rows = []
    n_ho = len(task.heldout_subjects)
    for K in P.ks:
        if K + 1 > n_ho or task.format_len(K, False) > model.cfg.n_ctx:
            continue
        H = _tvset(model, task, P.n_per_k, seed, 100 + K, task.heldout_subjects, K=K)
        X = H.at(boundary)
        sp = pr.split_by_prompt(H.prompt_ids(), 0.5, seed=seed, stratify=H.types)
        rows.append({"K": K, "type_variance_fraction": tv.type_variance_fraction(X, H.types),
                     "silhouette": tv.silhouette(X, H.types),
                     **tv.cosine_within_between(X, H.types),
                     "acc_pc": pr.probe_accuracy(X, H.types, sp, "pca", P.n_pc, seed),
                     "acc_full": pr.probe_accuracy(X, H.types, sp, "full", P.n_pc, seed),
                     "type_variance_fraction_by_boundary": [
                         tv.type_variance_fraction(H.at(k), H.types)
                         for k in range(H.n_boundaries)],
                     "icl_exact": H.accuracy})
    return rows


# --------------------------------------------------------------------------------------------
# Small PT + finetune runs at several lam (the lam sweep)
# --------------------------------------------------------------------------------------------
def lam_run_config(base: RunConfig, lam: float, P: TaskvecParams) -> RunConfig:
    """The main run's task with ``lam`` replaced, on a small model (same layout)."""
    task_cfg = replace(base.task, lam=float(lam))
    model = replace(base.model, d_model=P.lam_d_model, d_head=P.lam_d_model,
                    d_mlp=P.lam_d_mlp)
    pt = TrainConfig(steps=P.lam_pt_steps, batch_size=64, lr=P.lam_pt_lr, eval_every=0,
                     checkpoint_schedule="none", progress=False)
    return RunConfig(name=f"lam{lam:g}-seed{base.seed}", seed=base.seed, task=task_cfg,
                     model=model, train=pt)


def train_lam_run(base: RunConfig, lam: float, run_path: Path, P: TaskvecParams) -> Path:
    """Pretrain (all subjects, PT format) then finetune attention on ICL (finetune subjects);
    checkpoints ``pretrain`` and ``ft-icl`` (start and end only) in ``run_path``. Resumes."""
    from mechinterp_icr.models.factory import build_model
    from mechinterp_icr.store.rundir import RunDir
    from mechinterp_icr.training.loop import train_phase

    rc = lam_run_config(base, lam, P)
    run = RunDir.open_for(run_path, rc)
    task = rc.task.build(rc.seed)
    model = build_model(rc.model, seed=rc.seed)
    train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), rc.train, run, PHASE_PT,
                rc.seed, run_config=rc, phase_order=0)
    ft = TrainConfig(steps=P.lam_ft_steps, batch_size=128, lr=1e-3, trainable="attention",
                     eval_every=0, checkpoint_schedule="none", progress=False)
    subs = task.finetune_subjects
    train_phase(model, lambda rng, bs: task.sample_icl(rng, bs, subjects=subs), ft, run,
                PHASE_FT, rc.seed, run_config=replace(rc, train=ft), phase_order=1)
    return run.path


def _lam_metrics(path: Path, seed: int, P: TaskvecParams) -> dict[str, Any]:
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    run = RunDir(path)
    rc, task, build = load_run_model(run)
    out: dict[str, Any] = {"lam": float(rc.task.lam), "seed": seed,
                           "grammar_tv": task.separation()["tv_transition"]}
    small = replace(P, n_heldout=max(400, P.n_heldout // 2))
    for ck, model in run.iter_models(f"phase:{PHASE_PT}:last,phase:{PHASE_FT}:last", build):
        r = analyse_checkpoint(model, task, seed, small, full=False)
        H = _tvset(model, task, small.n_heldout, seed, 1, task.heldout_subjects)
        X = H.at(r["boundary"])
        key = "pt" if ck.phase == PHASE_PT else "ft"
        out[f"{key}_acc_pc"] = r["acc_pc"]
        out[f"{key}_acc_full"] = r["acc_full"]
        out[f"{key}_icl_exact"] = r["icl_exact"]
        out[f"{key}_type_variance_fraction"] = tv.type_variance_fraction(X, H.types)
        out[f"{key}_silhouette"] = tv.silhouette(X, H.types)
    return out


def lam_sweep(base: RunConfig, out_dir: Path, seed: int, P: TaskvecParams,
              log=print) -> list[dict[str, Any]]:
    """Small PT + ICL-finetune runs at every ``P.lams`` for one seed, and their separation."""
    rows = []
    for lam in P.lams:
        t = time.perf_counter()
        path = Path(out_dir) / "runs" / "cr-taskvec" / f"lam{lam:g}" / f"seed{seed}"
        train_lam_run(base, lam, path, P)
        row = _lam_metrics(path, seed, P)
        row["seconds"] = time.perf_counter() - t
        rows.append(row)
        if log:
            log(f"  CR-4 lam sweep seed {seed} lam {lam:g}: ft separation "
                f"{row['ft_type_variance_fraction']:.3f}, ft top-PC probe {row['ft_acc_pc']:.3f}"
                f" ({row['seconds']:.1f}s)")
    return rows


# --------------------------------------------------------------------------------------------
# One seed, the claim, the figures
# --------------------------------------------------------------------------------------------
def _spearman(x, y) -> float:
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(y == y[0]) or np.all(x == x[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)


def probe_curve(run, task, build, seed: int, P: TaskvecParams, phase: str = PHASE_FT
                ) -> list[dict[str, Any]]:
    """Top-PC / full probe accuracy at every (sub-sampled) checkpoint of ``phase``."""
    cks = [c for c in run.checkpoints() if c.phase == phase]
    if len(cks) > P.curve_max_checkpoints:
        idx = np.unique(np.round(np.linspace(0, len(cks) - 1, P.curve_max_checkpoints)))
        cks = [cks[int(i)] for i in idx]
    small = replace(P, n_heldout=max(400, P.n_heldout // 2))
    rows = []
    for ck, model in run.iter_models(",".join(c.name for c in cks), build):
        r = analyse_checkpoint(model, task, seed, small, full=False)
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step,
                     "acc_pc": r["acc_pc"], "acc_full": r["acc_full"],
                     "boundary": r["boundary"], "icl_exact": r["icl_exact"]})
    return rows


def analyse_seed(run_path: Path, seed: int, P: TaskvecParams, log=print) -> dict[str, Any]:
    """CR-4 numbers of one CR run directory (phases pretrain, ft-icl, ft-iclgrm)."""
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    run = RunDir(run_path)
    _, task, build = load_run_model(run)
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if run.latest(p) is not None]
    check(PHASE_PT in phases and PHASE_FT in phases, "run", str(run_path),
          f"a CR run directory with phases {PHASE_PT!r} and {PHASE_FT!r} (has {run.phases()})")
    res: dict[str, Any] = {"seed": seed, "run": str(run_path), "phases": {}, "k_sweep": {},
                           "pca": {}}
    sel = ",".join(f"phase:{p}:last" for p in phases)
    for ck, model in run.iter_models(sel, build):
        r = analyse_checkpoint(model, task, seed, P)
        r["checkpoint"] = ck.name
        res["phases"][ck.phase] = r
        res["pca"][ck.phase] = {**pca_points(model, task, seed, P, r["boundary"]),
                                "boundary_label": r["boundary_label"]}
        res["k_sweep"][ck.phase] = separation_vs_k(model, task, seed, P, r["boundary"])
        if log:
            log(f"  CR-4 seed {seed} {ck.name}: top-PC probe {r['acc_pc']:.3f} at "
                f"{r['boundary_label']}, full {r['acc_full']:.3f}, transfer "
                f"{r['transfer_acc_pc']:.3f}, shuffle {r['acc_shuffle_pc']:.3f} "
                f"({r['seconds']:.1f}s)")
    res["curve"] = probe_curve(run, task, build, seed, P)
    return res


def _per_seed_metrics(res: dict[str, Any]) -> dict[str, Any]:
    pt, ft = res["phases"][PHASE_PT], res["phases"][PHASE_FT]
    grm = res["phases"].get(PHASE_FT_GRM)
    m = {
        "ft_acc_pc": ft["acc_pc"], "ft_acc_full": ft["acc_full"],
        "ft_transfer_acc_pc": ft["transfer_acc_pc"],
        "ft_transfer_acc_full": ft["transfer_acc_full"],
        "ft_acc_pc_by_subject": ft.get("acc_pc_by_subject", float("nan")),
        "ft_boundary": ft["boundary_label"],
        "ft_icl_exact_heldout": ft["icl_exact"],
        "pt_acc_pc": pt["acc_pc"], "pt_acc_full": pt["acc_full"],
        "pt_full_boundary": pt["full_boundary_label"],
        "pt_transfer_acc_pc": pt["transfer_acc_pc"],
        "pt_boundary": pt["boundary_label"],
        "ft_shuffle_pc": ft["acc_shuffle_pc"], "ft_shuffle_full": ft["acc_shuffle_full"],
        "pt_shuffle_pc": pt["acc_shuffle_pc"],
        "ft_random_dir": ft["acc_random_dir"], "pt_random_dir": pt["acc_random_dir"],
        "chance": ft["chance"],
        "ft_type_variance_fraction": ft["geom_type_variance_fraction"],
        "pt_type_variance_fraction": pt["geom_type_variance_fraction"],
        "ft_silhouette": ft["geom_silhouette"], "pt_silhouette": pt["geom_silhouette"],
        "ft_cos_gap": ft["geom_cos_gap"], "pt_cos_gap": pt["geom_cos_gap"],
        "ft_participation_ratio": ft["geom_participation_ratio"],
        "ft_n_components_90": ft["geom_n_components_90"],
        "ft_transplant_success": ft["transplant_success"],
        "pt_transplant_success": pt["transplant_success"],
        "ft_transplant_boundary": ft["transplant"][ft["transplant_boundary"]]["label"],
    }
    if grm is not None:
        m.update({"grm_acc_pc": grm["acc_pc"], "grm_acc_full": grm["acc_full"],
                  "grm_transfer_acc_pc": grm["transfer_acc_pc"],
                  "grm_transplant_success": grm["transplant_success"]})
    for ph, key in ((PHASE_FT, "ft"), (PHASE_PT, "pt")):
        ks = res["k_sweep"].get(ph, [])
        m[f"{key}_rho_k"] = _spearman([r["K"] for r in ks],
                                      [r["type_variance_fraction"] for r in ks])
        m[f"{key}_rho_k_full_probe"] = _spearman([r["K"] for r in ks], [r["acc_full"] for r in ks])
    lam_rows = res.get("lam_sweep", [])
    if len(lam_rows) >= 2:
        m["ft_rho_lam"] = _spearman([r["lam"] for r in lam_rows],
                                    [r["ft_type_variance_fraction"] for r in lam_rows])
        m["pt_rho_lam"] = _spearman([r["lam"] for r in lam_rows],
                                    [r["pt_type_variance_fraction"] for r in lam_rows])
    return m


def _mean(vals) -> float:
    v = [float(x) for x in vals if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else float("nan")


def build_claim(results: list[dict[str, Any]], P: TaskvecParams) -> Claim:
    per_seed = {str(r["seed"]): _per_seed_metrics(r) for r in results}
    col = {k: [m.get(k) for m in per_seed.values()] for k in next(iter(per_seed.values()))}
    ft, ftt = _mean(col["ft_acc_pc"]), _mean(col["ft_transfer_acc_pc"])
    pt, ptt = _mean(col["pt_acc_pc"]), _mean(col["pt_transfer_acc_pc"])
    chance = _mean(col["chance"])
    shuf = max(abs(_mean(col["ft_shuffle_pc"]) - chance), abs(_mean(col["ft_shuffle_full"])
                                                             - chance))
    m = P.far_lower_margin
    checks = {
        f"transfer: probe fit on finetune-subject prompts scores >= {P.pass_threshold} on "
        f"held-out-subject prompts (mean {ftt:.3f})": ftt >= P.pass_threshold,
        f"PT only: top-PC probe at least {m} lower (PT {pt:.3f} vs finetuned {ft:.3f})":
            pt <= ft - m,
        f"PT only: transfer at least {m} lower (PT {ptt:.3f} vs finetuned {ftt:.3f})":
            ptt <= ftt - m,
        f"label-shuffle control within {P.control_margin} of chance {chance:.2f} "
        f"(largest gap {shuf:.3f})": shuf <= P.control_margin,
        f"random-direction control below the top-PC probe (random "
        f"{_mean(col['ft_random_dir']):.3f} vs top-PC {ft:.3f})":
            _mean(col["ft_random_dir"]) < ft,
        f"separation grows with K: Spearman rho(K, type variance share) > 0 after "
        f"finetuning (mean {_mean(col['ft_rho_k']):.2f})": _mean(col["ft_rho_k"]) > 0,
    }
    if "ft_rho_lam" in col:
        rl = _mean(col["ft_rho_lam"])
        checks[f"separation grows with lam: Spearman rho(lam, type variance share) > 0 "
               f"after finetuning (mean {rl:.2f}, small lam runs)"] = rl > 0
    claim = Claim(
        id="CR-4",
        statement=("After ICL finetuning the attribute type is encoded in a low-dimensional "
                   f"subspace at the query position: a probe on the top {P.n_pc} principal "
                   "components (fit on training prompts only) decodes it on held-out prompts "
                   f"with accuracy >= {P.pass_threshold}, a probe fit on finetune-subject "
                   "prompts transfers to held-out subjects, both are far lower after PT only, "
                   "the label-shuffle control is at chance, and separation grows with K and "
                   "with lam."),
        metric="ft_acc_pc", op=">=", threshold=P.pass_threshold, per_seed=per_seed,
        extra_checks=checks,
        notes=("Held-out-subject ICL prompts, all types; boundary (embed / after each block) "
               "chosen on a dev split, accuracy on a disjoint test split (no shared prompt). "
               "Separation = share of the task-vector variance explained by the type. "
               "lam trend from small PT+finetune runs (see docs/taskvec.md)."),
        figure="figures/cr4_overview.html",
    )
    return claim


def _add_type_scatter(fig, x, y, t, colors, row: int, col: int, legend: bool,
                      size: int) -> None:
    """One marker trace per attribute type (coloured by type) into subplot (row, col)."""
    import plotly.graph_objects as go

    x, y, t = np.asarray(x), np.asarray(y), np.asarray(t)
    for l in range(len(colors)):
        m = t == l
        fig.add_trace(go.Scatter(x=x[m], y=y[m], mode="markers", name=f"type {l}",
                                 legendgroup=f"type {l}", showlegend=legend,
                                 marker=dict(size=size, color=colors[l], opacity=0.7)),
                      row, col)


def _type_colors(n):
    base = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
            "#e377c2"]
    return [base[i % len(base)] for i in range(n)]


def write_figures(results: list[dict[str, Any]], fig_dir: Path) -> dict[str, Any]:
    """PCA scatter (PT-only vs finetuned), separation vs K, separation vs lam, per-layer and
    per-checkpoint probe accuracy. Returns the written paths."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from mechinterp_icr.viz.figures import save_figure

    out: dict[str, Any] = {}
    r0 = results[0]
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if p in r0["pca"]]
    titles = {PHASE_PT: "PT only", PHASE_FT: "after ICL finetuning",
              PHASE_FT_GRM: "after ICL+Grm finetuning"}
    fig = make_subplots(rows=1, cols=len(phases), subplot_titles=[
        f"{titles[p]} ({r0['pca'][p]['boundary_label']}; top-PC probe "
        f"{r0['phases'][p]['acc_pc']:.2f})" for p in phases])
    n_types = int(max(max(r0["pca"][p]["type"]) for p in phases)) + 1
    cols = _type_colors(n_types)
    for j, p in enumerate(phases):
        d = r0["pca"][p]
        x, y, t = np.asarray(d["x"]), np.asarray(d["y"]), np.asarray(d["type"])
        _add_type_scatter(fig, x, y, t, cols, 1, j + 1, legend=j == 0, size=5)
        fig.update_xaxes(title_text=f"PC1 ({d['var_ratio'][0]:.0%} var)", row=1, col=j + 1)
        fig.update_yaxes(title_text=f"PC2 ({d['var_ratio'][1]:.0%} var)", row=1, col=j + 1)
    fig.update_layout(title=f"CR-4: task vectors of held-out-subject ICL prompts at the query "
                            f"position, first two PCs, coloured by attribute type (seed "
                            f"{r0['seed']})")
    out["pca_scatter"] = save_figure(fig, Path(fig_dir) / "cr4_pca_scatter", width=1300,
                                     height=480)

    # separation vs K
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "type variance share of task vectors", "top-PC probe accuracy (held-out prompts)"])
    for p, colr in zip(phases, ["#7f7f7f", "#1f77b4", "#ff7f0e"]):
        for c, key in enumerate(("type_variance_fraction", "acc_pc")):
            ks = sorted({row["K"] for r in results for row in r["k_sweep"].get(p, [])})
            vals = [[row[key] for r in results for row in r["k_sweep"].get(p, [])
                     if row["K"] == k] for k in ks]
            mean = [float(np.mean(v)) for v in vals]
            lo = [float(np.min(v)) for v in vals]
            hi = [float(np.max(v)) for v in vals]
            fig.add_trace(go.Scatter(x=ks, y=mean, mode="lines+markers", name=titles[p],
                                     legendgroup=p, showlegend=c == 0, line=dict(color=colr),
                                     error_y=dict(type="data", symmetric=False,
                                                  array=np.subtract(hi, mean).tolist(),
                                                  arrayminus=np.subtract(mean, lo).tolist())),
                          1, c + 1)
        fig.update_xaxes(title_text="number of demonstrations K")
    fig.update_yaxes(title_text="between-type / total variance", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=1, col=2, range=[0, 1.02])
    fig.update_layout(title="CR-4: separation of the attribute type vs number of demos K "
                            "(mean over seeds, bars: min-max)")
    out["sep_vs_k"] = save_figure(fig, Path(fig_dir) / "cr4_separation_vs_k", width=1100)

    lam_rows = [row for r in results for row in r.get("lam_sweep", [])]
    if lam_rows:
        fig = make_subplots(rows=1, cols=2, subplot_titles=[
            "type variance share of task vectors", "top-PC probe accuracy (held-out prompts)"])
        lams = sorted({row["lam"] for row in lam_rows})
        for key, name, colr in (("pt", "PT only", "#7f7f7f"),
                                ("ft", "after ICL finetuning", "#1f77b4")):
            for c, metric in enumerate(("type_variance_fraction", "acc_pc")):
                vals = [[row[f"{key}_{metric}"] for row in lam_rows if row["lam"] == lm]
                        for lm in lams]
                fig.add_trace(go.Scatter(x=lams, y=[float(np.mean(v)) for v in vals],
                                         mode="lines+markers", name=name, legendgroup=key,
                                         showlegend=c == 0, line=dict(color=colr)), 1, c + 1)
                fig.add_trace(go.Scatter(x=[row["lam"] for row in lam_rows],
                                         y=[row[f"{key}_{metric}"] for row in lam_rows],
                                         mode="markers", showlegend=False, legendgroup=key,
                                         marker=dict(color=colr, size=5, opacity=0.4)), 1, c + 1)
        fig.update_xaxes(title_text="pretraining grammar separation lam")
        fig.update_yaxes(title_text="between-type / total variance", row=1, col=1)
        fig.update_yaxes(title_text="accuracy", row=1, col=2, range=[0, 1.02])
        fig.update_layout(title="CR-4: separation vs the Markov separation lam of pretraining "
                                "(small PT + ICL-finetune runs; line: mean, dots: seeds)")
        out["sep_vs_lam"] = save_figure(fig, Path(fig_dir) / "cr4_separation_vs_lam",
                                        width=1100)

    # probe accuracy per boundary (PT vs finetuned) and across finetuning
    fig = make_subplots(rows=1, cols=2, subplot_titles=[
        "per layer boundary (held-out test prompts)", "across ICL finetuning (chosen boundary)"])
    for p, colr in zip(phases, ["#7f7f7f", "#1f77b4", "#ff7f0e"]):
        labels = [row["label"] for row in r0["phases"][p]["layers"]]
        for key, dash in (("acc_pc", "solid"), ("acc_full", "dot")):
            vals = np.mean([[row[key] for row in r["phases"][p]["layers"]] for r in results], 0)
            fig.add_trace(go.Scatter(x=labels, y=vals.tolist(), mode="lines+markers",
                                     name=f"{titles[p]}, {'top-PC' if key == 'acc_pc' else 'full'}"
                                     , line=dict(color=colr, dash=dash)), 1, 1)
    for key, dash in (("acc_pc", "solid"), ("acc_full", "dot")):
        for r in results:
            fig.add_trace(go.Scatter(x=[row["step"] for row in r["curve"]],
                                     y=[row[key] for row in r["curve"]], mode="lines+markers",
                                     name=f"seed {r['seed']} {key}", showlegend=False,
                                     line=dict(color="#1f77b4", dash=dash)), 1, 2)
    fig.update_xaxes(title_text="ICL finetuning step", row=1, col=2)
    fig.update_yaxes(title_text="type probe accuracy", range=[0, 1.02])
    fig.update_layout(title="CR-4: type probe accuracy (solid: top-PC probe, dotted: full probe)")
    # HTML only: the overview figure carries the per-boundary curve into the report, and each
    # PNG export costs seconds of headless Chromium
    out["probe_layers"] = save_figure(fig, Path(fig_dir) / "cr4_probe_layers", width=1200,
                                      png=False)
    out["overview"] = save_figure(overview_figure(results), Path(fig_dir) / "cr4_overview",
                                  width=1400, height=900)
    return out


def overview_figure(results: list[dict[str, Any]]):
    """One figure for the report: PCA scatters (top row), separation vs K, vs lam, and the
    top-PC probe per boundary (bottom row)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    r0 = results[0]
    phases = [p for p in (PHASE_PT, PHASE_FT, PHASE_FT_GRM) if p in r0["pca"]]
    titles = {PHASE_PT: "PT only", PHASE_FT: "ICL-finetuned", PHASE_FT_GRM: "ICL+Grm-finetuned"}
    colors = {PHASE_PT: "#7f7f7f", PHASE_FT: "#1f77b4", PHASE_FT_GRM: "#ff7f0e"}
    lam_rows = [row for r in results for row in r.get("lam_sweep", [])]
    sub = [f"{titles[p]}: PCA at {r0['pca'][p]['boundary_label']} (top-PC probe "
           f"{r0['phases'][p]['acc_pc']:.2f})" for p in phases]
    sub += [""] * (3 - len(phases))
    sub += ["separation (type variance share) vs K", "separation vs pretraining lam",
            "top-PC probe accuracy per boundary"]
    fig = make_subplots(rows=2, cols=3, subplot_titles=sub, vertical_spacing=0.14)
    n_types = int(max(max(r0["pca"][p]["type"]) for p in phases)) + 1
    tcols = _type_colors(n_types)
    for j, p in enumerate(phases):
        d = r0["pca"][p]
        x, y, t = np.asarray(d["x"]), np.asarray(d["y"]), np.asarray(d["type"])
        _add_type_scatter(fig, x, y, t, tcols, 1, j + 1, legend=j == 0, size=4)
    for p in phases:
        ks = sorted({row["K"] for r in results for row in r["k_sweep"].get(p, [])})
        mean = [float(np.mean([row["type_variance_fraction"] for r in results
                               for row in r["k_sweep"].get(p, []) if row["K"] == k]))
                for k in ks]
        fig.add_trace(go.Scatter(x=ks, y=mean, mode="lines+markers", name=titles[p],
                                 legendgroup=p, line=dict(color=colors[p])), 2, 1)
        labels = [row["label"] for row in r0["phases"][p]["layers"]]
        acc = np.mean([[row["acc_pc"] for row in r["phases"][p]["layers"]] for r in results], 0)
        fig.add_trace(go.Scatter(x=labels, y=acc.tolist(), mode="lines+markers",
                                 name=titles[p], legendgroup=p, showlegend=False,
                                 line=dict(color=colors[p])), 2, 3)
    if lam_rows:
        lams = sorted({row["lam"] for row in lam_rows})
        for key, p in (("pt", PHASE_PT), ("ft", PHASE_FT)):
            fig.add_trace(go.Scatter(
                x=lams, y=[float(np.mean([row[f"{key}_type_variance_fraction"]
                                          for row in lam_rows if row["lam"] == lm]))
                           for lm in lams],
                mode="lines+markers", name=titles[p] + " (small runs)", legendgroup=p,
                showlegend=False, line=dict(color=colors[p])), 2, 2)
    fig.update_xaxes(title_text="demos K", row=2, col=1)
    fig.update_xaxes(title_text="lam", row=2, col=2)
    fig.update_xaxes(title_text="layer boundary", row=2, col=3)
    fig.update_yaxes(title_text="type variance share", row=2, col=1)
    fig.update_yaxes(title_text="type variance share", row=2, col=2)
    fig.update_yaxes(title_text="accuracy", range=[0, 1.02], row=2, col=3)
    fig.update_layout(title=f"CR-4: task vectors at the query position of held-out-subject ICL "
                            f"prompts (scatter: seed {r0['seed']}; lines: mean over seeds)")
    return fig


def add_taskvec_claim(summary: Summary, out_dir: Path, run_dirs: list[Path],
                      seeds: list[int], profile: str, params: TaskvecParams | None = None,
                      log=print) -> None:
    """Add claim CR-4 (and its tables and figures) for the CR runs ``run_dirs``.

    Run directories are matched to seeds by name (``seed<N>``); a seed without a complete run
    (phases pretrain and ft-icl) is skipped and named in the claim's notes. ``params``
    overrides the profile's sizes (tests use tiny ones).
    """
    from mechinterp_icr.store.rundir import RunDir

    P = params or params_for(profile)
    out_dir = Path(out_dir)
    by_name = {Path(p).name: Path(p) for p in run_dirs}
    results, skipped = [], []
    errors: dict[Any, str] = {}
    for i, seed in enumerate(seeds):
        path = by_name.get(f"seed{seed}")
        if path is None and len(run_dirs) == len(seeds):
            path = Path(run_dirs[i])
        run = RunDir(path) if path is not None and Path(path).is_dir() else None
        if run is None or run.latest(PHASE_PT) is None or run.latest(PHASE_FT) is None:
            skipped.append(seed)
            continue
        # a failure on one seed is reported in the claim, not allowed to stop the reproduction
        try:
            if getattr(run.read_config().task, "n_types", 0) < 2:
                skipped.append(seed)  # one attribute type: there is nothing to decode
                continue
            with summary.stage("cr4_taskvec"):
                res = analyse_seed(run.path, seed, P, log=log)
        except (ConfigError, ValueError, RuntimeError) as e:
            errors[seed] = f"{type(e).__name__}: {e}"
            continue
        if len(results) < P.lam_seeds and len(P.lams) >= 2:
            try:
                with summary.stage("cr4_lam_sweep"):
                    res["lam_sweep"] = lam_sweep(run.read_config(), out_dir, seed, P, log=log)
            except (ConfigError, ValueError, RuntimeError) as e:
                errors[f"lam sweep, seed {seed}"] = f"{type(e).__name__}: {e}"
        results.append(res)
        atomic_write_text(run.analyses_dir / "taskvec.json",
                          json.dumps(res, indent=2, default=_json))
    if not results:
        summary.add(Claim(id="CR-4", statement="Task vectors encode the type after finetuning "
                          "(not measured: no CR run directory with pretrain and ft-icl "
                          "checkpoints could be analysed)", metric="ft_acc_pc", op=">=",
                          threshold=P.pass_threshold,
                          notes=f"no usable runs for seeds {seeds}; errors: {errors}"))
        return
    claim = build_claim(results, P)
    if skipped:
        claim.notes += f" Seeds without a complete CR run, skipped: {skipped}."
    if errors:
        claim.notes += f" Errors: {errors}."
        claim.details["errors"] = {str(k): v for k, v in errors.items()}
    with summary.stage("cr4_figures"):
        figs = write_figures(results, out_dir / "figures")
    from mechinterp_icr.claims import ci95

    keys = ("ft_acc_pc", "ft_acc_full", "ft_transfer_acc_pc", "ft_acc_pc_by_subject",
            "pt_acc_pc", "pt_acc_full", "pt_transfer_acc_pc", "ft_shuffle_pc",
            "ft_shuffle_full", "ft_random_dir", "ft_type_variance_fraction",
            "pt_type_variance_fraction", "ft_transplant_success", "grm_acc_pc",
            "grm_transfer_acc_pc", "ft_rho_k")
    summ = {}
    for k in keys:
        vals = [m[k] for m in claim.per_seed.values() if isinstance(m.get(k), (int, float))]
        if vals:
            summ[k] = {"mean": float(np.mean(vals)), "ci95": list(ci95(vals))}
    claim.details = {**claim.details, "mean_and_ci95_over_seeds": summ,
                     "figures": figs, "params": {k: getattr(P, k) for k in
                                                 P.__dataclass_fields__},
                     "seconds": {str(r["seed"]): {
                         ph: v["seconds"] for ph, v in r["phases"].items()} for r in results}}
    summary.add(claim)
    summary.tables["cr4_layers"] = [
        {"seed": r["seed"], "phase": ph, **{k: row[k] for k in ("label", "acc_pc", "acc_full")}}
        for r in results for ph, v in r["phases"].items() for row in v["layers"]]
    summary.tables["cr4_k_sweep"] = [
        {"seed": r["seed"], "phase": ph,
         **{k: v for k, v in row.items() if k != "type_variance_fraction_by_boundary"}}
        for r in results for ph, rows in r["k_sweep"].items() for row in rows]
    summary.tables["cr4_lam_sweep"] = [row for r in results for row in r.get("lam_sweep", [])]
    summary.tables["cr4_transplant"] = [{"seed": r["seed"], "phase": ph, **row}
                                        for r in results for ph, v in r["phases"].items()
                                        for row in v["transplant"]]
    summary.tables["cr4_curve"] = [{"seed": r["seed"], **row} for r in results
                                   for row in r["curve"]]


def _json(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


# --------------------------------------------------------------------------------------------
# Entry points of the probes/ scripts
# --------------------------------------------------------------------------------------------
def probe_run(run_path: Path, selection: str, P: TaskvecParams, seed: int = 0,
              full: bool = True, umap: bool = False, out_dir: Path | None = None,
              with_k: bool = False, log=print) -> dict[str, Any]:
    """CR-4 numbers for every checkpoint of ``selection`` in one CR run directory.

    Writes ``<run>/analyses/task_vectors.json`` and figures (PCA scatter per checkpoint, and a
    UMAP view with ``umap``) into ``out_dir`` (default ``<run>/analyses``).
    """
    from plotly.subplots import make_subplots

    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir
    from mechinterp_icr.viz.figures import save_figure

    run = RunDir(run_path)
    _, task, build = load_run_model(run)
    out_dir = Path(out_dir) if out_dir is not None else run.analyses_dir
    rows, views = [], []
    for ck, model in run.iter_models(selection, build):
        r = analyse_checkpoint(model, task, seed, P, full=full)
        r.update({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step})
        if with_k:
            r["k_sweep"] = separation_vs_k(model, task, seed, P, r["boundary"])
        rows.append(r)
        H = _tvset(model, task, 400, seed, 9, task.heldout_subjects)
        X = H.at(r["boundary"])
        Z = tv.umap_embed(X, seed=seed) if umap else tv.pca(X, 2).transform(X)
        views.append((ck.name, r, Z, H.types))
        if log:
            extra = (f", transfer {r['transfer_acc_pc']:.3f}, shuffle {r['acc_shuffle_pc']:.3f}"
                     f", random dirs {r['acc_random_dir']:.3f}, type var "
                     f"{r['geom_type_variance_fraction']:.3f}" if full else "")
            log(f"{ck.name:24s} boundary {r['boundary_label']:5s} top-PC {r['acc_pc']:.3f} "
                f"full {r['acc_full']:.3f}{extra}  (model ICL exact {r['icl_exact']:.3f})")
    shown = views if len(views) <= 4 else [views[int(i)] for i in
                                            np.linspace(0, len(views) - 1, 4).round()]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=[
        f"{name} ({r['boundary_label']}, top-PC {r['acc_pc']:.2f})" for name, r, _, _ in shown])
    n_types = task.cfg.n_types
    cols = _type_colors(n_types)
    for j, (_name, _r, Z, t) in enumerate(shown):
        _add_type_scatter(fig, Z[:, 0], Z[:, 1], t, cols, 1, j + 1, legend=j == 0, size=5)
    kind = "UMAP" if umap else "PCA"
    fig.update_layout(title=f"Task vectors of held-out-subject ICL prompts ({kind}), coloured "
                            "by attribute type")
    figs = save_figure(fig, out_dir / f"task_vectors_{kind.lower()}", width=380 * len(shown) + 200,
                       height=460)
    result = {"run": str(run.path), "selection": selection, "rows": rows, "figures": figs,
              "params": {k: getattr(P, k) for k in P.__dataclass_fields__}}
    atomic_write_text(out_dir / "task_vectors.json", json.dumps(result, indent=2, default=_json))
    return result
