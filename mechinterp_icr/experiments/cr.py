"""Reproduction of paper CR (claims CR-1, CR-2, CR-3; SPEC section 1).

Per seed, in ``<out>/runs/cr/seed<N>/``:

1. ``pretrain`` (phase order 0): the 2-layer, 1-head model on PT over all subjects.
2. From the same PT weights, finetuning branches on the **finetune subjects only**:
   ``ft-icl`` (1) on ICL and ``ft-iclgrm`` (2) on ICL+Grm with the default trainable set
   (attention only), and the all-weights arms ``ft-icl-allw`` (3) / ``ft-iclgrm-allw`` (4).
3. Evaluation of every phase's final model: PT factual recall (typed, restricted with its
   Bayes ceiling, exact) on finetune and held-out subjects, and ICL / ICL+Grm accuracy
   (exact, type, restricted) on held-out and finetune subjects per number of demos K.
   A smaller held-out evaluation runs at every checkpoint (``metrics.jsonl`` / sidecars).
4. The CR-3 sweep: ICL+Grm finetuning under other settings of the open choices, evaluated
   on plain ICL on held-out subjects. Settings that only change finetuning reuse the PT
   weights of step 1; settings that change PT (word order, lam, ...) pretrain their own
   model in ``<out>/runs/cr-sweep/<label>/seed<N>/``.

Profiles: ``quick`` (3 seeds in a few minutes on 2 CPU cores) and ``paper`` (the prototype's
sizes and a larger sweep). Everything is overridable with ``--set``: ``task.*``, ``model.*``,
``pretrain.*``, ``finetune.*`` and the experiment's own fields (``allweights_arm``, ``eval_n``,
``eval_ks``, ``sweep``, ``sweep_seeds``, ``threads``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechinterp_icr.claims import Claim, Summary, ci95
from mechinterp_icr.config import (
    ConfigError,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    check,
    check_range,
    parse_overrides,
    to_dict,
)
from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.cr import CRTask, CRTaskConfig, evaluate_icl, evaluate_pt
from mechinterp_icr.training.loop import train_phase

__all__ = [
    "BRANCHES",
    "PROFILES",
    "CRExperimentConfig",
    "parse_sweep_setting",
    "profile_config",
    "reproduce",
    "run_seed",
    "run_sweep_setting",
    "validate",
]

# phase name -> (phase order, ICL+Grm format?, all weights?)
BRANCHES = {
    "ft-icl": (1, False, False),
    "ft-iclgrm": (2, True, False),
    "ft-icl-allw": (3, False, True),
    "ft-iclgrm-allw": (4, True, True),
}
# task fields that change the pretraining data (a sweep setting touching one pretrains anew)
PT_FIELDS = {"n_subjects", "n_grammar", "n_types", "n_values", "lam", "dirichlet_alpha",
             "shared_alpha", "grammar_len_min", "grammar_len_max", "order", "n_tuples"}


@dataclass(frozen=True)
class CRExperimentConfig:
    """Everything the CR reproduction runs; ``--set key=value`` edits it (validated)."""

    task: CRTaskConfig = field(default_factory=CRTaskConfig)
    model: ModelConfig = field(default_factory=lambda: CRTaskConfig().default_model())
    pretrain: TrainConfig = field(default_factory=TrainConfig)
    finetune: TrainConfig = field(default_factory=lambda: TrainConfig(trainable="attention"))
    allweights_arm: bool = True  # also run the all-weights arm of the ICL branch (CR-2)
    allweights_iclgrm: bool = True  # ... and of the ICL+Grm branch (CR-3)
    allweights_trainable: str = "all"
    eval_n: int = 512  # sequences per evaluation cell at the end of each phase
    eval_ks: tuple = (1, 2, 4, 8)  # numbers of demos evaluated at the end
    ckpt_eval_n: int = 256  # sequences per evaluation at each checkpoint
    sweep: tuple = ()  # CR-3 sweep settings: "label|task.k=v,finetune.k=v"
    sweep_seeds: int = 3  # the sweep runs on the first this-many seeds
    threads: int = 0  # torch threads during the CR target (0 = leave as is; restored after)

    def __post_init__(self) -> None:
        check(isinstance(self.allweights_arm, bool), "allweights_arm", self.allweights_arm,
              "true or false")
        check(isinstance(self.allweights_iclgrm, bool), "allweights_iclgrm",
              self.allweights_iclgrm, "true or false")
        check(isinstance(self.allweights_trainable, str) and self.allweights_trainable != "",
              "allweights_trainable", self.allweights_trainable, "a trainable preset")
        check_range("eval_n", self.eval_n, 1, 1_000_000, integer=True)
        check_range("ckpt_eval_n", self.ckpt_eval_n, 1, 1_000_000, integer=True)
        ks = tuple(self.eval_ks)
        object.__setattr__(self, "eval_ks", ks)
        check(len(ks) > 0 and all(isinstance(k, int) and not isinstance(k, bool) and
                                  1 <= k <= self.task.max_demos for k in ks),
              "eval_ks", list(ks), f"integers in [1, task.max_demos = {self.task.max_demos}]")
        object.__setattr__(self, "sweep", tuple(self.sweep))
        check(all(isinstance(s, str) for s in self.sweep), "sweep", list(self.sweep),
              "a list of strings 'label|task.key=value,finetune.key=value'")
        check_range("sweep_seeds", self.sweep_seeds, 0, 1000, integer=True)
        check_range("threads", self.threads, 0, 256, integer=True)


# ------------------------------------------------------------------------------------------------
# Profiles
# ------------------------------------------------------------------------------------------------
def _base(ft_steps: int, pt_steps: int, pt_lr: float) -> CRExperimentConfig:
    task = CRTaskConfig()
    model = replace(task.default_model(), n_ctx=64)  # headroom for longer sweep formats
    pretrain = TrainConfig(steps=pt_steps, batch_size=64, lr=pt_lr, optimizer="adamw",
                           eval_every=0, checkpoint_schedule="linear",
                           checkpoint_every=max(1, pt_steps // 4), progress=False)
    finetune = TrainConfig(steps=ft_steps, batch_size=128, lr=1e-3, trainable="attention",
                           eval_every=0, checkpoint_schedule="log", checkpoint_dense_until=10,
                           checkpoint_every=max(1, ft_steps // 4), progress=False)
    # One torch thread: for a model this small, intra-op threading costs more CPU than it
    # saves, and under load it was 3x slower (550 s CPU with 2 threads vs 189 s with 1).
    return CRExperimentConfig(task=task, model=model, pretrain=pretrain, finetune=finetune,
                              threads=1)


QUICK_SWEEP = (
    "default (gsa, shared chain, len 1-2)|",
    "type-chain grammar|task.iclgrm_chain=type",
    "len 0-2|task.iclgrm_len_min=0",
    "sga order, type chain|task.order=sga,task.iclgrm_chain=type",
)
PAPER_SWEEP = QUICK_SWEEP[:3] + (
    "no query grammar|task.iclgrm_query_grammar=false",
    "uniform grammar|task.iclgrm_chain=uniform",
    "type chain, len 0-2|task.iclgrm_chain=type,task.iclgrm_len_min=0",
    "all weights|finetune.trainable=all",
    "loss on all demo attributes|task.icl_loss=all",
    "short finetune (100 steps)|finetune.steps=100",
    "sga order, type chain|task.order=sga,task.iclgrm_chain=type",
    "sga order, shared chain|task.order=sga",
    ("sga order, type chain, no query grammar|task.order=sga,task.iclgrm_chain=type,"
     "task.iclgrm_query_grammar=false"),
    "sga order, type chain, len 0-2|task.order=sga,task.iclgrm_chain=type,task.iclgrm_len_min=0",
    "lam 0.1|task.lam=0.1",
    "lam 0.5|task.lam=0.5",
)


def profile_config(profile: str) -> CRExperimentConfig:
    if profile == "quick":
        return replace(_base(ft_steps=200, pt_steps=500, pt_lr=2e-3), sweep=QUICK_SWEEP,
                       eval_n=512, ckpt_eval_n=128, sweep_seeds=3, allweights_iclgrm=False)
    if profile == "paper":
        return replace(_base(ft_steps=300, pt_steps=3000, pt_lr=1e-3), sweep=PAPER_SWEEP,
                       eval_n=1024, sweep_seeds=3)
    raise ConfigError(f"--profile = {profile!r} is not allowed; expected one of "
                      f"{sorted(PROFILES)}")


PROFILES = ("quick", "paper")


def parse_sweep_setting(setting: str) -> tuple[str, dict[str, Any]]:
    """'label|task.a=1,finetune.b=x' -> (label, {'task.a': 1, 'finetune.b': 'x'})."""
    label, sep, rest = setting.partition("|")
    if not sep:
        label, rest = setting, setting
    items = [p.strip() for p in rest.split(",") if p.strip()]
    ov = parse_overrides(items)
    for k in ov:
        check(k.split(".")[0] in ("task", "finetune") and k.count(".") == 1, "sweep", setting,
              "settings whose keys are task.<field> or finetune.<field>")
    return label.strip() or "default", ov


def _slug(label: str) -> str:
    keep = "".join(ch if ch.isalnum() else "-" for ch in label.lower())
    return "-".join(p for p in keep.split("-") if p)[:60] or "default"


def resolve(profile: str, overrides) -> CRExperimentConfig:
    cfg = apply_overrides(profile_config(profile), overrides or [])
    _check_fits(cfg)
    specs = {("pretrain.trainable", cfg.pretrain.trainable),
             ("finetune.trainable", cfg.finetune.trainable),
             ("allweights_trainable", cfg.allweights_trainable)}
    for s in cfg.sweep:
        _, scfg, _ = _sweep_config(cfg, s)  # validates every sweep setting before any work
        specs.add((f"sweep setting {s!r}: finetune.trainable", scfg.finetune.trainable))
    _check_trainable(cfg, sorted(specs))
    return cfg


def _check_trainable(cfg: CRExperimentConfig, specs) -> None:
    """Trainable patterns must match parameters of the model (checked on a CPU instance)."""
    from mechinterp_icr.training.loop import resolve_trainable

    task = cfg.task.build(0)
    model = build_model(_model_cfg(cfg, task), seed=0, device="cpu")
    for name, spec in specs:
        try:
            resolve_trainable(model, spec)
        except ConfigError as e:
            raise ConfigError(f"{name}: {e}") from None


def _check_fits(cfg: CRExperimentConfig) -> None:
    task = cfg.task.build(0)
    m = cfg.model
    if m.n_ctx and m.n_ctx < task.n_ctx:
        raise ConfigError(f"model.n_ctx = {m.n_ctx} is not allowed; the task's longest sequence "
                          f"is {task.n_ctx} tokens (PT {task.pt_len}, ICL+Grm with "
                          f"task.max_demos = {cfg.task.max_demos} demos "
                          f"{task.icl_len[True]}); expected >= {task.n_ctx}")
    if m.d_vocab and m.d_vocab != task.d_vocab:
        raise ConfigError(f"model.d_vocab = {m.d_vocab} is not allowed; the task's vocabulary "
                          f"has {task.d_vocab} tokens (use 0 to take it from the task)")


def _model_cfg(cfg: CRExperimentConfig, task: CRTask) -> ModelConfig:
    m = cfg.model
    return replace(m, d_vocab=task.d_vocab, n_ctx=m.n_ctx or task.n_ctx)


def _sweep_config(cfg: CRExperimentConfig, setting: str) -> tuple[str, CRExperimentConfig, bool]:
    """(label, experiment config of the setting, needs its own pretraining)."""
    label, ov = parse_sweep_setting(setting)
    try:
        scfg = apply_overrides(cfg, ov)
    except ConfigError as e:
        raise ConfigError(f"sweep setting {setting!r}: {e}") from None
    own_pt = any(k.startswith("task.") and k.split(".")[1] in PT_FIELDS and
                 getattr(scfg.task, k.split(".")[1]) != getattr(cfg.task, k.split(".")[1])
                 for k in ov)
    t_main, t_new = cfg.task.build(0), scfg.task.build(0)
    n_ctx = _model_cfg(cfg, t_main).n_ctx
    if t_new.n_ctx > n_ctx and not (own_pt and scfg.model.n_ctx == 0):
        raise ConfigError(f"sweep setting {setting!r} is not allowed: its sequences are up to "
                          f"{t_new.n_ctx} tokens but model.n_ctx = {n_ctx}; raise model.n_ctx")
    return label, scfg, own_pt


def validate(profile: str, seeds: list[int], overrides) -> CRExperimentConfig:
    """Resolve and validate the whole configuration; raise ConfigError before any work."""
    check(isinstance(seeds, (list, tuple)) and len(seeds) > 0, "--seeds", seeds,
          "at least one seed")
    return resolve(profile, overrides)


# ------------------------------------------------------------------------------------------------
# One seed
# ------------------------------------------------------------------------------------------------
def _ckpt_eval(task: CRTask, seed: int, n: int):
    """Small held-out evaluation logged at every checkpoint."""

    def fn(model) -> dict[str, float]:
        out = {}
        r = evaluate_icl(model, task, [seed, 101], task.heldout_subjects, task.cfg.n_demos, n)
        out.update({f"heldout_icl_{k}": v for k, v in r.items()
                    if k in ("exact", "type", "restricted")})
        r = evaluate_icl(model, task, [seed, 102], task.heldout_subjects, task.cfg.n_demos, n,
                         grammar=True)
        out["heldout_iclgrm_exact"] = r["exact"]
        r = evaluate_icl(model, task, [seed, 103], task.finetune_subjects, task.cfg.n_demos, n)
        out["finetune_icl_exact"] = r["exact"]
        r = evaluate_pt(model, task, [seed, 104], None, max(16, n // 4))
        out.update({f"pt_{k}": v for k, v in r.items() if k in ("typed", "restricted", "exact")})
        return out

    return fn


def full_eval(model, task: CRTask, seed: int, ks, n: int) -> list[dict[str, Any]]:
    """Rows (split, format, K, exact, type, restricted, typed, restricted_type)."""
    rows = []
    splits = {"heldout": task.heldout_subjects, "finetune": task.finetune_subjects}
    for si, (split, subs) in enumerate(splits.items()):
        r = evaluate_pt(model, task, [seed, 200, si], subs, max(64, n // 2))
        rows.append({"split": split, "format": "pt", "K": None, **r})
        for gi, fmt in enumerate(("icl", "iclgrm")):
            for K in ks:
                r = evaluate_icl(model, task, [seed, 300, si, gi, K], subs, K, n,
                                 grammar=fmt == "iclgrm")
                rows.append({"split": split, "format": fmt, "K": K, **r})
    return rows


def _pick(rows, split, fmt, K=None, key="exact"):
    for r in rows:
        if r["split"] == split and r["format"] == fmt and (K is None or r["K"] == K):
            return r[key]
    return float("nan")


def finetune_sampler(task: CRTask, grammar: bool):
    """The finetuning data of a branch: ICL or ICL+Grm over the finetune subjects only."""
    subs = task.finetune_subjects

    def sample(rng, bs):
        return task.sample_icl(rng, bs, subjects=subs, grammar=grammar)

    return sample


def _train_branch(cfg, task, rc, run, pt_state, phase, order, grammar, trainable, seed,
                  ft_cfg=None):
    ft = replace(ft_cfg or cfg.finetune, trainable=trainable)
    if ft_cfg is None and phase.endswith("-allw"):
        ft = replace(ft, checkpoint_schedule="none")  # the comparison arm: start and end only
    model = build_model(rc.model, seed=seed)
    model.load_state_dict(pt_state)
    subs = task.finetune_subjects
    res = train_phase(model, finetune_sampler(task, grammar), ft, run, phase, seed,
                      run_config=replace(rc, train=ft),
                      eval_fn=_ckpt_eval(task, seed, cfg.ckpt_eval_n), phase_order=order,
                      extra_meta={"finetune_format": "iclgrm" if grammar else "icl",
                                  "finetune_subjects": subs.tolist()})
    return model, res


def _pretrain(cfg, task, rc, run, seed):
    model = build_model(rc.model, seed=seed)
    res = train_phase(model, lambda rng, bs: task.sample_pt(rng, bs), cfg.pretrain, run,
                      "pretrain", seed, run_config=rc,
                      eval_fn=_ckpt_eval(task, seed, cfg.ckpt_eval_n), phase_order=0)
    return model, res


def run_config_for(cfg: CRExperimentConfig, seed: int, name: str) -> tuple[RunConfig, CRTask]:
    task = cfg.task.build(seed)
    rc = RunConfig(name=name, seed=seed, task=cfg.task, model=_model_cfg(cfg, task),
                   train=cfg.pretrain)
    return rc, task


def run_seed(cfg: CRExperimentConfig, out_dir: Path, seed: int, summary: Summary | None = None
             ) -> dict[str, Any]:
    """Pretrain + all branches + evaluation for one seed; returns per-phase eval rows."""
    stage = summary.stage if summary is not None else _nullstage
    rc, task = run_config_for(cfg, seed, f"seed{seed}")
    run = RunDir.open_for(Path(out_dir) / "runs" / "cr" / f"seed{seed}", rc)
    result: dict[str, Any] = {"seed": seed, "task": task.describe(), "phases": {},
                              "seconds": {}}
    t = time.perf_counter()
    with stage("pretrain"):
        model, _ = _pretrain(cfg, task, rc, run, seed)
    result["seconds"]["pretrain"] = time.perf_counter() - t
    pt_state = {k: v.clone() for k, v in model.state_dict().items()}
    with stage("evaluate"):
        result["phases"]["pretrain"] = full_eval(model, task, seed, cfg.eval_ks, cfg.eval_n)
    for phase, (order, grammar, allw) in BRANCHES.items():
        if allw and not (cfg.allweights_iclgrm if grammar else cfg.allweights_arm):
            continue
        trainable = cfg.allweights_trainable if allw else cfg.finetune.trainable
        t = time.perf_counter()
        with stage("finetune"):
            model, _ = _train_branch(cfg, task, rc, run, pt_state, phase, order, grammar,
                                     trainable, seed)
        result["seconds"][phase] = time.perf_counter() - t
        with stage("evaluate"):
            result["phases"][phase] = full_eval(model, task, seed, cfg.eval_ks, cfg.eval_n)
    result["pt_state"] = pt_state
    return result


class _nullstage:
    def __init__(self, name):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _pt_key(cfg: CRExperimentConfig) -> str:
    """Identity of the pretraining (task PT fields, model, pretrain config)."""
    t = {k: getattr(cfg.task, k) for k in sorted(PT_FIELDS)}
    return json.dumps([t, to_dict(cfg.model), to_dict(cfg.pretrain)], sort_keys=True)


def run_sweep_setting(cfg: CRExperimentConfig, setting: str, out_dir: Path, seed: int,
                      pt_state: dict | None, main: dict | None = None,
                      pt_cache: dict | None = None) -> dict[str, Any]:
    """ICL+Grm finetuning under one sweep setting for one seed; held-out plain ICL and
    ICL+Grm accuracy. Reuses ``pt_state`` unless the setting changes the PT data."""
    label, scfg, own_pt = _sweep_config(cfg, setting)
    spec = setting.partition("|")[2] if "|" in setting else setting
    if main is not None and not parse_sweep_setting(setting)[1]:
        # the default setting is the main ft-iclgrm branch: reuse its evaluation
        rows, K = main["phases"]["ft-iclgrm"], cfg.task.n_demos
        return {"setting": label, "spec": spec, "seed": seed, "own_pretrain": False,
                "heldout_icl_exact": _pick(rows, "heldout", "icl", K),
                "heldout_icl_type": _pick(rows, "heldout", "icl", K, "type"),
                "heldout_iclgrm_exact": _pick(rows, "heldout", "iclgrm", K),
                "pt_typed_after": float(np.mean([_pick(rows, sp, "pt", key="typed")
                                                 for sp in ("heldout", "finetune")])),
                "seconds": 0.0}
    rc, task = run_config_for(scfg, seed, f"seed{seed}")
    if not own_pt:
        rc = replace(rc, model=_model_cfg(cfg, cfg.task.build(seed)))
    elif scfg.model.n_ctx == cfg.model.n_ctx and task.n_ctx > rc.model.n_ctx:
        rc = replace(rc, model=replace(rc.model, n_ctx=task.n_ctx))
    run = RunDir.open_for(Path(out_dir) / "runs" / "cr-sweep" / _slug(label) / f"seed{seed}", rc)
    t = time.perf_counter()
    if own_pt and pt_cache is not None and _pt_key(scfg) in pt_cache:
        pt_state = pt_cache[_pt_key(scfg)]  # same PT as an earlier setting of this seed
    elif own_pt or pt_state is None:
        model, _ = _pretrain(scfg, task, rc, run, seed)
        pt_state = {k: v.clone() for k, v in model.state_dict().items()}
        if pt_cache is not None:
            pt_cache[_pt_key(scfg)] = pt_state
    pt_icl = None
    if own_pt:
        # CR-1 under this setting's pretraining: held-out plain ICL of the PT-only model
        pt_model = build_model(rc.model, seed=seed)
        pt_model.load_state_dict(pt_state)
        pt_icl = evaluate_icl(pt_model, task, [seed, 399], task.heldout_subjects,
                              scfg.task.n_demos, cfg.eval_n)["exact"]
    ft = replace(scfg.finetune, checkpoint_schedule="none")
    model, _ = _train_branch(scfg, task, rc, run, pt_state, "ft-iclgrm", 2, True,
                             scfg.finetune.trainable, seed, ft_cfg=ft)
    n = cfg.eval_n
    K = scfg.task.n_demos
    icl = evaluate_icl(model, task, [seed, 400], task.heldout_subjects, K, n)
    grm = evaluate_icl(model, task, [seed, 401], task.heldout_subjects, K, n, grammar=True)
    ptr = evaluate_pt(model, task, [seed, 402], None, max(64, n // 2))
    return {"setting": label, "spec": spec, "seed": seed, "own_pretrain": own_pt,
            "heldout_icl_exact": icl["exact"], "heldout_icl_type": icl["type"],
            "heldout_iclgrm_exact": grm["exact"], "pt_typed_after": ptr["typed"],
            "pt_only_heldout_icl_exact": pt_icl,
            "seconds": time.perf_counter() - t}


def run_sweep(cfg: CRExperimentConfig, out_dir: Path, seeds, settings, log=None
              ) -> list[dict[str, Any]]:
    """Standalone CR-3 sweep (``analyses/cr_sweep.py``): pretrain (or resume) the main PT run
    of each seed, then ICL+Grm-finetune every setting from it; one JSON row per (setting,
    seed) appended to ``log`` as it finishes."""
    for s in settings:
        _sweep_config(cfg, s)
    rows = []
    for seed in seeds:
        rc, task = run_config_for(cfg, seed, f"seed{seed}")
        run = RunDir.open_for(Path(out_dir) / "runs" / "cr" / f"seed{seed}", rc)
        model, _ = _pretrain(cfg, task, rc, run, seed)
        pt_state = {k: v.clone() for k, v in model.state_dict().items()}
        cache = {_pt_key(cfg): pt_state}
        for setting in settings:
            _, scfg, _own = _sweep_config(cfg, setting)
            row = run_sweep_setting(cfg, setting, out_dir, seed, cache.get(_pt_key(scfg)),
                                    pt_cache=cache)
            rows.append(row)
            if log is not None:
                with open(log, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    return rows


def sweep_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate per-seed sweep rows into (setting, seeds, held-out ICL, held-out ICL+Grm)."""
    out = []
    for label in dict.fromkeys(r["setting"] for r in rows):
        rs = [r for r in rows if r["setting"] == label]
        icl = [r["heldout_icl_exact"] for r in rs]
        grm = [r["heldout_iclgrm_exact"] for r in rs]
        out.append({"setting": label, "spec": rs[0]["spec"], "seeds": [r["seed"] for r in rs],
                    "heldout_icl_exact_mean": float(np.mean(icl)),
                    "heldout_icl_exact_ci95": list(ci95(icl)),
                    "heldout_icl_exact_per_seed": icl,
                    "heldout_iclgrm_exact_mean": float(np.mean(grm)),
                    "heldout_iclgrm_exact_per_seed": grm,
                    "pt_typed_after_mean": float(np.mean([r["pt_typed_after"] for r in rs])),
                    "pt_only_heldout_icl_exact_mean": (
                        float(np.mean([r["pt_only_heldout_icl_exact"] for r in rs]))
                        if all(r.get("pt_only_heldout_icl_exact") is not None for r in rs)
                        else None),
                    "own_pretrain": rs[0]["own_pretrain"]})
    return out


# ------------------------------------------------------------------------------------------------
# Claims
# ------------------------------------------------------------------------------------------------
def _claims(cfg: CRExperimentConfig, results: list[dict[str, Any]], sweep: list[dict]
            ) -> list[Claim]:
    K = cfg.task.n_demos
    L = cfg.task.n_types
    c1, c2, c3 = {}, {}, {}
    for r in results:
        s = str(r["seed"])
        pt = r["phases"]["pretrain"]
        typed = float(np.mean([_pick(pt, sp, "pt", key="typed") for sp in ("heldout",
                                                                             "finetune")]))
        restricted = float(np.mean([_pick(pt, sp, "pt", key="restricted")
                                    for sp in ("heldout", "finetune")]))
        exact = float(np.mean([_pick(pt, sp, "pt", key="exact") for sp in ("heldout",
                                                                           "finetune")]))
        c1[s] = {"pt_typed_recall": typed, "pt_restricted_recall": restricted,
                 "pt_exact_recall": exact, "bayes_ceiling": r["task"]["bayes_ceiling_pt"],
                 "separation_tv": r["task"]["tv_transition"],
                 "heldout_icl_exact": _pick(pt, "heldout", "icl", K),
                 "heldout_icl_type": _pick(pt, "heldout", "icl", K, "type"),
                 "heldout_icl_best_attr_type": _pick(pt, "heldout", "icl", K,
                                                     "restricted_type"),
                 "type_chance": 1.0 / L}
        for phase, dst in (("ft-icl", c2), ("ft-iclgrm", c3)):
            rows = r["phases"][phase]
            d = {"heldout_icl_exact": _pick(rows, "heldout", "icl", K),
                 "heldout_icl_type": _pick(rows, "heldout", "icl", K, "type"),
                 "heldout_icl_restricted": _pick(rows, "heldout", "icl", K, "restricted"),
                 "finetune_icl_exact": _pick(rows, "finetune", "icl", K),
                 "heldout_iclgrm_exact": _pick(rows, "heldout", "iclgrm", K),
                 "pt_typed_after": np.mean([_pick(rows, sp, "pt", key="typed")
                                            for sp in ("heldout", "finetune")]),
                 "heldout_icl_exact_by_K": {str(k): _pick(rows, "heldout", "icl", k)
                                            for k in cfg.eval_ks}}
            aw = phase + "-allw"
            if aw in r["phases"]:
                d["allweights_heldout_icl_exact"] = _pick(r["phases"][aw], "heldout", "icl", K)
                d["allweights_pt_typed_after"] = float(np.mean(
                    [_pick(r["phases"][aw], sp, "pt", key="typed")
                     for sp in ("heldout", "finetune")]))
            dst[s] = {k: float(v) if isinstance(v, (np.floating, float)) else v
                      for k, v in d.items()}
    icl_mean = float(np.mean([v["heldout_icl_exact"] for v in c1.values()]))
    type_mean = float(np.mean([v["heldout_icl_best_attr_type"] for v in c1.values()]))
    claim1 = Claim(
        "CR-1",
        "PT-only model: facts are stored (typed recall >= 0.95; restricted recall reported "
        "beside its Bayes ceiling) but contextual recall is absent (held-out ICL exact <= 0.10, "
        "type of the best attribute guess near chance)",
        metric="pt_typed_recall", op=">=", threshold=0.95, per_seed=c1,
        extra_checks={f"held-out ICL exact (K={K}) mean {icl_mean:.3f} <= 0.10":
                      icl_mean <= 0.10,
                      f"type of best attribute guess {type_mean:.3f} within 0.10 of chance "
                      f"{1.0 / L:.3f}": abs(type_mean - 1.0 / L) <= 0.10},
        details={"heldout_icl_exact_mean": icl_mean,
                 "order": cfg.task.order,
                 "pt_only_heldout_icl_exact_other_pretraining": {
                     r["setting"]: r["pt_only_heldout_icl_exact_mean"] for r in sweep
                     if r.get("pt_only_heldout_icl_exact_mean") is not None},
                 "best_attr_type_acc_mean": type_mean, "type_chance": 1.0 / L,
                 "best_attr_type_minus_chance": type_mean - 1.0 / L},
        notes=f"Restricted recall is bounded by the Bayes ceiling of reading the type from the "
              f"grammar; the type of the PT model's best attribute guess on ICL is "
              f"{type_mean:.3f} vs chance {1.0 / L:.3f}. In the gsa order a subject is always "
              f"followed by its attribute, so the PT model answers the query subject's "
              f"attribute of a guessed type (exact about the type-guess rate); in the sga "
              f"order it predicts grammar (exact 0): see "
              f"details.pt_only_heldout_icl_exact_other_pretraining and docs/cr.md.",
        figure="figures/cr_icl_by_k.html")
    aw2 = [v.get("allweights_heldout_icl_exact") for v in c2.values()]
    claim2 = Claim(
        "CR-2",
        "ICL finetuning on a subject subset (attention only) gives held-out ICL exact accuracy "
        ">= 0.90",
        metric="heldout_icl_exact", op=">=", threshold=0.90, per_seed=c2,
        details={"trainable": cfg.finetune.trainable,
                 "allweights_arm_mean": float(np.mean(aw2)) if None not in aw2 else None},
        notes="The all-weights arm is reported per seed (allweights_heldout_icl_exact).",
        figure="figures/cr_icl_by_k.html")
    claim3 = Claim(
        "CR-3",
        "ICL+Grm finetuning on a subject subset, evaluated on plain ICL on held-out subjects: "
        "exact accuracy >= 0.80 (transfer across formats)",
        metric="heldout_icl_exact", op=">=", threshold=0.80, per_seed=c3,
        details={"default_setting": {"order": cfg.task.order,
                                     "iclgrm_chain": cfg.task.iclgrm_chain,
                                     "iclgrm_len": [cfg.task.iclgrm_len_min,
                                                    cfg.task.iclgrm_len_max],
                                     "iclgrm_query_grammar": cfg.task.iclgrm_query_grammar,
                                     "lam": cfg.task.lam,
                                     "trainable": cfg.finetune.trainable,
                                     "finetune_steps": cfg.finetune.steps},
                 "sweep": sweep},
        notes="Transfer across the sweep is in tables['CR-3 sweep'] and docs/cr.md.",
        figure="figures/cr3_sweep.html")
    return [claim1, claim2, claim3]


# ------------------------------------------------------------------------------------------------
# Figures
# ------------------------------------------------------------------------------------------------
def _figures(cfg, results, sweep, fig_dir: Path) -> dict[str, Any]:
    try:
        import plotly.graph_objects as go

        from mechinterp_icr.viz.figures import save_figure
    except ImportError as e:  # pragma: no cover
        return {"error": str(e)}
    out = {}
    fig = go.Figure()
    for phase in ["pretrain"] + [p for p in BRANCHES if p in results[0]["phases"]]:
        for fmt, dash in (("icl", "solid"),):
            means, los, his = [], [], []
            for K in cfg.eval_ks:
                vals = [_pick(r["phases"][phase], "heldout", fmt, K) for r in results]
                lo, hi = ci95(vals)
                means.append(float(np.mean(vals)))
                los.append(means[-1] - lo)
                his.append(hi - means[-1])
            fig.add_trace(go.Scatter(x=list(cfg.eval_ks), y=means, name=phase, mode="lines+markers",
                                     line={"dash": dash},
                                     error_y={"type": "data", "symmetric": False,
                                              "array": his, "arrayminus": los}))
    fig.update_layout(title="CR: held-out plain-ICL exact accuracy by number of demos K "
                            f"(mean, 95% CI over {len(results)} seeds)",
                      xaxis_title="K (demos)", yaxis_title="exact accuracy",
                      yaxis_range=[-0.02, 1.02])
    out["cr_icl_by_k"] = save_figure(fig, fig_dir / "cr_icl_by_k")
    # finetuning dynamics from the checkpoint evaluations (metrics.jsonl), mean over seeds
    curves: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in results:
        run = RunDir(Path(fig_dir).parent / "runs" / "cr" / f"seed{r['seed']}")
        for m in run.read_metrics():
            for key in ("heldout_icl_exact", "heldout_iclgrm_exact", "pt_restricted"):
                if m.get("phase") in ("ft-icl", "ft-iclgrm") and key in m:
                    curves.setdefault((m["phase"], key), {}).setdefault(
                        int(m["step"]), []).append(float(m[key]))
    if curves:
        fig = go.Figure()
        names = {"heldout_icl_exact": "held-out plain ICL",
                 "heldout_iclgrm_exact": "held-out ICL+Grm", "pt_restricted": "PT restricted"}
        dashes = {"heldout_icl_exact": "solid", "heldout_iclgrm_exact": "dash",
                  "pt_restricted": "dot"}
        for (phase, key), by_step in sorted(curves.items()):
            steps = sorted(by_step)
            fig.add_trace(go.Scatter(x=[max(s, 0.5) for s in steps],
                                     y=[float(np.mean(by_step[s])) for s in steps],
                                     mode="lines+markers", name=f"{phase}: {names[key]}",
                                     line={"dash": dashes[key]},
                                     marker={"size": 4}))
        fig.update_layout(title="CR finetuning dynamics (checkpoint evaluations, mean over "
                                f"{len(results)} seeds; step 0 drawn at 0.5)",
                          xaxis={"type": "log", "title": "finetuning step"},
                          yaxis_title="exact accuracy", yaxis_range=[-0.02, 1.02])
        out["cr_finetune_curves"] = save_figure(fig, fig_dir / "cr_finetune_curves")
    if sweep:
        fig = go.Figure()
        labels = [r["setting"] for r in sweep]
        for key, name in (("heldout_icl_exact", "held-out plain ICL"),
                          ("heldout_iclgrm_exact", "held-out ICL+Grm")):
            means = [r[f"{key}_mean"] for r in sweep]
            pts = [r[f"{key}_per_seed"] for r in sweep]
            fig.add_trace(go.Bar(x=labels, y=means, name=name, offsetgroup=key))
            fig.add_trace(go.Scatter(x=[lab for lab, p in zip(labels, pts) for _ in p],
                                     y=[v for p in pts for v in p], mode="markers",
                                     offsetgroup=key, name=f"{name} (per seed)",
                                     marker={"size": 7, "color": "black"}, showlegend=False))
        fig.add_hline(y=0.8, line_dash="dot", annotation_text="CR-3 threshold 0.80")
        fig.update_layout(title="CR-3 sweep: ICL+Grm finetuning, held-out accuracy "
                                "(bars: mean; dots: seeds)",
                          barmode="group", scattermode="group", yaxis_title="exact accuracy",
                          yaxis_range=[-0.02, 1.05])
        out["cr3_sweep"] = save_figure(fig, fig_dir / "cr3_sweep", width=1100)
    return out


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------
def reproduce(profile: str, out_dir, seeds: list[int], overrides) -> Summary:
    cfg = validate(profile, seeds, overrides)
    prev_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _reproduce(cfg, profile, Path(out_dir), seeds)
    finally:
        torch.set_num_threads(prev_threads)  # leave the process as we found it


def _reproduce(cfg: CRExperimentConfig, profile: str, out_dir: Path, seeds: list[int]
               ) -> Summary:
    summary = Summary("cr", profile, seeds)
    summary.config["cr"] = to_dict(cfg)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    # refuse stale run directories before any training
    for seed in seeds:
        rc, _ = run_config_for(cfg, seed, f"seed{seed}")
        p = out_dir / "runs" / "cr" / f"seed{seed}"
        if p.is_dir():
            RunDir(p).check_config(rc)
    results = []
    for seed in seeds:
        results.append(run_seed(cfg, out_dir, seed, summary))
    sweep_rows: list[dict[str, Any]] = []
    with summary.stage("sweep"):
        for r in results[:cfg.sweep_seeds]:
            cache = {_pt_key(cfg): r["pt_state"]}
            for setting in cfg.sweep:
                sweep_rows.append(run_sweep_setting(cfg, setting, out_dir, r["seed"],
                                                    r["pt_state"], main=r, pt_cache=cache))
    sweep = sweep_table(sweep_rows)
    for r in results:
        r.pop("pt_state", None)
    for c in _claims(cfg, results, sweep):
        summary.add(c)
    summary.tables["CR-3 sweep"] = [
        {"setting": r["setting"], "spec": r["spec"], "seeds": r["seeds"],
         "heldout_plain_icl_acc": round(r["heldout_icl_exact_mean"], 4),
         "heldout_plain_icl_per_seed": [round(v, 4) for v in r["heldout_icl_exact_per_seed"]],
         "heldout_iclgrm_acc": round(r["heldout_iclgrm_exact_mean"], 4),
         "pt_typed_recall_after": round(r["pt_typed_after_mean"], 4),
         "own_pretraining": r["own_pretrain"],
         "pt_only_heldout_icl_acc": r["pt_only_heldout_icl_exact_mean"]} for r in sweep]
    summary.tables["CR eval"] = [
        {"seed": r["seed"], "phase": ph, **row} for r in results
        for ph, rows in r["phases"].items() for row in rows]
    summary.tables["CR task"] = [{"seed": r["seed"], **r["task"]} for r in results]
    summary.tables["CR phase seconds"] = [{"seed": r["seed"], **r["seconds"]} for r in results]
    with summary.stage("figures"):
        figs = _figures(cfg, results, sweep, out_dir / "figures")
    summary.tables["CR figures"] = figs
    summary.tables["CR cpu"] = {"process_cpu_s": time.process_time() - cpu0,
                                "wall_s": time.perf_counter() - wall0,
                                "torch_threads": torch.get_num_threads()}
    (out_dir / "cr").mkdir(parents=True, exist_ok=True)
    from mechinterp_icr.store.io import atomic_write_text

    atomic_write_text(out_dir / "cr" / "sweep_rows.json", json.dumps(sweep_rows, indent=2))
    print_sweep(sweep)
    return summary


def format_sweep(sweep: list[dict[str, Any]]) -> str:
    rows = [("setting", "seeds", "held-out plain ICL", "held-out ICL+Grm", "PT typed after")]
    for r in sweep:
        rows.append((r["setting"], str(len(r["seeds"])),
                     f"{r['heldout_icl_exact_mean']:.3f} (" +
                     ", ".join(f"{v:.2f}" for v in r["heldout_icl_exact_per_seed"]) + ")",
                     f"{r['heldout_iclgrm_exact_mean']:.3f}",
                     f"{r['pt_typed_after_mean']:.3f}"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)) for r in rows)


def print_sweep(sweep) -> None:
    if sweep:
        print("\nCR-3 sweep (ICL+Grm finetuning; accuracy on held-out subjects)")
        print(format_sweep(sweep))
