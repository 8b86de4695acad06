"""mechinterp_icr: a workbench for in-context recall.

    import mechinterp_icr as mi
    model, task = mi.load("out/runs/cr/seed0")   # a HookedTransformer and its task

``load`` (and :class:`~mechinterp_icr.api.TaskTokenizer`) are imported on first use, so that
``import mechinterp_icr.config`` and the ``icr`` command stay fast.
"""
__version__ = "0.1.0"

__all__ = ["load", "TaskTokenizer", "attach_tokenizer", "__version__"]


def __getattr__(name: str):
    if name in ("load", "TaskTokenizer", "attach_tokenizer"):
        import mechinterp_icr.api

        return getattr(mechinterp_icr.api, name)
    raise AttributeError(f"module 'mechinterp_icr' has no attribute {name!r}")
