"""Confidence intervals over seeds: reported beside every verdict; a verdict reads one only
where its spec registers it as a condition (CR-9's ``ft_rise_from_lam_s_lo95``, computed by
the spec's ``derive``; docs/registry.md)."""

from __future__ import annotations

import math

__all__ = ["CI_METHOD", "ci95", "clip_interval", "interval"]

CI_METHOD = ("two-sided 95% Student-t interval of the mean over seeds, clipped to the "
             "metric's declared range (claims.registry.METRIC_RANGES); no verdict reads it")


def interval(values, bounds: tuple[float, float] | None = None) -> tuple[float, float, bool]:
    """(lo, hi, clipped): the two-sided 95% Student-t interval of the mean over seeds ((v, v)
    for a single value), clipped to ``bounds`` (a metric's declared range, e.g. (0, 1) for
    an accuracy: the mean of values in a range lies in it, so clipping never drops the true
    mean and keeps the t-interval's coverage); ``clipped`` says whether an end was moved.
    No verdict reads an interval (docs/registry.md, change log)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return (float("nan"), float("nan"), False)
    n = len(vals)
    mean = sum(vals) / n
    if n == 1:
        lo = hi = mean
    else:
        from scipy import stats

        sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
        half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    return clip_interval(lo, hi, bounds)


def clip_interval(lo: float, hi: float, bounds: tuple[float, float] | None
                  ) -> tuple[float, float, bool]:
    """(lo, hi, clipped): the interval moved inside ``bounds`` (None: unchanged); also for an
    interval stored before the metric ranges were declared."""
    if bounds is None:
        return (lo, hi, False)
    clo, chi = max(lo, float(bounds[0])), min(hi, float(bounds[1]))
    return (clo, chi, (clo, chi) != (lo, hi))


def ci95(values, bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """Two-sided 95% Student-t interval of the mean over seeds ((v, v) for a single value),
    clipped to ``bounds`` when given (:func:`interval`)."""
    lo, hi, _ = interval(values, bounds)
    return (lo, hi)
