"""Uncertainty over prompts of patching cells: percentile bootstrap intervals and sign-flip
p-values, from the per-prompt values the patching engine returns with ``per_prompt=True``.

One cell of a patching table is a mean over prompt pairs (or a ratio of such means: the
normalised recovery). Its uncertainty over prompts is read from the per-prompt values:

- :func:`resample_indices`: ``n_resamples`` resamples of the ``n`` prompt pairs with
  replacement, ``np.random.default_rng(seed).integers(0, n, (n_resamples, n))``; every cell
  and the clean and corrupted runs use the same resamples (a resample is a set of prompt
  pairs, not of cells).
- :func:`bootstrap_interval`: the percentile interval of the mean over prompts.
- :func:`recovery_interval`: the percentile interval of the normalised recovery
  ``(mean patched - mean corrupted) / (mean clean - mean corrupted)``, numerator and
  denominator recomputed on each resample.
- :func:`sign_flip_p`: the two-sided sign-flip (paired randomisation) p-value of the cell's
  effect ``patched - corrupted`` per prompt: ``(1 + #{|mean(s * d)| >= |mean(d)|}) /
  (1 + n_resamples)`` over random signs ``s``; 1 where patching changes no prompt.

Defaults (:data:`N_RESAMPLES`, :data:`SEED`, :data:`LEVEL`) are the analyses' defaults; the
analyses record the values they used (``RUN/analyses/index.json``). See
docs/circuit_tools.md.
"""

from __future__ import annotations

import numpy as np

from mechinterp_icr.config import check

__all__ = ["LEVEL", "MAX_RESAMPLES", "N_RESAMPLES", "SEED", "bootstrap_interval",
           "check_bootstrap", "recovery_interval", "resample_indices", "sign_flip_p"]

N_RESAMPLES = 1000  # resamples of the prompt pairs per interval (and sign flips per p-value)
MAX_RESAMPLES = 100_000
SEED = 0  # seed of the resamples (independent of the prompts' seed)
LEVEL = 0.95  # the intervals' coverage
_CHUNK = 1 << 22  # elements gathered at once (cells x resamples x prompts)


def check_bootstrap(n_resamples: int, seed: int, level: float = LEVEL) -> None:
    """A ConfigError naming the option, its value and what is allowed, unless
    ``n_resamples`` is an integer in [1, MAX_RESAMPLES], ``seed`` a non-negative integer and
    ``level`` in (0, 1)."""
    check(isinstance(n_resamples, (int, np.integer)) and not isinstance(n_resamples, bool)
          and 1 <= n_resamples <= MAX_RESAMPLES, "n_resamples", n_resamples,
          f"an integer in [1, {MAX_RESAMPLES:,}]")
    check(isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
          and 0 <= seed < 2**63, "seed", seed, "an integer in [0, 2**63)")
    check(isinstance(level, float) and 0 < level < 1, "level", level, "a number in (0, 1)")


def resample_indices(n: int, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """``(n_resamples, n)`` prompt indices, each row ``n`` draws with replacement."""
    check_bootstrap(n_resamples, seed)
    check(isinstance(n, (int, np.integer)) and n >= 1, "n", n, "at least one prompt")
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def _values(x) -> np.ndarray:
    """``x`` (numpy or torch, any shape with prompts last) as float64 numpy."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _resampled_means(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``v[..., idx].mean(-1)``: (..., n) values -> (..., n_resamples) resample means,
    gathered a few cells at a time (bounded memory)."""
    flat = v.reshape(-1, v.shape[-1])
    per = max(1, _CHUNK // idx.size)
    out = np.empty((flat.shape[0], idx.shape[0]))
    for i in range(0, flat.shape[0], per):
        out[i:i + per] = flat[i:i + per][:, idx].mean(-1)
    return out.reshape(*v.shape[:-1], idx.shape[0])


def _percentiles(stats: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.percentile(stats, [50 * (1 - level), 50 * (1 + level)], axis=-1)
    return lo, hi


def bootstrap_interval(values, n_resamples: int = N_RESAMPLES, seed: int = SEED,
                       level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``, each of shape ``values.shape[:-1]``: the percentile bootstrap interval
    (coverage ``level``) of the mean over the last axis (prompts) of ``values``. A cell
    whose values are all equal has ``lo == hi``."""
    check_bootstrap(n_resamples, seed, level)
    v = _values(values)
    idx = resample_indices(v.shape[-1], n_resamples, seed)
    return _percentiles(_resampled_means(v, idx), level)


def recovery_interval(patched, clean, corrupted, n_resamples: int = N_RESAMPLES,
                      seed: int = SEED, level: float = LEVEL
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``, each of shape ``patched.shape[:-1]``: the percentile bootstrap interval
    of the normalised recovery of each cell, ``(mean patched - mean corrupted) / (mean clean
    - mean corrupted)``, from per-prompt values ``patched`` (cells..., n) and ``clean``,
    ``corrupted`` (n,), resampling prompt pairs (the same resamples for numerator and
    denominator). A cell equal to the corrupted run on every prompt has ``lo == hi == 0``."""
    check_bootstrap(n_resamples, seed, level)
    p, c, x = _values(patched), _values(clean), _values(corrupted)
    check(c.shape == x.shape == p.shape[-1:], "clean, corrupted", (c.shape, x.shape),
          f"one value per prompt each, shape {p.shape[-1:]} like patched's last axis")
    idx = resample_indices(p.shape[-1], n_resamples, seed)
    num = _resampled_means(p - x, idx)  # (..., R)
    den = _resampled_means(c - x, idx)  # (R,)
    den = np.where(np.abs(den) < 1e-12, 1e-12, den)  # as interp.patching.normalised_recovery
    return _percentiles(num / den, level)


def sign_flip_p(effects, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """Two-sided sign-flip p-value per cell of the mean over the last axis of ``effects``
    (per-prompt ``patched - corrupted``; null: each prompt's effect is symmetric around 0),
    ``(1 + #{|mean(s * d)| >= |mean(d)|}) / (1 + n_resamples)`` over ``n_resamples`` draws
    of independent random signs ``s`` (seed ``[seed, 1]``, apart from the resamples). The
    smallest possible p is ``1 / (1 + n_resamples)``; a cell without effect has p = 1."""
    check_bootstrap(n_resamples, seed)
    d = _values(effects)
    flat = d.reshape(-1, d.shape[-1])
    signs = np.random.default_rng([seed, 1]).choice([-1.0, 1.0], size=(n_resamples,
                                                                       d.shape[-1]))
    obs = np.abs(flat.mean(-1))  # (cells,)
    null = np.abs(flat @ signs.T) / d.shape[-1]  # (cells, R)
    tol = 1e-9 * np.maximum(obs, np.abs(flat).max(-1, initial=0.0))  # float noise of a tie
    hits = (null >= (obs - tol)[:, None]).sum(-1)
    return ((1 + hits) / (1 + n_resamples)).reshape(d.shape[:-1])
