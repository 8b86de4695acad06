"""The Python entry point: a run's checkpoint as a real ``HookedTransformer`` and its task.

    import mechinterp_icr as mi
    model, task = mi.load("out/runs/cr/seed0")                     # main phase, last checkpoint
    model, task = mi.load("out/runs/cr/seed0", phase="pretrain")   # last PT checkpoint
    model, task = mi.load("out/runs/cr/seed0", "ft-icl-0000010")   # one checkpoint by name
    model.to_str_tokens(task.sample_icl(rng, 1).tokens[0])         # ['[BOS]', 'S3', ...]
    logits, cache = model.run_with_cache(model.to_tokens("[BOS] S1 A0_3 [SEP] S2"))

The model carries a :class:`TaskTokenizer` (``model.tokenizer``): the task's vocabulary as the
small part of a HuggingFace tokenizer TransformerLens uses, so ``to_tokens``, ``to_str_tokens``
and ``to_string`` work, and circuitsvis views can be labelled with ``model.to_str_tokens``.
A prompt is the tokens' names separated by spaces; no BOS is added (``[BOS]`` is written out
where the task has one).

Which checkpoint ``load`` picks without a ``phase``: ``last`` / ``first`` mean the last / first
checkpoint of the run's main phase: ``ft-icl`` when the run has it (a CR reproduction run),
else the last phase the run trained, never an all-weights comparison arm (``*-allw``). Any
other ``checkpoint`` is a selection (``phase:NAME:last``, a name, ``steps:A-B``) that must
name exactly one checkpoint.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mechinterp_icr.config import ConfigError
from mechinterp_icr.pipeline import main_phase
from mechinterp_icr.store.rundir import RunDir, RunError

__all__ = ["TaskTokenizer", "load", "attach_tokenizer", "main_phase", "resolve_checkpoint"]


class TaskTokenizer:
    """A task vocabulary dressed as the part of a HuggingFace tokenizer that TransformerLens
    calls (``__call__``, ``encode``, ``decode``, ``batch_decode``, the special tokens and
    ``padding_side``). Tokens are separated by whitespace; an unknown token is a ValueError
    naming it. Padding (several prompts of different lengths) uses ``[PAD]`` when the
    vocabulary has one, else token 0, on the right.

    No task vocabulary has an end-of-sequence token (CR's ``[SEP]`` separates records and is
    never a training target), so ``eos_token_id`` is None; :func:`attach_tokenizer` makes the
    model's ``generate`` default to ``stop_at_eos=False`` accordingly. Without a ``[PAD]``
    (IR, induction) ``pad_token`` is None and ``pad_token_id`` is -1, an id no token has:
    TransformerLens masks the positions whose id equals ``pad_token_id`` (``generate``, a KV
    cache, left padding), and token 0 is a real subject / BOS there, not padding."""

    def __init__(self, vocab, name: str = "task-vocab"):
        self.vocab = vocab
        self.name_or_path = name
        self.padding_side = "right"
        self._index = dict(vocab.index)
        self.bos_token = "[BOS]" if "[BOS]" in self._index else None
        self.pad_token = "[PAD]" if "[PAD]" in self._index else None
        self._pad_fill = self._index["[PAD]"] if self.pad_token else 0  # what pads a row
        self.eos_token = None
        self.unk_token = None
        self.init_kwargs: dict[str, Any] = {"name_or_path": name}

    # ids of the special tokens (None when the vocabulary has none)
    @property
    def bos_token_id(self) -> int | None:
        return None if self.bos_token is None else self._index[self.bos_token]

    @property
    def pad_token_id(self) -> int:
        """``[PAD]``'s id; -1 (no token) where the vocabulary has none."""
        return -1 if self.pad_token is None else self._index[self.pad_token]

    @property
    def eos_token_id(self) -> None:
        return None

    def get_vocab(self) -> dict[str, int]:
        return dict(self._index)

    @property
    def vocab_size(self) -> int:
        return len(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        try:
            return self.vocab.encode(text)
        except ValueError as e:
            raise ValueError(f"{e} (prompts are token names separated by spaces)") from None

    def __call__(self, text: str | Sequence[str], return_tensors: str | None = None,
                 padding: bool = False, truncation: bool = False, max_length: int | None = None,
                 **_: Any) -> dict[str, Any]:
        single = isinstance(text, str)
        rows = [self.encode(t) for t in ([text] if single else list(text))]
        if truncation and max_length:
            rows = [r[:max_length] for r in rows]
        masks = [[1] * len(r) for r in rows]
        if padding or return_tensors == "pt":
            width = max((len(r) for r in rows), default=0)
            pad = self._pad_fill
            if self.padding_side == "left":
                masks = [[0] * (width - len(r)) + m for r, m in zip(rows, masks)]
                rows = [[pad] * (width - len(r)) + r for r in rows]
            else:
                masks = [m + [0] * (width - len(r)) for r, m in zip(rows, masks)]
                rows = [r + [pad] * (width - len(r)) for r in rows]
        if return_tensors == "pt":
            return {"input_ids": torch.tensor(rows, dtype=torch.long),
                    "attention_mask": torch.tensor(masks, dtype=torch.long)}
        if single:
            return {"input_ids": rows[0], "attention_mask": masks[0]}
        return {"input_ids": rows, "attention_mask": masks}

    @staticmethod
    def _ids(tokens) -> list[int]:
        if isinstance(tokens, torch.Tensor):
            return [int(t) for t in tokens.reshape(-1).tolist()]
        if isinstance(tokens, int):
            return [tokens]
        return [int(t) for t in tokens]

    def decode(self, tokens, skip_special_tokens: bool = False, **_: Any) -> str:
        ids = self._ids(tokens)
        if skip_special_tokens:
            special = {i for i in (self.bos_token_id, self.pad_token_id) if i is not None}
            ids = [i for i in ids if i not in special]
        return self.vocab.decode(ids) if ids else ""

    def batch_decode(self, sequences, skip_special_tokens: bool = False, **kw: Any) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in sequences]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.vocab.tokens([ids])[0]
        return self.vocab.tokens(self._ids(ids))

    def __repr__(self) -> str:
        return f"TaskTokenizer({self.name_or_path!r}, {len(self)} tokens)"


def _bind(method, model, args, kwargs) -> inspect.BoundArguments:
    """``method``'s (an unbound HookedTransformer method) arguments as the caller gave them."""
    return inspect.signature(method).bind_partial(model, *args, **kwargs)


def _no_eos_default(ba: inspect.BoundArguments, tokenizer) -> None:
    """``stop_at_eos=False`` unless the caller set it or passed an ``eos_token_id``, when the
    tokenizer has no end token (TransformerLens' default True then fails)."""
    if ("stop_at_eos" not in ba.arguments and ba.arguments.get("eos_token_id") is None
            and getattr(tokenizer, "eos_token_id", None) is None):
        ba.arguments["stop_at_eos"] = False


def _task_generate(self, *args, **kwargs):
    """``HookedTransformer.generate`` with the task tokenizer's defaults: ``stop_at_eos`` is
    False unless an ``eos_token_id`` is passed (no task vocabulary has an end token), and a
    string result is the whole sequence in the task's token names, ``[BOS]`` included as it
    was written (TransformerLens would drop it as a special token); the ``[PAD]`` that pads
    a batch of prompts on the left, and what follows a row's stop token, are left out."""
    from transformer_lens import HookedTransformer

    tok = self.tokenizer
    if not isinstance(tok, TaskTokenizer):  # a tokenizer set since: plain TransformerLens
        return HookedTransformer.generate(self, *args, **kwargs)
    ba = _bind(HookedTransformer.generate, self, args, kwargs)
    _no_eos_default(ba, tok)
    inp = ba.arguments.get("input", "")
    if isinstance(inp, str):
        widths = [len(tok.encode(inp))]
    elif isinstance(inp, list):
        widths = [len(tok.encode(t)) for t in inp]
        if tok.pad_token is None and len(set(widths)) > 1:
            raise ValueError(f"the {tok.name_or_path} vocabulary has no pad token: generate "
                             "prompts of different lengths one at a time (or as token rows "
                             "of one length)")
    else:
        widths = [inp.shape[1]] if isinstance(inp, torch.Tensor) and inp.ndim == 2 else None
    return_type = ba.arguments.get("return_type", "input")
    if widths is None or not (return_type == "str" or (
            return_type == "input" and isinstance(inp, (str, list)))):
        return HookedTransformer.generate(*ba.args, **ba.kwargs)
    ba.arguments["return_type"] = "tokens"
    out = HookedTransformer.generate(*ba.args, **ba.kwargs)
    if not isinstance(out, torch.Tensor):  # output_logits=True: a ModelOutput, left as is
        return out
    stop = ba.arguments.get("eos_token_id")
    if not ba.arguments.get("stop_at_eos", True):
        stops: set[int] = set()
    elif stop is None:
        stops = {tok.eos_token_id} - {None}
    else:
        stops = {int(stop)} if isinstance(stop, int) else {int(t) for t in stop}
    width = max(widths)
    texts = []
    for row in out.tolist():
        head, new = row[:width], row[width:]
        if tok.pad_token is not None:  # the left padding of a batch of prompts
            while head and head[0] == tok.pad_token_id:
                head = head[1:]
        cut = next((i + 1 for i, t in enumerate(new) if t in stops), len(new))
        texts.append(tok.decode(head + new[:cut]))
    return texts if isinstance(inp, list) and len(inp) > 1 else texts[0]


def _task_generate_stream(self, *args, **kwargs):
    """``HookedTransformer.generate_stream`` with ``stop_at_eos`` False unless an
    ``eos_token_id`` is passed (see :func:`_task_generate`)."""
    from transformer_lens import HookedTransformer

    ba = _bind(HookedTransformer.generate_stream, self, args, kwargs)
    _no_eos_default(ba, self.tokenizer)
    return HookedTransformer.generate_stream(*ba.args, **ba.kwargs)


def attach_tokenizer(model, task) -> Any:
    """Give ``model`` (a HookedTransformer) the task's vocabulary as its tokenizer; returns the
    model. ``set_tokenizer`` is not used: it wants a HuggingFace tokenizer and would load one
    from the hub; the shim is assigned directly and BOS is never added automatically.

    The model's ``generate`` and ``generate_stream`` (bound to this instance; the class is
    still ``HookedTransformer``) then run to ``max_new_tokens`` unless an ``eos_token_id`` is
    passed, since the task has no end token, and ``generate`` on a string returns the prompt
    and the new tokens in the task's token names (:func:`_task_generate`)."""
    model.tokenizer = TaskTokenizer(task.vocab, name=type(task).__name__)
    model.cfg.tokenizer_prepends_bos = False
    model.cfg.default_prepend_bos = False
    model.generate = types.MethodType(_task_generate, model)
    model.generate_stream = types.MethodType(_task_generate_stream, model)
    return model


def resolve_checkpoint(run: RunDir, checkpoint: str | int = "last", phase: str | None = None):
    """The one :class:`~mechinterp_icr.store.rundir.CheckpointInfo` that ``checkpoint`` and
    ``phase`` name in ``run``; RunError / ConfigError otherwise."""
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, (str, int)):
        raise ConfigError(f"checkpoint = {checkpoint!r} is not allowed; expected 'last', "
                          "'first', a step number, or a selection naming one checkpoint")
    if phase is None and checkpoint in ("last", "first"):
        phase = main_phase(run)
    if phase is not None:
        if phase not in run.phases():
            raise RunError(f"phase = {phase!r} has no checkpoint in {run.path}; phases here: "
                           f"{run.phases()}")
        if checkpoint in ("last", "first"):
            sel = f"phase:{phase}:{checkpoint}"
        elif isinstance(checkpoint, int) or str(checkpoint).isdigit():
            steps = [c for c in run.checkpoints() if c.phase == phase]
            got = [c for c in steps if c.step == int(checkpoint)]
            if not got:
                raise RunError(f"checkpoint = {checkpoint!r}: phase {phase!r} of {run.path} has "
                               f"no checkpoint at that step; steps: "
                               f"{[c.step for c in steps][:20]}")
            return got[0]
        else:
            sel = str(checkpoint)
    else:
        if isinstance(checkpoint, int):
            raise ConfigError(f"checkpoint = {checkpoint} (a step) needs a phase; e.g. "
                              f"load(run, {checkpoint}, phase={main_phase(run)!r})")
        sel = checkpoint
    cks = run.select(sel)
    if phase is not None:
        cks = [c for c in cks if c.phase == phase]
    if len(cks) != 1:
        raise RunError(f"checkpoint = {checkpoint!r} selects {len(cks)} checkpoints in "
                       f"{run.path}; expected exactly one (e.g. last, phase:NAME:last or a "
                       f"name like {run.checkpoints()[-1].name})")
    return cks[0]


def load(run_dir: str | Path, checkpoint: str | int = "last", phase: str | None = None,
         device: str | None = None):
    """``(model, task)``: the checkpoint of the run at ``run_dir`` as a ``HookedTransformer``
    in eval mode, with the task's tokenizer attached, and the run's task (built from the
    run's config and seed: the same vocabulary, subjects and splits as in training).

    ``checkpoint``: ``last`` (default), ``first``, a step (with ``phase``), or a selection
    naming one checkpoint (``phase:NAME:last``, ``ft-icl-0000050``). ``phase``: restrict to
    one phase; without it ``last``/``first`` use the run's main phase (module docstring).
    The chosen checkpoint's name is ``model.cfg.model_name``.
    """
    from mechinterp_icr.models.factory import build_model
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.checkpoint import load_checkpoint

    run = RunDir(run_dir)
    cfg, task, _ = load_run_model(run)
    ck = resolve_checkpoint(run, checkpoint, phase)
    model = build_model(cfg.model, seed=cfg.seed, device=device)
    load_checkpoint(ck.stem, model)
    model.eval()
    model.cfg.model_name = ck.name
    return attach_tokenizer(model, task), task
