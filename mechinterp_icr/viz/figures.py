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
import time
from pathlib import Path

from mechinterp_icr.store.io import atomic_write_bytes, atomic_write_text, ensure_file

__all__ = ["save_figure", "png_available", "PLOTLY_JS", "PNG_TIMEOUT_S", "SEED_COLORS",
           "checkpoint_figure", "curve_points", "seeds_caption"]

# one colour per seed in the per-seed curve figures
SEED_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]


def curve_points(d: dict | None) -> tuple[list[float], list[float]]:
    """A stored curve ``{x: value}`` (x as a string or number) as sorted (xs, values), without
    the points that are not numbers."""
    import math

    pts = sorted((float(k), float(v)) for k, v in (d or {}).items()
                 if v is not None and not math.isnan(float(v)))
    return [p[0] for p in pts], [p[1] for p in pts]

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


PNG_TIMEOUT_S = float(os.environ.get("MECHINTERP_ICR_PNG_TIMEOUT", "120"))
_png_broken: list[str] = []  # why PNG export stopped for this process (set once)


@functools.cache
def _png_server() -> None:
    """Keep one Chromium for every PNG this process writes (kaleido's sync server; tried once
    per process): a figure then takes about 0.15 s instead of about 2 s for a browser started
    per figure (measured on the 2-core machine; a reproduction writes about 15).
    Stopped at exit; when it cannot start, each figure starts its own browser as before.
    The server thread's own traceback (Chromium could not start) is not printed: the figure
    that is then not written is named instead (:func:`save_figure`)."""
    try:
        import atexit
        import threading
        import warnings

        import kaleido

        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
        warnings.filterwarnings("ignore", message="The kopts argument is ignored")
        server = getattr(kaleido, "_global_server", None)
        thread = getattr(server, "_thread", None)
        previous = threading.excepthook

        def quiet(args):
            if args.thread is not thread:
                previous(args)

        threading.excepthook = quiet
    except Exception:  # noqa: BLE001 - an older kaleido or no server: per-figure browsers
        pass


def _abandon_png_server() -> None:
    """Forget kaleido's sync server when it died or hangs: its exit handler would otherwise
    wait for it forever (the process would never exit)."""
    try:
        import kaleido

        server = getattr(kaleido, "_global_server", None)
        if server is not None and getattr(server, "_initialized", False):
            server._initialized = False  # noqa: SLF001 - its close() then returns at once
    except Exception:  # noqa: BLE001
        pass


def _png_bytes(fig, width: int, height: int, timeout: float) -> tuple[bytes | None, str]:
    """(PNG bytes, "") or (None, why) from kaleido, never waiting longer than ``timeout``
    seconds: the export runs in a daemon thread, so a Chromium that cannot start (or hangs)
    costs the timeout once, after which this process writes no more PNGs, and never keeps
    the process from exiting."""
    import threading

    if _png_broken:
        return None, _png_broken[0]
    server = getattr(__import__("kaleido"), "_global_server", None)
    thread = getattr(server, "_thread", None)
    if thread is not None and getattr(server, "_initialized", False) and not thread.is_alive():
        _abandon_png_server()  # the server died starting Chromium: per-figure browsers
    box: dict = {}

    def work():
        try:
            box["png"] = fig.to_image(format="png", width=width, height=height, scale=1.5)
        except BaseException as e:  # noqa: BLE001 - reported as the figure's png_error
            box["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"

    t = threading.Thread(target=work, name="mechinterp-icr-png", daemon=True)
    t.start()
    end = time.monotonic() + timeout
    while t.is_alive() and time.monotonic() < end:
        t.join(0.1)
        if t.is_alive() and thread is not None and not thread.is_alive():
            break  # the server died (Chromium could not start): the export waits forever
    if t.is_alive():
        _abandon_png_server()
        _png_broken.append(f"the PNG export did not finish (Chromium could not start, or it "
                           f"hung past {timeout:g} s; MECHINTERP_ICR_PNG_TIMEOUT sets the "
                           "wait); no more PNGs are tried in this process")
        return None, _png_broken[0]
    png = box.get("png")
    if not png:
        return None, box.get("error", "kaleido returned no image")
    return png, ""


def _ensure_plotly_js(folder: Path) -> None:
    from plotly.offline import get_plotlyjs

    ensure_file(folder / PLOTLY_JS, get_plotlyjs())  # a stale or truncated copy is rewritten


def save_figure(fig, stem: str | Path, png: bool = True, width: int = 900,
                height: int = 520) -> dict[str, str]:
    """Write ``stem.html`` (offline, shared plotly.min.js) and ``stem.png`` when possible,
    each atomically (a reader never sees half a figure).

    Returns the paths written, keyed by format; when the PNG could not be written (kaleido
    failed twice, or the export did not finish within ``PNG_TIMEOUT_S``), ``png_error`` says
    why and names the figure, and no PNG of an earlier run is left to pass for this one.
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    _ensure_plotly_js(stem.parent)
    fig.update_layout(template="plotly_white", width=width, height=height)
    out = {}
    html = stem.with_suffix(".html")
    atomic_write_text(html, fig.to_html(include_plotlyjs=PLOTLY_JS, full_html=True))
    out["html"] = str(html)
    if png and png_available():
        os.environ.setdefault("BROWSER_PATH", chromium_path() or "")
        _png_server()
        png_path = stem.with_suffix(".png")
        data, why = _png_bytes(fig, width, height, PNG_TIMEOUT_S)
        if data is None and not _png_broken:  # a failure under load: tried once more
            data, why = _png_bytes(fig, width, height, PNG_TIMEOUT_S)
        if data is not None:
            atomic_write_bytes(png_path, data)
            out["png"] = str(png_path)
        else:
            if png_path.is_file() and not png_path.is_symlink():
                png_path.unlink()  # an earlier run's PNG would pass for this figure
            out["png_error"] = f"{png_path.name} not written: {why}"
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
