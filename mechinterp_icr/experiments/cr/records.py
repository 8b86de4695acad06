"""The CR reproduction's job names and records: one frozen dataclass per kind of job (the
base :class:`mechinterp_icr.jobs.Record`), and the one helper that names a job, shared by
:func:`.reproduce.plan` and :func:`.reproduce.summarise`.

The jobs return plain JSON (``evaluate.to_record``); the summary reads each record back with
``Record.read``, which refuses one whose keys differ from its kind's, naming them. The JSON
keys are the stored files' own, so records written before these classes read unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mechinterp_icr.jobs import Record, record_field

__all__ = [
    "CascadeRecord",
    "JOB_KINDS",
    "LamRecord",
    "MechanismRecord",
    "PlaceboRecord",
    "SweepRecord",
    "TaskvecRecord",
    "TrainRecord",
    "UninfRecord",
    "VARIANT_KINDS",
    "ViewsRecord",
    "job_name",
    "read_record",
]


@dataclass(frozen=True)
class TrainRecord(Record):
    """``seed<N>/train`` (and ``shared/seed<N>/train``): pretraining and the finetuning
    branches of one seed: the task's numbers, each phase's evaluation rows, the finetuning
    curves and each phase's seconds."""

    KIND: ClassVar[str] = "train"
    seed: int = record_field("seed")
    task: dict[str, Any] = record_field("task")
    phases: dict[str, Any] = record_field("phases")
    curves: dict[str, Any] = record_field("curves")
    seconds: dict[str, float] = record_field("seconds")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class SweepRecord(Record):
    """``sweep/<slug>/seed<N>``: one CR-3 sweep setting's row."""

    KIND: ClassVar[str] = "sweep"
    row: dict[str, Any] = record_field("row")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class LamRecord(Record):
    """``cr4-lam/<lam>/seed<N>``: one point of the CR-4 lam sweep (its row, or the error that
    stopped it)."""

    KIND: ClassVar[str] = "cr4-lam"
    timings: dict[str, float] = record_field("timings")
    row: dict[str, Any] | None = record_field("row", default=None)
    error: str | None = record_field("error", default=None)


@dataclass(frozen=True)
class TaskvecRecord(Record):
    """``seed<N>/cr4`` (and ``shared/seed<N>/cr4``): the task-vector analysis of one seed's
    run: ``status`` "ok" with its ``result``, "error" with the ``error``, or "skipped"."""

    KIND: ClassVar[str] = "cr4"
    status: str = record_field("status")
    timings: dict[str, float] = record_field("timings", default_factory=dict)
    result: dict[str, Any] | None = record_field("result", default=None)
    error: str | None = record_field("error", default=None)


@dataclass(frozen=True)
class CascadeRecord(Record):
    """``seed<N>/cascade``: CR-7 (the cascade and its causal arms) and CR-5's mechanism-model
    head roles."""

    KIND: ClassVar[str] = "cascade"
    cr7: dict[str, Any] = record_field("cr7")
    cr5_mech: dict[str, Any] = record_field("cr5_mech")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class PlaceboRecord(Record):
    """``seed<N>/placebo``: CR-7's synthetic placebo schedules."""

    KIND: ClassVar[str] = "placebo"
    placebo: dict[str, Any] = record_field("placebo")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class MechanismRecord(Record):
    """``seed<N>/mechanism``: CR-6's construction numbers and CR-5's 2-layer head roles."""

    KIND: ClassVar[str] = "mechanism"
    cr6: dict[str, Any] = record_field("cr6")
    cr5: dict[str, Any] = record_field("cr5")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class UninfRecord(Record):
    """``seed<N>/uninf-demos`` (and ``shared/seed<N>/uninf-demos``): the type of the best
    attribute guess of the seed's PT-only, ICL-finetuned and mixed-type ICL+Grm models on the
    held-out ICL prompts at the default K, with the real demos and with uninformative demos
    (``uninformative.uninf_demos_seed``): ``phases`` maps a phase to ``{real,
    uninformative, contrast, demo_query_type}``."""

    KIND: ClassVar[str] = "uninf-demos"
    seed: int = record_field("seed")
    K: int = record_field("K")
    n: int = record_field("n")
    phases: dict[str, Any] = record_field("phases")
    timings: dict[str, float] = record_field("timings")


@dataclass(frozen=True)
class ViewsRecord(Record):
    """``views``: the attention views written (paths relative to the output folder)."""

    KIND: ClassVar[str] = "views"
    views: list[str] = record_field("views")
    timings: dict[str, float] = record_field("timings")


JOB_KINDS: dict[str, type[Record]] = {
    "train": TrainRecord, "sweep": SweepRecord, "cr4-lam": LamRecord, "cr4": TaskvecRecord,
    "cascade": CascadeRecord, "placebo": PlaceboRecord, "mechanism": MechanismRecord,
    "views": ViewsRecord, "uninf-demos": UninfRecord,
}

# the kinds of job the shared-token variant runs too (``shared/seed<N>/<kind>``)
VARIANT_KINDS = ("train", "cr4", "uninf-demos")


def job_name(kind: str, seed: int | None = None, *, setting: str | None = None,
             lam: float | None = None, variant: str = "") -> str:
    """The name of the job of ``kind``: ``[shared/]seed<N>/<kind>``, ``sweep/<slug>/seed<N>``
    (``setting`` = the slug), ``cr4-lam/<lam>/seed<N>`` or ``views``; ``variant="shared"``
    for the shared-token variant's jobs (:data:`VARIANT_KINDS`). A ValueError for an unknown
    kind or missing arguments."""
    if kind not in JOB_KINDS:
        raise ValueError(f"job kind {kind!r} is not one of {sorted(JOB_KINDS)}")
    if kind == "views":
        return "views"
    if seed is None or (kind == "sweep") != (setting is not None) or \
            (kind == "cr4-lam") != (lam is not None):
        raise ValueError(f"job kind {kind!r} takes a seed" + (
            " and setting" if kind == "sweep" else " and lam" if kind == "cr4-lam" else ""))
    if kind == "sweep":
        return f"sweep/{setting}/seed{seed}"
    if kind == "cr4-lam":
        return f"cr4-lam/{lam:g}/seed{seed}"
    if variant and kind not in VARIANT_KINDS:
        raise ValueError(f"the {variant!r} variant has no {kind!r} jobs")
    return (f"{variant}/" if variant else "") + f"seed{seed}/{kind}"


def read_record(records: dict[str, dict], kind: str, seed: int | None = None, **kw) -> Any:
    """The typed record of the job :func:`job_name` names, from the scheduler's records."""
    return JOB_KINDS[kind].read(records[job_name(kind, seed, **kw)])
