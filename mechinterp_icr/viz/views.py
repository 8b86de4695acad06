"""Offline interactive attention views (circuitsvis).

``str(view)`` / ``show_code()`` of circuitsvis load the JavaScript from a CDN and render blank
offline. Here the bundled ``circuitsvis/dist/cdn/iife.js`` is written **once** per folder as
``circuitsvis.js`` and every view references it relatively (``<script src="circuitsvis.js">``),
then calls ``CircuitsVis.render`` with the props: no network, ~1.3 MB once instead of per view.
Token strings are the task vocabulary's readable names (``S12``, ``A2_5``, ``[SEP]``, ...).
"""

from __future__ import annotations

import html
import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from mechinterp_icr.store.io import atomic_write_text, ensure_file

__all__ = [
    "BUNDLE_NAME",
    "attention_view_html",
    "bundle_source",
    "example_prompt",
    "view_run",
    "write_attention_view",
    "write_bundle",
]

BUNDLE_NAME = "circuitsvis.js"
MAX_EXAMPLE = 100_000  # view_run draws example+1 examples to show one


def bundle_source() -> str:
    import circuitsvis

    p = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    text = p.read_text(encoding="utf-8")
    # drop the source-map comment (the .map file is not copied)
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("//# sourceMappingURL"))


def write_bundle(folder: str | Path) -> Path:
    """Write ``circuitsvis.js`` into ``folder`` (atomic); an existing copy is reused only when
    it is this bundle byte for byte (a stale or truncated one is rewritten)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / BUNDLE_NAME
    ensure_file(target, bundle_source())
    return target


def attention_view_html(tokens: Sequence[str], patterns, head_names: Sequence[str] | None = None,
                        title: str = "attention", component: str = "AttentionHeads",
                        notes: str = "") -> str:
    """A full HTML page rendering ``patterns`` (heads, T, T) over ``tokens``."""
    pats = np.asarray(patterns.detach().cpu() if isinstance(patterns, torch.Tensor)
                      else patterns, dtype=float)
    props = {"attention": pats.round(5).tolist(), "tokens": [str(t) for t in tokens]}
    if head_names is not None and component == "AttentionHeads":
        props["attentionHeadNames"] = list(head_names)  # the prop AttentionHeads reads
    div = f"circuits-vis-{uuid.uuid4().hex[:12]}"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>
<body style="font-family: sans-serif">
<h3>{html.escape(title)}</h3>
<p>{html.escape(notes)}</p>
<div id="{div}" style="margin: 15px 0;"></div>
<script src="{BUNDLE_NAME}"></script>
<script>
CircuitsVis.render("{div}", CircuitsVis.{component}, {json.dumps(props)});
</script>
</body></html>
"""


def write_attention_view(path: str | Path, tokens: Sequence[str], patterns,
                         head_names: Sequence[str] | None = None, title: str = "attention",
                         notes: str = "") -> Path:
    path = Path(path)
    write_bundle(path.parent)
    return atomic_write_text(path, attention_view_html(tokens, patterns, head_names, title,
                                                       notes=notes))


def example_prompt(task, seed: int, n: int, stream: str = "view"):
    """``(tokens (T,), answer id or None)``: example ``n`` of the task's fixed example set
    ``stream``, cut at its prediction position (the last token is where the answer is
    predicted). CR: held-out ICL prompts up to the query; other tasks: held-out examples up
    to their last position with a target, whose target is the answer."""
    from mechinterp_icr.tasks.base import IGNORE
    from mechinterp_icr.training.loop import batch_rng

    rng = batch_rng(seed, stream, 0)
    if hasattr(task, "sample_icl"):
        b = task.sample_icl(rng, n + 1, subjects=getattr(task, "heldout_subjects", None))
        qp = int(b.meta["query_pos"][n])
        return b.tokens[n, :qp + 1], int(b.meta["answer"][n])
    b = task.sample(rng, n + 1, "eval")
    pos = (b.targets[n] != IGNORE).nonzero().flatten()
    if not len(pos):
        return b.tokens[n], None
    qp = int(pos[-1])
    return b.tokens[n, :qp + 1], int(b.targets[n, qp])


@torch.no_grad()
def view_run(run: str | Path, checkpoint: str = "last", prompt: str | None = None,
             example: int | None = None, out: str | Path | None = None) -> Path:
    """Write the attention view of one checkpoint of ``run`` on a prompt or a task example.

    Inputs are checked before the run is read: not both of ``prompt`` and ``example``, a
    non-empty prompt, an example index in [0, MAX_EXAMPLE), exactly one checkpoint."""
    from mechinterp_icr.config import ConfigError, check_range
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir, RunError

    if prompt is not None and example is not None:
        raise ConfigError("--prompt and --example are not allowed together; give one")
    if prompt is not None and not prompt.split():
        raise ConfigError("--prompt = '' is not allowed; expected space-separated tokens, "
                          'e.g. "[BOS] S1 A0_3 [SEP] S2"')
    if example is not None:
        check_range("--example", example, 0, MAX_EXAMPLE - 1, integer=True)
    rd = RunDir(run)
    cfg, task, build = load_run_model(rd)
    if prompt is not None and len(prompt.split()) > cfg.model.n_ctx:
        raise ConfigError(f"--prompt has {len(prompt.split())} tokens; expected at most "
                          f"model.n_ctx = {cfg.model.n_ctx}")
    cks = rd.select(checkpoint)
    if len(cks) != 1:
        raise RunError(f"--checkpoint {checkpoint!r} selects {len(cks)} checkpoints; "
                       "expected exactly one (e.g. last, phase:NAME:last or a name)")
    if prompt is not None:
        try:
            ids = task.vocab.encode(prompt)
        except ValueError as e:
            raise ConfigError(f"--prompt = {prompt!r} is not allowed: {e}") from None
        toks = torch.tensor(ids, dtype=torch.long)
        label, answer = "prompt", None
    else:
        n = 0 if example is None else int(example)
        if n < 0:
            raise ConfigError(f"--example = {n} is not allowed; expected an integer >= 0")
        toks, answer = example_prompt(task, cfg.seed, n)
        label = f"example{n}"
    if toks.numel() > cfg.model.n_ctx:
        raise ConfigError(f"--prompt has {toks.numel()} tokens; expected at most "
                          f"model.n_ctx = {cfg.model.n_ctx}")
    ck = cks[0]
    ((ck, model),) = list(rd.iter_models(ck.name, build))
    dev = next(model.parameters()).device
    logits, cache = model.run_with_cache(toks[None].to(dev),
                                         names_filter=lambda n: n.endswith("hook_pattern"))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    pats = torch.cat([cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(L)], 0)
    names = [f"L{l}H{h}" for l in range(L) for h in range(H)]
    tok_str = task.vocab.tokens(toks.tolist())
    probs = torch.softmax(logits[0, -1].float(), -1)
    top = int(probs.argmax())
    pred = task.vocab.tokens([top])[0]
    out = Path(out) if out is not None else rd.analyses_dir / "views" / f"{ck.name}-{label}.html"
    notes = (f"run {rd.path}, checkpoint {ck.name}; prediction at the last position: {pred} "
             f"(p = {float(probs[top]):.3f})")
    if answer is not None:
        right = "right" if top == answer else "wrong"
        notes += (f"; correct answer: {task.vocab.tokens([answer])[0]} "
                  f"(p = {float(probs[answer]):.3f}, {right})")
    return write_attention_view(out, tok_str, pats, names, title=f"{ck.name}: {label}",
                                notes=notes)


def _record_views(summary, out_dir: str | Path, written: list[Path]) -> None:
    """List the written views (relative to the output folder) in the summary's table
    ``"<TARGET> attention views"`` (one per target, so a merged summary keeps both)."""
    if summary is not None:
        summary.tables.setdefault(f"{summary.target.upper()} attention views", []).extend(
            {"view": str(p.relative_to(out_dir))} for p in written)


def write_reproduction_views(summary, out_dir: str | Path, run_dirs, seeds, profile: str,
                             phases=("pretrain", "ft-icl", "ft-iclgrm"), n_examples: int = 2
                             ) -> list[Path]:
    """Attention views of the first seed's runs for the report: the last checkpoint of each
    phase on the first held-out examples, written to ``out_dir/views``. Also used for the IR
    HookedTransformer runs (``out_dir/runs/ir/seed*/ht_*``)."""
    from mechinterp_icr.store.rundir import RunDir

    out = Path(out_dir) / "views"
    written: list[Path] = []
    runs = [Path(r) for r in run_dirs][:1]
    for run in runs:
        have = RunDir(run).phases()
        for ph in [p for p in phases if p in have]:
            for ex in range(n_examples):
                written.append(view_run(run, f"phase:{ph}:last", example=ex,
                                        out=out / f"{run.parent.name}-{run.name}-{ph}-"
                                                  f"example{ex}.html"))
    _record_views(summary, out_dir, written)
    return written


def write_ir_views(summary, out_dir: str | Path, run_dirs, seeds, profile: str) -> list[Path]:
    """Attention views of the IR HookedTransformer runs of the first seed (last checkpoint)."""
    from mechinterp_icr.store.rundir import RunDir

    runs = sorted(p for r in list(run_dirs)[:1] for p in Path(r).glob("ht_*")
                  if (p / "config.json").exists())
    written: list[Path] = []
    out = Path(out_dir) / "views"
    for run in runs:
        if not RunDir(run).checkpoints():
            continue
        written.append(view_run(run, "last", example=0,
                                out=out / f"ir-{run.parent.name}-{run.name}-last.html"))
    _record_views(summary, out_dir, written)
    return written
