"""The report: figure paths relative to the output directory or to the working directory
resolve; the IR row-overwrite table is a compact table with its figure; a report written into
another folder links nothing outside it; the git revision it is written at is recorded."""

import json
import re

import pytest

from mechinterp_icr.viz.publish import publish
from mechinterp_icr.viz.report import render_report, resolve_figure, write_report

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00"
       b"\x00\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00"
       b"\x00\x00\x00IEND\xaeB`\x82")


def _out(tmp_path):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    for name in ("cr5_head_roles", "cr_icl_by_k", "ir_causal_row_overwrite", "extra"):
        (out / "figures" / f"{name}.png").write_bytes(PNG)
        (out / "figures" / f"{name}.html").write_text("<html></html>")
    (out / "views").mkdir()
    (out / "views" / "v.html").write_text("<html></html>")
    (out / "runs" / "cr" / "seed0").mkdir(parents=True)
    claim = {"statement": "s", "metric": "m", "mean": 1.0, "ci95": [1.0, 1.0],
             "threshold": {"op": ">=", "value": 0.5}, "per_seed": {"0": {"m": 1.0}},
             "n_seeds": 1, "holds": True, "verdict": "holds"}
    summary = {
        "profile": "quick", "seeds": [0], "git_revision": "abc",
        "claims": {"CR-2": {**claim, "figure": "figures/cr_icl_by_k.html"},
                   # a path relative to the directory the reproduction ran in
                   "CR-5": {**claim, "figure": "out/figures/cr5_head_roles.png"}},
        "tables": {
            "IR-3/IR-4 causal: attention-row overwrite": {
                "note": "rows written into the step-1 attention",
                "per_seed_fixed_rows": {"0": {"a": 0.29, "critical_gap": 0.08}},
                "fixed_rows_mean": {"pairwise": {k: {"mean": 1.0, "ci95": [1.0, 1.0]}
                                                 for k in ("clean", "single", "swap")},
                                    "critical_gap": {"mean": 0.08, "ci95": [0.07, 0.09]}}},
            "IR figures": {"extra": {"png": "out/figures/extra.png",
                                     "html": "out/figures/extra.html"}},
            "IR runs": {"ht_a": {"step1_acc": 0.99, "acc": {"clean": 1.0}}},
        }}
    (out / "summary.json").write_text(json.dumps(summary))
    return out, summary


def test_figure_paths_resolve_from_both_bases(tmp_path, monkeypatch):
    out, summary = _out(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert resolve_figure("out/figures/cr5_head_roles.png", out).with_suffix(".png").exists()
    assert resolve_figure("figures/cr_icl_by_k.html", out) == out / "figures" / "cr_icl_by_k"
    monkeypatch.chdir(tmp_path / "out" / "views")  # elsewhere: found by name in figures/
    assert resolve_figure("out/figures/cr5_head_roles.png", out).with_suffix(".png").exists()
    text = render_report(summary, out)
    assert "was not produced" not in text
    assert text.count("data:image/png;base64,") == 4  # CR-2, CR-5, overwrite, extra


def test_overwrite_table_is_compact_with_its_figure(tmp_path):
    out, summary = _out(tmp_path)
    text = render_report(summary, out)
    sec = text[text.index("IR-3/IR-4 causal"):]
    assert "step-1 row written" in sec and "swap sequences" in sec
    assert "critical gap: <b>0.08</b>" in sec
    assert '"per_seed_fixed_rows"' not in text  # no raw JSON
    assert ">ht_a</td>" in text and "clean: 1" in text  # keyed rows, nested cells


def test_published_report_links_nothing_outside_its_folder(tmp_path):
    out, _ = _out(tmp_path)
    dest = tmp_path / "figures"
    publish(out, dest)
    text = (dest / "report.html").read_text()
    for href in re.findall(r'(?:href|src)="([^"]+)"', text):
        if href.startswith(("data:", "#")):
            continue
        assert (dest / href).resolve().is_relative_to(dest.resolve()), href
        assert (dest / href).exists(), href
    assert "not copied here" in text  # interactive figures and views are named instead
    assert re.search(r'<meta name="git-revision" content="[^"]+">', text)
    # in the output directory itself the interactive files are linked
    own = write_report(out).read_text()
    assert 'href="figures/cr_icl_by_k.html"' in own and 'href="views/v.html"' in own


@pytest.mark.parametrize("n", [2, 6])
def test_cr3_sweep_figure_turns_horizontal_for_many_settings(tmp_path, monkeypatch, n):
    """The paper profile's 17 sweep settings get a row each (readable labels); a few stay
    vertical bars. Every setting's mean and seeds are drawn."""
    from mechinterp_icr.viz.cr_figures import _sweep_figure

    monkeypatch.setenv("MECHINTERP_ICR_NO_PNG", "1")
    rows = [{"setting": f"setting {i}", "heldout_icl_exact_mean": 0.5,
             "heldout_icl_exact_per_seed": [0.4, 0.6], "heldout_iclgrm_exact_mean": 0.9,
             "heldout_iclgrm_exact_per_seed": [0.9, 0.9]} for i in range(n)]
    out = _sweep_figure(rows, tmp_path / "cr3_sweep")
    html = (tmp_path / "cr3_sweep.html").read_text()
    assert out["html"].endswith("cr3_sweep.html") and "png" not in out
    assert ('"orientation":"h"' in html) == (n > 4)
    assert all(f"setting {i}" in html for i in range(n))
