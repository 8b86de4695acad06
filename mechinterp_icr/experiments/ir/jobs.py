"""The jobs the IR reproduction is cut into: one module-level function per job, each calling
the computations of :mod:`.stages` (and of the sweep and control modules).

Each function takes only keyword arguments that pickle (the frozen :class:`IRConfig`, a
seed, a sweep setting, paths), computes one stage (or one sweep setting) of one seed from
those inputs alone (every draw comes from :func:`..train.tagged_rng` and seeded generators,
nothing is cached between calls), and returns its job's record (:mod:`.records`, a frozen
dataclass per kind of job, as plain JSON) with the seconds it spent per stage under
``"timings"``. Files a later job reads (the fast runs'
records, the pretrained memory, the HookedTransformer runs' checkpoints) are written into the
seed's run directory, atomically or replaced whole, so a job killed midway can simply run
again. :func:`..reproduce.plan` lists the jobs and their order; :func:`..reproduce.summarise`
turns the records into claims, tables and figures.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from mechinterp_icr.experiments.ir.config import IRConfig
from mechinterp_icr.experiments.ir.controls import (
    induction_control,
    induction_row_test,
    ir_head_scores,
    overwrite_fixed_rows,
    overwrite_run_rows,
)
from mechinterp_icr.experiments.ir.conventions import stop_tol_variants
from mechinterp_icr.experiments.ir.ir5 import sample_complexity_row
from mechinterp_icr.experiments.ir.ir8 import tok_metrics
from mechinterp_icr.experiments.ir.ir9 import attractor_metrics
from mechinterp_icr.experiments.ir.records import (
    AttractorRecord,
    HookedOverwriteRecord,
    HookedRecord,
    InductionRecord,
    K3Record,
    MainRecord,
    MemoryRecord,
    OverwriteRecord,
    PretrainedRecord,
    RowRecord,
    TokRecord,
)
from mechinterp_icr.experiments.ir.stages import (
    hooked_run_named,
    k3_metrics,
    k3_records,
    main_setting,
    memory_and_ceiling,
    pgd_vs_gd_metrics,
    pgd_vs_gd_runs,
    pretrained_metrics,
    pretrained_setting,
    raw_train,
)
from mechinterp_icr.experiments.ir.sweeps import gap_row
from mechinterp_icr.experiments.ir.train import final_record
from mechinterp_icr.models.ir import Memory
from mechinterp_icr.store.io import (
    atomic_write_bytes,
    atomic_write_json,
    read_regular_file,
)

__all__ = [
    "MemoryFileError",
    "STAGES",
    "StageTimer",
    "attractor_job",
    "gap_job",
    "hooked_job",
    "hooked_overwrite_job",
    "induction_job",
    "k3_job",
    "load_memory",
    "main_job",
    "memory_job",
    "overwrite_job",
    "pretrained_job",
    "sample_job",
    "save_memory",
    "tok_job",
]

# stage names of the timings (the same as before the cut into jobs)
STAGES = ("IR-1 memory + ceiling", "IR-2/3/4 PGD vs GD (fast)",
          "IR-3/6/7 stopping-rule conventions", "IR-3/IR-4 causal: row overwrite",
          "IR-8 position-only (structural)", "IR-8 induction control",
          "IR-8 token-dependent model", "IR-3 gap vs n", "IR-7 K=3", "IR-6 pretrained memory",
          "IR-5 sample complexity", "IR-5 sample complexity (learned control)",
          "IR-9 within-pair attractor", "HookedTransformer runs (checkpoints)")


class StageTimer:
    """Seconds per stage name, accumulated over ``with timer(name):`` blocks."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t


# --------------------------------------------------------------------------------------------
# per seed
# --------------------------------------------------------------------------------------------
def main_job(*, cfg: IRConfig, seed: int, run_dir: Path) -> dict[str, Any]:
    """IR-1 (memory retrieval, shuffled-triple control, ideal-attention ceilings), IR-2/3/4
    (PGD vs GD on raw, pair-symmetric and eps-asymmetric data; records written to
    ``run_dir/fast_<data>_<alg>.json``) and IR-8 on the raw-data PGD head (induction-style
    row replacement, prefix-matching scores)."""
    t = StageTimer()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    main = main_setting(cfg, seed)
    with t("IR-1 memory + ceiling"):
        ir1, ceil = memory_and_ceiling(main, seed)
    with t("IR-2/3/4 PGD vs GD (fast)"):
        runs = pgd_vs_gd_runs(cfg, main, seed, run_dir)
        ir2, ir3, ir4 = pgd_vs_gd_metrics(cfg, runs, main, seed)
    with t("IR-3/6/7 stopping-rule conventions"):
        fast, recs = runs[("raw", "pgd")]
        ir3["stop_tol_variants"] = stop_tol_variants(cfg, fast, recs, raw_train(cfg, seed))
    with t("IR-8 position-only (structural)"):
        ir8 = {**induction_row_test(fast, main.ev), "head": ir_head_scores(fast, cfg, seed)}
    return MainRecord(ir1, ir2, ir3, ir4, ir8, t.timings).to_json()


def overwrite_job(*, cfg: IRConfig, seed: int, run_dir: Path) -> dict[str, Any]:
    """IR-3/IR-4 causal, per seed: fixed step-1 rows at the ``a`` this seed's raw-data PGD
    run learned (read from ``run_dir/fast_raw_pgd.json``, written by :func:`main_job`)."""
    t = StageTimer()
    with t("IR-3/IR-4 causal: row overwrite"):
        recs = json.loads((Path(run_dir) / "fast_raw_pgd.json").read_text())["records"]
        table = overwrite_fixed_rows(cfg, seed, final_record(recs)["a"])
    return OverwriteRecord(table, t.timings).to_json()


def induction_job(*, cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-8: the induction-head control trained and scored for this seed."""
    t = StageTimer()
    with t("IR-8 induction control"):
        ctrl = induction_control(cfg, seed)
    return InductionRecord(ctrl, t.timings).to_json()


def k3_job(*, cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-7: PGD with K = 3 in-context pairs."""
    t = StageTimer()
    with t("IR-7 K=3"):
        fast, recs, train = k3_records(cfg, seed, return_run=True)
        m = k3_metrics(recs)
    with t("IR-3/6/7 stopping-rule conventions"):
        m["stop_tol_variants"] = stop_tol_variants(cfg, fast, recs, train)
    return K3Record(m, t.timings).to_json()


class MemoryFileError(ValueError):
    """IR-6's pretrained memory file is missing, corrupt, or not a pretrained memory."""


def save_memory(path: Path, memory: Memory, log: list[dict]) -> Path:
    """Write a pretrained memory to ``path`` (safetensors: ``W_in``, ``b_in``, ``W_out``) and
    its kind, pretraining log and the weights' SHA-256 to the JSON sidecar
    ``path.with_suffix(".json")``; each file atomically, weights first (a sidecar left from an
    earlier run does not match new weights: :func:`load_memory` checks the hash)."""
    path = Path(path)
    data = st_save({"W_in": memory.W_in.contiguous(), "b_in": memory.b_in.contiguous(),
                    "W_out": memory.W_out.contiguous()})
    atomic_write_bytes(path, data)
    atomic_write_json(path.with_suffix(".json"), {"kind": memory.kind, "log": log,
                                                  "sha256": hashlib.sha256(data).hexdigest()})
    return path


def _checked_memory(side: Any, raw: bytes) -> tuple[Memory, list[dict]]:
    if not isinstance(side, dict) or side.get("kind") != "pretrained" or \
            not isinstance(side.get("log"), list):
        raise ValueError("the sidecar must hold kind 'pretrained' and a log list, it holds "
                         f"kind {side.get('kind') if isinstance(side, dict) else side!r}")
    if side.get("sha256") != hashlib.sha256(raw).hexdigest():
        raise ValueError("the weights do not match the sidecar's sha256 (truncated, replaced "
                         "or written by another run)")
    w = st_load(raw)
    missing = sorted({"W_in", "b_in", "W_out"} - set(w))
    if missing:
        raise ValueError(f"the weights lack {missing}")
    if any(t.dtype != torch.float64 for t in w.values()) or w["W_in"].dim() != 2 or \
            not w["W_in"].shape[1] == w["b_in"].numel() == w["W_out"].shape[0]:
        raise ValueError("W_in, b_in, W_out must be float64 with W_in (d, H), b_in (H,), "
                         "W_out (H, V), got " + ", ".join(
                             f"{k} {tuple(t.shape)} {t.dtype}" for k, t in sorted(w.items())))
    return Memory("pretrained", w["W_in"], w["b_in"], w["W_out"]), side["log"]


def load_memory(path: Path) -> tuple[Memory, list[dict]]:
    """The memory and pretraining log written by :func:`save_memory` (bit-identical); no
    pickle is read. A missing, corrupt or foreign file raises :class:`MemoryFileError` naming
    the file and how to pretrain it again."""
    path = Path(path)
    try:
        side = json.loads(read_regular_file(path.with_suffix(".json"), 1 << 26))
        return _checked_memory(side, read_regular_file(path, 1 << 34))
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise MemoryFileError(
            f"IR-6 memory {path} (and its .json sidecar): {e}. Delete both and the record "
            "jobs/ir/seed<s>/ir6_memory.json in the output folder, then rerun to pretrain "
            "it again") from None


def memory_job(*, cfg: IRConfig, seed: int, memory_file: Path) -> dict[str, Any]:
    """IR-6, first half: pretrain the memory (n = ``pretrained.n``) and write it to
    ``memory_file`` for :func:`pretrained_job`."""
    t = StageTimer()
    with t("IR-6 pretrained memory"):
        log: list = []
        pre = pretrained_setting(cfg, seed, log=log)
        Path(memory_file).parent.mkdir(parents=True, exist_ok=True)
        save_memory(Path(memory_file), pre.memory, log)
    return MemoryRecord(str(memory_file), log[-1] if log else None, t.timings).to_json()


def pretrained_job(*, cfg: IRConfig, seed: int, memory_file: Path) -> dict[str, Any]:
    """IR-6, second half: retrieval of the memory in ``memory_file`` (from
    :func:`memory_job`) and PGD finetuning on top of it."""
    t = StageTimer()
    with t("IR-6 pretrained memory"):
        memory, log = load_memory(memory_file)
        pre = pretrained_setting(cfg, seed, memory=memory)
        m = pretrained_metrics(cfg, seed, pre, log)
    return PretrainedRecord(m, t.timings).to_json()


# --------------------------------------------------------------------------------------------
# per sweep setting and seed
# --------------------------------------------------------------------------------------------
def gap_job(*, cfg: IRConfig, seed: int, n: int) -> dict[str, Any]:
    """IR-3: the converged within-pair gap at ``n`` subjects."""
    t = StageTimer()
    with t("IR-3 gap vs n"):
        row = gap_row(cfg, seed, n)
    return RowRecord(row, t.timings).to_json()


def sample_job(*, cfg: IRConfig, seed: int, n: int, arm: str = "memory") -> dict[str, Any]:
    """IR-5: the sample-complexity row at ``n`` subjects (random embeddings) of ``arm``:
    "memory" (the claim) or "learned" (its positive control)."""
    t = StageTimer()
    with t("IR-5 sample complexity" + ("" if arm == "memory" else " (learned control)")):
        row = sample_complexity_row(cfg, seed, n, arm)
    return RowRecord(row, t.timings).to_json()


def attractor_job(*, cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-9: the within-pair gap from an imposed offset, learning rate registered and 0."""
    t = StageTimer()
    with t("IR-9 within-pair attractor"):
        m = attractor_metrics(cfg, seed)
    return AttractorRecord(m, t.timings).to_json()


def tok_job(*, cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-8: the token-dependent model (all of W_Q, W_K) finetuned and scored."""
    t = StageTimer()
    with t("IR-8 token-dependent model"):
        m = tok_metrics(cfg, seed)
    return TokRecord(m, t.timings).to_json()


# --------------------------------------------------------------------------------------------
# HookedTransformer runs (first seed)
# --------------------------------------------------------------------------------------------
def hooked_job(*, cfg: IRConfig, seed: int, run_dir: Path, name: str) -> dict[str, Any]:
    """One HookedTransformer run with checkpoints into ``run_dir/name`` (replaced whole)."""
    t = StageTimer()
    with t("HookedTransformer runs (checkpoints)"):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        row = hooked_run_named(cfg, seed, Path(run_dir), name)
    return HookedRecord(row, t.timings).to_json()


def hooked_overwrite_job(*, cfg: IRConfig, seed: int, run_dir: Path, name: str
                         ) -> dict[str, Any]:
    """IR-3/IR-4 causal: the row overwrite across the checkpoints of the run ``name``
    (written by :func:`hooked_job`)."""
    t = StageTimer()
    with t("IR-3/IR-4 causal: row overwrite"):
        rows = overwrite_run_rows(Path(run_dir) / name, cfg.overwrite_n, seed)
    return HookedOverwriteRecord(rows, t.timings).to_json()
