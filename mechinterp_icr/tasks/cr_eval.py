"""Task CR's evaluation: accuracies of a model at the query of ICL / ICL+Grm prompts
(``evaluate_icl``; with ``uninformative`` on the same prompts with every demo of another type
than the query's, ``other_type_demos``) and at every attribute of PT sequences
(``evaluate_pt``), scored by ``_scores``; and the ideal reader's type accuracy over task
seeds (``ideal_reader_table``, how the shared-token variant's rate is chosen). Re-exported by
``mechinterp_icr.tasks.cr``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check
from mechinterp_icr.tasks.base import IGNORE, Batch, logits_at

if TYPE_CHECKING:
    from mechinterp_icr.tasks.cr import CRTask, CRTaskConfig

__all__ = ["evaluate_icl", "evaluate_pt", "ideal_reader_table", "other_type_demos"]


def _rng(rng_or_seed) -> np.random.Generator:
    if isinstance(rng_or_seed, np.random.Generator):
        return rng_or_seed
    return np.random.default_rng(rng_or_seed)


def _check_ctx(model, T: int) -> None:
    n_ctx = int(model.cfg.n_ctx)
    if T > n_ctx:
        raise ConfigError(f"sequence length {T} is not allowed for this model; expected at most "
                          f"model.n_ctx = {n_ctx} (fewer demos, shorter grammar, or a model "
                          "built for this task's n_ctx)")


@torch.no_grad()
def _answer_logits(model, batch: Batch, pos: torch.Tensor) -> torch.Tensor:
    dev = next(model.parameters()).device
    B = batch.tokens.shape[0]
    rows = torch.arange(B)[:, None].expand(pos.shape) if pos.ndim > 1 else torch.arange(B)
    out = logits_at(model, batch.tokens.to(dev), rows.reshape(-1).to(dev),
                    pos.reshape(-1).to(dev)).float().cpu()
    return out.reshape(*pos.shape, out.shape[-1])


def _scores(task: CRTask, logits: torch.Tensor, answer: torch.Tensor, types: torch.Tensor):
    """Correctness per prediction from logits (..., d_vocab): ``exact`` (argmax over the
    vocabulary is the answer), ``type`` (that argmax is one of the true type's values),
    ``restricted`` (argmax among the live attribute tokens is the answer), ``typed`` (argmax
    among the true type's V value tokens is the answer), ``restricted_type`` (the best live
    attribute token is one of the true type's values). In the shared-token variant a token can
    be a value of two types, so ``type`` / ``restricted_type`` count it for both."""
    attr = torch.as_tensor(task.live_attr_ids)
    pred = logits.argmax(-1)
    exact = pred == answer
    sub = logits[..., attr]  # (..., n live attribute tokens)
    r_pred = attr[sub.argmax(-1)]
    restricted = r_pred == answer
    type_ok = torch.as_tensor(task.has_type(pred, types))
    typed_ids = torch.as_tensor(task.value_ids)[types]  # (..., V)
    best = torch.gather(logits, -1, typed_ids).argmax(-1, keepdim=True)
    typed = torch.gather(typed_ids, -1, best).squeeze(-1) == answer
    rtype_ok = torch.as_tensor(task.has_type(r_pred, types))
    return {"exact": exact, "type": type_ok, "restricted": restricted, "typed": typed,
            "restricted_type": rtype_ok}


def other_type_demos(task: CRTask, batch: Batch, rng: np.random.Generator) -> Batch:
    """The ICL batch ``batch`` (from ``task.sample_icl``) with uninformative demos: every demo
    keeps its subject and position, and its attribute token becomes that subject's attribute
    of a type drawn uniformly from the L - 1 types other than the prompt's query type
    (independently per demo, from ``rng``), so no demo is of the query's type. The query, its
    type, its answer and every other token are unchanged (the same prompt otherwise). In the
    shared-token variant a demo's token may still be a value of the query's type too (a shared
    token, as in a real prompt of the demo's type). meta gains ``demo_types`` (B, K)."""
    L = task.cfg.n_types
    check(L >= 2, "task.n_types", L, "at least 2 for demos of another type than the query's")
    for key in ("type", "demo_subjects", "demo_attr_pos"):
        check(key in batch.meta, "batch.meta", sorted(batch.meta),
              f"an ICL batch of sample_icl (with {key!r})")
    query_types = batch.meta["type"].numpy()
    subjects = batch.meta["demo_subjects"].numpy()  # (B, K)
    pos = torch.as_tensor(batch.meta["demo_attr_pos"].numpy() + 1)  # the demo attributes
    B, K = subjects.shape
    types = (query_types[:, None] + 1 + rng.integers(L - 1, size=(B, K))) % L
    new = torch.as_tensor(task.answer_id(subjects, types), dtype=batch.tokens.dtype)
    rows = torch.arange(B)[:, None]
    tok, tgt = batch.tokens.clone(), batch.targets.clone()
    tok[rows, pos] = new
    before = tgt[rows, pos - 1]  # a loss target on a demo attribute follows the new token
    tgt[rows, pos - 1] = torch.where(before != IGNORE, new, before)
    return Batch(tok, tgt, {**batch.meta, "demo_types": torch.as_tensor(types)})


@torch.no_grad()
def evaluate_icl(model, task: CRTask, rng_or_seed, subjects=None, K: int | None = None,
                 n: int = 512, grammar: bool = False, batch_size: int = 512,
                 fixed: dict | None = None, uninformative=None) -> dict[str, float]:
    """ICL (or ICL+Grm) accuracy at the query: ``exact`` (argmax over the vocabulary is the
    answer), ``type`` (argmax is one of the right type's values), ``restricted`` (argmax among
    attribute tokens is the answer), plus ``typed`` (argmax among the right type's values) and
    ``restricted_type`` (the best attribute guess is one of the right type's values; chance 1/L
    by default, higher in the shared-token variant), as in ``_scores``. ``fixed``:
    arrays of ``n`` rows (``types``, ``query_subjects``, ``demo_subjects`` (n, K)) given to
    ``sample_icl`` batch by batch (the same prompts at several K). ``uninformative`` (a seed or
    generator; None: the real demos): the same prompts (``rng_or_seed`` draws them as without
    it) with every demo of another type than the query's (:func:`other_type_demos`, the types
    drawn from this stream), and ``demo_query_type``, the share of demo tokens that are values
    of the query's type (0 by default; shared tokens in the variant)."""
    rng = _rng(rng_or_seed)
    other_rng = None if uninformative is None else _rng(uninformative)
    K = task.cfg.n_demos if K is None else K
    _check_ctx(model, task.format_len(K, grammar))
    acc: dict[str, float] = {}
    shared = 0.0
    done = 0
    while done < n:
        b = min(batch_size, n - done)
        kw = {k: np.asarray(v)[done:done + b] for k, v in (fixed or {}).items()}
        batch = task.sample_icl(rng, b, K=K, subjects=subjects, grammar=grammar, **kw)
        if other_rng is not None:
            batch = other_type_demos(task, batch, other_rng)
            demo_tok = batch.tokens[torch.arange(b)[:, None], batch.meta["demo_attr_pos"] + 1]
            shared += float(task.has_type(demo_tok, batch.meta["type"][:, None]).sum())
        logits = _answer_logits(model, batch, batch.meta["query_pos"])
        sc = _scores(task, logits, batch.meta["answer"], batch.meta["type"])
        for k, v in sc.items():
            acc[k] = acc.get(k, 0.0) + float(v.float().sum())
        done += b
    out = {k: v / n for k, v in acc.items()}
    if other_rng is not None:
        out["demo_query_type"] = shared / (n * K)
    return out


@torch.no_grad()
def evaluate_pt(model, task: CRTask, rng_or_seed, subjects=None, n: int = 512,
                batch_size: int = 256) -> dict[str, float]:
    """PT factual recall at every attribute of ``n`` PT sequences (tuples restricted to
    ``subjects`` when given): ``typed`` (argmax among the true type's values), ``restricted``
    (argmax among all attributes; bounded by the Bayes ceiling of reading the type from the
    grammar), ``exact`` (argmax over the vocabulary), ``type``."""
    rng = _rng(rng_or_seed)
    _check_ctx(model, task.pt_len)
    acc: dict[str, float] = {}
    count = 0
    done = 0
    while done < n:
        b = min(batch_size, n - done)
        batch = task.sample_pt(rng, b, subjects=subjects)
        logits = _answer_logits(model, batch, batch.meta["attr_pos"])
        sc = _scores(task, logits, batch.meta["answer"], batch.meta["type"])
        for k, v in sc.items():
            acc[k] = acc.get(k, 0.0) + float(v.float().sum())
        count += int(batch.meta["answer"].numel())
        done += b
    return {k: v / count for k, v in acc.items()}


# ------------------------------------------------------------------------------------------------
# The ideal reader over task seeds (choosing the shared-token variant's rate)
# ------------------------------------------------------------------------------------------------
def ideal_reader_table(cfg: CRTaskConfig, ks, seeds=(0, 1, 2), n: int = 20000,
                       reader: str = "generative") -> list[dict]:
    """:meth:`CRTask.ideal_type_accuracy` of ``cfg`` built on each task seed in ``seeds``
    (held-out subjects, ``n`` prompts, reader seed 0), per K in ``ks``: one dict per K with
    ``K``, ``mean`` and ``min`` over the task seeds and ``per_seed`` (in the order of
    ``seeds``)."""
    tasks = [cfg.build(int(s)) for s in seeds]
    check(len(tasks) >= 1, "seeds", list(seeds), "at least one task seed")
    rows = []
    for K in ks:
        acc = [t.ideal_type_accuracy(int(K), n=n, reader=reader) for t in tasks]
        rows.append({"K": int(K), "mean": float(np.mean(acc)), "min": float(np.min(acc)),
                     "per_seed": acc})
    return rows
