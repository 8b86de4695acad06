"""No threshold is written outside the claim specs: a line a figure draws at a threshold, or a
caption that names one, reads the registry (``claims.registry.threshold`` / ``setting``), so a
rule change moves the figure with it. The test reads the figure and report code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

VIZ = Path(__file__).resolve().parents[2] / "mechinterp_icr" / "viz"
LINES = {"add_hline": "y", "add_vline": "x", "_log_threshold": None}
# a caption that names a threshold by its number ("threshold 0.80", "dashed 0.5")
CAPTION = re.compile(r"(threshold|dashed|dotted|bound|target)\s*(<=|>=|=)?\s*\d*\.\d+")


def _numeric(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
        and not isinstance(node.value, bool)


def _literal_lines(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", None))
        if name not in LINES:
            continue
        pos = 1 if name == "_log_threshold" else 0  # _log_threshold(fig, y)
        args = node.args[pos:pos + 1] + [k.value for k in node.keywords if k.arg == LINES[name]]
        if any(_numeric(a) for a in args):
            out.append(f"line {node.lineno}: {name} at a number literal")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and CAPTION.search(node.value):
            out.append(f"line {node.lineno}: caption {node.value!r}")
    return out


@pytest.mark.parametrize("path", sorted(VIZ.glob("*.py")), ids=lambda p: p.name)
def test_figures_and_report_draw_thresholds_from_the_specs(path):
    assert _literal_lines(ast.parse(path.read_text())) == []


def test_the_search_finds_a_literal_threshold():
    code = ('fig.add_hline(y=0.9, annotation_text="CR-2 0.90")\n'
            'fig.add_vline(0.8)\n_log_threshold(fig, 0.02)\n'
            't = "dashed 0.5"\nfig.add_hline(y=threshold("CR-2", "m"))\n')
    found = _literal_lines(ast.parse(code))
    assert len(found) == 4, found
