"""``icr calibrate``: the calibrations that produced registered CR values
(:mod:`mechinterp_icr.experiments.cr.calibrate`; docs/taskvec.md, "Calibrations"). Registered
on the ``icr`` group when :mod:`mechinterp_icr.cli` loads."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mechinterp_icr.cli.group import _fail, main, parse_seeds, profile_option, set_option
from mechinterp_icr.config import ConfigError

__all__ = ["calibrate"]

DECISION_SEEDS = frozenset(range(5))  # the published reproduction's seeds (make reproduce)
_PROFILE = profile_option("CR config")
_SET = set_option("CR config", " (see `icr config cr`)")


def _calibration_seeds(text: str) -> list[int]:
    """``A-B`` or comma-separated seeds, none of them a decision seed (a registered value
    chosen on the seeds that decide the claims would be tuned on them)."""
    a, sep, b = text.partition("-")
    if sep and a.strip().isdigit() and b.strip().isdigit() and int(a) <= int(b) < 10**6:
        seeds = list(range(int(a), int(b) + 1))
    else:
        try:
            seeds = parse_seeds(text)
        except ConfigError:
            raise ConfigError(f"--seeds = {text[:60]!r} is not allowed; expected A-B (A <= B) or "
                              "distinct non-negative integers joined by commas, e.g. "
                              "200-207") from None
    if DECISION_SEEDS & set(seeds):
        raise ConfigError(f"--seeds = {text[:60]!r} is not allowed; a calibration runs on seeds "
                          f"outside the decision seeds {sorted(DECISION_SEEDS)} (e.g. 200-207)")
    return seeds


@main.group()
def calibrate() -> None:
    """Measure what a registered CR value was chosen from, on seeds outside the decision seeds;
    prints the recommendation (registering it is a dated entry in docs/registry.md)."""


@calibrate.command("cr9-noise")
@click.option("--seeds", default="200-207", show_default=True,
              help="Seeds (A-B or comma-separated), none of 0-4.")
@click.option("--out", default="out-cr9-noise", show_default=True,
              type=click.Path(file_okay=False), help="Jobs and cr9_noise.json go here.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Jobs run at once (more than 1 starts a local Ray).")
@_PROFILE
@_SET
def cr9_noise_cmd(seeds: str, out: str, workers: int, profile: str,
                  overrides: tuple[str, ...]) -> None:
    """CR-9's retraining noise: eta^2 at the CR-4 hook after one full PT + ICL finetuning per
    seed at the registered lam (the CR-9 lam runs' own code), its SD over the seeds and the
    5-seed drop tolerance 2 sqrt(2) SD / sqrt(5). Registered as CR9_LAM_SD. Resumable: each
    seed's record is kept under OUT/jobs/cr/cr9-noise/."""
    from mechinterp_icr.experiments.cr.calibrate import cr9_noise
    from mechinterp_icr.runner import resolve_config

    try:
        seed_list = _calibration_seeds(seeds)
        cfg = resolve_config("cr", profile, list(overrides))
    except ConfigError as e:
        _fail(str(e))
    from mechinterp_icr.store.io import atomic_write_text

    res = cr9_noise(cfg, seed_list, Path(out), workers)
    atomic_write_text(Path(out, "cr9_noise.json"), json.dumps(res, indent=1))
    for s, eta, icl in zip(res["seeds"], res["ft_eta2"], res["ft_icl_exact"]):
        click.echo(f"seed {s}: ft eta^2 {eta:.4f}  held-out ICL exact "
                   f"{float('nan') if icl is None else icl:.3f}")
    click.echo(f"lam {res['lam']:g}: eta^2 mean {res['mean']:.4f}, SD {res['std']:.4f} over "
               f"{len(seed_list)} seeds -> drop tolerance for 5 seeds 2 sqrt(2) SD / sqrt(5) "
               f"= {res['tolerance_5_seeds']:.4f}  ({Path(out, 'cr9_noise.json')})")


@calibrate.command("shared-rate")
@click.option("--seeds", default="100-119", show_default=True,
              help="Task seeds (A-B or comma-separated), none of 0-4.")
@click.option("--n", "n", default=20000, show_default=True, type=click.IntRange(100, 10**6),
              help="Monte Carlo prompts per (seed, K).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Also write the table here.")
@_PROFILE
@_SET
def shared_rate_cmd(seeds: str, n: int, json_out: str | None, profile: str,
                    overrides: tuple[str, ...]) -> None:
    """The shared-token variant's sharing rate task.attr_share, before any training: per rate
    0, 0.1, .., 1 the ideal reader's type accuracy from the demo attribute tokens at K = 1 ..
    max_demos (mean over task seeds [min]), the worst seed's margins to the registered bounds,
    and the smallest rate meeting both on every seed and at mean +/- 3 SD."""
    import numpy as np

    from mechinterp_icr.claims.cr_registry import SHARED_IDEAL_K1_MAX, SHARED_IDEAL_KMAX_MIN
    from mechinterp_icr.experiments.cr.calibrate import recommended_rate, shared_rate_table
    from mechinterp_icr.runner import resolve_config
    from mechinterp_icr.store.io import atomic_write_text

    try:
        seed_list = _calibration_seeds(seeds)
        base = resolve_config("cr", profile, list(overrides)).task
    except ConfigError as e:
        _fail(str(e))
    table = shared_rate_table(base, tuple(seed_list), n)
    k_max = base.max_demos
    click.echo(f"ideal reader's type accuracy from the demo attribute tokens (held-out subjects, "
               f"task seeds {seed_list}, n = {n}): mean over seeds [min]")
    click.echo(f"bounds on every seed: K=1 <= {SHARED_IDEAL_K1_MAX}, K={k_max} >= "
               f"{SHARED_IDEAL_KMAX_MIN}; V = {base.n_values}, L = {base.n_types}")
    click.echo("  r    n_sh " + " ".join(f"{'K=' + str(k):>15}" for k in range(1, k_max + 1))
               + "   K1 margin  Kmax margin  kb-reader K=1")
    for t in table:
        cells = " ".join(f"{row['mean']:.4f} [{row['min']:.4f}]" for row in t["rows"])
        click.echo(f"{t['attr_share']:4.1f} {t['n_shared_slots']:5d}  {cells}   "
                   f"{t['k1_margin']:+9.4f}  {t['kmax_margin']:+10.4f}  "
                   f"{t['kb_reader_k1']['mean']:.4f}" + ("  <- meets both" if t["meets"] else ""))
    best = recommended_rate(table)
    if best is None:
        click.echo("no rate on the 0.1 grid meets both bounds on every seed")
    else:
        k1 = np.round(best["rows"][0]["per_seed"], 4).tolist()
        km = np.round(best["rows"][-1]["per_seed"], 4).tolist()
        click.echo(f"recommended task.attr_share = {best['attr_share']} (the smallest rate on the "
                   f"0.1 grid meeting both bounds on every seed and at mean +/- 3 sd): K=1 mean "
                   f"+ 3 sd {best['k1_mean_plus_3sd']:.4f}, K=1 per seed {k1}, K={k_max} per "
                   f"seed {km}")
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(
            {"seeds": seed_list, "n": n, "k1_max": SHARED_IDEAL_K1_MAX,
             "kmax_min": SHARED_IDEAL_KMAX_MIN,
             "recommended": None if best is None else best["attr_share"], "table": table},
            indent=1))
