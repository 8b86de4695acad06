"""Reproduction of paper CR: contextual recall (claims CR-1 .. CR-7; SPEC section 1).

The interface every paper package offers the runner:

- :data:`PROFILES`: ``("quick", "paper")``;
- :func:`profile` ``(name) -> CRConfig``: the profile's config (unknown names are a
  ``ConfigError``); ``config.apply_overrides(cfg, ["taskvec.n_pc=4", ...])`` edits any field;
- :class:`CRConfig`: the one frozen, validated config of every stage;
- :func:`reproduce` ``(cfg, out_dir, seeds, summary)``: the stages in order.

Modules: ``config`` (dataclasses, profiles), ``train`` (pretraining and finetuning branches),
``evaluate`` (checkpoint and final evaluations), ``sweep`` (the CR-3 sweep), ``taskvec``
(CR-4), ``mechanism`` (CR-5, CR-6), ``cascade`` (CR-7 training), ``claims`` (results ->
claims), ``reproduce`` (the stage list). Figures: ``mechinterp_icr.viz.cr_figures``.
"""

from mechinterp_icr.experiments.cr.config import PROFILES, CRConfig, profile
from mechinterp_icr.experiments.cr.reproduce import reproduce

__all__ = ["PROFILES", "CRConfig", "profile", "reproduce"]
