"""icr explore: one offline page with a slider over checkpoints; in headless Chromium, moving
the slider (the #ck=N fragment dispatches the slider's input event) changes the rendered
attention, the role table and the marked step."""

import json
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


CR_TINY = ["--set", "train.steps=24", "--set", "train.batch_size=8", "--set",
           "train.progress=false", "--set", "train.checkpoint_schedule=linear", "--set",
           "train.checkpoint_every=12", "--set", "model.d_model=16", "--set", "model.d_head=8",
           "--set", "model.n_heads=2", "--set", "model.n_layers=1", "--set", "model.d_mlp=32",
           "--set", "task.n_subjects=8", "--set", "task.n_types=2", "--set",
           "task.n_values=4", "--set", "task.n_grammar=4", "--set", "task.n_tuples=2",
           "--set", "task.n_demos=2", "--set", "task.max_demos=3"]


@pytest.fixture(scope="module")
def cr_pages(tmp_path_factory):
    """A tiny CR run's page over all its checkpoints (steps 0, 12, 24: a log step axis) and
    over the last one."""
    d = tmp_path_factory.mktemp("explore-cr")
    r = CliRunner().invoke(main, ["train", "--task", "cr", "--out", str(d / "run"), *CR_TINY])
    assert r.exit_code == 0, r.output
    pages = {}
    for sel in ("all", "last"):
        pages[sel] = d / f"{sel}.html"
        r = CliRunner().invoke(main, ["explore", str(d / "run"), "--checkpoints", sel,
                                      "--out", str(pages[sel])])
        assert r.exit_code == 0, r.output
    return pages


def _curve(dom: str) -> dict:
    """The drawn curve panel: the x axis' ends, the dashed line's x, the tick labels, the
    number of polylines and point markers, the note."""
    svg = re.search(r'<svg id="curve-svg".*?</svg>', dom, re.S).group(0)
    axis = re.search(r'<line id="x-axis" x1="([\d.]+)"[^>]* x2="([\d.]+)"', svg)
    cur = re.search(r'<line id="current-step" x1="([\d.]+)"', svg)
    note = re.search(r'id="curve-note"[^>]*>([^<]*)<', dom).group(1)
    return {"axis": (float(axis.group(1)), float(axis.group(2))) if axis else None,
            "current": float(cur.group(1)) if cur else None,
            "ticks": re.findall(r'class="x-tick"[^>]*>([^<]*)<', svg),
            "lines": svg.count("<polyline"), "points": svg.count("<circle"), "note": note,
            "empty": 'id="curve-empty"' in svg, "log": "(log scale)" in svg}


def test_the_current_step_is_inside_the_curve_axis(page, cr_pages, chromium):
    """The x axis spans every checkpoint of the phase on the slider: the dashed line is on it
    and its step is labelled, at the first and the last checkpoint, for logged metrics
    (induction) and the CR-7 probes."""
    cases = [(page[1], "train-0000000", "0", "12"), (page[1], "train-0000012", "12", "12"),
             (cr_pages["all"], "pretrain-0000000", "0", "24"),
             (cr_pages["all"], "pretrain-0000024", "24", "24")]
    for html_file, name, step, end in cases:
        frag = "ck=0" if step == "0" else "ck=-1"
        dom = dump_dom(html_file, fragment=frag)
        assert _attr(dom, "data-current") == name
        c = _curve(dom)
        assert c["axis"] and c["current"] is not None and c["lines"] >= 1, (name, c)
        lo, hi = c["axis"]
        assert lo - 0.5 <= c["current"] <= hi + 0.5, (name, c)
        assert step in c["ticks"] and c["ticks"][0] == "0", (name, c)
        assert c["ticks"][-1] == end, (name, c)
        assert c["log"] == (end == "24"), (name, c)  # steps spanning > 20: a log axis
    assert "CR-7" in dump_dom(cr_pages["all"]).split('id="curve-select"')[1][:200]


def test_one_cr_checkpoint_shows_its_probes_and_says_why_there_is_no_curve(cr_pages,
                                                                            chromium):
    """With one checkpoint selected the CR-7 probes are one point each: drawn as markers on
    an axis around that step, with a line saying why there is no curve (the panel was an
    empty frame before)."""
    dom = dump_dom(cr_pages["last"], fragment="ck=-1")
    assert _attr(dom, "data-current") == "pretrain-0000024"
    c = _curve(dom)
    assert not c["empty"] and c["points"] == 4  # OV and KQ of L0H0 and L0H1
    lo, hi = c["axis"]
    assert lo < c["current"] < hi and c["ticks"] == ["24"]
    assert "one point" in c["note"] and "--checkpoints all" in c["note"]


def test_one_prompt_seed_is_one_prompt_in_view_and_explore(cr_pages):
    """`icr explore --prompt-seed N` shows the prompt `icr view --example N` shows."""
    import mechinterp_icr as mi
    from mechinterp_icr.viz.explore import explore_data
    from mechinterp_icr.viz.views import example_prompt

    run = cr_pages["all"].parent / "run"
    _, task = mi.load(run)
    seed = json.loads((run / "config.json").read_text())["seed"]
    for n in (0, 3):
        data = explore_data(run, "last", prompt_seed=n, n_roles=4)
        toks, answer = example_prompt(task, seed, n)
        assert data["tokens"] == task.vocab.tokens(toks.tolist())
        assert data["answer"] == task.vocab.tokens([answer])[0]
        assert f"icr view --example {n}" in data["prompt_desc"]
    assert explore_data(run, "last", prompt_seed=0, n_roles=4)["tokens"] != data["tokens"]


def test_the_page_opens_on_the_view_that_fits_the_model():
    """A one-layer model (the mechanism model) opens on CR-7's layer-0 probes; a deeper one
    (the main model, where those probes stay flat) on its held-out accuracy."""
    from mechinterp_icr.viz.explore import _curve_groups

    names = ["CR-7 KQ probe L0H0", "CR-7 OV probe L0H0", "heldout_icl_exact", "loss"]
    mech = _curve_groups("cr", names, 1, mechanism=True)
    main_model = _curve_groups("cr", names, 1, mechanism=False)
    assert mech[0]["label"].startswith("CR-7") and main_model[0]["label"] == "held-out accuracy"
    assert any(g["label"].startswith("CR-7") and "mechanism model's view" in g["label"]
               for g in main_model)


def test_head_narrows_the_attention_and_the_role_table(page):
    """--head L1H0,L0H1: the page holds those heads' patterns and role rows, in that order,
    equal to the same heads' rows of the all-heads page; a head outside the model is one
    line and exit code 2."""
    from mechinterp_icr.viz.explore import explore_data

    d, _ = page
    every = explore_data(d / "run", "last", n_roles=4)
    two = explore_data(d / "run", "last", n_roles=4, heads="L1H0,L0H1")
    assert two["head_names"] == ["L1H0", "L0H1"]
    at = [every["head_names"].index(n) for n in two["head_names"]]
    for key in ("attention", "roles"):
        assert two["checkpoints"][0][key] == [every["checkpoints"][0][key][i] for i in at]
    r = CliRunner().invoke(main, ["explore", str(d / "run"), "--head", "L2H0",
                                  "--out", str(d / "y.html")])
    assert r.exit_code == 2 and "--head = 'L2H0' is not allowed" in r.output
    assert not (d / "y.html").exists()
