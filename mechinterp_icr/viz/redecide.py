"""``icr redecide OUT``: a reproduction's verdicts, headlines, intervals, verdict figures,
report and (optionally) README claim table recomputed from the measurements stored in
``OUT/summary.json`` under the registered specs, without training
(:mod:`mechinterp_icr.claims.redecide` decides; this module writes what the decisions feed).

- ``redecide_outputs(OUT)`` rewrites ``OUT/summary.json`` (atomically), redraws the verdict
  figure of every claim whose figure is one (``figures/<id>_verdict``) and re-renders
  ``OUT/report.html``; with ``readme`` it rewrites that README's claim table.
- ``redecide_outputs(OUT, check=True)`` writes nothing and lists every stored decision that
  is not what the specs give (and, with ``readme``, a stale README table): ``icr redecide
  figures --check --readme README.md`` is how CI checks that the committed results agree with
  the specs.

The experiment figures that draw a threshold read it from the registry when they are drawn,
so after a rule change they show the new line only when the stage that draws them runs again;
the verdict figures, CR-8's and CR-9's figures, the report and the tables are redrawn here.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from mechinterp_icr.claims.check import read_summary
from mechinterp_icr.claims.protocol import ClaimSpec
from mechinterp_icr.claims.redecide import differences, rebuild_claim, redecide_summary
from mechinterp_icr.claims.registry import REGISTRY
from mechinterp_icr.config import ConfigError
from mechinterp_icr.store.io import atomic_write_bytes, atomic_write_json, write_or_check

__all__ = ["Redecided", "redecide_outputs", "summary_path"]


@dataclass
class Redecided:
    """What :func:`redecide_outputs` found: the summary file, the verdicts before and after by
    claim id, the stored decisions that differ from the specs' (``problems``), the registered
    metrics the stored run did not measure, and the files written."""

    summary: Path
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    unmeasured: dict[str, list[str]] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, tuple[str, str]]:
        return {c: (self.before.get(c, ""), v) for c, v in self.after.items()
                if self.before.get(c) != v}


def summary_path(out: str | Path) -> Path:
    """``OUT/summary.json`` for a reproduction folder, or OUT itself when it names a file."""
    p = Path(out)
    return p / "summary.json" if p.is_dir() else p


def _verdicts(summary: Mapping[str, Any]) -> dict[str, str]:
    return {str(c): str(e.get("verdict")) for c, e in (summary.get("claims") or {}).items()
            if isinstance(e, Mapping)}


def _redraw_verdict_figures(summary: dict[str, Any], out_dir: Path,
                            registry: Mapping[str, ClaimSpec]) -> list[Path]:
    """Redraw every figure that draws a registered rule: each claim's verdict figure, CR-8's
    figure (its paired curve and registered rise), CR-9's (lam_s, the registered rise and
    the drop tolerance) and IR-5's (N(n) at the registered gain fraction, s_poly drawn)."""
    from mechinterp_icr.claims.cr_registry import CR8_HEADROOM
    from mechinterp_icr.viz.claim_figures import verdict_figure
    from mechinterp_icr.viz.cr_figures import cr8_figure, cr9_figure
    from mechinterp_icr.viz.figures import save_figure
    from mechinterp_icr.viz.ir5_figure import ir5_figure

    seeds = [str(s) for s in summary.get("seeds") or []] or None
    written = []
    for cid, c in (summary.get("claims") or {}).items():
        fig_path = str(c.get("figure") or "") if isinstance(c, Mapping) else ""
        if fig_path.endswith("_verdict.html"):
            claim = rebuild_claim(cid, c, registry)
            fig = None if claim is None else verdict_figure(claim, seeds=seeds)
            width = 1200
        elif fig_path.endswith("/cr8_by_k.html"):  # draws the registered paired rule
            per_seed = c.get("per_seed") if isinstance(c.get("per_seed"), Mapping) else {}
            label = "shared-token variant" if "shared" in cid else "default task"
            fig, width = cr8_figure(dict(per_seed), CR8_HEADROOM, label), 1700
        elif fig_path.endswith("/cr9_by_lam.html"):  # draws lam_s and the registered rule
            per_seed = c.get("per_seed") if isinstance(c.get("per_seed"), Mapping) else {}
            fig, width = cr9_figure(dict(per_seed)), 1300
        elif fig_path.endswith("/ir_5_sample_complexity.html"):  # N(n) at the registered q
            per_seed = c.get("per_seed") if isinstance(c.get("per_seed"), Mapping) else {}
            fig, width = ir5_figure(dict(per_seed)), 1500
        else:
            continue
        if fig is None:
            continue
        height = fig.layout.height or 500
        stem = (out_dir / fig_path).with_suffix("")
        if stem.parent.is_dir():
            save_figure(fig, stem, width=width, height=height)
            written.append(stem.with_suffix(".html"))
            continue
        # a published folder (figures/) keeps only the PNG, beside the summary, under the
        # path the figure has below the run's figures/ folder
        rel = Path(fig_path).with_suffix(".png")
        dest = out_dir.joinpath(*rel.parts[1:]) if rel.parts[0] == "figures" else out_dir / rel
        if not dest.parent.is_dir():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            got = save_figure(fig, Path(tmp) / stem.name, width=width, height=height)
            if "png" in got:
                atomic_write_bytes(dest, Path(got["png"]).read_bytes())
                written.append(dest)
    return written


def _read(path: Path) -> dict[str, Any]:
    stored = read_summary(path)
    if not isinstance(stored["claims"], dict):
        raise ConfigError(f"summary {path} has no 'claims' object; expected the summary.json "
                          "that `icr reproduce` writes")
    return stored


def redecide_outputs(out: str | Path, check: bool = False, readme: str | Path | None = None,
                     registry: Mapping[str, ClaimSpec] = REGISTRY, report: bool = True,
                     figures: bool = True, rerun: str | Path | None = None) -> Redecided:
    """Redecide the reproduction in ``out`` (a folder with ``summary.json`` or the file);
    see the module docstring. With ``rerun`` (a reproduction of the same seeds and profile
    under another rounding, or its summary file) its summary is copied to
    ``OUT/rerun/summary.json`` and attached (:func:`mechinterp_icr.claims.rerun.attach_rerun`);
    a rerun already attached is redecided with the decision run. Raises ``ConfigError`` when
    a summary cannot be read or the rerun does not pair with the decision run."""
    from mechinterp_icr.claims.rerun import (
        RERUN_DIR,
        attach_rerun,
        pairing_problem,
        rerun_summary_path,
    )
    from mechinterp_icr.viz.readme import claim_table, replace_table

    path = summary_path(out)
    stored = _read(path)
    new, unmeasured = redecide_summary(stored, registry)
    rerun_stored, rerun_dest = None, None
    if rerun is not None:
        if check:
            raise ConfigError("--rerun attaches a rerun (it writes); it cannot be used with "
                              "--check")
        rerun_stored = _read(summary_path(rerun))
        rerun_dest = path.parent / RERUN_DIR / "summary.json"
    else:
        rerun_dest = rerun_summary_path(path, stored)
        rerun_stored = None if rerun_dest is None else _read(rerun_dest)
    rerun_new = None
    if rerun_stored is not None:
        if rerun_dest.resolve() == path.resolve():
            raise ConfigError(f"{path}: its rerun is the decision run's own summary")
        why = pairing_problem(stored, rerun_stored)
        if why:
            raise ConfigError(f"{rerun_dest if rerun is None else summary_path(rerun)}: {why}")
        rerun_new, _ = redecide_summary(rerun_stored, registry)
        new = attach_rerun(new, rerun_new, rerun_dest.relative_to(path.parent).as_posix())
    res = Redecided(path, _verdicts(stored), _verdicts(new), unmeasured=unmeasured)
    if check:
        res.problems = differences(stored, new)
        if rerun_new is not None:
            res.problems += [f"rerun {line}" for line in differences(rerun_stored, rerun_new)]
        if readme is not None:
            text = Path(readme).read_text()
            if replace_table(text, claim_table(new)) != text:
                res.problems.append(f"{readme}: the claim table is not the one the specs give "
                                    f"on {path}")
        return res
    if rerun_new is not None:
        rerun_dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(rerun_dest, rerun_new)
        res.written.append(rerun_dest)
    atomic_write_json(path, new)
    res.written.append(path)
    out_dir = path.parent
    if figures:
        res.written += _redraw_verdict_figures(new, out_dir, registry)
    if report:
        from mechinterp_icr.viz.report import write_report

        res.written.append(write_report(out_dir))
    if readme is not None:
        text = Path(readme).read_text()
        write_or_check(readme, replace_table(text, claim_table(new)), False, "")
        res.written.append(Path(readme))
    return res
