"""Run directories: the unit every stage exchanges.

```
runs/<name>/config.json                         resolved RunConfig (task, model, train, seed)
runs/<name>/checkpoints/<phase>-<step>.safetensors  (+ .json sidecar)
runs/<name>/metrics.jsonl                       one line per evaluation
runs/<name>/analyses/<analysis>.json and figures
```

Checkpoint selections (``--checkpoints``): ``all``, ``last``, ``first``, ``phase:NAME``,
``phase:NAME:first``, ``phase:NAME:last``, ``steps:A-B`` (inclusive, any phase), an exact
checkpoint name ``<phase>-<step>``, or several of these joined by commas. A selection that is
empty, misspelt or names an unknown phase is refused with the allowed forms, never read as
"everything" or as nothing.

Phases are named by short identifiers (:data:`PHASE_PATTERN`: a letter, then letters, digits,
``_`` and single inner ``-``, at most 32 characters), so a phase name can never leave the
``checkpoints`` folder. Each checkpoint records its phase's order in the run; ``last`` and
``first`` follow that order (then the step), not the alphabet.
"""

from __future__ import annotations

import errno
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import mechinterp_icr.tasks  # noqa: F401  (registers every task kind that read_config may meet)
from mechinterp_icr.config import (
    ConfigError,
    RunConfig,
    check_buildable,
    from_dict,
    show,
    to_dict,
)
from mechinterp_icr.store.checkpoint import CheckpointError, read_sidecar
from mechinterp_icr.store.io import (
    UnsafeFileError,
    atomic_write_text,
    read_regular_file,
    remove_stale_temp_files,
)

__all__ = ["RunDir", "CheckpointInfo", "RunError", "PHASE_PATTERN", "check_phase_name",
           "checkpoint_name", "SELECTION_FORMS"]

PHASE_PATTERN = r"[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*"
_PHASE_RE = re.compile(rf"^{PHASE_PATTERN}$")
_CKPT_RE = re.compile(r"^(?P<phase>[A-Za-z0-9_.+]+(?:-[A-Za-z0-9_.+]+)*?)-(?P<step>\d+)$")
SELECTION_FORMS = ("all, last, first, phase:NAME, phase:NAME:first, phase:NAME:last, "
                   "steps:A-B, a checkpoint name, or several joined by commas")
MAX_CONFIG_BYTES = 4 * 1024**2
MAX_METRICS_BYTES = 1024**3


class RunError(RuntimeError):
    """A run directory is missing or malformed, or a selection matches nothing."""


def check_phase_name(phase: Any) -> str:
    """Refuse a phase name that is not a short identifier (it names files); returns it."""
    if not (isinstance(phase, str) and len(phase) <= 32 and _PHASE_RE.match(phase)):
        raise ConfigError(f"phase = {show(phase)} is not allowed; expected a short name: a "
                          "letter, then letters, digits, '_' or single inner '-', at most 32 "
                          "characters (e.g. train, pretrain, ft-icl)")
    return phase


@dataclass(frozen=True)
class CheckpointInfo:
    phase: str
    step: int
    stem: Path
    order: int  # position of the phase in the run (pretrain 0, finetune branches 1, ...)
    problem: str | None = None  # why the sidecar cannot be read (None: it can)

    @property
    def name(self) -> str:
        return self.stem.name

    def sidecar(self) -> dict[str, Any]:
        return read_sidecar(self.stem)


def checkpoint_name(phase: str, step: int) -> str:
    return f"{phase}-{step:07d}"


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """{'model': {'d_model': 64}} -> {'model.d_model': 64}."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


class RunDir:
    def __init__(self, path: str | Path, create: bool = False):
        self.path = Path(path)
        if create:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise RunError(f"run directory {self.path} exists and is not a directory; "
                               "choose another --out") from None
        elif not self.path.is_dir():
            what = "is not a directory" if os.path.lexists(self.path) else "does not exist"
            raise RunError(f"run directory {self.path} {what}; train one with "
                           "`icr train` or `icr reproduce`, or check the path")

    # -- files ---------------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def analyses_dir(self) -> Path:
        d = self.path / "analyses"
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @classmethod
    def open_for(cls, path: str | Path, cfg: RunConfig) -> "RunDir":
        """Create (or reopen, to resume) the run directory of ``cfg``; refuse one that holds a
        run with a different config. A run keeps its ``config.json`` when it is reopened, also
        under another directory name (a copied or renamed run) or other resource ceilings."""
        run = cls(path, create=True)
        if not run.check_config(cfg):
            run.write_config(cfg)
        return run

    def check_config(self, cfg: RunConfig) -> bool:
        """Raise ConfigError if this directory already holds a run with another config; True
        when it holds this run. ``name`` (the directory's name when ``icr train`` made it) and
        ``resources`` (ceilings, not results) do not count."""
        if not os.path.lexists(self.path / "config.json"):
            return False
        old = self.read_config()
        same = replace(old, name=cfg.name, resources=cfg.resources)
        if same == cfg:
            return True
        a, b = _flat(to_dict(same)), _flat(to_dict(cfg))
        diff = sorted(k for k in set(a) | set(b) if a.get(k, a) != b.get(k, b))
        raise ConfigError(f"run directory {self.path} holds a run with a different config "
                          f"(differs in {', '.join(diff[:6]) or 'its values'}); choose another "
                          "--out, repeat the settings it was made with, or delete it")

    def write_config(self, cfg: RunConfig) -> None:
        atomic_write_text(self.path / "config.json", json.dumps(to_dict(cfg), indent=2,
                                                                sort_keys=True))

    def read_config(self) -> RunConfig:
        p = self.path / "config.json"
        if not os.path.lexists(p):
            raise RunError(f"run directory {self.path} has no config.json")
        try:
            data = json.loads(read_regular_file(p, MAX_CONFIG_BYTES).decode("utf-8"))
        except UnsafeFileError as e:
            raise RunError(f"run directory {self.path}: {e}") from None
        except (ValueError, RecursionError) as e:  # JSON and UTF-8 errors, deep nesting
            raise RunError(f"run directory {self.path}: config.json is not valid JSON "
                           f"(empty, truncated or edited): {str(e)[:200]}") from None
        try:  # an edited config.json cannot make a reader build a task or model that is
            cfg = from_dict(RunConfig, data)  # too big for its resources.max_gib
            check_buildable(cfg)
            return cfg
        except ConfigError as e:
            raise ConfigError(f"run directory {self.path}: config.json: {e}") from None

    def log_metrics(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=float) + "\n")

    def _metric_lines(self) -> list[str]:
        if not os.path.lexists(self.metrics_path):
            return []
        try:
            data = read_regular_file(self.metrics_path, MAX_METRICS_BYTES)
        except UnsafeFileError as e:
            raise RunError(f"run directory {self.path}: {e}") from None
        return data.decode("utf-8", errors="replace").splitlines()

    @staticmethod
    def _parse_metric(line: str) -> dict[str, Any] | None:
        line = line.strip()
        if not line:
            return None
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return None  # a line cut by an interruption
        return rec if isinstance(rec, dict) else None

    def read_metrics(self) -> list[dict[str, Any]]:
        out = []
        for line in self._metric_lines():
            rec = self._parse_metric(line)
            if rec is not None:
                out.append(rec)
        return out

    def truncate_metrics(self, phase: str, keep_until: int) -> int:
        """Drop the lines of ``phase`` logged after step ``keep_until`` (all of them when it is
        negative) and lines cut by an interruption, so a resumed phase logs each step once.
        Rewrites the file atomically, only when something is dropped; returns how many."""
        lines = self._metric_lines()
        keep = []
        for line in lines:
            rec = self._parse_metric(line)
            if rec is None:
                continue
            step = rec.get("step")
            if rec.get("phase") == phase and (not isinstance(step, int) or step > keep_until):
                continue
            keep.append(line)
        dropped = len([ln for ln in lines if ln.strip()]) - len(keep)
        if dropped:
            atomic_write_text(self.metrics_path, "".join(ln + "\n" for ln in keep))
        return dropped

    def remove_stale_temp_files(self) -> list[Path]:
        """Remove temporary files left by killed writers (their process is gone)."""
        return remove_stale_temp_files(self.path) + remove_stale_temp_files(self.checkpoint_dir)

    @contextmanager
    def writer_lock(self):
        """Hold the run's writer lock (``.lock``, ``flock``): one process trains into a run
        directory at a time; a second is refused with RunError. The kernel drops the lock when
        the holder dies, also on kill -9."""
        import fcntl

        lock = self.path / ".lock"
        try:  # never through a symlink: that would create or lock a file outside the run
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.EMLINK):
                raise
            raise RunError(f"run directory {self.path}: {lock.name} is a symbolic link; "
                           "refusing to follow it (remove it to train here)") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunError(f"run directory {self.path} is being written by another "
                               "process; wait for it to finish or stop it") from None
            yield self
        finally:
            os.close(fd)

    @staticmethod
    def check_new_or_run(path: str | Path) -> None:
        """Refuse to train into ``path`` when it is a folder that holds files but no run (no
        ``config.json``): the run's files would be written among someone else's. A missing
        or empty folder, or one holding a run, is fine."""
        path = Path(path)
        if not path.is_dir() or os.path.lexists(path / "config.json"):
            return
        own = {".lock", "checkpoints", "metrics.jsonl", "analyses"}
        other = sorted(p.name for p in path.iterdir() if p.name not in own)
        if other:
            raise RunError(f"--out {path} is a folder that holds other files ({other[0]!r}"
                           f"{f' and {len(other) - 1} more' if len(other) > 1 else ''}) but "
                           "no run (no config.json); choose a new or empty folder")

    def checkpoint_stem(self, phase: str, step: int) -> Path:
        return self.checkpoint_dir / checkpoint_name(check_phase_name(phase), step)

    # -- listing and selection -----------------------------------------------------------------
    def checkpoints(self) -> list[CheckpointInfo]:
        """Complete checkpoints (sidecar present), ordered by phase order then step. One whose
        sidecar cannot be read is listed with its ``problem`` (and its phase's order)."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = []
        for side in self.checkpoint_dir.glob("*.json"):
            m = _CKPT_RE.match(side.stem)
            if not m:
                continue
            try:
                meta = read_sidecar(side)
                order, problem = meta.get("phase_order", 0), None
            except CheckpointError as e:
                order, problem = None, str(e)
            found.append((m["phase"], int(m["step"]), side.with_suffix(""), order, problem))
        orders: dict[str, int] = {}
        for phase, _, _, order, _ in found:
            if order is not None:
                orders.setdefault(phase, order)
        out = [CheckpointInfo(phase, step, stem, orders.get(phase, 0) if order is None else order,
                              problem) for phase, step, stem, order, problem in found]
        return sorted(out, key=lambda c: (c.order, c.phase, c.step))

    def phases(self) -> list[str]:
        seen: list[str] = []
        for c in self.checkpoints():
            if c.phase not in seen:
                seen.append(c.phase)
        return seen

    def phase_order(self, phase: str) -> int:
        """The order of ``phase`` in this run: its recorded order when it has checkpoints,
        else one past the last phase's (0 in a fresh run)."""
        cks = self.checkpoints()
        for c in cks:
            if c.phase == phase:
                return c.order
        return max((c.order for c in cks), default=-1) + 1

    def latest(self, phase: str) -> CheckpointInfo | None:
        cks = [c for c in self.checkpoints() if c.phase == phase]
        return cks[-1] if cks else None

    def select(self, selection: str = "all") -> list[CheckpointInfo]:
        """The checkpoints a selection names (see the module docstring); never empty."""
        parts = [p.strip() for p in str(selection).split(",")]
        if not any(parts):
            raise RunError(f"--checkpoints {show(selection)} is empty; use {SELECTION_FORMS}")
        cks = self.checkpoints()
        if not cks:
            raise RunError(f"run directory {self.path} has no checkpoints")
        chosen: list[CheckpointInfo] = []
        for part in [p for p in parts if p]:
            got = self._select_one(cks, part)
            if not got:
                raise RunError(
                    f"--checkpoints {show(part)} matches no checkpoint in {self.path}; phases "
                    f"here: {self.phases()}; use {SELECTION_FORMS} (e.g. {cks[-1].name})")
            chosen.extend(c for c in got if c not in chosen)
        return chosen

    def _select_one(self, cks: list[CheckpointInfo], part: str) -> list[CheckpointInfo]:
        if part == "all":
            return list(cks)
        if part == "last":
            return [cks[-1]]
        if part == "first":
            return [cks[0]]
        if part.startswith("phase:"):
            name, _, which = part[len("phase:"):].partition(":")
            if which not in ("", "first", "last"):
                raise RunError(f"--checkpoints {show(part)} is not allowed: after phase:NAME "
                               f"expected :first or :last, got {show(which)}; use "
                               f"{SELECTION_FORMS}")
            got = [c for c in cks if c.phase == name]
            if not got:
                raise RunError(f"--checkpoints {show(part)} matches no checkpoint in "
                               f"{self.path}: phase {show(name)} has none; phases here: "
                               f"{self.phases()}")
            return got[-1:] if which == "last" else got[:1] if which == "first" else got
        if part.startswith("steps:"):
            a, _, b = part[len("steps:"):].partition("-")
            try:
                lo, hi = int(a), int(b or a)
            except ValueError:
                raise RunError(f"--checkpoints {show(part)}: expected steps:A-B with "
                               "non-negative integers A <= B") from None
            if lo > hi:
                raise RunError(f"--checkpoints {show(part)}: expected steps:A-B with A <= B")
            return [c for c in cks if lo <= c.step <= hi]
        got = [c for c in cks if c.name == part or c.name == Path(part).stem]
        if not got and not _CKPT_RE.match(Path(part).stem):
            raise RunError(f"--checkpoints {show(part)} is not a selection; use "
                           f"{SELECTION_FORMS}")
        return got

    def iter_models(self, selection: str, build) -> Iterator[tuple[CheckpointInfo, Any]]:
        """Yield (checkpoint, model) one at a time; ``build()`` makes a fresh model to fill.

        Only one checkpoint's weights are in memory at a time.
        """
        from mechinterp_icr.store.checkpoint import load_checkpoint

        for ck in self.select(selection):
            model = build()
            load_checkpoint(ck.stem, model)
            yield ck, model
