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
    WANDB_PROJECT), named after the run directory and phase, with the resolved config.
    Metrics are logged as ``<phase>/<name>`` at their step."""

    def __init__(self, cfg, out: Path, phase: str):
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--track wandb needs the wandb package (pip install wandb)"
                              ) from None
        self.cfg, self.out, self.phase, self.run = cfg, out, phase, None

    def __call__(self, record: dict) -> None:
        import os

        import wandb

        if self.run is None:
            mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY")
                                                    else "offline")
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "mechinterp_icr"),
                                  name=f"{self.out.resolve().name}-{self.phase}",
                                  dir=str(self.out), mode=mode, config=to_dict(self.cfg))
        step = record.get("step")
        data = {f"{self.phase}/{k}": v for k, v in record.items()
                if k not in ("phase", "step") and isinstance(v, (int, float))}
        self.run.log(data, step=step if isinstance(step, int) else None)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
