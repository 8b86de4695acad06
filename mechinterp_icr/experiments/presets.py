"""Training presets: named bundles of ``--set`` items for ``icr train --preset NAME``.

``tiny`` makes every phase of both papers (the main CR model, its finetuning branches, the
mechanism model, the IR phases) and the induction task train in seconds to a minute on one
CPU thread, small enough to try the workbench's whole workflow from the README. It changes the
sizes (16 subjects, 2 types, d_model 32 for CR; n = 8 for IR) and the step counts, never what a
phase trains or on which data: the full settings are the reproduction's profile (``--profile
quick``), which is what ``icr train`` uses without ``--preset``.

A preset's items come first and the command's own ``--set`` items win over them: ``--preset
tiny --set train.steps=600`` trains the tiny model for 600 steps. On the main CR model's phases
``train.KEY`` and the phase's own section (``pretrain.KEY``, ``finetune.KEY``) are one setting.
A finetuning phase takes its task and model from the run it starts from, so its preset holds
only its own training section: finetune a tiny pretraining with ``--preset tiny`` too.
"""

from __future__ import annotations

from mechinterp_icr.config import ConfigError

__all__ = ["PRESETS", "preset_overrides"]

PRESETS = ("tiny",)

# the CR task and main model of the tests' tiny runs (docs/circuit_tools.md, "The example runs")
_CR_TASK = ["task.n_subjects=16", "task.n_grammar=4", "task.n_types=2", "task.n_values=4",
            "task.n_tuples=3", "task.n_demos=2", "task.max_demos=3", "task.grammar_len_max=3"]
_CR_EVAL = ["eval_n=128", "eval_n_by_k=128", "ckpt_eval_n=32"]
_CR_MODEL = ["model.d_model=32", "model.d_head=32", "model.d_mlp=64", "model.n_ctx=0"]
_CR_FT = ["train.steps=80", "train.lr=0.005", "train.batch_size=64",
          "train.checkpoint_dense_until=3", "train.checkpoint_every=20"]
# the mechanism model: both phases repeat the cascade settings (mech-ft-icl checks its start
# is the model they give)
_CR_MECH = ["cascade.d_model=32", "cascade.d_head=16", "cascade.pt_steps=400",
            "cascade.pt_batch=64", "cascade.ft_steps=60", "cascade.ft_batch=64",
            "cascade.ft_lr=0.006", "cascade.dense_until=4", "cascade.checkpoint_every=10",
            "cascade.probe_batch=32"]
_IR_HOOKED = ["hooked.n=8", "hooked.N=16", "hooked.steps=3", "hooked.dense=2", "hooked.eval=32"]
_IR_MEMORY = ["pretrained.n=8", "pretrained.N=16", "pretrained.steps=5",
              "pretrained.ft_steps=5"]

_TINY = {
    ("cr", "pretrain"): _CR_TASK + _CR_MODEL + _CR_EVAL + [
        "train.steps=300", "train.lr=0.005", "train.batch_size=64",
        "train.checkpoint_every=100"],
    ("cr", "mech-pretrain"): _CR_TASK + _CR_MECH + ["ckpt_eval_n=32"],
    ("cr", "mech-ft-icl"): _CR_MECH + ["ckpt_eval_n=32"],
    ("ir", "memory-pretrain"): _IR_MEMORY,
    ("ir", "memory-pgd"): _IR_MEMORY,
    ("induction", None): ["train.steps=300", "train.checkpoint_every=100", "model.n_heads=2",
                          "model.d_head=16", "model.d_model=32", "model.attn_only=true"],
}


def _tiny(task: str, phase: str | None) -> list[str]:
    if (task, phase) in _TINY:
        return list(_TINY[task, phase])
    if task == "cr":  # every finetuning branch of the main model
        return _CR_FT + _CR_EVAL
    if task == "ir":  # the HookedTransformer PGD / GD phases
        return list(_IR_HOOKED)
    return list(_TINY["induction", None])


def _key(item: str, section: str | None) -> str:
    key = item.partition("=")[0].strip()
    if section and key.startswith(section + "."):
        return "train." + key[len(section) + 1:]
    return key


def preset_overrides(name: str | None, task: str, phase: str | None,
                     overrides: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The ``--set`` items of preset ``name`` for ``task`` / ``phase`` followed by
    ``overrides`` (the command's own, which win: a preset item whose setting they give is
    dropped). ``name`` None: ``overrides`` unchanged. An unknown preset is a ConfigError."""
    overrides = list(overrides)
    if name is None:
        return overrides
    if name not in PRESETS:
        raise ConfigError(f"--preset = {name!r} is not allowed; expected one of "
                          f"{', '.join(PRESETS)}")
    section = {"pretrain": "pretrain"}.get(phase or "", "finetune") if task == "cr" else None
    given = {_key(o, section) for o in overrides}
    return [i for i in _tiny(task, phase) if _key(i, section) not in given] + overrides
