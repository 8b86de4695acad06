"""Runs a reproduction target and the analyses that extend it, then writes the summary.

A target module ``mechinterp_icr.experiments.<target>`` provides ``validate`` and
``reproduce``. Extensions add further claims computed on the target's run directories (the
interpretability toolkits add CR-4 .. CR-7 to the CR target); each is called as
``fn(summary, out_dir, run_dirs, seeds, profile)`` inside its own timed stage.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from mechinterp_icr.claims import Summary

__all__ = ["EXTENSIONS", "TARGETS", "run_target", "validate_target"]

TARGETS = ("cr", "ir")

EXTENSIONS: dict[str, list[tuple[str, str, str]]] = {
    # target: [(stage name, module, function)]
    "cr": [
        ("CR-4 task vectors and probes", "mechinterp_icr.experiments.cr_taskvec",
         "add_taskvec_claim"),
        ("CR-5..7 mechanism", "mechinterp_icr.experiments.cr_mechanism",
         "add_mechanism_claims"),
        ("attention views", "mechinterp_icr.viz.views", "write_reproduction_views"),
    ],
    "ir": [
        ("attention views", "mechinterp_icr.viz.views", "write_ir_views"),
    ],
}


def _module(target: str):
    return importlib.import_module(f"mechinterp_icr.experiments.{target}")


def validate_target(target: str, profile: str, seeds: list[int], overrides: list[str]) -> None:
    _module(target).validate(profile, seeds, overrides)


def run_target(target: str, profile: str, out_dir: Path, seeds: list[int],
               overrides: list[str]) -> Summary:
    summary = _module(target).reproduce(profile, out_dir, seeds, overrides)
    summary.write(out_dir)  # the target's own claims are safe on disk before extensions run
    run_dirs = sorted((out_dir / "runs" / target).glob("seed*"),
                      key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else 0)
    for stage, modname, fn in EXTENSIONS.get(target, []):
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
            continue
        with summary.stage(stage):
            getattr(mod, fn)(summary, out_dir, run_dirs, seeds, profile)
        summary.write(out_dir)
    return summary
