"""IR-8 decided on the token-dependent model.

A position-only head cannot be an induction head by construction (its scores do not depend
on the tokens), so IR-8 is decided on the same 1-layer IR model with **all of W_Q, W_K
trainable** (token and position blocks; the HookedTransformer at ``n = hooked.n``, frozen
memory, embeddings and OV copy), finetuned by PGD (:func:`~mechinterp_icr.training.pgd.
pgd_hooked`, ``target="qk"``: the large step ``hooked.attn_big_lr``, the perturbation of the
position block, small steps of ``hooked.attn_lr``, gradient clipping ``hooked.attn_clip``) on
``token_model.N`` sequences for the **whole registered budget** ``token_model.steps`` (SPEC 2;
no early stop: a run stopped when validation passes 0.99 and then tested against 0.99 is tested
at its own bar); every ``token_model.check_every`` small steps its step-1 argmax on
``token_model.eval`` validation sequences is logged. Solved (``IR8_SOLVED``: step-1 argmax >=
0.99) is then read on ``token_model.eval`` (10,000) other fresh sequences; a model that does not
solve the task makes IR-8 inconclusive. On it:

- (a, reported as structural: a row on one token cannot solve a two-pair task, so it cannot
  fail) its own step-1 rows (per sequence) against induction-style rows written in through
  ``hook_pattern``: all attention on a fixed earlier offset (t-1, the previous token a copying
  head would use, or t-2). An induction head attends to the token after an earlier
  occurrence of the query's token; in an IR sequence the query ``s_q`` never occurs earlier
  (the context subjects are distinct; counted in ``query_seen_before``), so only the offsets
  remain.
- (b, the rule) the baseline-subtracted prefix-matching score of its head on repeated-token
  probes of the IR context's length minus one (tokens drawn from the whole IR vocabulary), by
  the project's code and by TransformerLens's ``head_detector``, with the mean attention on
  one probe shape for the figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mechinterp_icr.claims.ir_registry import IR8_SOLVED
from mechinterp_icr.claims.protocol import compare
from mechinterp_icr.config import TrainConfig
from mechinterp_icr.experiments.ir.config import IRConfig, model_spec, task_config
from mechinterp_icr.experiments.ir.controls import (
    PROBE_SHAPES,
    TL_SCORE_PROBES,
    head_patterns,
    induction_probes,
    prefix_matching_score,
    tl_induction_score,
)
from mechinterp_icr.experiments.ir.train import tagged_rng
from mechinterp_icr.interp.ir_attention import ir_accuracy, overwrite_attention_row
from mechinterp_icr.models.ir import build_ir_hooked
from mechinterp_icr.training.loop import train_phase
from mechinterp_icr.training.pgd import PGDConfig, pgd_hooked

__all__ = ["OFFSETS", "hooked_row_test", "mean_probe_pattern", "tok_metrics", "tok_model",
           "tok_pgd"]

OFFSETS = (1, 2)  # induction-style rows: all attention on query - offset


def tok_pgd(cfg: IRConfig) -> PGDConfig:
    """IR-8's PGD of all of W_Q, W_K (the registered attention step sizes and clipping); its
    ``steps`` is the first segment of small steps (``token_model.check_every``)."""
    return PGDConfig(big_lr=cfg.hooked.attn_big_lr, sigma=cfg.sigma, lr=cfg.hooked.attn_lr,
                     steps=min(cfg.token_model.check_every, cfg.token_model.steps), perturb=True,
                     target="qk", clip=cfg.hooked.attn_clip)


def _solves(model, val, K: int) -> float:
    q = 2 * K
    with torch.no_grad():
        return ir_accuracy(model(val.tokens)[:, q: q + 2], val)["step1_acc"]


def tok_model(cfg: IRConfig, seed: int):
    """(model, task, eval batch, log): the token-dependent IR model at ``n = hooked.n`` after
    PGD on ``token_model.N`` fresh sequences for the whole budget ``token_model.steps``, its
    ``token_model.eval`` fresh evaluation sequences, and the validation log (``[(small steps,
    step-1 argmax on token_model.eval validation sequences)]`` every
    ``token_model.check_every`` small steps; it never stops the run).
    Full-batch SGD has no state, so the segments make the same run as one call would."""
    task = task_config(cfg, cfg.hooked.n).build(seed)
    model = build_ir_hooked(task, model_spec(cfg), seed=seed)
    train = task.sample(tagged_rng(seed, "ir8-train", cfg.hooked.n), cfg.token_model.N)
    val = task.sample(tagged_rng(seed, "ir8-val", cfg.hooked.n), cfg.token_model.eval)
    pgd = tok_pgd(cfg)
    pgd_hooked(model, train, pgd, None, seed)
    done, K = pgd.steps, task.cfg.n_pairs
    checks = [(done, _solves(model, val, K))]
    while done < cfg.token_model.steps:
        seg = min(cfg.token_model.check_every, cfg.token_model.steps - done)
        more = TrainConfig(steps=seg, batch_size=len(train), optimizer="sgd", lr=pgd.lr,
                           grad_clip=pgd.clip, trainable="qk", eval_every=0,
                           checkpoint_schedule="linear", checkpoint_every=seg, progress=False)
        train_phase(model, lambda rng, bs: train, more, None, "pgd", seed)
        done += seg
        checks.append((done, _solves(model, val, K)))
    model.eval()
    ev = task.sample(tagged_rng(seed, "ir8-eval", cfg.hooked.n), cfg.token_model.eval)
    return model, task, ev, checks


@torch.no_grad()
def hooked_row_test(model, ev, K: int = 2) -> dict[str, float]:
    """IR-8 (a) on a HookedTransformer: step-1 accuracy (argmax, ties 1/k) with the model's
    own step-1 rows and with each induction-style row of :data:`OFFSETS`; the larger of the
    latter is ``induction_row_step1_acc``."""
    q = 2 * K
    own = model(ev.tokens)[:, q: q + 2]
    out = {"learned_row_step1_acc": ir_accuracy(own, ev)["step1_acc"],
           "learned_row_step1_expected": ir_accuracy(own, ev)["step1_prob"]}
    for off in OFFSETS:
        row = torch.zeros(q + 1)
        row[q - off] = 1.0
        logits = overwrite_attention_row(model, ev.tokens, 0, 0, q, row)[:, q: q + 2]
        out[f"offset_{off}_step1_acc"] = ir_accuracy(logits.double(), ev)["step1_acc"]
    out["induction_row_step1_acc"] = max(out[f"offset_{o}_step1_acc"] for o in OFFSETS)
    ctx = ev.tokens[:, :q]
    out["query_seen_before"] = float((ctx == ev.tokens[:, q: q + 1]).any(1).double().mean())
    return out


def mean_probe_pattern(pattern: torch.Tensor, shape: int = 0) -> list[list[float]]:
    """Mean attention pattern (L, L) over the probes of :data:`PROBE_SHAPES` ``[shape]``
    (probe i has shape ``i % len(PROBE_SHAPES)``): what the IR-8 figure draws."""
    idx = torch.arange(shape, pattern.shape[0], len(PROBE_SHAPES))
    return pattern[idx].double().mean(0).tolist()


@torch.no_grad()
def tok_metrics(cfg: IRConfig, seed: int) -> dict[str, Any]:
    """IR-8's per-seed numbers on the token-dependent model: ``solved`` (step-1 argmax on
    ``token_model.eval`` fresh sequences meets ``IR8_SOLVED``, >= 0.99), (a), (b) by both
    scorers, the mean probe pattern."""
    with torch.enable_grad():
        model, task, ev, checks = tok_model(cfg, seed)
    a = hooked_row_test(model, ev, task.cfg.n_pairs)
    acc = ir_accuracy(model(ev.tokens)[:, 2 * task.cfg.n_pairs: 2 * task.cfg.n_pairs + 2],
                      ev)
    L = task.n_ctx - 1
    toks = induction_probes(L, task.d_vocab - 1, cfg.induction.probes, seed)
    pat = head_patterns(model, toks)[0]
    proj = prefix_matching_score(pat, toks)
    tl = tl_induction_score(model, toks[:TL_SCORE_PROBES], 0, 0)
    c = IR8_SOLVED
    return {**a, "solved": float(compare(a["learned_row_step1_acc"], c.op, c.threshold)),
            "step2_acc": acc["step2_acc"], "swap_step1_acc": acc.get("step1_acc_swap"),
            "small_steps": checks[-1][0], "validation_checks": checks,
            "project": proj, "transformer_lens": tl,
            "probe_shape": list(PROBE_SHAPES[0]),
            "mean_probe_pattern": np.round(mean_probe_pattern(pat), 5).tolist()}
