"""``icr train``: one phase of any task into a run directory, the one path for every task kind.

:func:`train` is what ``icr train`` calls, for every task: it resolves the phase, the preset,
the settings and the tracker, trains (or resumes) the phase and returns a
:class:`TrainResult`. A task without the papers' phases (induction) trains one phase of any
name on its own data (``pipeline.train_single_phase``); cr and ir train the papers' phases,
the recipes below.

``icr train --task cr --phase ft-icl --init RUN`` trains the named phase with the data, the
subject subset, the trainable set and the default settings the reproduction uses for it, by
calling the same functions the reproduction calls (``experiments.cr.train.pretrain_run`` /
``finetune_run``, ``experiments.cr.mechanism_model.mechanism_pretrain`` / ``mechanism_finetune``,
``experiments.ir.train.hooked_run``). ``icr phases --task T`` lists them (:func:`recipes`).

Settings: the defaults are the reproduction's profile (``--profile quick`` unless given), and
``--set KEY=VALUE`` takes the keys ``icr config TARGET`` prints (``finetune.steps``,
``task.n_subjects``, ``cascade.pt_steps``; for IR ``hooked.steps``, ``hooked.n``, ...). For the
main CR model's phases ``train.KEY`` is the phase's own training section (``pretrain.KEY``
for ``pretrain``, ``finetune.KEY`` for a finetuning branch), and ``resources.KEY`` the run's
resource ceilings. A finetuning phase takes its task, model and seed from the run it starts
from (``--init``, or the ``--out`` run's own pretraining), so ``task.*`` and ``model.*`` are
refused there: the knowledge base the model learnt is the one it is finetuned on.

Where a phase goes: a new ``--out`` directory gets the starting run's ``config.json`` and the
phase; ``--out`` equal to the starting run adds the phase to it (the reproduction's layout:
``pretrain`` and the branches side by side, ``mi.load(run)`` then reads ``ft-icl``). Rerun
the same command to resume; a finished phase is reported, not retrained.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mechinterp_icr.config import (
    ConfigError,
    ResourceConfig,
    RunConfig,
    apply_overrides,
    check_model_size,
    check_task_size,
    parse_overrides,
    to_dict,
)

__all__ = ["Recipe", "TrainResult", "recipe", "recipes", "train", "RECIPE_TASKS"]


@dataclass(frozen=True)
class Recipe:
    """One phase of a paper: its name (``--phase``), the task kind, one line on what it
    trains, and the phase it starts from (None: a fresh model)."""

    task: str
    name: str
    summary: str
    start: str | None = None
    ckpt: str | None = None  # the phase name of its checkpoints (None: the recipe's name)

    @property
    def phase(self) -> str:
        """The phase its checkpoints carry: the reproduction's name, so that the batches
        (drawn from the seed, the phase and the step) are the reproduction's."""
        return self.ckpt or self.name


@dataclass(frozen=True)
class TrainResult:
    """What ``icr train`` prints after a phase: its training result (a ``PhaseResult``; None
    for an IR phase, whose PGD phases are summarised by ``row``), the checkpoint it started
    from, and warnings for the user."""

    phase: Any
    started_from: str | None = None
    row: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    name: str = ""  # the phase trained (``--phase``, or its default)


_CR_BRANCH_LINES = {
    "ft-icl": "ICL finetuning of the attention on the finetune subjects (CR-1, CR-2)",
    "ft-iclgrm": "ICL+Grm finetuning of the attention on the finetune subjects (CR-3)",
    "ft-icl-allw": "ICL finetuning of all weights (CR-2's comparison arm)",
    "ft-iclgrm-allw": "ICL+Grm finetuning of all weights (CR-3's comparison arm)",
    "ft-icl-mixed": "ICL finetuning on mixed-type demos (CR-2's negative control)",
    "ft-iclgrm-mixed": "ICL+Grm finetuning on mixed-type demos (CR-3's negative control)",
}
_IR_LINES = {
    "sym-pgd": "PGD (large step, perturbation, small steps) of the position block on "
               "pair-symmetric data (IR-3, IR-4)",
    "sym-gd": "plain GD of the position block on pair-symmetric data (IR-4's comparison)",
    "raw-pgd": "PGD of the position block on raw data",
    "raw-gd": "plain GD of the position block on raw data",
    "raw-qk-pgd": "PGD of all of W_Q and W_K on raw data (the token-dependent model, IR-8)",
}

_IR_MEMORY = {
    "memory-pretrain": Recipe("ir", "memory-pretrain", "IR-6's memory pretrained on triple "
                              "completion at n = pretrained.n, in the IR model (uniform "
                              "attention)"),
    "memory-pgd": Recipe("ir", "memory-pgd", "PGD of the position block on top of the frozen "
                         "pretrained memory, IR-6's settings and data", "memory-pretrain"),
}

_RECIPES: dict[str, dict[str, Recipe]] = {
    "cr": {
        "pretrain": Recipe("cr", "pretrain", "PT of the main 2-layer model over all subjects "
                           "(CR-1..CR-4)"),
        **{name: Recipe("cr", name, line, "pretrain")
           for name, line in _CR_BRANCH_LINES.items()},
        "mech-pretrain": Recipe("cr", "mech-pretrain", "PT of the 1-layer, 2-head "
                                "attention-only mechanism model, frozen orthonormal "
                                "embeddings (CR-5, CR-7; phase pretrain)", ckpt="pretrain"),
        "mech-ft-icl": Recipe("cr", "mech-ft-icl", "ICL finetuning of the mechanism model at "
                              "cascade.ft_lr; logs the OV and KQ probes at every checkpoint "
                              "(CR-5, CR-7; phase ft-icl)", "mech-pretrain", ckpt="ft-icl"),
    },
    "ir": {**{name: Recipe("ir", name, line) for name, line in _IR_LINES.items()},
           **_IR_MEMORY},
}
RECIPE_TASKS = tuple(_RECIPES)


def recipes(task: str) -> list[Recipe]:
    """The phase recipes of task kind ``task`` in training order ([] for a task without)."""
    return list(_RECIPES.get(task, {}).values())


def recipe(task: str, name: str) -> Recipe:
    """The recipe ``name`` of ``task``; ConfigError naming the phases it has otherwise."""
    have = _RECIPES.get(task, {})
    if name not in have:
        raise ConfigError(f"--phase = {name!r} is not allowed for --task {task}; its phases "
                          f"are {', '.join(have)} (icr phases --task {task})")
    return have[name]


# ------------------------------------------------------------------------------------------
# settings
# ------------------------------------------------------------------------------------------
def _split(overrides: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the target config's overrides, ``resources.*`` overrides)."""
    ov = parse_overrides(overrides)
    res = {k: v for k, v in ov.items() if k.startswith("resources.")}
    return {k: v for k, v in ov.items() if k not in res}, res


def _resources(res: dict[str, Any]) -> ResourceConfig:
    return apply_overrides(RunConfig(), res).resources


def _refuse(ov: dict[str, Any], prefixes: tuple[str, ...], why: str) -> None:
    bad = sorted(k for k in ov if k.split(".")[0] in prefixes)
    if bad:
        raise ConfigError(f"--set {bad[0]} is not allowed here: {why}")


def _cr_config(profile: str, ov: dict[str, Any], rc: RunConfig | None, section: str | None):
    """The CR config of ``profile`` with ``ov`` applied; ``train.*`` goes to ``section``;
    ``rc`` (the starting run's config) fixes the task, model and pretraining."""
    from mechinterp_icr.experiments.cr.config import profile as cr_profile

    if section is None:
        _refuse(ov, ("train",), "the mechanism model's training is set in the cascade section "
                "(cascade.pt_steps, cascade.pt_lr, cascade.ft_steps, cascade.ft_lr, ...; "
                "icr config cr)")
    ov = {(f"{section}.{k[6:]}" if k.startswith("train.") else k): v for k, v in ov.items()}
    base = replace(cr_profile(profile), sweep=())  # the CR-3 sweep is no phase's setting
    # the end-of-phase K list is the reproduction's; a smaller task.max_demos shortens it
    max_demos = rc.task.max_demos if rc is not None else ov.get("task.max_demos",
                                                                 base.task.max_demos)
    if "eval_ks" not in ov and isinstance(max_demos, int):
        ov["eval_ks"] = [k for k in base.eval_ks if k <= max_demos] or [1]
    if rc is None:
        return apply_overrides(base, ov)
    fixed = _fixed_keys(rc.task, rc.model, rc.train)
    zero_ok = {"model.d_vocab", "model.n_ctx"}  # 0: take it from the task, as it was
    ov = {k: (fixed[k] if k in zero_ok and v == 0 else v) for k, v in ov.items()}
    differ = sorted(k for k, v in ov.items() if k in fixed and v != fixed[k])
    if not differ:
        cfg = apply_overrides(base, {**fixed, **ov})
        got = _fixed_keys(cfg.task, cfg.model, cfg.pretrain)
        differ = sorted(k for k in fixed if got[k] != fixed[k])
    if differ:  # a value repeated from the pretraining command is fine, another one is not
        k = differ[0]
        raise ConfigError(f"--set {k}={ov.get(k)!r} is not allowed here: a finetuning phase "
                          f"takes its task, model and pretraining from the run it starts "
                          f"from (--init), which has {k} = {fixed[k]!r}")
    return cfg


def _fixed_keys(task, model, pretrain) -> dict[str, Any]:
    """The dotted keys a finetuning phase takes from the run it starts from."""
    return {**{f"task.{k}": v for k, v in to_dict(task).items() if k != "kind"},
            **{f"model.{k}": v for k, v in to_dict(model).items()},
            **{f"pretrain.{k}": v for k, v in to_dict(pretrain).items()}}


# ------------------------------------------------------------------------------------------
# the starting checkpoint
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Start:
    """Where a finetuning phase starts: ``RUN:CHECKPOINT`` (``init``), that run's config, the
    checkpoint, and what the user should be warned of."""

    init: str
    rc: RunConfig
    ck: Any
    warnings: tuple[str, ...]


def _start(rec: Recipe, out: Path, init: str | None) -> _Start:
    """Where a recipe with a start phase starts (:class:`_Start`). Without ``--init``:
    ``out``'s own last checkpoint of the start phase. A bare ``--init RUN`` means
    ``RUN:phase:<start>:last``; the checkpoint must be of the start phase. An ``--out`` that
    holds its own start phase is only finetuned from it."""
    from mechinterp_icr.pipeline import parse_init, resolve_selection
    from mechinterp_icr.store.rundir import RunDir, RunError

    start = _RECIPES[rec.task][rec.start].phase
    own = (out / "config.json").exists() and start in RunDir(out).phases()
    if init is None:
        if not own:
            raise ConfigError(f"--phase {rec.name} starts from a {rec.start} checkpoint (phase "
                              f"{start!r}): give --init RUN[:CHECKPOINT], or --out a run that "
                              "has one")
        init = str(out)
    given = init
    if Path(init).is_dir():
        init = f"{init}:phase:{start}:last"
    path, sel = parse_init(init)
    if own and Path(path).resolve() != out.resolve():
        raise ConfigError(f"--init = {given!r} is not allowed: --out {out} holds its own "
                          f"{start!r} phase, so its branches start from it (leave --init out), "
                          "or train into another --out")
    run = RunDir(path)
    rc = run.read_config()
    kind = getattr(type(rc.task), "kind", None)
    if kind != rec.task:
        raise ConfigError(f"--init = {given!r} is not allowed: {path} is a {kind!r} run; "
                          f"--phase {rec.name} starts from a {rec.task!r} run")
    try:
        cks = run.select(resolve_selection(run, sel))
    except (RunError, ConfigError) as e:  # a bad selection: said in --init's words
        raise ConfigError(f"--init = {given!r} is not allowed: {e}") from None
    if len(cks) != 1 or cks[0].phase != start:
        got = ", ".join(sorted({c.phase for c in cks}))
        raise ConfigError(f"--init = {given!r} is not allowed: --phase {rec.name} starts from "
                          f"one checkpoint of phase {start!r}; it selects {len(cks)} of "
                          f"phase(s) {got}")
    warnings = []
    if rec.task == "cr" and cks[0].step < rc.train.steps:  # (an IR memory has no steps)
        warnings.append(f"starting from {cks[0].name}, step {cks[0].step} of the {rc.train.steps} "
                        f"steps its run was configured for (its {start} is unfinished)")
    return _Start(init, rc, cks[0], tuple(warnings))


# ------------------------------------------------------------------------------------------
# CR
# ------------------------------------------------------------------------------------------
def _is_mechanism_run(rc: RunConfig, cfg, task) -> bool:
    """``rc``'s model has the mechanism model's shape (``task``: the run's, already built)."""
    from mechinterp_icr.experiments.cr.mechanism_model import mechanism_model_config

    m, mech = rc.model, mechanism_model_config(task, cfg.cascade)
    return (m.n_layers, m.n_heads, m.attn_only) == (mech.n_layers, mech.n_heads,
                                                    mech.attn_only)


def _train_cr(rec: Recipe, out: Path, seed: int, ov: dict, res: dict, init: str | None,
              profile: str, on_log, seed_given: bool) -> TrainResult:
    from mechinterp_icr.experiments.cr.train import (
        BRANCHES,
        branch_train_config,
        copy_state,
        finetune_run,
        pretrain_run,
        run_config_for,
    )
    from mechinterp_icr.pipeline import train_single_phase

    name = out.resolve().name or "run"
    resources = _resources(res)
    if rec.start is None and init is not None:
        raise ConfigError(f"--init is not allowed for --phase {rec.name}: it trains a fresh "
                          "model (its finetuning phases take --init)")
    st = None if rec.start is None else _start(rec, out, init)
    if st is not None and seed_given and st.rc.seed != seed:
        raise ConfigError(f"--seed = {seed} is not allowed: the run it starts from has seed "
                          f"{st.rc.seed}, whose knowledge base the model learnt; leave --seed "
                          "out")
    seed = st.rc.seed if st is not None else seed
    section = "pretrain" if rec.name == "pretrain" else (
        "finetune" if rec.name in BRANCHES else None)
    other = {"pretrain": ("finetune", "cascade"), "finetune": ("cascade",),
             None: ("model", "pretrain", "finetune")}[section]
    _refuse(ov, other, f"--phase {rec.name} does not use these settings (icr config cr lists "
            "each section; the mechanism model is set in cascade.*)")
    both = sorted(k for k in ov if k.startswith("train.") and f"{section}.{k[6:]}" in ov)
    if both:
        raise ConfigError(f"--set {both[0]} is not allowed together with --set "
                          f"{section}.{both[0][6:]}: train.* is the {section} section here")
    cfg = _cr_config(profile, ov, None if st is None else st.rc, section)
    _check_cr_size(cfg, resources)
    _describe(on_log, cfg)
    task = cfg.task.build(seed)
    if section is None:
        return _train_mechanism(rec, out, seed, cfg, task, st, name, resources, on_log)
    if rec.name == "pretrain":
        rc, _ = run_config_for(cfg, seed, name)
        _no_stale_branches(out, rc)
        return TrainResult(train_single_phase(
            replace(rc, resources=resources), out, rec.name,
            trainer=lambda model, run, meta, log: pretrain_run(cfg, task, rc, run, seed,
                                                               on_log=log)[1],
            on_log=on_log))
    if _is_mechanism_run(st.rc, cfg, task):
        raise ConfigError(f"--init = {st.init!r} is not allowed: it is a mechanism-model "
                          "run; its finetuning phase is mech-ft-icl")
    rc = replace(st.rc, name=name, resources=resources)

    def ft(model, run, meta, log):
        return finetune_run(cfg, task, rc, run, copy_state(model), rec.name, seed,
                            extra_meta=meta, on_log=log)[1]

    return TrainResult(train_single_phase(rc, out, rec.name, init=st.init, trainer=ft,
                                           phase_train=branch_train_config(cfg, rec.name),
                                           on_log=on_log), st.init, warnings=st.warnings)


def _check_cr_size(cfg, resources: ResourceConfig) -> None:
    """Refuse a task, or the main model on it, too big for ``resources.max_gib`` before
    either is built (the full estimate, with training memory, follows in
    ``pipeline.train_single_phase``)."""
    nbytes = check_task_size(cfg.task, resources)
    t = cfg.task
    check_model_size(replace(cfg.model, d_vocab=cfg.model.d_vocab or t.vocab_size(),
                             n_ctx=cfg.model.n_ctx or t.context_len()), resources, nbytes)


def _train_mechanism(rec: Recipe, out: Path, seed: int, cfg, task, st: _Start | None,
                     name: str, resources, on_log) -> TrainResult:
    """``mech-pretrain`` / ``mech-ft-icl``: the CR-5/CR-7 mechanism model's phases, under
    the reproduction's phase names (:attr:`Recipe.phase`)."""
    from mechinterp_icr.experiments.cr import mechanism_model as C
    from mechinterp_icr.experiments.cr.evaluate import checkpoint_eval
    from mechinterp_icr.interp.ovkq import checkpoint_probes
    from mechinterp_icr.pipeline import train_single_phase

    ccfg = cfg.cascade
    if st is None:  # mech-pretrain
        rc = replace(C.mechanism_run_config(task, cfg.task, seed, ccfg, name),
                     resources=resources)
        _no_stale_branches(out, rc)
        return TrainResult(train_single_phase(
            rc, out, rec.phase, build=lambda: C.build_mechanism_model(task, seed, ccfg),
            trainer=lambda model, run, meta, log: C.mechanism_pretrain(
                model, task, seed, ccfg, run, phase=rec.phase, run_config=rc,
                eval_fn=checkpoint_eval(task, seed, cfg.ckpt_eval_n), on_log=log),
            on_log=on_log))
    if not _is_mechanism_run(st.rc, cfg, task):
        raise ConfigError(f"--init = {st.init!r} is not allowed: --phase mech-ft-icl starts "
                          "from a mechanism-model run (--phase mech-pretrain)")
    _check_mechanism_start(st, ccfg, task)
    rc = replace(st.rc, name=name, resources=resources)
    probes = checkpoint_probes(task, C.probe_batch_for(task, seed, ccfg))
    ft_train = C.mechanism_ft_config(ccfg, ccfg.ft_lr)
    return TrainResult(train_single_phase(
        rc, out, rec.phase, init=st.init,
        build=lambda: C.build_mechanism_model(task, seed, ccfg),
        trainer=lambda model, run, meta, log: C.mechanism_finetune(
            model, task, seed, ccfg, ccfg.ft_lr, run, probes, phase=rec.phase,
            run_config=replace(rc, train=ft_train), extra_meta=meta, on_log=log),
        phase_train=ft_train, on_log=on_log), st.init, warnings=st.warnings)


def _no_stale_branches(out: Path, rc: RunConfig) -> None:
    """Refuse to extend a pretraining whose run already has phases started from it (they
    would start from another PT state than the branches trained after the extension)."""
    from mechinterp_icr.store.rundir import RunDir

    if not (out / "config.json").exists():
        return
    run = RunDir(out)
    old, later = run.read_config(), [p for p in run.phases() if p != "pretrain"]
    if later and old.train.steps != rc.train.steps:
        raise ConfigError(f"train.steps = {rc.train.steps} is not allowed for {out}: its "
                          f"phases {', '.join(later)} started from its {old.train.steps}-step "
                          "pretraining; extend a copy without them, or train into another --out")


def _check_mechanism_start(st: _Start, ccfg, task) -> None:
    """The mechanism model of ``ccfg`` is the one the starting run pretrained (shape and
    which embeddings are frozen)."""
    from mechinterp_icr.experiments.cr.mechanism_model import mechanism_model_config
    from mechinterp_icr.store.checkpoint import read_sidecar

    want, have = mechanism_model_config(task, ccfg), st.rc.model
    if want != have:
        raise ConfigError(f"--init = {st.init!r} is not allowed: its model (d_model "
                          f"{have.d_model}, d_head {have.d_head}) is not the one "
                          f"cascade.* gives (cascade.embedding = {ccfg.embedding!r}: d_model "
                          f"{want.d_model}, cascade.d_head = {want.d_head}); "
                          "repeat the cascade settings it was pretrained with")
    learned = "embed.W_E" in (read_sidecar(st.ck.stem).get("trainable") or [])
    if learned != (ccfg.embedding == "learned"):
        raise ConfigError(f"cascade.embedding = {ccfg.embedding!r} is not allowed here: "
                          f"{st.init} was pretrained with "
                          f"{'learned' if learned else 'frozen'} embeddings")


# ------------------------------------------------------------------------------------------
# IR
# ------------------------------------------------------------------------------------------
def _train_ir(rec: Recipe, out: Path, seed: int, ov: dict, res: dict, init: str | None,
              profile: str, seed_given: bool, on_log=None) -> TrainResult:
    from mechinterp_icr.experiments.ir.config import profile as ir_profile
    from mechinterp_icr.store.rundir import RunDir

    if res:
        raise ConfigError(f"--set {sorted(res)[0]} is not allowed for an IR phase (its "
                          "resources are fixed by its sizes)")
    cfg = apply_overrides(ir_profile(profile), ov)
    _describe(on_log, cfg)
    out = Path(out).resolve() if str(out) in ("", ".") else Path(out)
    RunDir.check_new_or_run(out)  # no run's files among a user's own
    before = out.exists()
    try:
        with RunDir(out, create=True).writer_lock():  # one process trains a run at a time
            return _train_ir_locked(rec, out, seed, cfg, init, seed_given, on_log)
    except BaseException:
        if not before and out.is_dir() and not RunDir(out).checkpoints():
            import shutil

            shutil.rmtree(out, ignore_errors=True)  # a refused start leaves nothing behind
        raise


def _train_ir_locked(rec: Recipe, out: Path, seed: int, cfg, init: str | None,
                     seed_given: bool, on_log) -> TrainResult:
    from mechinterp_icr.experiments.ir.memory_runs import memory_pgd_run, memory_pretrain_run
    from mechinterp_icr.experiments.ir.stages import HOOKED_RUNS
    from mechinterp_icr.experiments.ir.train import hooked_run

    if rec.name == "memory-pretrain" or rec.name in _IR_LINES:
        if init is not None:
            raise ConfigError(f"--init is not allowed for --phase {rec.name}: it starts "
                              "from the construction (copy circuit, uniform attention)")
        if rec.name == "memory-pretrain":
            return TrainResult(None, row=memory_pretrain_run(cfg, seed, out, on_log))
        sym, perturb, target = HOOKED_RUNS["ht_" + rec.name.replace("-", "_")]
        return TrainResult(None, row=hooked_run(cfg, seed, out.parent, out.name, sym,
                                                perturb, target, fresh=False, on_log=on_log))
    st = _start(rec, out, init)
    start, rc = st.init, st.rc
    if seed_given and rc.seed != seed:
        raise ConfigError(f"--seed = {seed} is not allowed: the memory run it starts from "
                          f"has seed {rc.seed}; leave --seed out")
    from mechinterp_icr.pipeline import init_state, model_for_task

    model = model_for_task(rc, device="cpu")
    state, init_from = init_state(start, model)
    model.load_state_dict(state)
    return TrainResult(None, start, row=memory_pgd_run(
        cfg, rc.seed, out, model, init_from, replace(rc, name=out.resolve().name or "run"),
        on_log))


def _train_generic(task: str, phase: str, out: Path, seed: int, overrides: list[str],
                   init: str | None, tracker) -> TrainResult:
    """A task without the papers' phases: one phase of any name on the task's own data."""
    from mechinterp_icr.pipeline import resolve_run_config, train_single_phase

    cfg = resolve_run_config(task, seed, overrides, name=out.resolve().name or "run")
    _describe(tracker, cfg)
    return TrainResult(train_single_phase(cfg, out, phase=phase, init=init, on_log=tracker))


def _describe(tracker, cfg) -> None:
    """The tracker logs the phase's resolved settings, known once they are checked."""
    if tracker is not None:
        tracker.settings = cfg


def train(task: str, out: str | Path, phase: str | None = None, seed: int | None = None,
          overrides: list[str] | tuple[str, ...] = (), init: str | None = None,
          profile: str = "quick", preset: str | None = None, track: str = "none"
          ) -> TrainResult:
    """Train (or resume) phase ``phase`` of task kind ``task`` into the run directory ``out``:
    what ``icr train`` does, for every task kind (see the module docstring).

    ``phase``: a recipe's name for cr and ir (default: the first, ``pretrain`` / ``sym-pgd``),
    any name for another task (default ``train``). ``seed``: the seed of the task and model
    (default 0); a finetuning phase takes the seed of the run it starts from, and a ``seed``
    given must be that one. ``overrides``: ``--set`` items, after the ``preset``'s
    (``experiments.presets``). ``track``: ``"wandb"`` also logs every metrics record to
    Weights & Biases (``training.tracking``). Every setting is checked before anything is
    written; a refusal is a ``ConfigError`` naming the field, the value and what is allowed.
    """
    from mechinterp_icr.config import parse_init
    from mechinterp_icr.experiments.presets import preset_overrides

    # the refusals that need no torch come first (a mistyped command answers at once)
    if init is not None:
        parse_init(init)  # RUN must exist
    rec = None
    if task in RECIPE_TASKS:
        phase = recipes(task)[0].name if phase is None else phase
        rec = recipe(task, phase)  # refused with the list of phases
    elif profile != "quick":
        raise ConfigError(f"--profile = {profile!r} is not allowed for --task {task}: "
                          "profiles are the cr and ir reproductions'")
    if track not in ("none", "wandb"):
        raise ConfigError(f"--track = {track!r} is not allowed; expected none or wandb")
    phase = "train" if phase is None else phase
    from mechinterp_icr.store.rundir import check_phase_name

    check_phase_name(phase)
    items = preset_overrides(preset, task, phase if rec else None, list(overrides))
    from mechinterp_icr.training.tracking import WandbTracker

    out = Path(out)
    tracker = None
    if track == "wandb":  # the command as given, beside the resolved settings (_describe)
        tracker = WandbTracker({"task": task, "phase": phase, "profile": profile,
                                "seed": seed, "set": items, "init": init}, out, phase)
    given, seed = seed is not None, 0 if seed is None else seed
    try:
        if rec is None:
            done = _train_generic(task, phase, out, seed, items, init, tracker)
        else:
            ov, res = _split(items)
            args = (rec, out, seed, ov, res, init, profile)
            done = (_train_cr(*args, tracker, given) if task == "cr"
                    else _train_ir(*args, given, tracker))
        return replace(done, name=phase)
    finally:
        if tracker is not None:
            tracker.finish()
