"""TransformerLens 4 users (issue 40): ``scripts/tl4_load.py`` loads this project's CR,
mechanism and IR checkpoints into a ``TransformerBridge`` whose logits and cached activations
equal TL 3.9's ``HookedTransformer`` (``mi.load``, in this venv) to 1e-6, except
``hook_attn_scores`` (the bridge stores the post-softmax pattern there, which the loader warns
about once: the difference is asserted to be real).

Slow (``make test-slow`` or ``pytest -m slow tests/slow/test_tl4_loader.py``). TransformerLens 4
cannot share a venv with the project's TL 3.9, so the test builds one once, at ``.venv-tl4/`` in
the repository root (git-ignored, about 1.6 GB, 1-2 minutes from pip's cache), with
``torch==2.13.0+cpu`` (the CPU wheel kept on this machine's disk: an open ``torch``
requirement would download the multi-GB CUDA build; the local version label makes pip fail
rather than fetch another build), ``transformer-lens==4.3.0`` and ``safetensors``. It is not
made with ``--system-site-packages``: the base interpreter has no torch, and .venv's packages
(TL 3.9 among them) are not system packages, so that option would share nothing useful. A
stamp file holding the pins marks a finished build; a changed pin or an interrupted build is
rebuilt from scratch. Without the venv and without PyPI the test skips, saying why. After the
venv exists it runs in about a minute (three tiny trainings, one TL 4 process, the CLI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "tl4_load.py"
VENV = REPO / ".venv-tl4"
TL4_VERSION = "4.3.0"
PINS = {"torch": "2.13.0+cpu", "transformer-lens": TL4_VERSION, "safetensors": "0.8.0"}
STAMP = VENV / "tl4-stamp.json"
TOL = 1e-6

# the three kinds of checkpoint, trained through the CLI with the tiny preset and the fewest
# steps that still move every weight (Adam): run name -> (icr train items, checkpoint phase)
RUNS = {
    "cr": (["--task", "cr", "--phase", "pretrain", "--preset", "tiny",
            "--set", "train.steps=20", "--set", "train.checkpoint_every=20"], "pretrain"),
    "mechanism": (["--task", "cr", "--phase", "mech-pretrain", "--preset", "tiny",
                   "--set", "cascade.pt_steps=20"], "pretrain"),
    "ir": (["--task", "ir", "--phase", "sym-pgd", "--preset", "tiny"], "pgd"),
}


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _tail(res: subprocess.CompletedProcess) -> str:
    return (res.stdout + res.stderr)[-1500:]


def _pypi_or_skip() -> None:
    """Skip unless pip's index answers with TransformerLens 4 (short timeouts, no retries)."""
    try:
        res = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformer-lens",
                              "--timeout", "15", "--retries", "0"], capture_output=True,
                             text=True, timeout=120, env=_pip_env())
    except subprocess.TimeoutExpired:
        pytest.skip("PyPI cannot be reached (pip index timed out); the TL 4 venv "
                    f"{VENV} cannot be built")
    if res.returncode != 0 or TL4_VERSION not in res.stdout:
        last = (res.stderr.strip().splitlines() or ["no answer"])[-1]
        pytest.skip(f"PyPI cannot be reached or lacks transformer-lens {TL4_VERSION} "
                    f"({last[:200]}); the TL 4 venv {VENV} cannot be built")


def _build_venv() -> None:
    if VENV.exists():
        shutil.rmtree(VENV)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    res = subprocess.run(pip + [f"torch=={PINS['torch']}"], capture_output=True, text=True,
                         timeout=1800, env=_pip_env())
    if res.returncode != 0:
        shutil.rmtree(VENV)
        pytest.skip(f"torch {PINS['torch']} (the CPU wheel) cannot be installed here; not "
                    f"fetching another build: {_tail(res)[-300:]}")
    res = subprocess.run(pip + [f"torch=={PINS['torch']}",
                                f"transformer-lens=={PINS['transformer-lens']}",
                                f"safetensors=={PINS['safetensors']}"],
                         capture_output=True, text=True, timeout=3600, env=_pip_env())
    if res.returncode != 0:
        shutil.rmtree(VENV)
        pytest.fail(f"installing TransformerLens {TL4_VERSION} into {VENV} failed:\n"
                    f"{_tail(res)}")
    STAMP.write_text(json.dumps(PINS, sort_keys=True))


@pytest.fixture(scope="module")
def tl4_python() -> Path:
    """The TL 4 venv's interpreter, built once (see the module's doc)."""
    py = VENV / "bin" / "python"
    fresh = py.exists() and STAMP.exists() and json.loads(STAMP.read_text()) == PINS
    if not fresh:
        _pypi_or_skip()
        _build_venv()
    return py


def _tl4_env(home: Path) -> dict[str, str]:
    """A bare environment: nothing of this venv (or the network) reaches the TL 4 process."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One checkpoint stem of each kind (the last of its phase), trained by ``icr train``."""
    root = tmp_path_factory.mktemp("tl4")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    stems = {}
    for name, (items, phase) in RUNS.items():
        res = subprocess.run([sys.executable, "-m", "mechinterp_icr.cli", "train",
                              "--out", str(root / name), *items], capture_output=True,
                             text=True, timeout=600, env=env, cwd=root)
        assert res.returncode == 0, _tail(res)
        sides = sorted((root / name / "checkpoints").glob(f"{phase}-*.json"))
        assert sides, f"no {phase} checkpoint in {root / name}"
        stems[name] = sides[-1].with_suffix("")
    return stems


DRIVER = textwrap.dedent('''
    import importlib.metadata as md, importlib.util, json, sys, warnings
    import torch
    from safetensors.torch import save_file
    sys.path.insert(0, sys.argv[2])
    import tl4_load

    jobs = json.load(open(sys.argv[1]))
    info = {"transformer_lens": md.version("transformer_lens"), "torch": torch.__version__,
            "mechinterp_icr_findable": importlib.util.find_spec("mechinterp_icr") is not None,
            "b_U_parameter": {}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for job in jobs:
            bridge = tl4_load.load_bridge(job["stem"])
            info["b_U_parameter"][job["name"]] = any(
                "unembed" in n and n.endswith("bias") for n, _ in bridge.named_parameters())
            with torch.no_grad():
                logits, cache = bridge.run_with_cache(torch.tensor(job["tokens"]))
            out = {"logits": logits.clone()}
            out.update({k: v.detach().clone().contiguous() for k, v in cache.items()})
            save_file(out, job["out"])
    info["attn_scores_warnings"] = sum("hook_attn_scores" in str(w.message) for w in caught)
    info["mechinterp_icr_imported"] = any(m.startswith("mechinterp_icr") for m in sys.modules)
    print(json.dumps(info))
''')


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    assert torch.equal(torch.isfinite(a), torch.isfinite(b))
    fin = torch.isfinite(a)
    return float((a - b)[fin].abs().max()) if fin.any() else 0.0


def test_tl4_bridge_equals_tl39(tl4_python, checkpoints, tmp_path):
    from safetensors.torch import load_file

    import mechinterp_icr as mi

    jobs, ref = [], {}
    for name, stem in checkpoints.items():
        model, _ = mi.load(stem.parent.parent, stem.name, device="cpu")
        gen = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, model.cfg.d_vocab, (4, model.cfg.n_ctx), generator=gen)
        with torch.no_grad():
            logits, cache = model.run_with_cache(tokens)
        ref[name] = {"logits": logits, **dict(cache.items())}
        jobs.append({"name": name, "stem": str(stem), "tokens": tokens.tolist(),
                     "out": str(tmp_path / f"{name}.safetensors")})
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "driver.py").write_text(DRIVER)
    res = subprocess.run([str(tl4_python), str(tmp_path / "driver.py"),
                          str(tmp_path / "jobs.json"), str(SCRIPT.parent)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=_tl4_env(tmp_path))
    assert res.returncode == 0, _tail(res)
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["transformer_lens"] == TL4_VERSION
    assert not info["mechinterp_icr_findable"] and not info["mechinterp_icr_imported"]
    assert info["attn_scores_warnings"] == 1  # once per process, for three loads
    assert not any(info["b_U_parameter"].values())  # b_U is a buffer on the bridge

    summary = []
    for name in checkpoints:
        ours, theirs = ref[name], load_file(tmp_path / f"{name}.safetensors")
        missing = sorted(set(ours) - set(theirs))
        assert not missing, f"{name}: hooks TL 3.9 caches but the bridge does not: {missing}"
        scores = [k for k in ours if k.endswith("hook_attn_scores")]
        assert scores  # every attention layer has one
        diffs = {k: _max_diff(ours[k], theirs[k]) for k in ours if k not in scores}
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] <= TOL, f"{name}: {worst} differs by {diffs[worst]:.3g}"
        assert len(diffs) >= 10  # logits and the activations of every layer
        for k in scores:  # the bridge's hook_attn_scores is TL 3.9's pattern, not its scores
            pattern = k.replace("hook_attn_scores", "hook_pattern")
            assert _max_diff(ours[pattern], theirs[k]) <= TOL
            assert not torch.isfinite(ours[k]).all()  # TL 3.9 masks scores with -inf
            fin = torch.isfinite(ours[k])
            assert float((ours[k][fin] - theirs[k][fin]).abs().max()) > 0.1
        summary.append(f"{name}: {len(diffs)} tensors, logits max|diff| "
                       f"{diffs['logits']:.3g}, all max|diff| {diffs[worst]:.3g}")
    print("; ".join(summary))


def test_tl4_load_command_line(tl4_python, checkpoints, tmp_path):
    env = _tl4_env(tmp_path)

    def run(*args):
        return subprocess.run([str(tl4_python), str(SCRIPT), *map(str, args)],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env=env)

    for name, stem in checkpoints.items():  # STEM, STEM.json and STEM.safetensors all load
        path = {"cr": stem, "mechanism": stem.with_suffix(".json"),
                "ir": stem.with_suffix(".safetensors")}[name]
        res = run(path)
        assert res.returncode == 0, _tail(res)
        n_ctx = json.loads(stem.with_suffix(".json").read_text())[
            "hooked_transformer_config"]["n_ctx"]
        assert f"logits shape (1, {n_ctx}, " in res.stdout
        assert "hook_attn_scores" in res.stderr  # the one warning
    weights_only = tmp_path / "w"
    weights_only.mkdir()
    shutil.copy(checkpoints["cr"].with_suffix(".json"), weights_only / "a.json")
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"step": 3}))
    bad_weights = tmp_path / "bad"
    bad_weights.mkdir()
    shutil.copy(checkpoints["cr"].with_suffix(".json"), bad_weights / "b.json")
    (bad_weights / "b.safetensors").write_bytes(b"not safetensors")
    wrong = tmp_path / "wrong"  # the IR weights under the CR sidecar
    wrong.mkdir()
    shutil.copy(checkpoints["cr"].with_suffix(".json"), wrong / "c.json")
    shutil.copy(checkpoints["ir"].with_suffix(".safetensors"), wrong / "c.safetensors")
    for path in (tmp_path / "missing", tmp_path / "garbage.json", tmp_path / "other",
                 tmp_path, weights_only / "a", bad_weights / "b", wrong / "c"):
        res = run(path)
        assert res.returncode == 2, (path, _tail(res))
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (path, res.stderr)
        assert str(path) in lines[0] and "Traceback" not in res.stderr
        assert res.stdout == ""
