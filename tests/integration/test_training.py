import numpy as np
import pytest
import torch
from helpers import build_model_cfg, build_train_cfg

from mechinterp_icr.models.factory import build_model
from mechinterp_icr.store.rundir import RunDir
from mechinterp_icr.tasks.base import IGNORE, Batch
from mechinterp_icr.training.loop import (
    checkpoint_steps,
    lr_at,
    masked_loss,
    resolve_trainable,
    train_phase,
)


def _mc(task):
    return build_model_cfg(d_vocab=task.d_vocab, n_ctx=task.n_ctx)


def test_resume_equals_uninterrupted(tmp_path, induction_task):
    cfg = build_train_cfg(steps=60, checkpoint_every=20)
    full = build_model(_mc(induction_task), seed=0)
    train_phase(full, induction_task.sample, cfg, RunDir(tmp_path / "a", create=True),
                "train", 0)
    run = RunDir(tmp_path / "b", create=True)
    part = build_model(_mc(induction_task), seed=0)
    train_phase(part, induction_task.sample, cfg, run, "train", 0, stop_after=31)  # "killed"
    resumed = build_model(_mc(induction_task), seed=0)
    res = train_phase(resumed, induction_task.sample, cfg, run, "train", 0)
    assert res.resumed_from == 20
    for (n, a), b in zip(full.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), n


def test_training_learns_induction(induction_task):
    m = build_model(_mc(induction_task), seed=0)
    res = train_phase(m, induction_task.sample, build_train_cfg(steps=250), None, "train", 0)
    assert res.final_loss < 0.1


def test_loss_mask_no_gradient_from_unmasked_positions():
    torch.manual_seed(0)
    m = build_model(build_model_cfg(attn_only=True, n_layers=1), seed=0)
    tokens = torch.randint(0, 17, (2, 10))
    targets = torch.full((2, 10), IGNORE)
    targets[:, 4] = 3
    logits = m(tokens)
    logits.retain_grad()
    masked_loss(logits, targets).backward()
    g = logits.grad
    assert float(g[:, 5:].abs().max()) == 0.0 and float(g[:, :4].abs().max()) == 0.0
    assert float(g[:, 4].abs().max()) > 0
    # positions after the masked one cannot influence the loss (causal): their embeddings get
    # no gradient
    m.zero_grad()
    tokens2 = tokens.clone()
    tokens2[:, 6:] = (tokens[:, 6:] + 1) % 17
    l1 = masked_loss(m(tokens), targets)
    l2 = masked_loss(m(tokens2), targets)
    assert torch.allclose(l1, l2)


def test_freezing_and_gradient_mask(induction_task):
    m = build_model(_mc(induction_task), seed=0)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    mask = torch.zeros_like(m.blocks[0].attn.W_Q)
    mask[..., :4] = 1.0
    cfg = build_train_cfg(steps=10, trainable="blocks.0.attn.W_Q,blocks.1.attn.*",
                          optimizer="sgd", lr=0.5, grad_clip=0.0)
    train_phase(m, induction_task.sample, cfg, None, "train", 0,
                grad_masks={"blocks.0.attn.W_Q": mask})
    after = dict(m.named_parameters())
    assert torch.equal(before["embed.W_E"], after["embed.W_E"])
    assert torch.equal(before["blocks.0.attn.W_K"], after["blocks.0.attn.W_K"])
    wq0, wq1 = before["blocks.0.attn.W_Q"], after["blocks.0.attn.W_Q"]
    assert torch.equal(wq0[..., 4:], wq1[..., 4:])
    assert not torch.equal(wq0[..., :4], wq1[..., :4])
    assert not torch.equal(before["blocks.1.attn.W_V"], after["blocks.1.attn.W_V"])
    assert all(p.requires_grad for p in m.parameters())  # restored after the phase


def test_trainable_presets():
    m = build_model(build_model_cfg(attn_only=False), seed=0)
    att = resolve_trainable(m, "attention")
    assert att and all(".attn." in n for n in att)
    assert "embed.W_E" not in resolve_trainable(m, "no_embed")


def test_schedules():
    cfg = build_train_cfg(steps=1000, checkpoint_schedule="log", checkpoint_dense_until=10,
                          checkpoint_every=500)
    s = checkpoint_steps(cfg)
    assert s[:11] == list(range(11)) and s[-1] == 1000 and 500 in s
    assert len(s) < 60 and all(b > a for a, b in zip(s, s[1:]))
    wc = build_train_cfg(steps=100, warmup_steps=10, decay="cosine", lr=1.0, min_lr_ratio=0.0)
    assert abs(lr_at(wc, 0) - 0.1) < 1e-9 and abs(lr_at(wc, 9) - 1.0) < 1e-9
    assert lr_at(wc, 99) < 0.01


def test_metrics_and_sidecar(tmp_path, induction_task):
    run = RunDir(tmp_path / "r", create=True)
    m = build_model(_mc(induction_task), seed=0)
    train_phase(m, induction_task.sample, build_train_cfg(steps=20, eval_every=10), run,
                "train", 0, eval_fn=lambda model: {"probe": 1.5})
    recs = run.read_metrics()
    assert [r["step"] for r in recs] == [0, 10, 20]
    assert recs[-1]["probe"] == 1.5
    side = run.latest("train").sidecar()
    assert side["step"] == 20 and side["versions"]["torch"].startswith("2.")
    assert side["metrics"]["probe"] == 1.5


def test_batches_are_pure_functions_of_seed_phase_step(induction_task):
    from mechinterp_icr.training.loop import batch_rng

    a = induction_task.sample(batch_rng(0, "p", 7), 4)
    b = induction_task.sample(batch_rng(0, "p", 7), 4)
    c = induction_task.sample(batch_rng(0, "p", 8), 4)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    assert isinstance(a, Batch) and np.all((a.targets == IGNORE).numpy()[:, :9])


@pytest.mark.parametrize("norm,cap", [(None, 0.0), ("LN", 0.0), ("LNPre", 5.0)])
def test_logits_at_equals_the_full_forward_and_its_gradients(norm, cap):
    """The training loss unembeds only the target positions (tasks.base.logits_at); its
    logits and the gradients of the loss equal those of a full forward indexed there."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from mechinterp_icr.training.loop import target_logits

    torch.manual_seed(0)
    cfg = HookedTransformerConfig(n_layers=2, d_model=16, n_ctx=12, d_head=4, n_heads=4,
                                  d_vocab=30, act_fn="relu", normalization_type=norm,
                                  output_logits_soft_cap=cap)
    model = HookedTransformer(cfg)
    tokens = torch.randint(0, 30, (3, 12))
    targets = torch.full((3, 12), IGNORE)
    targets[:, 2::4] = torch.randint(0, 30, (3, 3))
    targets[1, 0] = 7
    logits, tgt = target_logits(model, Batch(tokens, targets))
    mask = targets != IGNORE
    full = model(tokens)
    assert logits.shape == (int(mask.sum()), 30)
    torch.testing.assert_close(logits, full[mask], rtol=0, atol=1e-6)
    assert torch.equal(tgt, targets[mask])
    g_sel = torch.autograd.grad(masked_loss(logits, tgt), list(model.parameters()))
    g_full = torch.autograd.grad(masked_loss(model(tokens), targets), list(model.parameters()))
    for a, b in zip(g_sel, g_full):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
