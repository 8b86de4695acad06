"""Experiment trackers for training metrics: ``icr train --track wandb`` forwards every
record ``train_phase`` writes to ``metrics.jsonl`` (its ``on_log``) to Weights & Biases."""

from __future__ import annotations

from pathlib import Path

from mechinterp_icr.config import ConfigError, to_dict

__all__ = ["WandbTracker"]


class WandbTracker:
    """``icr train --track wandb``: a wandb run opened at the first metrics record (so a
    refused start leaves nothing behind), offline with its files under OUT/wandb/ unless
    WANDB_MODE says otherwise or WANDB_API_KEY is set; project ``mechinterp_icr`` (or
    WANDB_PROJECT), named after the run directory and phase.

    Its config: ``command`` (what was asked: task, phase, profile, seed, ``--set`` items,
    ``--init``) and the phase's resolved settings (``settings``, set once they are checked).
    A record is logged as ``<record's phase>/<name>``. A command whose phase trains in
    several phases, each counting its steps from 0 (an IR PGD run: ``big``, then ``pgd``),
    logs them one after another on wandb's step axis (wandb drops a step lower than one it
    has logged), each record with its own step as ``<phase>/step``."""

    def __init__(self, command: dict, out: Path, phase: str, settings=None):
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--track wandb needs the wandb package (pip install wandb)"
                              ) from None
        self.command, self.settings = command, settings
        self.out, self.phase, self.run = out, phase, None
        self._base, self._last, self._phase = 0, -1, None  # the step axis across phases

    def _open(self):
        import os

        import wandb

        mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY")
                                                else "offline")
        config = {"command": self.command}
        if self.settings is not None:
            config.update(to_dict(self.settings))
        return wandb.init(project=os.environ.get("WANDB_PROJECT", "mechinterp_icr"),
                          name=f"{self.out.resolve().name}-{self.phase}", dir=str(self.out),
                          mode=mode, config=config)

    def step(self, phase: str, step) -> int | None:
        """The wandb step of a record of ``phase`` at its own ``step``: a later phase starts
        after the last step logged."""
        if not isinstance(step, int):
            return None
        if phase != self._phase:
            self._phase, self._base = phase, self._last + 1
        self._last = max(self._last, self._base + step)
        return self._base + step

    def __call__(self, record: dict) -> None:
        if self.run is None:
            self.run = self._open()
        phase = str(record.get("phase") or self.phase)
        step = record.get("step")
        data = {f"{phase}/{k}": v for k, v in record.items()
                if k != "phase" and isinstance(v, (int, float))}
        self.run.log(data, step=self.step(phase, step))

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
