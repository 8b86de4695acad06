"""scripts/tl4_load.py (the TransformerLens 4 loader, issue 40) in this venv's TL 3.9: it imports
nothing of the package, and bad input or the wrong TransformerLens is one line on stderr naming
the path, exit code 2, no traceback. Its loading is tested against TL 4 in
tests/slow/test_tl4_loader.py."""

import ast
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tl4_load.py"


def test_the_loader_needs_only_transformer_lens_torch_and_safetensors():
    roots = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    stdlib = {"__future__", "argparse", "importlib", "json", "os", "pathlib", "sys", "warnings"}
    assert roots - stdlib == {"torch", "safetensors", "transformer_lens"}


def _run(arg, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), str(arg)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_bad_input_is_one_line_naming_the_path(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"step": 3}))
    for path, why in ((tmp_path / "missing", "does not exist"),
                      (tmp_path / "garbage.json", "not readable JSON"),
                      (tmp_path / "other", "no 'hooked_transformer_config'"),
                      (tmp_path, "is a directory")):
        res = _run(path, tmp_path)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and why in lines[0], res.stderr
        assert res.stdout == ""


def test_transformer_lens_3_is_refused_in_one_line(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"hooked_transformer_config": {"n_layers": 1}}))
    res = _run(tmp_path / "a", tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "needs TransformerLens 4" in res.stderr
