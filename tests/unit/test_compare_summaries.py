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


def test_configs_compare_under_the_present_key_names(monkeypatch):
    """A summary written with the flat IR keys (and a CR sweep in its string form) agrees
    with one written with the sectioned config; a changed value is still named."""
    from mechinterp_icr.config import to_dict
    from mechinterp_icr.experiments.cr.config import SweepSetting
    from mechinterp_icr.experiments.ir.config import FLAT_KEYS, QUICK

    mod = load_repo_script("scripts/compare_summaries.py", monkeypatch)
    new = to_dict(QUICK)
    flat = dict(mod.settings(new))
    old = {next((o for o, n in FLAT_KEYS.items() if n == k), k): v for k, v in flat.items()}
    assert "sweep_n" in old and "sample_complexity.n" not in old
    assert mod.compare({**_summary(), "config": old}, {**_summary(), "config": new}) == []
    moved = {**old, "ht_n": 64}
    assert mod.compare({**_summary(), "config": moved}, {**_summary(), "config": new}) == \
        ["config.hooked.n: 64 -> 32"]
    s = "x|task.lam=0.5"
    assert mod.settings({"sweep": [s]}) == {"sweep": [to_dict(SweepSetting.parse(s))]}


def test_one_target_only(monkeypatch):
    mod = load_repo_script("scripts/compare_summaries.py", monkeypatch)
    a = {**_summary(), "claims": {"IR-3": _summary()["claims"]["IR-3"], "CR-1": {"mean": 1}}}
    b = {**a, "claims": {**a["claims"], "CR-1": {"mean": 2}}}
    assert mod.compare(a, b, target="ir") == []
    assert mod.compare(a, b, target="cr") == ["claims.CR-1.mean: 1 -> 2"]


def test_code_revision_tables_are_skipped_under_the_old_and_the_new_name(monkeypatch):
    """Summaries written before jobs were called jobs name the table "... each task result":
    compared with one written after ("... each job result"), neither is a difference."""
    mod = load_repo_script("scripts/compare_summaries.py", monkeypatch)
    old = _summary()
    old["tables"]["ir: code revision of each task result"] = [{"code": "abc", "tasks": 3}]
    new = _summary()
    new["tables"]["ir: code revision of each job result"] = [{"code": "def", "jobs": 3}]
    assert mod.compare(old, new) == []
