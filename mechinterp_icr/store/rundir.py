"""Run directories: the unit every stage exchanges.

```
runs/<name>/config.json                         resolved RunConfig (task, model, train, seed)
runs/<name>/checkpoints/<phase>-<step>.safetensors  (+ .json sidecar)
runs/<name>/metrics.jsonl                       one line per evaluation
runs/<name>/analyses/<analysis>.json and figures
```

Checkpoint selections (``--checkpoints``): ``all``, ``last``, ``first``, ``phase:NAME``,
``phase:NAME:last``, ``steps:A-B`` (inclusive, any phase), an exact checkpoint name
``<phase>-<step>``, or several of these joined by commas.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import mechinterp_icr.tasks  # noqa: F401  (registers every task kind that read_config may meet)
from mechinterp_icr.config import RunConfig, from_dict, to_dict
from mechinterp_icr.store.checkpoint import CheckpointError, read_sidecar

__all__ = ["RunDir", "CheckpointInfo", "RunError"]

_CKPT_RE = re.compile(r"^(?P<phase>[A-Za-z0-9_.+]+(?:-[A-Za-z0-9_.+]+)*?)-(?P<step>\d+)$")


class RunError(RuntimeError):
    """A run directory is missing or malformed, or a selection matches nothing."""


@dataclass(frozen=True)
class CheckpointInfo:
    phase: str
    step: int
    stem: Path
    order: int  # position of the phase in the run (pretrain 0, finetune branches 1, ...)

    @property
    def name(self) -> str:
        return self.stem.name

    def sidecar(self) -> dict[str, Any]:
        return read_sidecar(self.stem)


def checkpoint_name(phase: str, step: int) -> str:
    return f"{phase}-{step:07d}"


class RunDir:
    def __init__(self, path: str | Path, create: bool = False):
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise RunError(f"run directory {self.path} does not exist; train one with "
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
        run with a different config."""
        run = cls(path, create=True)
        run.check_config(cfg)
        run.write_config(cfg)
        return run

    def check_config(self, cfg: RunConfig) -> None:
        """Raise ConfigError if this directory already holds a run with another config."""
        from mechinterp_icr.config import ConfigError

        if (self.path / "config.json").exists() and self.read_config() != cfg:
            raise ConfigError(f"run directory {self.path} holds a run with a different config; "
                              "choose another --out or delete it")

    def write_config(self, cfg: RunConfig) -> None:
        from mechinterp_icr.store.io import atomic_write_text

        atomic_write_text(self.path / "config.json", json.dumps(to_dict(cfg), indent=2,
                                                                sort_keys=True))

    def read_config(self) -> RunConfig:
        p = self.path / "config.json"
        if not p.exists():
            raise RunError(f"run directory {self.path} has no config.json")
        return from_dict(RunConfig, json.loads(p.read_text()))

    def log_metrics(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=float) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        out = []
        for line in self.metrics_path.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption
        return out

    def checkpoint_stem(self, phase: str, step: int) -> Path:
        return self.checkpoint_dir / checkpoint_name(phase, step)

    # -- listing and selection -----------------------------------------------------------------
    def checkpoints(self) -> list[CheckpointInfo]:
        """Complete checkpoints (sidecar present), ordered by phase order then step."""
        if not self.checkpoint_dir.is_dir():
            return []
        out = []
        for side in self.checkpoint_dir.glob("*.json"):
            m = _CKPT_RE.match(side.stem)
            if not m:
                continue
            try:
                order = int(read_sidecar(side).get("phase_order", 0))
            except CheckpointError:
                order = 0
            out.append(CheckpointInfo(m["phase"], int(m["step"]), side.with_suffix(""), order))
        return sorted(out, key=lambda c: (c.order, c.phase, c.step))

    def phases(self) -> list[str]:
        seen: list[str] = []
        for c in self.checkpoints():
            if c.phase not in seen:
                seen.append(c.phase)
        return seen

    def latest(self, phase: str) -> CheckpointInfo | None:
        cks = [c for c in self.checkpoints() if c.phase == phase]
        return cks[-1] if cks else None

    def select(self, selection: str = "all") -> list[CheckpointInfo]:
        cks = self.checkpoints()
        if not cks:
            raise RunError(f"run directory {self.path} has no checkpoints")
        chosen: list[CheckpointInfo] = []
        for part in [p.strip() for p in selection.split(",") if p.strip()]:
            got = self._select_one(cks, part)
            if not got:
                raise RunError(
                    f"--checkpoints {part!r} matches no checkpoint in {self.path}; phases here: "
                    f"{self.phases()}; use all, last, first, phase:NAME, phase:NAME:last, "
                    "steps:A-B or a name like " + cks[-1].name)
            chosen.extend(c for c in got if c not in chosen)
        return chosen

    @staticmethod
    def _select_one(cks: list[CheckpointInfo], part: str) -> list[CheckpointInfo]:
        if part == "all":
            return list(cks)
        if part == "last":
            return [cks[-1]]
        if part == "first":
            return [cks[0]]
        if part.startswith("phase:"):
            rest = part[len("phase:"):]
            name, _, which = rest.partition(":")
            got = [c for c in cks if c.phase == name]
            if which == "last":
                return got[-1:]
            if which == "first":
                return got[:1]
            return got
        if part.startswith("steps:"):
            a, _, b = part[len("steps:"):].partition("-")
            try:
                lo, hi = int(a), int(b or a)
            except ValueError:
                raise RunError(
                    f"--checkpoints {part!r}: expected steps:A-B with integers") from None
            return [c for c in cks if lo <= c.step <= hi]
        return [c for c in cks if c.name == part or c.name == Path(part).stem]

    def iter_models(self, selection: str, build) -> Iterator[tuple[CheckpointInfo, Any]]:
        """Yield (checkpoint, model) one at a time; ``build()`` makes a fresh model to fill.

        Only one checkpoint's weights are in memory at a time.
        """
        from mechinterp_icr.store.checkpoint import load_checkpoint

        for ck in self.select(selection):
            model = build()
            load_checkpoint(ck.stem, model)
            yield ck, model
