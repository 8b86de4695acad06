"""benchmarks/stage_profile.py: stage job-seconds and shares from a summary."""

import json

from helpers import load_repo_script


def test_stage_table_sorts_stages_and_leaves_bookkeeping_out(tmp_path, monkeypatch, capsys):
    mod = load_repo_script("benchmarks/stage_profile.py", monkeypatch)
    summary = {"timings_by_target": {
        "cr": {"pretrain": 30.0, "total": 999.0, "jobs (wall, all targets)": 50.0},
        # the key's name in summaries written before jobs were called jobs
        "ir": {"IR-5": 60.0, "IR-1": 10.0, "tasks (wall, all targets)": 50.0}}}
    rows = mod.stage_table(summary)
    assert [(r["target"], r["stage"]) for r in rows] == [("ir", "IR-5"), ("cr", "pretrain"),
                                                         ("ir", "IR-1")]
    assert abs(rows[0]["share"] - 0.6) < 1e-12
    p = tmp_path / "summary.json"
    p.write_text(json.dumps(summary))
    assert mod.main([str(p), "--top", "2"]) == 0
    assert "the heaviest 2: ir IR-5 (60%), cr pretrain (30%)" in capsys.readouterr().out
    assert mod.main([str(tmp_path / "missing.json")]) == 2
