"""Open report.html and a circuitsvis attention view in headless Chromium and check that they
render: not blank, the claim table visible, the attention view drawn."""

import os
import shutil
import subprocess

import pytest
import torch

from mechinterp_icr.viz.browser import chromium_path, dump_dom, screenshot_until


@pytest.fixture(scope="module")
def chromium():
    if chromium_path() is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                       "-qq chromium", shell=True, capture_output=True, timeout=900)
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI; `make test` should have installed it")
        pytest.skip("chromium not installed (Debian package 'chromium')")
    return chromium_path()


def _small_summary(out_dir):
    import plotly.graph_objects as go

    from mechinterp_icr.claims import Claim, Summary
    from mechinterp_icr.viz.figures import save_figure

    s = Summary("demo", "quick", [0, 1, 2])
    fig = go.Figure(go.Scatter(x=[0, 1, 2, 3], y=[0.1, 0.5, 0.9, 0.97], mode="lines+markers"))
    fig.update_layout(title="held-out accuracy over finetuning steps",
                      xaxis_title="step", yaxis_title="accuracy")
    os.environ.pop("MECHINTERP_ICR_NO_PNG", None)
    try:
        save_figure(fig, out_dir / "figures" / "demo")
    finally:
        os.environ["MECHINTERP_ICR_NO_PNG"] = "1"
    s.add(Claim("CR-2", "demo statement", "acc", ">=", 0.9,
                {"0": {"acc": 0.95}, "1": {"acc": 0.97}, "2": {"acc": 0.93}},
                figure="figures/demo"))
    s.add(Claim("IR-3", "second demo statement", "gap", "<=", 0.02,
                {"0": {"gap": 0.05}, "1": {"gap": 0.01}, "2": {"gap": 0.04}}))
    s.write(out_dir)


def test_report_renders(tmp_path, chromium):
    from mechinterp_icr.viz.report import write_report

    _small_summary(tmp_path)
    report = write_report(tmp_path)
    text = report.read_text()
    import re

    assert not re.search(r'(src|href)="(https?:)?//', text), "report loads something remote"
    assert not re.search(r"cdn\.plot\.ly|unpkg\.com|jsdelivr", text)
    assert "data:image/png;base64," in text  # the figure is embedded
    dom = dump_dom(report)
    assert 'id="claim-table"' in dom and "CR-2" in dom and "IR-3" in dom
    assert "does not hold" in dom and "holds" in dom
    png, stats = screenshot_until(report, tmp_path / "report.png",
                                  ok=lambda s: s["nonwhite"] > 0.02, width=1200, height=1400)
    assert stats["nonwhite"] > 0.02, stats  # text, table and figure drawn
    assert stats["colored"] > 0.002, stats  # verdict colours / embedded figure


def test_attention_view_renders(tmp_path, chromium):
    from mechinterp_icr.viz.views import write_attention_view

    toks = ["[BOS]", "S1", "A0_3", "[SEP]", "S2", "A0_5", "[SEP]", "S3"]
    att = torch.softmax(torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(0)), -1)
    att = att.tril()
    att = att / att.sum(-1, keepdim=True)
    path = write_attention_view(tmp_path / "views" / "demo.html", toks, att, title="demo view")
    text = path.read_text()
    assert "unpkg" not in text and "jsdelivr" not in text
    png, stats = screenshot_until(path, tmp_path / "view.png", ok=lambda s: s["colored"] > 0.01,
                                  width=700, height=420)
    assert stats["colored"] > 0.01, stats  # the coloured attention grid is drawn
