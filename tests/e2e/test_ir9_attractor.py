"""``analyses/ir9_attractor.py``: IR-9 on chosen seeds through the reproduction's job and the
registered rule. A short budget keeps it fast; the verdict it prints and stores is the one
``claims.redecide`` gives the stored per-seed numbers, and a bad seed list is one line."""

import json
import subprocess
import sys
from pathlib import Path

from mechinterp_icr.claims.redecide import redecide_claim

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "analyses" / "ir9_attractor.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={"OMP_NUM_THREADS": "1",
                                                      "PATH": "/usr/bin:/bin"})


def test_ir9_script_decides_by_the_registered_rule(tmp_path):
    out = tmp_path / "ir9.json"
    res = _run("--seeds", "3", "--set", "steps=5", "--set", "stop_max=5", "--out", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(out.read_text())
    claim = got["claim"]
    m = claim["per_seed"]["3"]
    assert m["ir9_imposed"] == 1.0 and abs(m["ir9_start_gap"] - 0.05) < 1e-6
    # 5 small steps cannot close a 0.05 gap to 0.02, and lr 0 keeps it: a readable failure
    assert m["ir9_final_gap"] > 0.02 and abs(m["ir9_frozen_final_gap"] - 0.05) < 1e-6
    assert claim["verdict"] == "does not hold" and claim["holds"] is False
    again = redecide_claim("IR-9", {"per_seed": claim["per_seed"]}, ["3"])
    assert again["verdict"] == claim["verdict"]
    assert [c["as_expected"] for c in claim["controls"]] == [True, True, True]
    assert got["traces"]["3"]["learned"][-1][0] == 5
    assert "IR-9: does not hold" in res.stdout


def test_ir9_script_refuses_bad_seeds_in_one_line(tmp_path):
    for bad in ("a,b", "", "3,3", "-1"):
        res = _run("--seeds", bad, "--out", str(tmp_path / "x.json"))
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().startswith("error:") and len(res.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "x.json").exists()


def test_ir_gap_sweep_refuses_bad_seeds_with_the_commands_parser(tmp_path):
    """analyses/ir_gap_sweep.py reads --seeds with the commands' parser: a repeated seed
    (which appended its rows twice) is refused like a bad one, before anything is written."""
    script = ROOT / "analyses" / "ir_gap_sweep.py"
    for bad in ("a,b", "", "3,3", "-1"):
        res = subprocess.run([sys.executable, str(script), "IR-7", "--seeds", bad, "--out",
                              str(tmp_path / "rows.jsonl")], capture_output=True, text=True,
                             cwd=ROOT, timeout=300, env={"OMP_NUM_THREADS": "1",
                                                         "PATH": "/usr/bin:/bin"})
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().startswith("error: --seeds") and len(
            res.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "rows.jsonl").exists()
