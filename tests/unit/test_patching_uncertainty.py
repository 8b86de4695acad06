"""The uncertainty of patching cells (``interp.uncertainty``): the percentile bootstrap over
prompt pairs covers the mean, narrows with more prompts, equals a direct numpy bootstrap on the
same per-prompt values and seed, has zero width where every prompt agrees; the recovery's
interval and the sign-flip p-value; bad options are refused naming the option."""

import numpy as np
import pytest

from mechinterp_icr.config import ConfigError
from mechinterp_icr.interp import uncertainty as U


def _direct(values: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """The textbook bootstrap of one cell: resample prompts, mean, 2.5 / 97.5 percentiles."""
    idx = np.random.default_rng(seed).integers(0, len(values), size=(n_resamples, len(values)))
    means = values[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def test_the_interval_covers_the_mean_and_equals_a_direct_bootstrap():
    rng = np.random.default_rng(3)
    cells = rng.normal(rng.normal(size=(2, 5, 1)), 1.0, size=(2, 5, 40))  # (L, T, prompts)
    lo, hi = U.bootstrap_interval(cells, n_resamples=500, seed=11)
    assert lo.shape == hi.shape == (2, 5)
    mean = cells.mean(-1)
    assert np.all(lo <= mean) and np.all(mean <= hi) and np.all(hi - lo > 0)
    for l in range(2):
        for p in range(5):
            d_lo, d_hi = _direct(cells[l, p], 500, 11)
            assert lo[l, p] == pytest.approx(d_lo, abs=1e-12)
            assert hi[l, p] == pytest.approx(d_hi, abs=1e-12)
    # another seed gives another (but close) interval; the same seed the same one
    lo2, _ = U.bootstrap_interval(cells, n_resamples=500, seed=12)
    assert not np.array_equal(lo, lo2) and np.allclose(lo, lo2, atol=0.3)
    assert np.array_equal(lo, U.bootstrap_interval(cells, n_resamples=500, seed=11)[0])


def test_the_interval_shrinks_with_more_prompts():
    rng = np.random.default_rng(0)
    widths = []
    for n in (16, 64, 256, 1024):
        lo, hi = U.bootstrap_interval(rng.normal(0.5, 1.0, size=(3, n)), 400, seed=0)
        widths.append(float((hi - lo).mean()))
    assert all(a > b for a, b in zip(widths, widths[1:])), widths
    assert widths[0] / widths[-1] == pytest.approx(8, rel=0.25)  # ~ 1 / sqrt(n)


def test_a_cell_whose_prompts_agree_has_a_zero_width_interval():
    values = np.stack([np.full(30, 0.1), np.linspace(-1, 1, 30)])
    lo, hi = U.bootstrap_interval(values, 300, seed=4)
    assert hi[0] - lo[0] == 0 and lo[0] == pytest.approx(0.1)
    assert hi[1] - lo[1] > 0
    # recovery: a cell equal to the corrupted run on every prompt is exactly [0, 0], p = 1
    rng = np.random.default_rng(1)
    clean, corr = rng.normal(3, 1, 30), rng.normal(-3, 1, 30)
    patched = np.stack([corr, corr + 0.5 * (clean - corr)])
    rlo, rhi = U.recovery_interval(patched, clean, corr, 300, seed=4)
    assert rlo[0] == rhi[0] == 0
    assert rlo[1] == pytest.approx(0.5) and rhi[1] == pytest.approx(0.5)  # every prompt 0.5
    p = U.sign_flip_p(patched - corr, 300, seed=4)
    assert p[0] == 1 and p[1] == pytest.approx(1 / 301)


def test_the_recovery_interval_is_a_ratio_bootstrap_of_the_same_resamples():
    rng = np.random.default_rng(7)
    n = 50
    clean, corr = rng.normal(4, 1, n), rng.normal(-1, 1, n)
    patched = corr + rng.normal(0.3, 0.5, n) * (clean - corr)
    lo, hi = U.recovery_interval(patched[None], clean, corr, 800, seed=2)
    idx = np.random.default_rng(2).integers(0, n, size=(800, n))
    rec = (patched[idx].mean(1) - corr[idx].mean(1)) / (clean[idx].mean(1) - corr[idx].mean(1))
    d_lo, d_hi = np.percentile(rec, [2.5, 97.5])
    assert lo[0] == pytest.approx(d_lo, abs=1e-9) and hi[0] == pytest.approx(d_hi, abs=1e-9)
    point = (patched.mean() - corr.mean()) / (clean.mean() - corr.mean())
    assert lo[0] < point < hi[0]


def test_the_sign_flip_p_value_separates_an_effect_from_noise():
    rng = np.random.default_rng(5)
    effect = rng.normal(1.0, 1.0, 64)
    noise = rng.normal(0.0, 1.0, 64)
    p = U.sign_flip_p(np.stack([effect, noise]), 999, seed=0)
    assert p[0] == pytest.approx(1 / 1000) and p[1] > 0.05
    # under the null (symmetric effects) p is roughly uniform: about 5% below 0.05
    null = U.sign_flip_p(rng.normal(0, 1, size=(400, 32)), 199, seed=1)
    assert 0.01 <= float((null < 0.05).mean()) <= 0.10


def test_torch_values_are_accepted():
    import torch

    v = torch.linspace(0, 1, 20, dtype=torch.float32).reshape(1, 20)
    lo, hi = U.bootstrap_interval(v, 100, seed=0)
    assert _direct(v[0].double().numpy(), 100, 0) == pytest.approx((lo[0], hi[0]), abs=1e-12)


@pytest.mark.parametrize("kw,name", [({"n_resamples": -5}, "n_resamples"),
                                     ({"n_resamples": 0}, "n_resamples"),
                                     ({"n_resamples": 2.5}, "n_resamples"),
                                     ({"seed": -1}, "seed")])
def test_bad_options_are_refused_naming_the_option(kw, name):
    with pytest.raises(ConfigError) as e:
        U.bootstrap_interval(np.zeros((1, 4)), **kw)
    msg = str(e.value)
    assert msg.startswith(f"{name} = ") and "not allowed; expected" in msg and "\n" not in msg


def test_the_scripts_defaults_are_the_librarys():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "analyses" / "_common.py"
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("_common_under_test", path)
        common = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(common)
    finally:
        sys.path.remove(str(path.parent))
    assert (common.N_RESAMPLES, common.MAX_RESAMPLES, common.BOOTSTRAP_SEED) == \
        (U.N_RESAMPLES, U.MAX_RESAMPLES, U.SEED)
