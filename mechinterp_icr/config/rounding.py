"""Named kernel settings that change float rounding on the CPU (``--rounding``).

The same code and seeds on another machine round differently, and 2000 float32 training steps
amplify that into per-seed differences of 0.01-0.04 in the CR accuracies (SPEC 0, "robust to
the machine"). One machine can make such a rerun: on an AVX512 CPU PyTorch's kernel dispatch
(``ATEN_CPU_CAPABILITY``) and MKL's code path (``MKL_CBWR``) each change the order of
floating-point reductions, while a rerun under one setting is bit-identical
(tests/integration/test_rounding.py; docs/reproduce.md lists what each setting changed here).

The variables must be set before torch loads its kernels, so :func:`apply_rounding` re-executes
the command with them set; Ray workers inherit them (``jobs._start_ray`` also passes them as
the runtime environment, for a cluster). The setting in force is :func:`current_rounding`,
stamped on every checkpoint and summary (``store.provenance.package_versions``).
"""

from __future__ import annotations

import os
import sys

from mechinterp_icr.config.errors import ConfigError, check_choice

__all__ = ["ROUNDINGS", "ROUNDING_VARS", "apply_rounding", "current_rounding", "rounding_callback",
           "rounding_env"]

ROUNDINGS: dict[str, dict[str, str]] = {
    "native": {},  # what the CPU and libraries pick (the registered runs)
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},  # PyTorch's AVX2 kernels on an AVX512 CPU
    "default": {"ATEN_CPU_CAPABILITY": "default"},  # PyTorch's portable kernels
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},  # MKL's conditional-reproducibility path
}
ROUNDING_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")


def rounding_env(name: str) -> dict[str, str]:
    """The environment variables of the setting ``name`` (one of :data:`ROUNDINGS`)."""
    check_choice("--rounding", name, tuple(ROUNDINGS))
    return dict(ROUNDINGS[name])


def current_rounding(environ=None) -> str:
    """The setting this process runs under: a name of :data:`ROUNDINGS`, or ``custom: ...``
    naming the variables when they match none."""
    env = os.environ if environ is None else environ
    got = {k: env[k] for k in ROUNDING_VARS if env.get(k)}
    for name, want in ROUNDINGS.items():
        if got == want:
            return name
    return "custom: " + ", ".join(f"{k}={v}" for k, v in sorted(got.items()))


def apply_rounding(name: str | None) -> None:
    """Make this command run under the setting ``name`` (None: leave the process as it is).
    When the environment differs, the command is executed again with the setting's variables
    (and no others of :data:`ROUNDING_VARS`); refused when torch is already loaded in a
    process that cannot be restarted."""
    if name is None:
        return
    want = rounding_env(name)
    if current_rounding() == name:
        return
    if "torch" in sys.modules:
        raise ConfigError(f"--rounding = {name!r} needs {want or 'no rounding variables'} set "
                          "before torch is loaded; set them in the environment instead")
    env = {k: v for k, v in os.environ.items() if k not in ROUNDING_VARS}
    env.update(want)
    argv = [sys.executable, *sys.argv]
    os.execve(sys.executable, argv, env)


def rounding_callback(ctx, param, value):
    """The CLI's ``--rounding`` option callback (eager: before any command body loads torch)."""
    apply_rounding(value)
    return value
