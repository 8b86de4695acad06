import re

import pytest

from mechinterp_icr.pipeline import resolve_run_config, train_single_phase
from mechinterp_icr.viz.views import BUNDLE_NAME, view_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("viewrun") / "run"
    cfg = resolve_run_config("induction", 0, ["train.steps=20", "train.progress=false",
                                              "train.checkpoint_schedule=linear",
                                              "train.checkpoint_every=10", "train.eval_every=0",
                                              "model.attn_only=true", "model.d_model=16",
                                              "model.d_head=8", "model.n_heads=2",
                                              "task.half_len=5"])
    train_single_phase(cfg, out)
    return out


def test_view_is_offline_and_readable(run_dir):
    path = view_run(run_dir, "last", example=2)
    text = path.read_text()
    assert not re.search(r"unpkg|jsdelivr|http", text)
    assert f'<script src="{BUNDLE_NAME}">' in text
    bundle = path.parent / BUNDLE_NAME
    assert bundle.exists() and bundle.stat().st_size > 100_000
    assert "CircuitsVis" in bundle.read_text()[:200]
    assert not re.search(r"unpkg|jsdelivr", bundle.read_text())
    assert '"[BOS]"' in text and '"T' in text  # readable token strings
    # the head names reach the prop circuitsvis' AttentionHeads reads (not "Head 0, Head 1")
    assert '"attentionHeadNames": ["L0H0", "L0H1", "L1H0", "L1H1"]' in text
    # the correct answer is shown beside the prediction, with both probabilities
    assert re.search(r"prediction at the last position: T\d+ \(p = [0-9.]+\); correct answer: "
                     r"T\d+ \(p = [0-9.]+, (right|wrong)\)", text)


def test_view_prompt_and_errors(run_dir, tmp_path):
    from mechinterp_icr.config import ConfigError
    from mechinterp_icr.store.rundir import RunError

    p = view_run(run_dir, "train-0000010", prompt="[BOS] T1 T2 T3 T1 T2", out=tmp_path / "v.html")
    assert p.exists() and (tmp_path / BUNDLE_NAME).exists()
    with pytest.raises(ConfigError, match="--prompt"):
        view_run(run_dir, "last", prompt="[BOS] nope")
    with pytest.raises(RunError, match="exactly one"):
        view_run(run_dir, "all", example=0)
