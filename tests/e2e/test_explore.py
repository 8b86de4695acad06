"""icr explore: one offline page with a slider over checkpoints; in headless Chromium, moving
the slider (the #ck=N fragment dispatches the slider's input event) changes the rendered
attention, the role table and the marked step."""

import re

import numpy as np
import pytest
from click.testing import CliRunner

from mechinterp_icr.cli import main
from mechinterp_icr.viz.browser import chromium_path, dump_dom, png_stats, screenshot_until

TINY = ["--set", "train.steps=12", "--set", "train.batch_size=16", "--set",
        "train.progress=false", "--set", "train.checkpoint_schedule=linear", "--set",
        "train.checkpoint_every=4", "--set", "train.lr=0.01", "--set", "model.d_model=16",
        "--set", "model.d_head=8", "--set", "model.n_heads=2", "--set", "model.n_layers=2",
        "--set", "task.n_tokens=8", "--set", "task.half_len=4"]


@pytest.fixture(scope="module")
def chromium():
    import os

    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI; `make test` should have installed it")
        pytest.skip("chromium not installed (Debian package 'chromium')")
    return chromium_path()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("explore")
    r = CliRunner().invoke(main, ["train", "--task", "induction", "--out", str(d / "run"),
                                  *TINY])
    assert r.exit_code == 0, r.output
    out = d / "explore.html"
    r = CliRunner().invoke(main, ["explore", str(d / "run"), "--checkpoints", "all",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    return d, out


def test_the_page_is_offline_and_holds_every_checkpoint(page):
    _, out = page
    text = out.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "unpkg.com" not in text and "cdn.jsdelivr" not in text
    assert text.count('"name":"train-') == 4  # steps 0, 4, 8, 12
    assert '"head_names":["L0H0","L0H1","L1H0","L1H1"]' in text


def test_bad_selection_is_one_line_and_exit_code_2(page):
    d, _ = page
    r = CliRunner().invoke(main, ["explore", str(d / "run"), "--checkpoints", "phase:nope",
                                  "--out", str(d / "x.html")])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "phase:nope" in r.output
    assert not (d / "x.html").exists()


def _attr(dom: str, name: str) -> str:
    m = re.search(rf'{name}="([^"]*)"', dom)
    assert m, f"{name} missing from the rendered page"
    return m.group(1)


def test_moving_the_slider_changes_the_rendered_attention(page, chromium, tmp_path):
    _, out = page
    first, last = dump_dom(out, fragment="ck=0"), dump_dom(out, fragment="ck=-1")
    assert _attr(first, "data-current") == "train-0000000"
    assert _attr(last, "data-current") == "train-0000012"
    assert _attr(first, "data-attention-sum") != _attr(last, "data-attention-sum")
    for dom in (first, last):  # circuitsvis rendered into the holder, roles and curves drawn
        assert 'id="attn-' in dom and "L1H1" in dom
        assert "<polyline" in dom and 'id="current-step"' in dom
        assert "correct answer" in dom
    pngs = []
    for i, frag in enumerate(("ck=0", "ck=-1")):
        png, stats = screenshot_until(out, tmp_path / f"ck{i}.png", fragment=frag,
                                      ok=lambda s: s["colored"] > 0.01, width=1300,
                                      height=900)
        assert stats["colored"] > 0.01, stats  # the attention grid is drawn
        pngs.append(png)
    from PIL import Image

    a, b = (np.asarray(Image.open(p).convert("RGB"), dtype=float) for p in pngs)
    left = slice(0, 560)  # the attention panel
    assert np.abs(a[:, left] - b[:, left]).mean() > 0.5
    assert png_stats(pngs[1])["nonwhite"] > 0.05
