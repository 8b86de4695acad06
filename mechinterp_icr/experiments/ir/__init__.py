"""Reproduction of paper IR (in-context factual recall): claims IR-1..IR-8.

``profile(name)`` gives the :class:`IRConfig` of a profile (``PROFILES``); overrides go
through :func:`mechinterp_icr.config.apply_overrides` with the flat field names
(``n=1024``, ``sweep_n=[64,128,256]``); ``reproduce(cfg, out_dir, seeds, summary)`` runs the
stages in order (:mod:`.reproduce`). Modules: ``config`` (the config and profiles), ``train``
(fast-path and HookedTransformer runs, the IR metric record), ``stages`` (per-seed stages),
``sweeps`` (gap against n, sample complexity, the IR-6/IR-7 gap sweep), ``controls``
(induction control, row overwrite), ``claims`` (metrics -> claims).
"""

from mechinterp_icr.experiments.ir.config import PROFILES, IRConfig, profile
from mechinterp_icr.experiments.ir.reproduce import reproduce

__all__ = ["PROFILES", "IRConfig", "profile", "reproduce"]
