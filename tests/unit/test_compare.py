"""``icr compare A B``: two summaries of the same code agree; a changed verdict or number is
named (largest numbers first); what differs between runs of the same code (timings, revisions,
roundings, a rerun record) is not. The end of ``icr reproduce`` compares a fresh run with the
published summary through the same code."""

import json

from click.testing import CliRunner

from mechinterp_icr.cli import main
from mechinterp_icr.cli.compare import against_published, compare, report_lines, settings


def _summary(**claim):
    c = {"verdict": "holds", "per_seed": {"0": {"gap": 0.01}}, "mean": 0.01, **claim}
    return {"claims": {"IR-3": c}, "tables": {"t": [{"n": 32, "gap": 0.02}]},
            "seeds": [0], "profile": "quick", "target": "ir", "timings_s": {"ir": 12.0},
            "git_revision": "abc", "code_state": "abc", "versions": {"torch": "2.13.0"},
            "rounding": "native"}


def _paths(d: str) -> list[str]:
    return [x.path for x in compare(*json.loads(d))[1]]


def test_same_numbers_agree_and_differences_are_named_largest_first():
    a = _summary()
    b = {**_summary(), "timings_s": {"ir": 99.0}, "git_revision": "def", "code_state": "x",
         "rounding": "avx2", "rerun": {"summary": "rerun/summary.json"}}
    assert compare(a, b) == ([], [])
    c = _summary(verdict="does not hold", mean=0.03, per_seed={"0": {"gap": 0.5}})
    changed, diffs = compare(a, c)
    assert changed == [("IR-3", "holds", "does not hold")]
    assert [d.path for d in diffs] == ["claims.IR-3.per_seed.0.gap", "claims.IR-3.mean"]
    assert diffs[0].size > diffs[1].size and diffs[0].claim == "IR-3"
    assert compare(a, _summary(mean=0.0100001), tol=1e-3) == ([], [])
    lines = report_lines(changed, diffs, names=("A", "B"))
    assert lines[:2] == ["verdicts that differ: 1", "  IR-3: holds (A) -> does not hold (B)"]
    assert "  IR-3: 2, largest 0.49 at claims.IR-3.per_seed.0.gap" in lines


def test_icr_compare_exits_1_on_a_verdict_and_0_on_numbers_only(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    a.write_text(json.dumps(_summary()))
    b.write_text(json.dumps(_summary(mean=0.02)))
    c.write_text(json.dumps(_summary(verdict="does not hold")))
    r = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert r.exit_code == 0, r.output
    assert "numbers that differ by more than 1e-09: 1, largest first:" in r.output
    assert CliRunner().invoke(main, ["compare", str(a), str(b), "--strict"]).exit_code == 1
    r = CliRunner().invoke(main, ["compare", str(a), str(c)])
    assert r.exit_code == 1 and "IR-3: holds" in r.output and "-> does not hold" in r.output
    r = CliRunner().invoke(main, ["compare", str(a), str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    # --claims: spaces stripped; an id in neither summary is refused, never compared as nothing
    r = CliRunner().invoke(main, ["compare", str(a), str(c), "--claims", "CR-1, IR-3"])
    assert r.exit_code == 2 and "CR-1" in r.output
    assert CliRunner().invoke(main, ["compare", str(a), str(c), "--claims", " IR-3"]
                              ).exit_code == 1
    # an old summary that stores its claims as a list compares
    old = {**_summary(), "claims": [{"id": "IR-3", **_summary()["claims"]["IR-3"]}]}
    assert compare(old, _summary())[0] == []


def test_configs_compare_under_the_present_key_names():
    """A summary written with the flat IR keys (and a CR sweep in its string form) agrees
    with one written with the sectioned config; a changed value is still named."""
    from mechinterp_icr.config import to_dict
    from mechinterp_icr.experiments.cr.config import SweepSetting
    from mechinterp_icr.experiments.ir.config import FLAT_KEYS, QUICK

    new = to_dict(QUICK)
    flat = dict(settings(new))
    old = {next((o for o, n in FLAT_KEYS.items() if n == k), k): v for k, v in flat.items()}
    assert "sweep_n" in old and "sample_complexity.n" not in old
    assert compare({**_summary(), "config": old}, {**_summary(), "config": new}) == ([], [])
    moved = {**old, "ht_n": 64}
    _, diffs = compare({**_summary(), "config": moved}, {**_summary(), "config": new})
    assert [str(d) for d in diffs] == ["config.hooked.n: 64 -> 32"]
    s = "x|task.lam=0.5"
    assert settings({"sweep": [s]}) == {"sweep": [to_dict(SweepSetting.parse(s))]}


def test_one_target_only_and_code_revision_tables_skipped():
    a = {**_summary(), "claims": {"IR-3": _summary()["claims"]["IR-3"], "CR-1": {"mean": 1}}}
    b = {**a, "claims": {**a["claims"], "CR-1": {"mean": 2}}}
    assert compare(a, b, target="ir") == ([], [])
    assert [str(d) for d in compare(a, b, target="cr")[1]] == ["claims.CR-1.mean: 1 -> 2"]
    old = _summary()
    old["tables"]["ir: code revision of each task result"] = [{"code": "abc", "tasks": 3}]
    new = _summary()
    new["tables"]["ir: code revision of each job result"] = [{"code": "def", "jobs": 3}]
    assert compare(old, new) == ([], [])


def test_the_end_of_a_reproduction_names_verdicts_that_differ_on_this_machine(tmp_path):
    pub = tmp_path / "summary.json"
    pub.write_text(json.dumps({**_summary(), "target": "cr,ir"}))
    fresh = {**_summary(verdict="does not hold", mean=0.02), "target": "cr,ir"}
    lines = against_published(fresh, pub)
    assert lines == [f"IR-3: does not hold here; {pub}: holds (the verdict differs on this "
                     "machine)",
                     f"1 numbers and 0 other values differ from {pub} (numbers by more than "
                     "1e-09); 1 verdicts differ"]
    # one paper of a full published run is compared on that paper
    assert against_published({**fresh, "target": "ir"}, pub)[-1].endswith("1 verdicts differ")
    assert against_published({**_summary(), "target": "cr,ir"}, pub)[-1].startswith(
        f"0 numbers and 0 other values differ from {pub}")
    # another commit or rounding is named: the machine is not blamed for it
    moved = against_published({**fresh, "code_state": "def", "rounding": "avx2"}, pub)[0]
    assert "on this machine" not in moved
    assert "code state 'abc' there, 'def' here" in moved and "rounding 'native'" in moved
    # a value that became None is counted
    gone = {**_summary(per_seed={"0": {"gap": None}}), "target": "cr,ir"}
    assert "0 numbers and 1 other values differ" in against_published(gone, pub)[-1]
    # another seed set or profile is another reproduction: nothing to say
    assert against_published({**fresh, "seeds": [0, 1]}, pub) == []
    assert against_published({**fresh, "profile": "paper"}, pub) == []
    assert against_published(fresh, tmp_path / "absent.json") == []
