"""mechinterp_icr.load: a checkpoint as a HookedTransformer with the task's tokenizer; the
sidecar's HookedTransformerConfig loads the weights with plain TransformerLens."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import mechinterp_icr as mi
from mechinterp_icr.config import ConfigError
from mechinterp_icr.pipeline import resolve_run_config, train_single_phase
from mechinterp_icr.store.rundir import RunDir, RunError

TINY = ["train.steps=6", "train.batch_size=8", "train.progress=false",
        "train.checkpoint_schedule=linear", "train.checkpoint_every=3", "model.n_layers=1",
        "model.d_model=16", "model.d_head=8", "model.n_heads=2", "model.d_mlp=32"]


@pytest.fixture(scope="module")
def cr_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "run"
    cfg = resolve_run_config("cr", 0, TINY + ["task.n_subjects=8", "task.n_types=2",
                                              "task.n_values=4", "task.n_grammar=4",
                                              "task.n_tuples=2", "task.n_demos=2",
                                              "task.max_demos=3"])
    train_single_phase(cfg, out, phase="pretrain")
    train_single_phase(cfg, out, phase="ft-icl-allw")
    return out


def test_load_returns_a_hooked_transformer_with_the_task_tokenizer(cr_run):
    from transformer_lens import HookedTransformer

    model, task = mi.load(cr_run)
    assert isinstance(model, HookedTransformer)
    assert model.cfg.model_name == "pretrain-0000006"  # the all-weights arm is never default
    assert not model.training
    b = task.sample_icl(np.random.default_rng(0), 2)
    toks = b.tokens[0]
    assert model.to_str_tokens(toks) == task.vocab.tokens(toks.tolist())
    text = task.vocab.decode(toks.tolist())
    assert torch.equal(model.to_tokens(text)[0].cpu(), toks)
    assert model.to_string(toks) == text
    logits, cache = model.run_with_cache(text)
    assert logits.shape == (1, toks.numel(), model.cfg.d_vocab)
    assert "blocks.0.attn.hook_pattern" in cache
    padded = model.to_tokens([text, " ".join(text.split()[:3])])
    assert padded.shape == (2, toks.numel())
    with pytest.raises(ValueError, match="not in the vocabulary"):
        model.to_tokens("[BOS] NOT_A_TOKEN")


def test_load_selects_checkpoints(cr_run):
    assert mi.load(cr_run, phase="ft-icl-allw")[0].cfg.model_name == "ft-icl-allw-0000006"
    assert mi.load(cr_run, 3, phase="pretrain")[0].cfg.model_name == "pretrain-0000003"
    assert mi.load(cr_run, "first")[0].cfg.model_name == "pretrain-0000000"
    assert mi.load(cr_run, "ft-icl-allw-0000003")[0].cfg.model_name == "ft-icl-allw-0000003"
    with pytest.raises(RunError, match="exactly one"):
        mi.load(cr_run, "all")
    with pytest.raises(RunError, match="phases here"):
        mi.load(cr_run, phase="nope")
    with pytest.raises(ConfigError, match="needs a phase"):
        mi.load(cr_run, 3)
    with pytest.raises(RunError, match="no checkpoint at that step"):
        mi.load(cr_run, 5, phase="pretrain")


def _readme_loader() -> str:
    """The TransformerLens-only loading code README.md shows, with its example stem replaced by
    the script's first argument and a forward pass on the tokens of the second appended."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split("<!-- tl-only-loading:begin -->")[1].split("<!-- tl-only-loading:end -->")[0]
    code = block.split("```python")[1].split("```")[0]
    assert re.search(r"^stem = .*$", code, flags=re.M), "README's snippet names no stem"
    code = re.sub(r"^stem = .*$", "stem = sys.argv[1]", code, flags=re.M)
    return "import sys\n" + code + textwrap.dedent('''
        tokens = torch.tensor(json.load(open(sys.argv[2])))
        with torch.no_grad():
            torch.save(model(tokens), sys.argv[3])
        print("package imported:", any(m.startswith("mechinterp_icr") for m in sys.modules))
    ''')


def test_plain_transformer_lens_loads_a_checkpoint(cr_run, tmp_path):
    ck = RunDir(cr_run).select("phase:pretrain:last")[0]
    model, task = mi.load(cr_run, phase="pretrain")
    tokens = task.sample(np.random.default_rng(1), 3).tokens
    (tmp_path / "tokens.json").write_text(json.dumps(tokens.tolist()))
    (tmp_path / "load.py").write_text(_readme_loader())
    res = subprocess.run([sys.executable, str(tmp_path / "load.py"), str(ck.stem),
                          str(tmp_path / "tokens.json"), str(tmp_path / "logits.pt")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                              "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "package imported: False" in res.stdout
    plain = torch.load(tmp_path / "logits.pt", weights_only=True)
    with torch.no_grad():
        ours = model(tokens.to(next(model.parameters()).device)).cpu()
    assert torch.allclose(plain, ours, atol=1e-5)


def test_old_checkpoint_without_the_config_still_loads(cr_run, tmp_path):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(cr_run, copy)
    for side in (copy / "checkpoints").glob("*.json"):
        meta = json.loads(side.read_text())
        meta.pop("hooked_transformer_config")
        side.write_text(json.dumps(meta))
    model, _ = mi.load(copy, phase="pretrain")
    assert model.cfg.model_name == "pretrain-0000006"


@pytest.mark.parametrize("module", [
    "mechinterp_icr",
    # deciding from stored measurements (icr redecide, icr check) reads JSON only
    "mechinterp_icr.claims.redecide",
    "mechinterp_icr.claims.check",
    "mechinterp_icr.store.io",
    "mechinterp_icr.jobs",
])
def test_the_package_root_and_the_decision_layer_stay_light(module):
    code = (f"import sys, {module}; "
            "print('transformer_lens' in sys.modules, 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parent, timeout=120)
    assert res.stdout.split() == ["False", "False"], res.stderr


def test_generate_works_with_default_arguments(cr_run):
    """No task vocabulary has an end token: generate runs to max_new_tokens without being
    told stop_at_eos=False, on a string (the prompt and the new tokens, by name, [BOS] kept)
    and on a token tensor (the tokens)."""
    model, task = mi.load(cr_run)
    assert model.tokenizer.eos_token_id is None
    prompt = "[BOS] S1 A0_3 [SEP] S2"
    text = model.generate(prompt, max_new_tokens=3)
    assert isinstance(text, str) and text.startswith(prompt + " ")
    assert len(text.split()) == 5 + 3 and all(t in task.vocab.index for t in text.split())
    tokens = model.to_tokens(prompt)
    out = model.generate(tokens, max_new_tokens=3)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 5 + 3)
    assert torch.equal(out[:, :5], tokens)
    # greedy: the next token is the forward pass's argmax; a batch (left-padded with [PAD],
    # masked) gives each prompt what it gives alone; an explicit eos_token_id still stops
    greedy = dict(do_sample=False, verbose=False)
    with torch.no_grad():
        top = int(model(tokens)[0, -1].argmax())
    assert int(model.generate(tokens, 1, **greedy)[0, -1]) == top
    assert model.generate(prompt, 1, **greedy).split()[-1] == task.vocab.names[top]
    alone = [model.generate(p, 3, **greedy) for p in (prompt, "[BOS] S2")]
    assert model.generate([prompt, "[BOS] S2"], 3, **greedy) == alone
    assert model.generate(prompt, 3, return_type="tokens", **greedy).shape == (1, 8)
    stopped = model.generate(prompt, 3, eos_token_id=top, **greedy)
    assert stopped == prompt + " " + task.vocab.names[top]
    streamed = list(model.generate_stream(tokens, max_new_tokens=2, verbose=False))
    assert streamed[-1].shape == (1, 5 + 2)  # one yield: the prompt and 2 tokens


def test_generate_on_a_vocabulary_without_a_pad_token():
    """IR has no [PAD]: token 0 is subject S0, so pad_token_id is -1 and a prompt that ends
    with S0 is not masked as padding (TransformerLens masks ids equal to pad_token_id)."""
    from mechinterp_icr.api import attach_tokenizer
    from mechinterp_icr.pipeline import model_for_task

    cfg = resolve_run_config("ir", 0, ["model.n_layers=1", "model.d_model=16",
                                       "model.d_head=8", "model.n_heads=2", "model.d_mlp=32"])
    task = cfg.task.build(cfg.seed)
    model = attach_tokenizer(model_for_task(cfg), task)
    tok = model.tokenizer
    assert tok.pad_token is None and tok.pad_token_id == -1 and tok.eos_token_id is None
    assert tok.decode([0, 1], skip_special_tokens=True) == "S0 S1"
    tokens = torch.tensor([[5, int(task.ans_ids[0]), 0]])
    with torch.no_grad():
        top = int(model(tokens)[0, -1].argmax())
    assert int(model.generate(tokens, 1, do_sample=False, verbose=False)[0, -1]) == top
    assert model.generate(tok.decode(tokens[0]), 2).startswith("S5 A0 S0 ")
    assert model.to_tokens(["S1 S2", "S1"])[1].tolist() == [1, 0]  # padded with token 0
    with pytest.raises(ValueError, match="no pad token"):
        model.generate(["S1 S2", "S1"], 1)
