"""One run directory: resolve a run config, train one phase into it, evaluate it, load it.

``icr train`` reaches it through ``experiments.phases.train``, the one path for every task
kind (the papers' phases bring their own model and training, :func:`train_single_phase`).

Everything a command could refuse is checked before anything is written: the config (types,
ranges, a task, a model that fits the task, the resource estimate of
:func:`mechinterp_icr.config.check_resources` including the task's own tables), the phase name
and the trainable parameters. A start that fails anyway leaves the directory as it was.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import mechinterp_icr.tasks  # noqa: F401  (registers every task kind)
from mechinterp_icr.config import (
    ConfigError,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    check,
    check_range,
    check_resources,
    check_task_size,
    parse_init,
    task_build_bytes,
    task_config_class,
    to_dict,
)
from mechinterp_icr.models.factory import build_model, default_device
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.store.rundir import RunDir, RunError, check_phase_name
from mechinterp_icr.training.loop import (
    PhaseResult,
    batch_rng,
    masked_accuracy,
    masked_loss,
    resolve_trainable,
    train_phase,
)

__all__ = ["resolve_run_config", "complete_model_config", "task_build_bytes", "model_for_task",
           "train_single_phase", "evaluate_run", "load_run_model", "MAX_EVAL_BATCHES",
           "main_phase", "resolve_selection", "parse_init", "task_metrics",
           "check_phase_settings", "init_state", "format_eval", "metric_lines",
           "trainable_names"]

MAX_EVAL_BATCHES = 10_000


def resolve_run_config(task_kind: str, seed: int, overrides: list[str],
                       name: str = "run") -> RunConfig:
    """Default RunConfig for a task kind with dotted overrides applied and validated,
    including that a task is set, the model fits it and the resource estimate."""
    tcls = task_config_class(task_kind)
    base = RunConfig(name=name, seed=seed, task=tcls(),
                     model=getattr(tcls, "default_model", lambda self: ModelConfig())(tcls()))
    cfg = apply_overrides(base, overrides)
    return complete_model_config(cfg)


def _check_task_size(cfg: RunConfig) -> int:
    check(cfg.task is not None, "task", None,
          'a task config, e.g. --set task={"kind": "induction"}')
    return check_task_size(cfg.task, cfg.resources)


def _complete(cfg: RunConfig):
    """(completed config, built task); see :func:`complete_model_config`."""
    nbytes = _check_task_size(cfg)
    task = cfg.task.build(cfg.seed)
    m = cfg.model
    if m.d_vocab == 0 or m.n_ctx == 0:
        m = replace(m, d_vocab=m.d_vocab or task.d_vocab, n_ctx=m.n_ctx or task.n_ctx)
    check(m.d_vocab >= task.d_vocab, "model.d_vocab", m.d_vocab,
          f"0 (take it from the task) or at least the task's vocabulary size {task.d_vocab}")
    check(m.n_ctx >= task.n_ctx, "model.n_ctx", m.n_ctx,
          f"0 (take it from the task) or at least the task's context length {task.n_ctx}")
    out = replace(cfg, model=m)
    check_resources(out, nbytes)
    return out, task


def complete_model_config(cfg: RunConfig) -> RunConfig:
    """Fill d_vocab / n_ctx of the model from the task when they are 0; refuse a missing task,
    a model smaller than the task, and a run over its resource ceilings (the task's tables are
    estimated before the task is built)."""
    return _complete(cfg)[0]


def model_for_task(cfg: RunConfig, device: str | None = None):
    return build_model(cfg.model, seed=cfg.seed, device=device or default_device())


def _heldout_eval(task, n_batches: int, batch_size: int, seed: int):
    def eval_fn(model) -> dict[str, Any]:
        if hasattr(task, "evaluate"):
            return task.evaluate(model)
        dev = next(model.parameters()).device
        losses, accs = [], []
        for i in range(n_batches):
            b = task.sample(batch_rng(seed, "heldout-eval", i), batch_size, split="eval").to(dev)
            logits = model(b.tokens)
            losses.append(float(masked_loss(logits, b.targets)))
            accs.append(masked_accuracy(logits, b.targets))
        return {"eval_loss": sum(losses) / len(losses), "eval_acc": sum(accs) / len(accs)}

    return eval_fn


def _existing(path: Path) -> set[Path]:
    """The run directory's entries (recursively) before a start, to undo a failed one."""
    if not path.is_dir():
        return set()
    return {p for p in path.rglob("*")} | {path}


def _undo_start(out: Path, before: set[Path], existed: bool) -> None:
    """Remove what a failed start added to a run directory that has no checkpoint: the
    directory itself when it did not exist, else the entries that are new."""
    if not out.is_dir() or any((out / "checkpoints").glob("*.json")):
        return  # a checkpoint was written: keep it, the same command resumes from it
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for p in sorted(set(out.rglob("*")) - before, key=lambda q: -len(q.parts)):
        try:
            p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
        except OSError:
            pass


def _extension(out: Path, cfg: RunConfig) -> RunConfig | None:
    """The stored config of ``out`` when ``cfg`` differs from it only by a larger
    ``train.steps`` (the run is extended); None when the configs agree or there is none.
    A smaller ``train.steps`` is refused (a run is not shortened)."""
    run = RunDir(out)
    if not (out / "config.json").exists():
        return None
    old = run.read_config()
    if old.train.steps == cfg.train.steps:
        return None
    same = replace(cfg, name=old.name, resources=old.resources,
                   train=replace(cfg.train, steps=old.train.steps))
    if same != old:
        return None  # another difference: check_config names it
    if cfg.train.steps < old.train.steps:
        raise ConfigError(
            f"train.steps = {cfg.train.steps} is not allowed for {out}: the run was made with "
            f"train.steps = {old.train.steps} and is not shortened; analyse its first steps "
            f"with --checkpoints steps:0-{cfg.train.steps}, or train into another --out")
    return old


def init_state(spec: str, model) -> tuple[dict, str]:
    """Weights of the checkpoint ``spec`` (``RUN:CHECKPOINT``) checked against ``model``."""
    from mechinterp_icr.store.checkpoint import load_checkpoint

    path, sel = parse_init(spec)
    run = RunDir(path)
    cks = run.select(resolve_selection(run, sel))
    if len(cks) != 1:
        raise RunError(f"--init {spec!r} selects {len(cks)} checkpoints; expected exactly one "
                       "(e.g. RUN:last, RUN:phase:NAME:last or RUN:<checkpoint name>)")
    tmp = {k: v.detach().clone() for k, v in model.state_dict().items()}
    load_checkpoint(cks[0].stem, model)  # checks names and shapes before loading
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(tmp)
    return state, f"{run.path}:{cks[0].name}"


def trainable_names(model, train: TrainConfig) -> list[str]:
    """The parameters a phase under ``train`` trains on ``model`` (its trainable set less the
    parameters frozen by construction), as ``training.loop.train_phase`` records them."""
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    return [n for n in resolve_trainable(model, train.trainable) if n not in frozen]


def _same_start(a: str | None, b: str | None) -> bool:
    """Two ``init_from`` records (``RUN:CHECKPOINT``) name the same checkpoint."""
    if a is None or b is None:
        return a == b
    (ra, _, ca), (rb, _, cb) = a.rpartition(":"), b.rpartition(":")
    return ca == cb and Path(ra).resolve() == Path(rb).resolve()


def check_phase_settings(run: RunDir, phase: str, train: TrainConfig,
                         trainable: list[str] | None = None,
                         init_from: str | None = None) -> None:
    """Refuse to resume ``phase`` of ``run`` under other training settings than its
    checkpoints were made with (a larger ``steps`` extends it; ``progress`` does not count),
    with another set of trained parameters, or from another starting checkpoint."""
    from mechinterp_icr.store.checkpoint import CheckpointError, read_sidecar

    cks = [c for c in run.checkpoints() if c.phase == phase]
    if not cks:
        return
    try:
        side = read_sidecar(cks[-1].stem)
    except CheckpointError:
        return  # a damaged last checkpoint: the resume skips it and says so
    if trainable is not None and side.get("trainable") not in (None, trainable):
        raise ConfigError(
            f"phase {phase!r} of {run.path} trained other parameters ({len(side['trainable'])} "
            f"tensors, now {len(trainable)}: the model or its frozen parts differ); repeat the "
            "settings it was made with, or train into another --out")
    if "init_from" in side and not _same_start(side["init_from"], init_from):
        raise ConfigError(
            f"phase {phase!r} of {run.path} started from {side['init_from']}, not from "
            f"{init_from}; resume it from the same --init, or train into another --out")
    old = side.get("train")
    if not isinstance(old, dict):
        return
    new = to_dict(train)
    diff = sorted(k for k in set(old) | set(new)
                  if k not in ("steps", "progress") and old.get(k) != new.get(k))
    if diff:
        raise ConfigError(
            f"phase {phase!r} of {run.path} was trained with other settings (train: "
            f"{', '.join(f'{k} {old.get(k)!r} then, {new.get(k)!r} now' for k in diff[:4])}); "
            "repeat the settings it was made with, or train into another --out")
    if new["steps"] < old.get("steps", 0):
        raise ConfigError(
            f"train.steps = {new['steps']} is not allowed for phase {phase!r} of {run.path}: "
            f"it was made with {old['steps']} steps and is not shortened; analyse its first "
            f"steps with --checkpoints steps:0-{new['steps']}, or train into another --out")


def train_single_phase(cfg: RunConfig, out: Path, phase: str = "train",
                       init: str | None = None, on_log=None, *, build=None, trainer=None,
                       phase_train: TrainConfig | None = None) -> PhaseResult:
    """Train (or resume) one phase of ``cfg`` into the run directory ``out``.

    Refused before anything is written: a bad phase name, a config over its resource ceilings
    (see :func:`complete_model_config`), a ``train.trainable`` matching no parameter, a
    directory holding another run or being trained by another process. A start that fails
    before the first checkpoint leaves the directory as it was. A new phase of an existing
    run gets the next phase order, so ``last`` follows the order the phases ran in.

    Extending: when the directory holds this run with a smaller ``train.steps`` (and nothing
    else differs), the phase resumes from its last checkpoint and trains up to the new
    ``train.steps``; ``config.json`` records the new value. With a constant learning rate
    (``train.decay = constant``, the default) the result equals a run trained that long from
    the start.

    ``init`` (``RUN:CHECKPOINT``): a phase that has no checkpoint in ``out`` yet starts from
    that checkpoint of another run (same model shapes) instead of a fresh initialisation;
    its sidecars record it as ``init_from``. A phase that has checkpoints resumes from them.
    ``on_log``: called with every metrics record (``training.loop.train_phase``).

    A phase recipe (``experiments.phases``) brings its own model and training: ``build()``
    makes the model (default :func:`model_for_task`), ``trainer(model, run, extra_meta,
    on_log)`` trains the phase into ``run`` and returns its ``PhaseResult`` (default: the
    task's own training data under ``cfg.train``), and ``phase_train`` is the phase's
    training settings when they are not ``cfg.train`` (a finetuning phase of a run whose
    ``config.json`` holds its pretraining); a rerun with other ``phase_train`` settings than
    the phase's checkpoints were made with is refused, except a larger ``steps``.
    """
    out = Path(out)
    check_phase_name(phase)
    cfg, task = _complete(cfg)
    model = (build or (lambda: model_for_task(cfg)))()
    resolve_trainable(model, (phase_train or cfg.train).trainable)  # ConfigError: no match
    init_from = None
    if init is not None:
        state, init_from = init_state(init, model)
        model.load_state_dict(state)
    existed = out.exists()
    RunDir.check_new_or_run(out)  # no run's files among a user's own
    # a finetuning phase (phase_train) never extends the run's config.json: that records the
    # pretraining, which only its own phase extends
    extended = _extension(out, cfg) if existed and phase_train is None else None
    if existed and extended is None:
        RunDir(out).check_config(cfg)  # another run's directory: refused before any write
    if existed and phase_train is not None:
        check_phase_settings(RunDir(out), phase, phase_train, trainable_names(model,
                                                                          phase_train),
                             init_from)
    before = _existing(out)
    run = RunDir(out, create=True)
    try:
        with run.writer_lock():
            try:
                if extended is not None:
                    run.write_config(replace(cfg, name=extended.name,
                                             resources=extended.resources))
                run = RunDir.open_for(out, cfg)
                meta = {"init_from": init_from} if init_from else None
                if trainer is not None:
                    return trainer(model, run, meta, on_log)
                return train_phase(model, lambda rng, bs: task.sample(rng, bs, "train"),
                                   cfg.train, run, phase, cfg.seed, run_config=cfg,
                                   phase_order=run.phase_order(phase),
                                   eval_fn=_heldout_eval(task, 2, cfg.train.eval_batch_size,
                                                         cfg.seed),
                                   extra_meta=meta, on_log=on_log)
            except BaseException:
                if extended is not None:
                    run.write_config(extended)  # the run keeps the config it had
                _undo_start(out, before, existed)
                raise
    except (RunError, OSError):  # the lock was refused or could not be taken
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # only the empty directory made above
        raise


def load_run_model(run: RunDir):
    """(config, task, fresh model builder) for a run directory."""
    cfg = run.read_config()  # checked to be buildable under its ceiling (check_buildable)
    task = cfg.task.build(cfg.seed)
    return cfg, task, lambda: model_for_task(cfg)


def main_phase(run: RunDir) -> str:
    """The phase that ``last`` / ``first`` mean for a person reading a run: ``ft-icl`` when
    the run has it (a CR reproduction run, whose last phase is an all-weights comparison arm),
    else the last phase trained that is not an all-weights arm (``*-allw``) or a mixed-type
    control (``*-mixed``)."""
    phases = run.phases()
    if not phases:
        raise RunError(f"run directory {run.path} has no checkpoints")
    if "ft-icl" in phases:
        return "ft-icl"
    usable = [p for p in phases if not p.endswith(("-allw", "-mixed"))]
    return (usable or phases)[-1]


def resolve_selection(run: RunDir, selection: str) -> str:
    """``selection`` with each bare ``last`` / ``first`` read as the main phase's
    (:func:`main_phase`): ``phase:ft-icl:last`` on a CR run, never the all-weights arm."""
    parts = [p.strip() for p in str(selection).split(",")]
    if not any(p in ("last", "first") for p in parts):
        return selection
    main = main_phase(run)
    return ",".join(f"phase:{main}:{p}" if p in ("last", "first") else p for p in parts)


def _default_selection(run: RunDir) -> str:
    """The last checkpoint of every phase but the all-weights arms (of every phase when all
    are arms)."""
    phases = run.phases()
    if not phases:
        raise RunError(f"run directory {run.path} has no checkpoints")
    keep = [p for p in phases if not p.endswith("-allw")] or phases
    return ",".join(f"phase:{p}:last" for p in keep)


def task_metrics(task, cfg: RunConfig, n_batches: int):
    """``fn(model) -> metrics``: the task's own held-out metrics.

    CR: held-out-subject ICL accuracy (``exact``, ``type``, ``restricted``) for every number of
    demonstrations K = 1 .. max_demos (keys ``heldout_icl_<metric>_K<K>``) and PT recall
    (``pt_typed``, ``pt_exact``); IR: step-1 (relation) and step-2 (answer) accuracy;
    other tasks: held-out loss and accuracy at the positions that carry a loss.
    ``n_batches`` x ``train.eval_batch_size`` prompts per number."""
    n = n_batches * cfg.train.eval_batch_size
    kind = getattr(type(cfg.task), "kind", None)
    if kind == "cr":
        from mechinterp_icr.tasks.cr import evaluate_icl, evaluate_pt

        def cr_fn(model) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for K in range(1, task.cfg.max_demos + 1):
                if task.format_len(K, False) > model.cfg.n_ctx:
                    break
                r = evaluate_icl(model, task, [cfg.seed, 0xE7A1, K], task.heldout_subjects, K, n)
                out.update({f"heldout_icl_{k}_K{K}": r[k] for k in ("exact", "type",
                                                                    "restricted")})
            r = evaluate_pt(model, task, [cfg.seed, 0xE7A2], None, n)
            out.update({"pt_typed": r["typed"], "pt_exact": r["exact"]})
            return out

        return cr_fn
    generic = _heldout_eval(task, n_batches, cfg.train.eval_batch_size, cfg.seed)
    if kind != "ir":
        return generic

    def ir_fn(model) -> dict[str, Any]:
        out = generic(model)
        dev = next(model.parameters()).device
        K = task.cfg.n_pairs
        hits = {"step1_acc": [], "step2_acc": []}
        for i in range(n_batches):
            b = task.sample(batch_rng(cfg.seed, "heldout-eval", i),
                            cfg.train.eval_batch_size, split="eval").to(dev)
            pred = model(b.tokens).argmax(-1)
            for key, pos in (("step1_acc", 2 * K), ("step2_acc", 2 * K + 1)):
                hits[key].append(float((pred[:, pos] == b.targets[:, pos]).float().mean()))
        out.update({k: sum(v) / len(v) for k, v in hits.items()})
        return out

    return ir_fn


@torch.no_grad()
def evaluate_run(path: Path, selection: str | None = None, n_batches: int = 4,
                 progress: bool = False):
    """Evaluate the selected checkpoints of a run with the task's own metrics
    (:func:`task_metrics`); one row per checkpoint with its phase and step. Without a
    selection: the last checkpoint of every phase except the all-weights arms; a bare
    ``last`` / ``first`` is the main phase's (:func:`resolve_selection`). Writes
    ``analyses/eval.json`` only when every selected checkpoint was evaluated (a refused or
    failed evaluation leaves the previous result in place)."""
    check_range("--batches", n_batches, 1, MAX_EVAL_BATCHES, integer=True)
    run = RunDir(path)
    cfg, task, build = load_run_model(run)
    selection = _default_selection(run) if selection is None else resolve_selection(run,
                                                                                   selection)
    cks = run.select(selection)  # refuse an empty, misspelt or unmatched selection first
    fn = task_metrics(task, cfg, n_batches)
    items = run.iter_models(selection, build)
    if progress:
        import sys

        from tqdm.auto import tqdm

        items = tqdm(items, total=len(cks), desc="eval", file=sys.stderr, leave=False,
                     disable=None)
    rows = []
    for ck, model in items:
        rows.append({"checkpoint": ck.name, "phase": ck.phase, "step": ck.step, **fn(model)})
    if not rows:  # select() never returns nothing; kept so no result is replaced by []
        raise ConfigError(f"--checkpoints {selection!r} selects nothing")
    out = run.analyses_dir / "eval.json"
    atomic_write_text(out, json.dumps(rows, indent=2))
    return rows, out


def format_eval(rows: list[dict]) -> list[str]:
    """Lines of ``icr eval``: per phase, its checkpoints; metrics ending in ``_K<k>`` as a
    table over K, the others as ``name value`` pairs."""
    import re

    lines: list[str] = []
    for r in rows:
        lines.append(f"{r['phase']}  {r['checkpoint']} (step {r['step']})")
        by_k: dict[str, dict[int, float]] = {}
        flat = []
        for k, v in r.items():
            if k in ("checkpoint", "phase", "step"):
                continue
            m = re.fullmatch(r"(.+)_K(\d+)", k)
            if m:
                by_k.setdefault(m.group(1), {})[int(m.group(2))] = v
            else:
                flat.append((k, v))
        if flat:
            lines.append("  " + "   ".join(
                f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in flat))
        if by_k:
            ks = sorted({k for d in by_k.values() for k in d})
            width = max(len(n) for n in by_k) + 2
            lines.append("  " + "".ljust(width) + "".join(f"K={k}".rjust(8) for k in ks))
            for name, d in by_k.items():
                lines.append("  " + name.ljust(width) + "".join(
                    (f"{d[k]:.3f}" if k in d else "").rjust(8) for k in ks))
    return lines


def metric_lines(metrics: list[dict], shown: str | None) -> list[str]:
    """``icr checkpoints``'s metrics column, one line per checkpoint's ``metrics``: the
    first 4 numbers and how many more there are (``shown`` None), every one (``all``) or the
    comma-joined names of ``shown`` (one no checkpoint has is refused, naming those there
    are): never a silent cut."""
    nums = [{k: v for k, v in m.items() if isinstance(v, (int, float))} for m in metrics]
    have = list(dict.fromkeys(k for n in nums for k in n))
    want = None if shown in (None, "all") else [k.strip() for k in shown.split(",")]
    bad = [k for k in want or [] if k not in have]
    if bad or want == []:
        raise ConfigError(f"--metrics = {shown!r} is not allowed: expected all or names "
                          f"joined by commas among {', '.join(have) or '(none recorded)'}")
    out = []
    for n in nums:
        keys = list(n)[:4] if shown is None else list(n) if want is None else [
            k for k in want if k in n]
        more = len(n) - len(keys) if shown is None else 0
        out.append(", ".join(f"{k}={n[k]:.3g}" for k in keys)
                   + (f" (+{more} more: --metrics all)" if more else ""))
    return out
