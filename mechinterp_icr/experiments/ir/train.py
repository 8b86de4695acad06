"""Training runs of the IR reproduction and the one metric record they report.

- :func:`run_fast`: PGD / GD on :class:`~mechinterp_icr.models.ir.FastIR` (theory setting,
  position block only, float64), evaluated at :func:`eval_steps`;
- :func:`hooked_run`: PGD / GD on the IR HookedTransformer with checkpoints in a run
  directory (position block, or all of W_Q, W_K for the experiment setting);
- both kinds of run report the one IR metric record,
  :func:`mechinterp_icr.interp.ir_attention.ir_metric_record` (step-1 / step-2 accuracies,
  the step-1 row statistics, the step-2 mass on ``s_q``), at their evaluation steps; the
  ``analyses/ir_attention_rows.py`` table reports the same record per checkpoint.

Every data draw comes from :func:`tagged_rng` (a numpy generator from the seed and tags), so
each stage sees the same sequences whatever else runs.
"""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, RunConfig, TrainConfig
from mechinterp_icr.experiments.ir.config import IRConfig, model_spec, task_config
from mechinterp_icr.interp.ir_attention import ir_accuracy, ir_metric_record, row_stats
from mechinterp_icr.models.ir import (
    FastIR,
    IRModelSpec,
    build_ir_hooked,
    ideal_pos_block,
    ir_model_config,
)
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.training.pgd import PGDConfig, pgd_fast, pgd_hooked

__all__ = [
    "FINAL_KEYS",
    "batch_accuracy",
    "ceiling",
    "check_pgd_resume",
    "escape_step",
    "eval_steps",
    "fast_metrics",
    "final_batch",
    "final_record",
    "gap_stop_rule",
    "hooked_metrics_fn",
    "hooked_run",
    "run_fast",
    "spread_escape_step",
    "tagged_rng",
]



def tagged_rng(seed: int, *tags) -> np.random.Generator:
    """A numpy generator that is a pure function of the seed and the tags."""
    return np.random.default_rng([int(seed)] + [zlib.crc32(str(t).encode()) for t in tags])


def fast_metrics(fast: FastIR, ev) -> dict[str, Any]:
    """:func:`ir_metric_record` of a FastIR on the evaluation batch ``ev``."""
    K = fast.task.cfg.n_pairs
    with torch.no_grad():
        logits2 = fast.cot_logits(ev.tokens)
        A = fast.attention([2 * K, 2 * K + 1])
    return ir_metric_record(logits2, A[0].numpy(), A[1], ev, K)


def hooked_metrics_fn(task, ev):
    """Evaluation function for :func:`pgd_hooked`: :func:`ir_metric_record` of the
    HookedTransformer on ``ev`` (rows averaged over the batch, one forward pass)."""
    K = task.cfg.n_pairs

    def fn(model) -> dict[str, Any]:
        logits, cache = model.run_with_cache(
            ev.tokens, names_filter=lambda n: n.endswith("hook_pattern"))
        pat = cache["pattern", 0][:, 0].double()  # (B, T, T)
        r1, r2 = pat[:, 2 * K].mean(0).numpy(), pat[:, 2 * K + 1].mean(0).numpy()
        return ir_metric_record(logits[:, 2 * K: 2 * K + 2], r1, r2, ev, K)

    return fn


def eval_steps(total: int) -> set[int]:
    """Log-spaced evaluation steps of a run of ``total`` small steps (and its end)."""
    s = {0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000,
         1500, 2000, 3000, total + 1}
    return {x for x in s if x <= total + 1}


def escape_step(recs: list[dict], threshold: float, key: str = "swap_p") -> int | None:
    """IR-4: the first step >= 1 whose expected step-1 accuracy on swap-confusing sequences
    (``key``, evaluated at every step) reaches ``threshold`` (None: never in the run)."""
    for r in recs:
        if r["step"] >= 1 and r.get(key) is not None and r[key] >= threshold:
            return int(r["step"])
    return None


def spread_escape_step(recs: list[dict], spread: float) -> int | None:
    """First step >= 1 whose step-1 pair-mass spread reaches ``spread`` (None: never)."""
    for r in recs:
        if r["step"] >= 1 and row_stats(r["row1"], (len(r["row1"]) - 1) // 2)[
                "pair_mass_spread"] >= spread:
            return int(r["step"])
    return None


def gap_stop_rule(cfg: IRConfig) -> tuple[set[int], Callable[[dict], bool]]:
    """IR-3's registered stopping rule: after ``steps`` small steps, every ``stop_every``
    steps, stop once the within-pair gap of the step-1 row moved by less than ``stop_tol``
    (either way) since the last check: a gap still growing is not settled (the run's length,
    ``stop_max`` small steps, bounds it).
    Returns the record steps at which the rule is checked (record step = small steps + 1) and the
    ``stop_fn`` for :func:`pgd_fast`."""
    checks = set(range(cfg.steps + 1, cfg.stop_max + 2, cfg.stop_every))
    seen: dict[int, float] = {}

    def stop(rec: dict) -> bool:
        t = rec["step"]
        if t not in checks:
            return False
        K = (len(rec["row1"]) - 1) // 2
        seen[t] = row_stats(rec["row1"], K)["within_pair_gap"]
        prev = seen.get(t - cfg.stop_every)
        return prev is not None and abs(prev - seen[t]) < cfg.stop_tol

    return checks, stop


FINAL_KEYS = ("step1_acc", "step1_prob", "step2_acc", "step2_prob", "step1_prob_swap",
              "step1_acc_swap", "step1_prob_single", "step1_acc_single")


def final_batch(cfg: IRConfig, task, seed: int, tag: str):
    """``cfg.final_eval`` fresh sequences of ``task``'s evaluation mix (tagged ``tag``): where
    a run's final accuracies are read (:func:`run_fast`'s ``final_ev``)."""
    return task.sample(tagged_rng(seed, "final", tag, task.cfg.n_subjects), cfg.final_eval)


@torch.no_grad()
def batch_accuracy(fast: FastIR, batch, chunk: int = 2500) -> dict[str, float]:
    """:func:`ir_accuracy` of ``fast`` on ``batch``, its logits computed in chunks."""
    logits = torch.cat([fast.cot_logits(batch.tokens[i: i + chunk])
                        for i in range(0, len(batch.tokens), chunk)])
    return ir_accuracy(logits, batch)


def run_fast(task, spec: IRModelSpec, train, ev, pgd: PGDConfig, seed: int, memory=None,
             E=None, *, swap=None, extra_eval: set[int] | None = None,
             stop_fn: Callable[[dict], bool] | None = None,
             at_big_step: dict | None = None,
             escape_at: float | None = None, final_ev=None,
             dense_dtype: torch.dtype = torch.float64) -> tuple[FastIR, list[dict]]:
    """PGD (or GD) on a fresh FastIR; records carry :func:`fast_metrics` at the eval steps
    (and ``extra_eval``); with a swap-confusing batch ``swap``, ``swap_p`` (expected step-1
    accuracy on it) at every step until it first reaches ``escape_at`` (the registered escape
    threshold, required with ``swap``) and at the eval steps
    after; right after the large step (record 1) the expected step-1 accuracy on each batch
    of ``at_big_step`` (name -> batch) as ``prob_<name>``. ``stop_fn(record)`` may end the
    run early. With ``final_ev`` (:func:`final_batch`) every accuracy of the final record
    (:func:`ir_accuracy`'s keys, :data:`FINAL_KEYS` among them) is read on it instead, the
    ``ev`` values kept as ``ev_<key>`` and its size as ``final_eval``. ``dense_dtype``: the
    precision of a dense (pretrained) memory's matmuls (:class:`FastIR`)."""
    if swap is not None and escape_at is None:
        raise ValueError("run_fast: escape_at (the registered escape threshold) is required "
                         "with a swap batch")
    fast = FastIR(task, spec, seed=seed, memory=memory, E=E, dense_dtype=dense_dtype)
    steps = eval_steps(pgd.steps) | (extra_eval or set())
    escaped = [False]

    def evaluate(f, t):
        out = fast_metrics(f, ev) if t in steps else {}
        if swap is not None and (not escaped[0] or t in steps):  # every step until escape
            out["swap_p"] = ir_accuracy(f.cot_logits(swap.tokens), swap)["step1_prob"]
            escaped[0] = escaped[0] or (t >= 1 and out["swap_p"] >= escape_at)
        if t == 1:
            for name, b in (at_big_step or {}).items():
                out[f"prob_{name}"] = ir_accuracy(f.cot_logits(b.tokens), b)["step1_prob"]
        return out

    recs = pgd_fast(fast, train, pgd, seed, eval_fn=evaluate, stop_fn=stop_fn)
    if final_ev is not None:  # every accuracy of the final record from the one big batch
        last = final_record(recs)
        acc = batch_accuracy(fast, final_ev)
        missing = [k for k in FINAL_KEYS if k not in acc]
        if missing:
            raise ValueError(f"run_fast: final_ev gives no {missing} (a batch without "
                             "confusing sequences?)")
        stale = [k for k in last if k in acc or k.startswith(("step1_acc_", "step1_prob_",
                                                               "step2_acc_", "step2_prob_"))]
        last.update({f"ev_{k}": last.pop(k) for k in stale})
        last.update(acc)
        last["final_eval"] = len(final_ev.tokens)
    return fast, recs


def final_record(recs: list[dict]) -> dict:
    """The last evaluated record of a run."""
    return [r for r in recs if "step1_acc" in r][-1]


# the ideal rows' pair mass a is searched on np.linspace(*CEILING_A_RANGE, grid): the argmax
# ceiling on CEILING_GRID points, the expected-accuracy ceiling (IR-2's and IR-5's targets) on
# CEILING_GRID_EXPECTED points
CEILING_A_RANGE = (0.17, 0.33)
CEILING_GRID = 17
CEILING_GRID_EXPECTED = 9


def ceiling(task, spec: IRModelSpec, ev, seed: int, K: int = 2, E=None,
            key: str = "step1_acc", grid: int = CEILING_GRID) -> dict[str, float]:
    """Best step-1 ``key`` (argmax accuracy, or ``step1_prob``: expected accuracy at the
    decoding temperature) over ideal rows (a, a, 1/2-a, 1/2-a, 0), step-2 row on s_q."""
    fast = FastIR(task, spec, seed=seed, E=E)
    best = {key: -1.0}
    for a in np.linspace(*CEILING_A_RANGE, grid):
        with torch.no_grad():
            fast.B.copy_(ideal_pos_block(task.n_ctx, K, float(a)))
            m = ir_accuracy(fast.cot_logits(ev.tokens), ev)
        if m[key] > best[key]:
            best = {**m, "a": float(a)}
    return best


def check_pgd_resume(run: RunDir, pgd: PGDConfig, settings: dict[str, Any]) -> None:
    """Refuse to resume a PGD run under other PGD settings (step sizes, steps, perturbation,
    clipping) or other evaluation settings than its checkpoints were made with."""
    from mechinterp_icr.store.checkpoint import CheckpointError, read_sidecar

    new = {"pgd": {k: getattr(pgd, k) for k in pgd.__dataclass_fields__},
           "ir_settings": settings}
    cks = run.checkpoints()
    if not cks:
        return
    try:
        side = read_sidecar(cks[-1].stem)
    except CheckpointError:
        return  # damaged: the resume skips it and says so
    for part, want in new.items():
        have = side.get(part)
        if not isinstance(have, dict):
            continue  # a checkpoint written before this record (or of the memory phase)
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        if diff:
            raise ConfigError(
                f"run directory {run.path} was trained with other settings ("
                + ", ".join(f"{k} {have.get(k)!r} then, {want.get(k)!r} now" for k in diff[:4])
                + "); repeat the settings it was made with, or train into another --out")


def hooked_run(cfg: IRConfig, seed: int, root: Path, name: str, sym: bool, perturb: bool,
               target: str, fresh: bool = True, on_log=None) -> dict[str, Any]:
    """One HookedTransformer PGD (``perturb``) or GD run at ``n = hooked.n`` into ``root/name``,
    checkpointed at every step up to ``hooked.dense``; ``target`` "pos" trains the position
    block, "qk" all of W_Q, W_K (with its own step sizes and clipping). ``fresh``: a present
    directory is replaced (the reproduction); otherwise it must hold this run, which resumes
    from its checkpoints (``icr train --task ir``; ``on_log``: its tracker). Returns the run
    path, its checkpoint count and the last evaluation."""
    tcfg = task_config(cfg, cfg.hooked.n, sym=sym)
    task = tcfg.build(seed)
    spec = model_spec(cfg)
    model = build_ir_hooked(task, spec, seed=seed)
    path = root / name
    rcfg = RunConfig(name=name, seed=seed, task=tcfg, model=ir_model_config(task, spec),
                     train=TrainConfig(steps=cfg.hooked.steps, batch_size=cfg.hooked.N,
                                       optimizer="sgd",
                                       lr=cfg.lr if target == "pos" else cfg.hooked.attn_lr,
                                       grad_clip=0.0 if target == "pos" else cfg.hooked.attn_clip,
                                       trainable={"pos": "blocks.0.attn.W_K", "qk": "qk",
                                                  "attention": "attention"}[target],
                                       progress=False))
    big_lr = cfg.big_lr if target == "pos" else cfg.hooked.attn_big_lr  # qk / attention
    pgd = PGDConfig(big_lr=big_lr, sigma=cfg.sigma, lr=cfg.lr if target == "pos" else
                    cfg.hooked.attn_lr, steps=cfg.hooked.steps, perturb=perturb, target=target,
                    clip=0.0 if target == "pos" else cfg.hooked.attn_clip)
    settings = {"hooked.eval": cfg.hooked.eval, "hooked.dense": cfg.hooked.dense}
    if fresh and path.exists():
        shutil.rmtree(path)
    run = RunDir.open_for(path, rcfg)  # refuses a directory holding another run
    if not fresh:
        check_pgd_resume(run, pgd, settings)
    train = task.sample(tagged_rng(seed, "train", cfg.hooked.n, sym), cfg.hooked.N)
    ev = task_config(cfg, cfg.hooked.n).build(seed).sample(tagged_rng(seed, "eval", cfg.hooked.n),
                                                      cfg.hooked.eval)
    pgd_hooked(model, train, pgd, run, seed, eval_fn=hooked_metrics_fn(task, ev),
               dense_until=cfg.hooked.dense,
               extra_meta={"ir_model": {k: getattr(spec, k)
                                        for k in spec.__dataclass_fields__},
                           "ir_settings": settings}, on_log=on_log)
    last = [m for m in run.read_metrics() if "step1_acc" in m][-1]
    return {"run": str(path), "n_checkpoints": len(run.checkpoints()),
            **{k: last[k] for k in ("step1_acc", "step2_acc", "within_pair_gap", "a",
                                    "mass_sq") if k in last}}
