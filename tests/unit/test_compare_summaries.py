"""scripts/compare_summaries.py: two summaries of the same code agree; a changed verdict or
number is named; what differs between runs of the same code (timings, revisions) is not."""

import json

from helpers import load_repo_script


def _summary(**claim):
    c = {"verdict": "holds", "per_seed": {"0": {"gap": 0.01}}, "mean": 0.01, **claim}
    return {"claims": {"IR-3": c}, "tables": {"t": [{"n": 32, "gap": 0.02}]},
            "seeds": [0], "timings_s": {"ir": 12.0}, "git_revision": "abc",
            "code_state": "abc", "versions": {"torch": "2.13.0"}}


def test_same_numbers_agree_and_differences_are_named(tmp_path, monkeypatch, capsys):
    mod = load_repo_script("scripts/compare_summaries.py", monkeypatch)
    a = _summary()
    b = {**_summary(), "timings_s": {"ir": 99.0}, "git_revision": "def", "code_state": "x"}
    assert mod.compare(a, b) == []
    c = _summary(verdict="does not hold", mean=0.03)
    diffs = mod.compare(a, c)
    assert diffs[0] == "verdict IR-3: holds -> does not hold"
    assert "claims.IR-3.mean: 0.01 -> 0.03" in diffs
    assert mod.compare(a, _summary(mean=0.0100001), tol=1e-3) == []
    pa, pc = tmp_path / "a.json", tmp_path / "c.json"
    pa.write_text(json.dumps(a))
    pc.write_text(json.dumps(c))
    assert mod.main([str(pa), str(pa)]) == 0
    assert mod.main([str(pa), str(pc)]) == 1
    assert "differences over 1 claims" in capsys.readouterr().out
    assert mod.main([str(pa), str(tmp_path / "missing.json")]) == 2


def test_code_revision_tables_are_skipped_under_the_old_and_the_new_name(monkeypatch):
    """Summaries written before jobs were called jobs name the table "... each task result":
    compared with one written after ("... each job result"), neither is a difference."""
    mod = load_repo_script("scripts/compare_summaries.py", monkeypatch)
    old = _summary()
    old["tables"]["ir: code revision of each task result"] = [{"code": "abc", "tasks": 3}]
    new = _summary()
    new["tables"]["ir: code revision of each job result"] = [{"code": "def", "jobs": 3}]
    assert mod.compare(old, new) == []
