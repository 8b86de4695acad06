"""The analysis scripts as a user runs them: on a run of a task kind a script does not support
it exits with code 2 and one line naming the run's task kind and what the script supports
(no traceback); the scripts that apply to the run finish and write their table."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ICR = Path(sys.executable).parent / "icr"

# script -> the task kinds it supports (the others must be refused)
CR_ONLY = ["attention_roles", "circuits", "head_roles"]
IR_ONLY = ["ir_attention_rows", "ir_overwrite_rows"]


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analyses" / f"{name}.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("analyses") / "induction"
    res = subprocess.run(
        [str(ICR), "train", "--task", "induction", "--out", str(out),
         "--set", "train.steps=30", "--set", "train.progress=false",
         "--set", "train.checkpoint_schedule=linear", "--set", "train.checkpoint_every=15",
         "--set", "model.d_model=32", "--set", "model.n_heads=2", "--set", "model.d_head=16",
         "--set", "model.attn_only=true"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


def _refused(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


@pytest.mark.parametrize("name,supported", [(n, "cr") for n in CR_ONLY] +
                         [(n, "ir") for n in IR_ONLY])
def test_scripts_refuse_other_task_kinds(induction_run, name, supported):
    msg = _refused(_script(name, str(induction_run), "--checkpoints", "last"))
    assert f"{name}.py" in msg and f"supports {supported} runs" in msg
    assert "'induction'" in msg
    assert not (induction_run / "analyses" / f"{name}.json").exists()


def test_bad_run_and_selection_are_refused(induction_run, tmp_path):
    msg = _refused(_script("patching_sweep", str(tmp_path / "missing")))
    assert "does not exist" in msg
    msg = _refused(_script("patching_sweep", str(induction_run), "--checkpoints", "phase:nope"))
    assert "phase:nope" in msg and "checkpoint" in msg


@pytest.mark.parametrize("name", ["patching_heatmap", "patching_sweep"])
@pytest.mark.parametrize("args,value", [(["--n-resamples", "-3"], "-3"),
                                        (["--n-resamples=0"], "0"),
                                        (["--n-resamples", "many"], "'many'"),
                                        (["--bootstrap-seed", "-1"], "-1")])
def test_bad_bootstrap_options_are_one_line(induction_run, name, args, value):
    msg = _refused(_script(name, str(induction_run), *args))
    assert args[0].split("=")[0] in msg and value in msg, msg
    if value not in ("'many'",):
        assert "expected an integer in [" in msg


def test_patching_sweep_runs_on_induction(induction_run):
    res = _script("patching_sweep", str(induction_run), "--checkpoints", "first,last",
                  "--n", "4", "--seed", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads((induction_run / "analyses" / "patching_sweep.json").read_text())
    assert {r["checkpoint"] for r in rows} == {"train-0000000", "train-0000030"}
    assert {"layer", "pos", "head", "recovery", "attribution_recovery"} <= set(rows[0])


def test_a_damaged_checkpoint_met_during_the_analysis_is_one_line(induction_run, tmp_path):
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(induction_run, run)
    weights = sorted((run / "checkpoints").glob("*.safetensors"))[-1]
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: found when it is loaded
    msg = _refused(_script("patching_sweep", str(run), "--checkpoints", "last", "--n", "4"))
    assert weights.stem in msg


SCRIPTS = sorted(p for d in ("analyses", "probes") for p in (ROOT / d).glob("*.py")
                 if not p.name.startswith("_"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_help_needs_no_heavy_import(path, tmp_path):
    """--help parses before the package (torch, TransformerLens) is imported: a torch that
    cannot be imported does not stop it, and the description is whole."""
    (tmp_path / "torch.py").write_text("raise ImportError('torch must not load for --help')\n")
    res = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={"PYTHONPATH": str(tmp_path),
                                                    "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-1500:]
    first = (ROOT / path).read_text().split('"""')[1].strip().split("\n\n")[0]
    assert " ".join(first.split())[:60] in " ".join(res.stdout.split())


def test_tables_have_full_names_csv_and_gap_guards(induction_run, tmp_path):
    csv = tmp_path / "sweep.csv"
    res = _script("patching_sweep", str(induction_run), "--checkpoints", "all", "--n", "4",
                  "--csv", str(csv), "--min-gap", "1000")
    assert res.returncode == 0, res.stderr[-2000:]
    header = res.stdout.splitlines()[0]
    assert "LD gap (clean LD - corrupted LD)" in header
    assert "attribution patching recovery" in header
    lines = csv.read_text().splitlines()
    from mechinterp_icr.interp.lens import PATCHING_COLUMNS

    # patching_heatmap.py's columns, then the attribution estimate
    assert lines[0] == ",".join(_quoted(h) for h in PATCHING_COLUMNS.values()) \
        + ",attribution patching recovery"
    assert lines[0].startswith("checkpoint,step,layer,head,position,token (first clean prompt),")
    rows = json.loads((induction_run / "analyses" / "patching_sweep.json").read_text())
    assert len(lines) == 1 + len(rows) and len({r["checkpoint"] for r in rows}) == 3
    # every gap is below 1000: no recovery, no interval (the p-value of the effect stays)
    assert all(ln.count(",n/a") == 4 for ln in lines[1:])
    assert all(isinstance(r["recovery"], float) and r["lo"] <= r["hi"] for r in rows)


def _quoted(header: str) -> str:
    """A CSV header cell as the csv module writes it."""
    return f'"{header}"' if "," in header else header


@pytest.mark.slow
def test_cr_scripts_run_on_a_cr_run(tmp_path):
    run = tmp_path / "cr"
    res = subprocess.run(
        [str(ICR), "train", "--task", "cr", "--out", str(run), "--phase", "pretrain",
         "--set", "train.steps=6", "--set", "train.progress=false",
         "--set", "train.checkpoint_schedule=linear", "--set", "train.checkpoint_every=3",
         "--set", "task.n_subjects=8", "--set", "task.n_types=2", "--set", "task.n_values=4",
         "--set", "task.n_grammar=4", "--set", "task.n_tuples=2", "--set", "task.n_demos=2",
         "--set", "task.max_demos=3", "--set", "model.d_model=16", "--set", "model.d_head=16"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    for name, extra in [("head_roles", ["--n", "8"]), ("attention_roles", ["--n", "8"]),
                        ("circuits", ["--n", "8"]), ("construction", [])]:
        csv = tmp_path / f"{name}.csv"
        res = _script(name, str(run), "--checkpoints", "all", "--csv", str(csv), *extra)
        assert res.returncode == 0, (name, res.stderr[-2000:])
        assert csv.exists() and len(csv.read_text().splitlines()) >= 2
    roles = json.loads((run / "analyses" / "head_roles.json").read_text())
    assert [r["checkpoint"] for r in roles] == ["pretrain-0000000", "pretrain-0000003",
                                                "pretrain-0000006"]
    assert {"type_gap", "subject_gap"} <= set(roles[0])
    sims = json.loads((run / "analyses" / "construction_checkpoints.json").read_text())
    assert {r["checkpoint"] for r in sims} == {r["checkpoint"] for r in roles}  # honoured


# --- the circuit tools (logit lens, DLA, patching heatmap, path patching) on CR, IR, induction
CIRCUIT = {"logit_lens": "answer probability", "dla": "direct attribution to the answer logit",
           "patching_heatmap": "exact patching recovery", "path_patching": "path patching recovery"}


@pytest.fixture(scope="module")
def cr_run(tmp_path_factory):
    from helpers import CR_TINY

    out = tmp_path_factory.mktemp("circuit") / "cr"
    sets = [x for item in CR_TINY if item.startswith(("task.", "model.")) for x in ("--set", item)]
    res = subprocess.run(
        [str(ICR), "train", "--task", "cr", "--out", str(out), "--phase", "pretrain", *sets,
         "--set", "train.steps=20", "--set", "train.checkpoint_every=10"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def ir_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("circuit") / "ir"
    res = subprocess.run([str(ICR), "train", "--task", "ir", "--out", str(out), "--phase",
                          "raw-pgd", "--set", "hooked.steps=6", "--set", "hooked.n=16", "--set",
                          "hooked.eval=64", "--set", "hooked.N=32"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


# the CR run in the default suite; IR and induction (the same scripts, 8 more subprocesses of
# 10-20 s each) in the slow step
@pytest.mark.parametrize("kind", ["cr", pytest.param("ir", marks=pytest.mark.slow),
                                  pytest.param("induction", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", list(CIRCUIT))
def test_circuit_scripts_write_table_png_and_html(request, tmp_path, kind, name):
    import os

    from mechinterp_icr.viz.figures import chromium_path

    run = request.getfixturevalue(f"{kind}_run")
    env = {k: v for k, v in os.environ.items() if k != "MECHINTERP_ICR_NO_PNG"}
    csv = tmp_path / f"{name}.csv"
    res = subprocess.run([sys.executable, str(ROOT / "analyses" / f"{name}.py"), str(run),
                          "--checkpoints", "first,last", "--n", "8", "--csv", str(csv),
                          # draw the CR heatmaps although 20 steps barely tell the pairs apart
                          *(["--min-gap=-1e9"] if kind == "cr" and "patching" in name else []),
                          *(["--track", "L0H0@1,L1H0@2"]
                            if name == "patching_heatmap" and kind == "cr" else [])],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert CIRCUIT[name] in res.stdout.splitlines()[0]  # full column names
    lines = csv.read_text().splitlines()
    rows = json.loads((run / "analyses" / f"{name}.json").read_text())
    assert len(lines) == 1 + len(rows) and len({r["checkpoint"] for r in rows}) == 2
    html = run / "analyses" / f"{name}.html"
    assert html.exists() and (run / "analyses" / "plotly.min.js").exists()
    if name in ("patching_heatmap", "path_patching"):
        assert '"sliders"' in html.read_text()  # the slider over checkpoints
    if name == "patching_heatmap":
        _heatmap_has_intervals(html.read_text(), csv, rows, -1e9 if kind == "cr" else 0.5)
        if kind == "cr":  # the 2-layer CR run has the cells --track names
            _tracked_cells_are_drawn_against_step(run, rows, -1e9)
    if chromium_path():  # kaleido writes PNGs only with a system Chromium
        assert (run / "analyses" / f"{name}.png").stat().st_size > 1000
    if name in ("logit_lens", "dla"):  # the metric against training step, phases in sequence
        steps = run / "analyses" / f"{name}_steps"
        text = steps.with_suffix(".html").read_text()
        assert "against training step" in text and "phases in sequence" in text
        assert f"run {run.name}, first,last (2 checkpoints)" in text  # run and checkpoints
        if chromium_path():
            from PIL import Image

            png = Image.open(steps.with_suffix(".png")).convert("RGB")
            assert png.size[0] >= 1000 and len(png.getcolors(1 << 20)) > 20  # not blank


def _tracked_cells_are_drawn_against_step(run: Path, rows: list[dict], min_gap: float) -> None:
    """--track L0H0@1,L1H0@2: per cell a recovery line over the checkpoints whose gap is at
    least ``min_gap``, with the rows' numbers, and its interval as a band."""
    traces = _plotly_traces((run / "analyses" / "patching_heatmap_steps.html").read_text())
    lines = [t for t in traces if t.get("mode") == "lines+markers"]
    bands = [t for t in traces if t.get("fill") == "toself"]
    for cell, (head, pos) in zip(("L0H0@1", "L1H0@2"), (("L0H0", 1), ("L1H0", 2))):
        want = [r for r in rows if r["head_name"] == head and r["pos"] == pos
                and r["gap"] >= min_gap]
        line = [t for t in lines if t["name"].startswith(cell)]
        if not want:
            assert not line
            continue
        assert len(line) == 1 and line[0]["y"] == pytest.approx([r["recovery"] for r in want])
    assert len(bands) == len(lines)
    for value in ("L0H7@1", "L0H0@x"):  # no such head; not a cell (unit tests: the rest)
        bad = _script("patching_heatmap", str(run), "--track", value)
        assert bad.returncode == 2 and f"--track = {value!r} is not allowed" in bad.stderr


def _plotly_traces(html: str) -> list[dict]:
    """The traces of the figure an HTML page from ``fig.to_html`` draws (its JSON)."""
    start = html.index("Plotly.newPlot(")
    at = html.index("[", html.index(",", start))
    return json.JSONDecoder().raw_decode(html, at)[0]


def _heatmap_has_intervals(html: str, csv_path: Path, rows: list[dict], min_gap: float) -> None:
    """The heatmap's HTML hovers each cell's interval and p-value (its customdata, the
    JSON's lo, hi, p_sign; none where the gap is below ``min_gap``), and its CSV has the lo,
    hi and p columns with the JSON's numbers (n/a where the gap is below ``min_gap``)."""
    import csv

    from mechinterp_icr.interp.lens import PATCHING_COLUMNS

    traces = _plotly_traces(html)
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    assert len(traces) == len(names)  # one per checkpoint, the slider's
    for trace, name in zip(traces, names):
        assert "95% interval [%{customdata[0]:.3f}, %{customdata[1]:.3f}]" in \
            trace["hovertemplate"] and "sign-flip p = %{customdata[2]" in trace["hovertemplate"]
        for r in (r for r in rows if r["checkpoint"] == name):
            yi, xi = trace["y"].index(r["head_name"]), r["pos"]
            if r["gap"] < min_gap:
                assert trace["customdata"][yi][xi] == [None] * 3 and trace["z"][yi][xi] is None
                continue
            assert trace["customdata"][yi][xi] == pytest.approx([r["lo"], r["hi"],
                                                                 r["p_sign"]])
            assert trace["z"][yi][xi] == pytest.approx(r["recovery"])
    assert all(c[1] >= c[0] for row in traces[-1]["customdata"] for c in row
               if c[0] is not None)
    with open(csv_path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == list(PATCHING_COLUMNS.values())
    at = {k: table[0].index(v) for k, v in PATCHING_COLUMNS.items()}
    assert table[0][at["lo"]] == "lo (95% bootstrap)" and table[0][at["hi"]] == \
        "hi (95% bootstrap)"
    for line, r in zip(table[1:], rows):
        assert float(line[at["p_sign"]]) == pytest.approx(r["p_sign"])
        keys = ("recovery", "lo", "hi")
        if r["gap"] < min_gap:
            assert [line[at[k]] for k in keys] == ["n/a"] * 3
            continue
        assert [float(line[at[k]]) for k in keys] == pytest.approx([r[k] for k in keys])
        assert float(line[at["lo"]]) <= float(line[at["hi"]])


def test_ov_qk_draws_the_circuit_blocks_of_one_head(cr_run):
    """analyses/ov_qk.py: the OV blocks (attribute and subject rows), the token QK block and
    the position QK block of one head, each the head's matrices restricted to the task's token
    groups with rows centred; keys after the query masked in the position block."""
    import math
    import os

    import torch

    import mechinterp_icr as mi
    from mechinterp_icr.interp.circuits import circuit_blocks
    from mechinterp_icr.viz.figures import chromium_path

    env = {k: v for k, v in os.environ.items() if k != "MECHINTERP_ICR_NO_PNG"}
    res = subprocess.run([sys.executable, str(ROOT / "analyses" / "ov_qk.py"), str(cr_run),
                          "--head", "L1H0", "--checkpoints", "first,last"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads((cr_run / "analyses" / "ov_qk.json").read_text())
    blocks_drawn = ["OV attribute -> attribute", "OV subject -> attribute",
                    "QK subject query x key token", "QK positions"]
    assert [r["block"] for r in rows] == blocks_drawn * 2  # first, then last checkpoint
    assert 0 <= rows[0]["ov_top1"] <= 1
    first, last = rows[0]["checkpoint"], rows[-1]["checkpoint"]
    assert first != last
    stem = cr_run / "analyses" / f"ov_qk-{last}-L1H0"
    assert stem.with_suffix(".html").exists()
    if chromium_path():
        assert stem.with_suffix(".png").stat().st_size > 1000
    # one page per head with a slider over both checkpoints, opening on the last
    page = (cr_run / "analyses" / "ov_qk-L1H0-checkpoints.html").read_text()
    shown = re.findall(r'"visible":(true|false)', page)  # per trace (steps hold lists)
    assert shown == ["false"] * 4 + ["true"] * 4
    assert f'"label":"{first}"' in page and f'"label":"{last}"' in page

    model, task = mi.load(cr_run)
    blocks = {b["name"]: b for b in circuit_blocks(model, task, 1, 0)}
    a = model.blocks[1].attn
    attrs = torch.as_tensor(task.attr_ids)
    ov = (model.W_E[attrs] @ a.W_V[0] @ a.W_O[0] @ model.W_U[:, attrs]).detach()
    ov = ov - ov.mean(-1, keepdim=True)
    got = torch.tensor(blocks["OV attribute -> attribute"]["z"])
    assert torch.allclose(got, ov, atol=1e-5)
    assert [g for g, _, _ in blocks["OV attribute -> attribute"]["col_groups"]] == \
        [f"type {i}" for i in range(task.cfg.n_types)]
    pos = blocks["QK positions"]["z"]
    n = len(pos)
    assert n == model.cfg.n_ctx
    assert all(math.isnan(pos[i][j]) for i in range(n) for j in range(i + 1, n))
    assert all(abs(sum(pos[i][: i + 1])) < 1e-4 for i in range(n))  # rows centred
    r = _script("ov_qk", str(cr_run), "--head", "L7H0")
    assert r.returncode == 2 and "--head = 'L7H0' is not allowed" in r.stderr


def test_ir_row_figure_puts_phases_in_sequence_with_the_ideal_row(ir_run):
    """analyses/ir_attention_rows.py: one line per row position across both phases (the large
    step, then PGD, in sequence), and the ideal row drawn and labelled."""
    res = _script("ir_attention_rows", str(ir_run), "--checkpoints", "all", "--n-eval", "32")
    assert res.returncode == 0, res.stderr[-2000:]
    html = (ir_run / "analyses" / "ir_attention_rows.html").read_text()
    names = re.findall(r'"name":"([^"]+)"', html)
    assert [n for n in names if n in ("s1", "a1", "s2", "a2", "s_q")] == \
        ["s1", "a1", "s2", "a2", "s_q"]  # one trace per position, not one per phase
    assert "phases in sequence" in html and "ideal s_q: 0" in html
    assert "ideal s1, a1: a = " in html
