"""Reproduction of paper IR (in-context factual recall): claims IR-1..IR-8.

``profile(name)`` gives the :class:`IRConfig` of a profile (``PROFILES``); overrides go
through :func:`mechinterp_icr.config.apply_overrides` with dotted keys (``n=1024``,
``sample_complexity.n=[64,128,256]``). :mod:`.reproduce` gives ``plan(cfg, out_dir, seeds)``
(the jobs: per seed, and per sweep setting and seed), ``summarise(cfg, out_dir, seeds,
records, summary)`` (the summary as a pure function of the job records) and
``reproduce(cfg, out_dir, seeds, summary, workers=1, ray_address=None, threads=1)`` (both,
through :func:`mechinterp_icr.jobs.run_jobs`). Modules: ``config`` (the config and
profiles), ``train`` (fast-path and HookedTransformer runs, the IR metric record), ``stages``
(per-seed stages), ``sweeps`` (gap against n, sample complexity, the IR-6/IR-7 gap sweep),
``controls`` (induction control, row overwrite), ``jobs`` (the job functions), ``claims``
(metrics -> claims).
"""

from mechinterp_icr.experiments.ir.config import PROFILES, IRConfig, profile
from mechinterp_icr.experiments.ir.reproduce import plan, reproduce, summarise

__all__ = ["PROFILES", "IRConfig", "plan", "profile", "reproduce", "summarise"]
