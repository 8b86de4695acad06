"""Headless Chromium: screenshot or DOM dump of a local HTML file, to check what we produce.

Uses Debian's ``chromium`` with flags that work as root (no sandbox, no GPU), a
fresh ``--user-data-dir`` each time, and ``--virtual-time-budget`` so that scripts (plotly,
circuitsvis/React) run before the capture. A plain screenshot can fire before circuitsvis has
drawn, so callers that need drawn content retry (:func:`screenshot_until`).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from mechinterp_icr.viz.figures import chromium_path

__all__ = ["chromium_path", "screenshot", "dump_dom", "screenshot_until", "png_stats"]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--allow-file-access-from-files"]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("chromium is not installed (Debian package 'chromium')")
    with tempfile.TemporaryDirectory(prefix="icr-chromium-") as profile:
        return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


def _url(html_file: str | Path, fragment: str = "") -> str:
    """The file's URL, with ``#fragment`` when given (e.g. ``ck=3`` for the explorer)."""
    uri = Path(html_file).resolve().as_uri()
    return f"{uri}#{fragment.lstrip('#')}" if fragment else uri


def screenshot(html_file: str | Path, png: str | Path, width: int = 1200, height: int = 1600,
               budget_ms: int = 10000, timeout: float = 90, fragment: str = "") -> Path:
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()  # a stale file must not pass for this capture
    _run([f"--screenshot={png}", f"--window-size={width},{height}",
          f"--virtual-time-budget={budget_ms}", _url(html_file, fragment)], timeout)
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot for {html_file}")
    return png


def dump_dom(html_file: str | Path, budget_ms: int = 10000, timeout: float = 90,
             fragment: str = "") -> str:
    """The DOM after scripts ran (``--dump-dom``); ``fragment`` is appended as ``#...``."""
    res = _run([f"--virtual-time-budget={budget_ms}", "--dump-dom",
                _url(html_file, fragment)], timeout)
    return res.stdout


def png_stats(png: str | Path) -> dict[str, float]:
    """Fraction of non-white pixels and of distinctly coloured (saturated) pixels."""
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB")).astype(np.float32) / 255.0
    nonwhite = float((img.min(axis=-1) < 0.95).mean())
    sat = float(((img.max(axis=-1) - img.min(axis=-1)) > 0.15).mean())
    return {"nonwhite": nonwhite, "colored": sat, "std": float(img.std())}


def screenshot_until(html_file: str | Path, png: str | Path, ok: Callable[[dict], bool],
                     tries: int = 3, **kw) -> tuple[Path, dict[str, float]]:
    """Screenshot, retrying with a longer time budget until ``ok(png_stats)`` is true."""
    stats: dict[str, float] = {}
    budget = kw.pop("budget_ms", 8000)
    for i in range(tries):
        screenshot(html_file, png, budget_ms=budget * (i + 1), **kw)
        stats = png_stats(png)
        if ok(stats):
            break
    return Path(png), stats
