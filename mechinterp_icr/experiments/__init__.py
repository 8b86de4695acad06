"""Paper reproductions: one package per paper (``cr``, ``ir``) with the same interface.

Each package ``mechinterp_icr.experiments.<paper>`` exports:

- ``PROFILES``: the profile names, ``("quick", "paper")``;
- ``profile(name) -> Config``: the profile's config, an instance of the package's one frozen,
  validated config dataclass (an unknown name raises ``ConfigError`` naming the allowed
  ones); ``config.apply_overrides(cfg, ["key.sub=value", ...])`` edits any field of any stage
  and ``to_dict`` / ``from_dict`` round-trip it;
- the config class itself (``CRConfig``, ``IRConfig``);
- ``reproduce(cfg, out_dir, seeds, summary) -> None``: every stage in order, each a named
  call timed by ``summary.stage(name)``; it writes ``summary`` to ``out_dir`` whenever
  results should be safe on disk.

Inside a package: ``config`` (dataclasses, profiles), ``train`` (training runs), analysis
stages, ``claims`` (results -> ``Claim`` objects) and ``reproduce`` (the stage list). Figures
live in ``mechinterp_icr.viz`` and take result rows.
"""
