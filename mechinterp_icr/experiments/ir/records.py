"""The IR reproduction's job names and records: one frozen dataclass per kind of job, and the
one helper that names a job, shared by :func:`.reproduce.plan` (which declares the jobs) and
:func:`.reproduce.summarise` (which reads their records).

A job function returns ``Record.to_json()``; the scheduler stores that JSON; ``summarise``
reads it back with ``Record.read(json)``, which refuses a record whose keys differ from the
dataclass's (a renamed key fails where the record is read, naming the job kind and the keys,
not as a ``KeyError`` deep in the summary). The JSON keys are the stored files' own
(``"IR-1"``, ``"row"``, ...), so records written before these classes read unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mechinterp_icr.jobs import Record, record_field

__all__ = [
    "AttractorRecord",
    "HookedOverwriteRecord",
    "HookedRecord",
    "InductionRecord",
    "JOB_KINDS",
    "K3Record",
    "MainRecord",
    "MemoryRecord",
    "OverwriteRecord",
    "PretrainedRecord",
    "RowRecord",
    "TokRecord",
    "job_name",
    "read_record",
]


@dataclass(frozen=True)
class MainRecord(Record):
    """``seed<s>/main``: IR-1, IR-2/3/4 (PGD vs GD), IR-8's position-only head."""

    KIND: ClassVar[str] = "main"
    ir1: dict[str, Any] = record_field("ir1", "IR-1")
    ir2: dict[str, Any] = record_field("ir2", "IR-2")
    ir3: dict[str, Any] = record_field("ir3", "IR-3")
    ir4: dict[str, Any] = record_field("ir4", "IR-4")
    ir8: dict[str, Any] = record_field("ir8", "IR-8")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class OverwriteRecord(Record):
    """``seed<s>/overwrite``: IR-3/IR-4 causal, the fixed step-1 rows."""

    KIND: ClassVar[str] = "overwrite"
    fixed_rows: dict[str, Any] = record_field("fixed_rows")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class InductionRecord(Record):
    """``seed<s>/induction``: IR-8's induction-head control."""

    KIND: ClassVar[str] = "induction"
    control: dict[str, Any] = record_field("control")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class TokRecord(Record):
    """``seed<s>/ir8_tok``: IR-8 on the token-dependent model."""

    KIND: ClassVar[str] = "ir8_tok"
    ir8: dict[str, Any] = record_field("ir8", "IR-8")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class AttractorRecord(Record):
    """``seed<s>/ir9``: IR-9, the within-pair gap from an imposed offset."""

    KIND: ClassVar[str] = "ir9"

    ir9: dict[str, Any] = record_field("ir9", "IR-9")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class K3Record(Record):
    """``seed<s>/k3``: IR-7, K = 3 in-context pairs."""

    KIND: ClassVar[str] = "k3"
    ir7: dict[str, Any] = record_field("ir7", "IR-7")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class MemoryRecord(Record):
    """``seed<s>/ir6_memory``: IR-6's pretrained memory file and its last pretraining log."""

    KIND: ClassVar[str] = "ir6_memory"
    memory_file: str = record_field("memory_file")
    pretrain_final: dict[str, Any] | None = record_field("pretrain_final")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class PretrainedRecord(Record):
    """``seed<s>/ir6``: IR-6, PGD finetuning on the pretrained memory."""

    KIND: ClassVar[str] = "ir6"
    ir6: dict[str, Any] = record_field("ir6", "IR-6")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class RowRecord(Record):
    """One table row: ``gap/n<n>/seed<s>`` (IR-3 gap vs n), ``sample/n<n>/seed<s>`` and
    ``sample_learned/n<n>/seed<s>`` (IR-5, both arms)."""

    KIND: ClassVar[str] = "row"
    row: dict[str, Any] = record_field("row")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class HookedRecord(RowRecord):
    """``seed<s>/ht/<run>``: one HookedTransformer run with checkpoints (its table row)."""

    KIND: ClassVar[str] = "ht"


@dataclass(frozen=True)
class HookedOverwriteRecord(Record):
    """``seed<s>/ht_overwrite/<run>``: the row overwrite across that run's checkpoints."""

    KIND: ClassVar[str] = "ht_overwrite"
    rows: list[dict[str, Any]] | None = record_field("rows")
    timings: dict[str, float] = record_field("timings")


# job kind -> its record class
JOB_KINDS: dict[str, type[Record]] = {
    "main": MainRecord, "overwrite": OverwriteRecord, "induction": InductionRecord,
    "ir8_tok": TokRecord, "ir9": AttractorRecord, "k3": K3Record, "ir6_memory": MemoryRecord,
    "ir6": PretrainedRecord, "gap": RowRecord, "sample": RowRecord,
    "sample_learned": RowRecord, "ht": HookedRecord, "ht_overwrite": HookedOverwriteRecord,
}
_PER_N = ("gap", "sample", "sample_learned")
_PER_RUN = ("ht", "ht_overwrite")


def job_name(kind: str, seed: int, *, n: int | None = None, run: str | None = None) -> str:
    """The name of the job of ``kind`` for ``seed`` (and ``n`` for the per-n jobs, ``run``
    for the HookedTransformer jobs): ``seed<s>/<kind>``, ``<kind>/n<n>/seed<s>`` or
    ``seed<s>/<kind>/<run>``; a ValueError for an unknown kind or a missing ``n``/``run``."""
    if kind not in JOB_KINDS:
        raise ValueError(f"job kind {kind!r} is not one of {sorted(JOB_KINDS)}")
    if (n is not None) != (kind in _PER_N) or (run is not None) != (kind in _PER_RUN):
        raise ValueError(f"job kind {kind!r} takes " + (
            "n" if kind in _PER_N else "run" if kind in _PER_RUN else "neither n nor run"))
    if kind in _PER_N:
        return f"{kind}/n{n}/seed{seed}"
    if kind in _PER_RUN:
        return f"seed{seed}/{kind}/{run}"
    return f"seed{seed}/{kind}"


def read_record(records: dict[str, dict], kind: str, seed: int, *, n: int | None = None,
                run: str | None = None) -> Record:
    """The typed record of the job :func:`job_name` names, from the scheduler's records."""
    return JOB_KINDS[kind].read(records[job_name(kind, seed, n=n, run=run)])
