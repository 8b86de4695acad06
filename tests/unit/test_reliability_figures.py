"""Reliability v2 (issue 41), figures: a PNG export that cannot start (no working Chromium)
or hangs never keeps a process from exiting and is named, not silent; figures are written
atomically; a stale ``plotly.min.js`` / ``circuitsvis.js`` beside a page is rewritten."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import plotly.graph_objects as go
import pytest

from mechinterp_icr.viz import figures
from mechinterp_icr.viz.views import BUNDLE_NAME, bundle_source, write_bundle

pytestmark = pytest.mark.timeout(120)


def _fig():
    return go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))


def test_figure_export_when_chromium_cannot_start_names_the_figure_and_the_process_exits(
        tmp_path):
    script = textwrap.dedent("""
        import sys
        import plotly.graph_objects as go
        from mechinterp_icr.viz import figures
        figures.png_available = lambda: True
        for name in ("logit_lens", "attention_roles"):
            p = figures.save_figure(go.Figure(go.Scatter(x=[1], y=[2])), sys.argv[1] + "/" + name)
            print(p.get("png_error"), flush=True)
        """)
    env = {k: v for k, v in os.environ.items() if k != "MECHINTERP_ICR_NO_PNG"}
    env.update(BROWSER_PATH="/bin/false", MECHINTERP_ICR_PNG_TIMEOUT="20")  # cannot start
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=100)
    assert res.returncode == 0 and time.monotonic() - t0 < 90, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("logit_lens.png not written") and "Chromium" in lines[0]
    assert lines[1].startswith("attention_roles.png not written")
    assert "Traceback" not in res.stderr
    assert (tmp_path / "logit_lens.html").is_file() and not (tmp_path / "logit_lens.png").exists()


def test_png_export_that_hangs_times_out_and_removes_a_stale_png(tmp_path, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(figures, "png_available", lambda: True)
    monkeypatch.setattr(figures, "_png_server", lambda: None)
    monkeypatch.setattr(figures, "PNG_TIMEOUT_S", 0.5)
    monkeypatch.setattr(figures, "_png_broken", [])
    monkeypatch.setattr(go.Figure, "to_image", lambda self, **kw: release.wait(30) and b"")
    (tmp_path / "f.png").write_bytes(b"an earlier run's figure")
    t0 = time.monotonic()
    paths = figures.save_figure(_fig(), tmp_path / "f")
    release.set()
    assert time.monotonic() - t0 < 10
    assert "png" not in paths and paths["png_error"].startswith("f.png not written")
    assert not (tmp_path / "f.png").exists() and (tmp_path / "f.html").is_file()
    assert "no more PNGs" in figures.save_figure(_fig(), tmp_path / "g")["png_error"]


def test_png_export_failure_is_retried_once(tmp_path, monkeypatch):
    calls = []

    def flaky(self, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("busy")
        return b"\x89PNG fake"

    monkeypatch.setattr(figures, "png_available", lambda: True)
    monkeypatch.setattr(figures, "_png_server", lambda: None)
    monkeypatch.setattr(figures, "_png_broken", [])
    monkeypatch.setattr(go.Figure, "to_image", flaky)
    paths = figures.save_figure(_fig(), tmp_path / "f")
    assert paths["png"] == str(tmp_path / "f.png") and len(calls) == 2
    assert (tmp_path / "f.png").read_bytes() == b"\x89PNG fake"
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]  # atomic writes only


@pytest.mark.parametrize("stale", ["14 bytes", "same size", "symlink to /dev/zero", "fifo"])
def test_stale_plotly_js_and_circuitsvis_js_beside_out_are_rewritten(tmp_path, stale):
    from plotly.offline import get_plotlyjs

    for name, text, write in ((figures.PLOTLY_JS, get_plotlyjs(),
                               lambda: figures.save_figure(_fig(), tmp_path / "f", png=False)),
                              (BUNDLE_NAME, bundle_source(), lambda: write_bundle(tmp_path))):
        p = tmp_path / name
        if stale == "14 bytes":
            p.write_text("// stale asset")
        elif stale == "same size":
            p.write_text("x" * len(text.encode()))
        elif stale == "symlink to /dev/zero":
            p.symlink_to("/dev/zero")
        else:
            os.mkfifo(p)
        write()
        assert not p.is_symlink() and p.read_text() == text, (name, stale)
        mtime = p.stat().st_mtime_ns
        write()  # an intact copy is reused, not rewritten
        assert p.stat().st_mtime_ns == mtime
