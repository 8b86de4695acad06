"""Reproduction of paper CR: contextual recall (claims CR-1 .. CR-7; SPEC section 1).

The interface every paper package offers the runner:

- :data:`PROFILES`: ``("quick", "paper")``;
- :func:`profile` ``(name) -> CRConfig``: the profile's config (unknown names are a
  ``ConfigError``); ``config.apply_overrides(cfg, ["taskvec.n_pc=4", ...])`` edits any field;
- :class:`CRConfig`: the one frozen, validated config of every stage;
- :func:`plan` ``(cfg, out_dir, seeds) -> list[jobs.Job]``: the reproduction cut into jobs
  (per seed: training, CR-4, CR-5/6, CR-7; per sweep setting and seed; per lam and seed);
- :func:`summarise` ``(cfg, out_dir, seeds, records, summary)``: every claim, table and
  figure from the job records (a pure function of them), then the summary is written;
- :func:`reproduce` ``(cfg, out_dir, seeds, summary, workers=1, ray_address=None,
  threads=1)``: ``jobs.run_jobs(plan(...))`` then :func:`summarise`.

Modules: ``config`` (dataclasses, profiles), ``train`` (pretraining and finetuning branches),
``evaluate`` (checkpoint and final evaluations), ``sweep`` (the CR-3 sweep), ``taskvec``
(CR-4), ``mechanism`` (CR-5, CR-6), ``cascade`` (CR-7 training), ``claims`` (results ->
claims), ``reproduce`` (the job plan and the summary). Figures:
``mechinterp_icr.viz.cr_figures``.
"""

from mechinterp_icr.experiments.cr.config import PROFILES, CRConfig, profile
from mechinterp_icr.experiments.cr.reproduce import plan, reproduce, summarise

__all__ = ["PROFILES", "CRConfig", "plan", "profile", "reproduce", "summarise"]
