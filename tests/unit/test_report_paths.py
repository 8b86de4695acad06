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


def _clean_tree(monkeypatch, files=()):
    """Publishing reads this checkout's state; a test fixes it (clean, or dirty ``files``)."""
    import mechinterp_icr.viz.publish as pub
    from mechinterp_icr.store.provenance import TreeState

    state = TreeState("c0ffee" * 6 + "abcd", tuple(files))
    monkeypatch.setattr(pub, "tree_state", lambda **kw: state)
    return state


def test_published_report_links_nothing_outside_its_folder(tmp_path, monkeypatch):
    out, _ = _out(tmp_path)
    dest = tmp_path / "figures"
    _clean_tree(monkeypatch)
    publish(out, dest)
    text = (dest / "report.html").read_text()
    for href in re.findall(r'(?:href|src)="([^"]+)"', text):
        if href.startswith(("data:", "#")):
            continue
        assert (dest / href).resolve().is_relative_to(dest.resolve()), href
        assert (dest / href).exists(), href
    assert "not copied here" in text  # interactive figures and views are named instead
    # each job's seconds for the next fresh run's ETA (here: no job records, an empty map)
    assert json.loads((dest / "job_seconds.json").read_text())["seconds"] == {}
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


# ---- provenance: a committed report names one commit --------------------------------------
def test_publish_refuses_a_dirty_tree_and_writes_nothing(tmp_path, monkeypatch, capsys):
    out, _ = _out(tmp_path)
    dest = tmp_path / "figures"
    _clean_tree(monkeypatch, files=("mechinterp_icr/viz/report.py",))
    with pytest.raises(SystemExit, match="refusing to publish.*mechinterp_icr/viz/report.py"):
        publish(out, dest)
    assert not dest.exists()
    # --allow-dirty publishes, warns loudly and marks the report
    publish(out, dest, allow_dirty=True)
    text = (dest / "report.html").read_text()
    assert 'id="provenance-warning"' in text and "mechinterp_icr/viz/report.py" in text
    assert "WARNING" in capsys.readouterr().err


def test_publish_refuses_a_summary_of_uncommitted_code(tmp_path, monkeypatch):
    out, summary = _out(tmp_path)
    (out / "summary.json").write_text(json.dumps({**summary, "code_state": "abc+dirty"}))
    _clean_tree(monkeypatch)
    with pytest.raises(SystemExit, match="uncommitted code"):
        publish(out, tmp_path / "figures")


def test_a_clean_report_names_both_commits_and_has_no_banner(tmp_path, monkeypatch):
    out, summary = _out(tmp_path)
    (out / "summary.json").write_text(json.dumps({**summary, "code_state": "abc"}))
    state = _clean_tree(monkeypatch)
    publish(out, tmp_path / "figures")
    text = (tmp_path / "figures" / "report.html").read_text()
    assert "provenance-warning" not in text and "dirty" not in text
    assert f"report written at git <code>{state.revision}</code>" in text
    assert "reproduced at git\n<code>abc</code>" in text


def test_a_published_folder_rerenders_onto_itself(tmp_path, monkeypatch):
    """``publish figures figures`` re-renders the report from the summary and the PNGs beside
    it (nothing rerun, nothing copied)."""
    out, _ = _out(tmp_path)
    dest = tmp_path / "figures"
    _clean_tree(monkeypatch)
    publish(out, dest)
    (dest / "report.html").unlink()
    written = publish(dest, dest)
    assert written == [dest / "report.html"]
    text = (dest / "report.html").read_text()
    assert "was not produced" not in text and text.count("data:image/png;base64,") == 4


def test_tree_state_excludes_the_output_folder(tmp_path):
    """A change under the excluded folder (the publish destination) is not dirt; a tracked
    change or an untracked file elsewhere is."""
    import shutil
    import subprocess

    from mechinterp_icr.store.provenance import tree_state

    if shutil.which("git") is None:
        pytest.skip("git not installed")

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "report.html").write_text("old")
    (tmp_path / "code.py").write_text("x = 1")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert not tree_state(tmp_path).dirty
    (tmp_path / "figures" / "report.html").write_text("new")
    assert tree_state(tmp_path).dirty_files == ("figures/report.html",)
    assert not tree_state(tmp_path, exclude=[tmp_path / "figures"]).dirty
    (tmp_path / "code.py").write_text("x = 2")
    (tmp_path / "new.py").write_text("")
    st = tree_state(tmp_path, exclude=[tmp_path / "figures"])
    assert st.dirty_files == ("code.py", "new.py") and "dirty" in st.label


# ---- headlines and intervals in the report -------------------------------------------------
def test_report_headline_is_the_deciding_condition_not_a_met_one(tmp_path):
    """CR-4 meets its first condition (top-PC probe) and fails a later one: the claim table
    and the section name the failing condition, with its worst seed, and the interval of the
    primary accuracy stays in [0, 1]."""
    from mechinterp_icr.claims import Claim, evaluate_control, spec

    sp = spec("CR-4")
    base = {"ft_acc_pc": 0.99, "ft_transfer_acc_pc": 0.99, "ft_patch_gain": 0.95,
            "ft_necessity_type_acc": 0.26, "pt_acc_pc": 0.3, "pt_patch_gain": 0.0,
            "ft_shuffle_gap": 0.0, "ft_random_patch_gain": 0.0, "ft_random_subspace_drop": 0.0}
    per = {str(s): dict(base) for s in range(5)}
    per["0"]["ft_acc_pc"] = 1.0
    per["1"]["ft_acc_pc"] = 0.96
    per["3"]["ft_transfer_acc_pc"] = 0.6
    claim = Claim.from_spec(sp, per, controls=[evaluate_control(c, per) for c in sp.controls])
    summary = {"profile": "quick", "seeds": [0, 1, 2, 3, 4], "git_revision": "abc",
               "claims": {"CR-4": claim.to_dict([0, 1, 2, 3, 4])}}
    text = render_report(summary, tmp_path, git_state="abc")
    row = text[text.index('<tr><td><a href="#CR-4">'):]
    row = row[:row.index("</tr>")]
    assert "does not hold" in row
    assert ("transfer to held-out subjects (ft_transfer_acc_pc), every seed: min 0.6 on "
            "seed 3 &lt; 0.9") in row
    assert "ft_acc_pc" not in row
    sec = text[text.index('<section class="claim" id="CR-4">'):]
    decided = sec[sec.index("Decided by:"):sec.index("</p>", sec.index("Decided by:"))]
    assert "ft_transfer_acc_pc" in decided and "ft_acc_pc" not in decided
    assert summary["claims"]["CR-4"]["ci95"][1] <= 1.0  # t-interval 0.99 +- ... clipped
    assert "clipped to its range [0, 1]" in sec


def test_merged_summary_keeps_each_targets_code_state(tmp_path):
    """A summary merged from runs at different commits says which target ran at which, and
    the report's header names both."""
    import json

    from mechinterp_icr.claims import Summary

    (tmp_path / "summary.json").write_text(json.dumps(
        {"target": "ir", "code_state": "aaa111", "claims": {}, "tables": {}}))
    s = Summary("cr", "quick", [0])
    s.code_state = "bbb222"
    s.write(tmp_path)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["code_state_by_target"] == {"ir": "aaa111", "cr": "bbb222"}
    text = render_report(data, tmp_path, git_state="bbb222")
    assert "per target: cr at <code>bbb222</code>, ir at <code>aaa111</code>" in text


def test_publish_replaces_its_own_subfolders_only(tmp_path, monkeypatch):
    """Publishing copies the figures' subfolders (the shared-token variant's) and leaves a
    published folder's other subfolders (figures/paper) alone."""
    import json

    from mechinterp_icr.viz import publish as pub

    out, dest = tmp_path / "out", tmp_path / "figures"
    (out / "figures" / "shared-tokens").mkdir(parents=True)
    (out / "figures" / "a.png").write_bytes(b"a")
    (out / "figures" / "shared-tokens" / "b.png").write_bytes(b"b")
    (out / "summary.json").write_text(json.dumps({"claims": {}, "code_state": "x"}))
    (dest / "paper").mkdir(parents=True)
    (dest / "paper" / "keep.png").write_bytes(b"k")
    (dest / "shared-tokens").mkdir()
    (dest / "shared-tokens" / "stale.png").write_bytes(b"s")
    monkeypatch.setattr(pub, "tree_state", lambda exclude=(): None)
    monkeypatch.setattr("mechinterp_icr.viz.report.write_report",
                        lambda *a, **k: dest / "report.html")
    pub.publish(out, dest, allow_dirty=True)
    assert (dest / "paper" / "keep.png").exists()
    assert (dest / "shared-tokens" / "b.png").exists()
    assert not (dest / "shared-tokens" / "stale.png").exists()
    assert (dest / "a.png").read_bytes() == b"a"
