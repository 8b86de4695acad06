"""Writing plotly figures: HTML that works offline, plus PNG when a browser is available.

``save_figure(fig, stem)`` writes ``stem.html`` referencing one ``plotly.min.js`` copied next to
it (written once per folder, so no CDN and no 4.8 MB per figure) and ``stem.png`` through
kaleido when Debian's Chromium is installed (kaleido would otherwise try to download a browser,
which fails offline). PNG export can be switched off with ``MECHINTERP_ICR_NO_PNG=1``.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from mechinterp_icr.store.io import atomic_write_text

__all__ = ["save_figure", "png_available", "PLOTLY_JS", "checkpoint_figure", "seeds_caption"]

PLOTLY_JS = "plotly.min.js"
_CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def _seed_list(seeds) -> str:
    def key(s):
        return (0, int(s), "") if str(s).lstrip("-").isdigit() else (1, 0, str(s))

    return ", ".join(str(s) for s in sorted(dict.fromkeys(str(x) for x in seeds), key=key))


def seeds_caption(shown, claim_seeds=None, why: str = "") -> str:
    """Which seeds a figure shows, for its title: ``"seeds 0, 1, 2, 3, 4"``, or, when it shows
    fewer than the claim it illustrates, ``"seeds 0, 1, 2 of the claim's 0, 1, 2, 3, 4 (why)"``
    (``why``: e.g. "the sweep runs on the first 3 seeds")."""
    shown = [str(s) for s in dict.fromkeys(shown)]
    text = f"seed{'s' if len(shown) != 1 else ''} {_seed_list(shown) or 'none'}"
    claim = [str(s) for s in dict.fromkeys(claim_seeds or [])]
    if claim and set(claim) - set(shown):
        text += f" of the claim's {_seed_list(claim)}"
        if why:
            text += f" ({why})"
    return text


def chromium_path() -> str | None:
    for c in _CHROMIUM_CANDIDATES:
        if os.path.exists(c):
            return c
    return shutil.which("chromium") or shutil.which("chromium-browser")


def png_available() -> bool:
    if os.environ.get("MECHINTERP_ICR_NO_PNG"):
        return False
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return chromium_path() is not None


@functools.cache
def _png_server() -> None:
    """Keep one Chromium for every PNG this process writes (kaleido's sync server; tried once
    per process): a figure then takes about 0.15 s instead of about 2 s for a browser started
    per figure (measured on the 2-core machine; a reproduction writes about 15).
    Stopped at exit; when it cannot start, each figure starts its own browser as before."""
    try:
        import atexit
        import warnings

        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
        warnings.filterwarnings("ignore", message="The kopts argument is ignored")
    except Exception:  # noqa: BLE001 - an older kaleido or no server: per-figure browsers
        pass


def _ensure_plotly_js(folder: Path) -> None:
    target = folder / PLOTLY_JS
    if target.exists():
        return
    from plotly.offline import get_plotlyjs

    atomic_write_text(target, get_plotlyjs())


def save_figure(fig, stem: str | Path, png: bool = True, width: int = 900,
                height: int = 520) -> dict[str, str]:
    """Write ``stem.html`` (offline, shared plotly.min.js) and ``stem.png`` when possible.

    Returns the paths written, keyed by format.
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    _ensure_plotly_js(stem.parent)
    fig.update_layout(template="plotly_white", width=width, height=height)
    out = {}
    html = stem.with_suffix(".html")
    fig.write_html(str(html), include_plotlyjs=PLOTLY_JS, full_html=True)
    out["html"] = str(html)
    if png and png_available():
        os.environ.setdefault("BROWSER_PATH", chromium_path() or "")
        _png_server()
        png_path = stem.with_suffix(".png")
        try:
            fig.write_image(str(png_path), width=width, height=height, scale=1.5)
            out["png"] = str(png_path)
        except Exception as e:  # kaleido/chromium failures must not kill a reproduction
            out["png_error"] = f"{type(e).__name__}: {e}"
    return out


def checkpoint_figure(rows, series: dict[str, str], title: str, y_title: str,
                      group: str | None = None, y_range=None):
    """Lines of ``rows`` (one per checkpoint, with ``phase`` and ``step``) against the training
    step: one line per series (label -> row key) and phase, and per value of ``group`` (a row
    key such as ``head``) when given. Checkpoints are placed at their steps, on a log axis
    (``step + 1``) when the steps span more than a decade, so log-spaced checkpoints are not
    drawn as evenly spaced categories."""
    import plotly.graph_objects as go

    fig = go.Figure()
    steps = [int(r["step"]) for r in rows if isinstance(r.get("step"), int)]
    log = bool(steps) and max(steps) + 1 > 10 * (min(steps) + 1)
    keys = []
    for r in rows:
        k = (r.get("phase", ""), r.get(group) if group else None)
        if k not in keys:
            keys.append(k)
    for phase, g in keys:
        sel = sorted((r for r in rows if r.get("phase", "") == phase
                      and (group is None or r.get(group) == g)), key=lambda r: r["step"])
        for label, key in series.items():
            name = " ".join(str(x) for x in (phase, g, label) if x not in (None, ""))
            fig.add_scatter(x=[r["step"] + 1 if log else r["step"] for r in sel],
                            y=[r.get(key) for r in sel], mode="lines+markers", name=name)
    fig.update_layout(title=title, yaxis_title=y_title,
                      xaxis_title="training step + 1 (log scale)" if log else "training step")
    if log:
        fig.update_xaxes(type="log")
    if y_range is not None:
        fig.update_yaxes(range=list(y_range))
    return fig
