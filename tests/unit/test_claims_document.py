"""docs/claims.md is generated from the registry (``mechinterp_icr.claims.document``) and must
be the one it gives; it lists every registered condition and control."""

from pathlib import Path

from mechinterp_icr.claims import document
from mechinterp_icr.claims.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def test_committed_claims_doc_is_the_registrys():
    assert (ROOT / "docs" / "claims.md").read_text() == document.render(), (
        "docs/claims.md is stale: python -m mechinterp_icr.claims.document docs/claims.md")


def test_every_condition_and_control_is_listed():
    text = document.render()
    for s in REGISTRY.values():
        assert f"## {s.id}\n" in text
        for c in s.conditions:
            assert f"| `{c.metric}` | {c.op} {c.threshold:g} |" in text, (s.id, c.metric)
        for k in s.controls:
            assert f"`{k.condition.metric}` {k.condition.op} {k.condition.threshold:g}" in text


def test_check_mode(tmp_path):
    f = tmp_path / "claims.md"
    assert document.main([str(f), "--check"]) == 1
    assert document.main([str(f)]) == 0
    assert document.main([str(f), "--check"]) == 0
    f.write_text(f.read_text() + "edited\n")
    assert document.main([str(f), "--check"]) == 1
