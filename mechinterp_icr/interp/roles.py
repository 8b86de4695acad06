"""Head roles by activation patching (CR-5).

Prompt pairs that differ in one thing only (same demo subjects, same positions):

- **type pairs**: the base prompt asks type ``l``; the source prompt has the same demo subjects
  and query subject but demos of type ``l' != l``. Patching the Relation head's output from the
  source into the base should move the answer to ``a_{l'}(s_q)``.
- **subject pairs**: same demos and type, the source has another query subject ``s'`` (not among
  the demos, and with ``a_l(s') != a_l(s_q)`` where possible). Patching the Subject head
  should move the answer to ``a_l(s')``.

In patching terms the source is ``clean`` (copied in) and the base is ``corrupted`` (patched).
Metric: logit difference ``logit[target answer] - logit[base answer]`` at the query;
``recovery`` is the normalised recovery (0 = base, 1 = source), ``moved`` the share of
examples whose argmax becomes the target answer and ``moved_gain`` = ``moved`` minus the share
of base prompts already answering the target (chance-corrected: a model that guesses the type
at random hits a_{l'}(s_q) on about 1/L of prompts without any patch). CR-5 scores a role by
``moved_gain`` (:func:`role_margins`); the normalised recovery, which divides by the model's
own source-base gap and so explodes where that gap is tiny (a PT-only model), sits beside
it. Each head is patched at all positions (``z``, TransformerLens
``attn_head_out_all_pos``) and at the query position only.
A verdict names the head with the largest type-pair recovery as the Relation head and the
head with the largest subject-pair recovery as the Subject head (``distinct`` says whether they
differ), next to each head's attention masses on the demo attributes and the query subject.
"""

from __future__ import annotations

import numpy as np
import torch

from mechinterp_icr.config import ConfigError
from mechinterp_icr.interp.attention import head_role_table
from mechinterp_icr.interp.patching import (
    batched_activation_patch,
    layer_head_vector_patch_setter,
    layer_pos_head_vector_patch_setter,
    layer_pos_patch_setter,
    logit_diff_metric,
    normalised_recovery,
)

__all__ = ["answer_change_rate", "make_pairs", "pair_effects", "role_margins", "role_verdict",
           "roles_across_checkpoints", "subject_same_query_control"]


def make_pairs(task, rng: np.random.Generator, n: int, kind: str, subjects=None, K=None):
    """(base batch, source batch, target answers) for ``kind`` ``"type"``, ``"subject"`` or
    ``"same_query"`` (the control: other demo subjects, same query subject and type; the
    target is the base answer, which a Subject head patched from there must not change)."""
    c = task.cfg
    K = c.n_demos if K is None else K
    subjects = task.heldout_subjects if subjects is None else np.asarray(subjects)
    base = task.sample_icl(rng, n, K=K, subjects=subjects)
    demos = base.meta["demo_subjects"].numpy()
    q = base.meta["query_subject"].numpy()
    types = base.meta["type"].numpy()
    if kind == "type":
        new_t = (types + rng.integers(1, c.n_types, size=n)) % c.n_types
        src = task.sample_icl(rng, n, K=K, subjects=subjects, types=new_t, demo_subjects=demos,
                              query_subjects=q)
        target = task.answer_id(q, new_t)
    elif kind == "subject":
        new_q = np.empty(n, dtype=np.int64)
        for b in range(n):
            pool = np.setdiff1d(subjects, np.append(demos[b], q[b]))
            # a source whose answer differs from the base's (else the pair moves nothing)
            differs = pool[task.kb[pool, types[b]] != task.kb[q[b], types[b]]]
            new_q[b] = rng.choice(differs if len(differs) else pool)
        src = task.sample_icl(rng, n, K=K, subjects=subjects, types=types, demo_subjects=demos,
                              query_subjects=new_q)
        target = task.answer_id(new_q, types)
    elif kind == "same_query":  # other demo subjects, same query subject and type
        new_d = np.empty_like(demos)
        for b in range(n):
            pool = np.setdiff1d(subjects, np.append(demos[b], q[b]))
            if len(pool) < K:  # too few subjects for disjoint demos: any but the query
                pool = np.setdiff1d(subjects, [q[b]])
            new_d[b] = rng.choice(pool, size=K, replace=False)
        src = task.sample_icl(rng, n, K=K, subjects=subjects, types=types, demo_subjects=new_d,
                              query_subjects=q)
        target = base.meta["answer"].numpy()
    else:
        raise ConfigError(f"kind = {kind!r} is not allowed; expected 'type', 'subject' or "
                          "'same_query'")
    return base, src, torch.as_tensor(target)


@torch.no_grad()
def pair_effects(model, base, src, target) -> list[dict]:
    """Per head: recovery and moved share, patched at all positions and at the query."""
    qp = base.meta["query_pos"]
    metric = logit_diff_metric(qp, target, base.meta["answer"])
    dev = next(model.parameters()).device
    btok, stok = base.tokens.to(dev), src.tokens.to(dev)
    names = {f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)}
    _, cache = model.run_with_cache(stok, names_filter=lambda n: n in names)
    base_logits = model(btok)
    v_base = float(metric(base_logits))
    v_src = float(metric(model(stok)))
    # the share of base prompts that already answer the target (a patch "moves" the rest)
    base_hit = float((base_logits[torch.arange(len(qp)), qp.to(dev)].argmax(-1).cpu()
                      == target).float().mean())
    allpos = batched_activation_patch(model, btok, cache, metric,
                                      layer_head_vector_patch_setter, "z")
    # query-position cells: query_pos is the same for every row (same K, no grammar)
    q = int(qp[0])
    assert bool((qp == q).all()), "pairs must share the query position"
    cells = [(l, q, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    atq = batched_activation_patch(model, btok, cache, metric,
                                   layer_pos_head_vector_patch_setter, "z", cells=cells)

    # moved share needs the argmax: one more batched pass per head (cheap)
    def moved(layer, head, pos=None):
        def hook(a, hook):
            a = a.clone()
            if pos is None:
                a[:, :, head] = cache[hook.name][:, :, head]
            else:
                a[:, pos, head] = cache[hook.name][:, pos, head]
            return a

        lg = model.run_with_hooks(btok, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", hook)])
        pred = lg[torch.arange(len(qp)), qp.to(dev)].argmax(-1).cpu()
        return float((pred == target).float().mean())

    # non-head components at the query position (where does the information enter?)
    comp = {}
    rp = batched_activation_patch(model, btok, _ensure(model, stok, cache, "resid_pre"), metric,
                                  layer_pos_patch_setter, "resid_pre", cells=[(0, q)])
    comp["resid_pre0@query"] = float(normalised_recovery(float(rp[0]), v_src, v_base))
    if not model.cfg.attn_only:
        mc = _ensure(model, stok, cache, "mlp_out")
        mo = batched_activation_patch(model, btok, mc, metric, layer_pos_patch_setter,
                                      "mlp_out",
                                      cells=[(l, q) for l in range(model.cfg.n_layers)])
        for l in range(model.cfg.n_layers):
            comp[f"mlp{l}@query"] = float(normalised_recovery(float(mo[l]), v_src, v_base))
    rows = []
    i = 0
    for l in range(model.cfg.n_layers):
        for h in range(model.cfg.n_heads):
            rows.append({"layer": l, "head": h,
                         "recovery_all_pos": float(normalised_recovery(float(allpos[l, h]),
                                                                       v_src, v_base)),
                         "recovery_query": float(normalised_recovery(float(atq[i]), v_src,
                                                                     v_base)),
                         "moved_all_pos": moved(l, h), "moved_query": moved(l, h, q),
                         "base_hit": base_hit,
                         "metric_base": v_base, "metric_source": v_src,
                         "components": comp})
            i += 1
    return rows


def _ensure(model, stok, cache, act: str) -> dict:
    """``cache`` extended with the source run's ``act`` activations (all layers)."""
    names = {f"blocks.{l}.hook_{act}" for l in range(model.cfg.n_layers)}
    if all(n in cache for n in names):
        return cache
    _, extra = model.run_with_cache(stok, names_filter=lambda n: n in names)
    merged = dict(cache.items())
    merged.update(dict(extra.items()))
    return merged


@torch.no_grad()
def role_verdict(model, task, seed: int = 0, n: int = 64, subjects=None) -> dict:
    """Relation/Subject head verdict for one model (see module doc)."""
    rng = np.random.default_rng([seed, 0x501E])
    t_rows = pair_effects(model, *make_pairs(task, rng, n, "type", subjects))
    s_rows = pair_effects(model, *make_pairs(task, rng, n, "subject", subjects))
    att = head_role_table(model, task.sample_icl(rng, n, subjects=task.heldout_subjects
                                                 if subjects is None else subjects))
    heads = [f"L{r['layer']}H{r['head']}" for r in t_rows]
    rel = int(np.argmax([r["recovery_all_pos"] for r in t_rows]))
    sub = int(np.argmax([r["recovery_all_pos"] for r in s_rows]))
    table = []
    for i, name in enumerate(heads):
        table.append({"head": name,
                      "type_recovery": t_rows[i]["recovery_all_pos"],
                      "type_recovery_query": t_rows[i]["recovery_query"],
                      "type_moved": t_rows[i]["moved_all_pos"],
                      "subject_recovery": s_rows[i]["recovery_all_pos"],
                      "subject_recovery_query": s_rows[i]["recovery_query"],
                      "subject_moved": s_rows[i]["moved_all_pos"],
                      "type_moved_gain": t_rows[i]["moved_all_pos"] - t_rows[i]["base_hit"],
                      "subject_moved_gain": s_rows[i]["moved_all_pos"] - s_rows[i]["base_hit"],
                      "attn_demo_attribute": att[i]["demo_attribute"],
                      "attn_query_subject": att[i]["query_subject"],
                      "attn_demo_subject": att[i]["demo_subject"]})
    return {"relation_head": heads[rel], "subject_head": heads[sub], "distinct": rel != sub,
            "relation_recovery": t_rows[rel]["recovery_all_pos"],
            "relation_moved": t_rows[rel]["moved_all_pos"],
            "subject_recovery": s_rows[sub]["recovery_all_pos"],
            "subject_moved": s_rows[sub]["moved_all_pos"], "heads": table,
            "components_type": t_rows[0]["components"],
            "components_subject": s_rows[0]["components"]}


def roles_across_checkpoints(run, selection: str, seed: int = 0, n: int = 64) -> list[dict]:
    """``role_verdict`` for every selected checkpoint of a CR run (one model at a time)."""
    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    rd = run if isinstance(run, RunDir) else RunDir(run)
    _, task, _ = load_run_model(rd)
    return map_checkpoints(rd, selection, lambda ck, m: role_verdict(m, task, seed, n))


@torch.no_grad()
def answer_change_rate(model, base, src, layer: int, head: int) -> float:
    """Share of base prompts whose argmax answer at the query changes when ``head``'s output
    (all positions) is patched in from ``src``."""
    dev = next(model.parameters()).device
    btok, stok = base.tokens.to(dev), src.tokens.to(dev)
    qp = base.meta["query_pos"].to(dev)
    name = f"blocks.{layer}.attn.hook_z"
    _, cache = model.run_with_cache(stok, names_filter=lambda n: n == name)
    rows = torch.arange(btok.shape[0], device=dev)
    before = model(btok)[rows, qp].argmax(-1)

    def hook(a, hook):
        a = a.clone()
        a[:, :, head] = cache[name][:, :, head]
        return a

    after = model.run_with_hooks(btok, fwd_hooks=[(name, hook)])[rows, qp].argmax(-1)
    return float((after != before).float().mean())


def role_margins(verdict: dict, metric: str = "recovery", floor: float = 0.05) -> dict:
    """Per role (Relation on type pairs, Subject on subject pairs): the head with the larger
    score, its score, the other heads' best score and the margin = score / max(other, floor)
    (``floor`` guards a near-zero or negative denominator). ``metric``: ``recovery``
    (normalised logit-difference recovery, all positions), ``moved`` (share of prompts
    whose answer becomes the target) or ``moved_gain`` (``moved`` minus the share of base
    prompts that already answer the target: the prompts the patch actually moves; CR-5's
    role score)."""
    col = {"recovery": ("type_recovery", "subject_recovery"),
           "moved": ("type_moved", "subject_moved"),
           "moved_gain": ("type_moved_gain", "subject_moved_gain")}[metric]
    out = {}
    for role, key in (("relation", col[0]), ("subject", col[1])):
        vals = [float(h[key]) for h in verdict["heads"]]
        i = int(np.argmax(vals))
        other = max([v for j, v in enumerate(vals) if j != i], default=0.0)
        out.update({f"{role}_head": verdict["heads"][i]["head"], f"{role}_score": vals[i],
                    f"{role}_other": other,
                    f"{role}_margin": vals[i] / max(other, floor)})
    out["distinct"] = out["relation_head"] != out["subject_head"]
    return out


@torch.no_grad()
def subject_same_query_control(model, task, head: int, seed: int = 0, n: int = 64,
                               layer: int = 0, subjects=None) -> float:
    """The CR-5 Subject-head control: patch ``head`` from a prompt with other demo subjects
    but the same query subject (and type); the share of answers that change (should be ~0:
    the Subject head carries the query subject, not the demos)."""
    rng = np.random.default_rng([seed, 0x5A3E])
    base, src, _ = make_pairs(task, rng, n, "same_query", subjects)
    return answer_change_rate(model, base, src, layer, head)
