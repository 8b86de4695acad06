"""Provenance stamped on checkpoints and summaries: package versions, git revision, memory."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

__all__ = ["package_versions", "git_revision", "code_state", "peak_memory_mb"]


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("mechinterp_icr", "torch", "transformer-lens", "numpy", "safetensors",
                "scikit-learn", "plotly", "circuitsvis"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def git_revision(cwd: str | Path | None = None) -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                           cwd=cwd or Path(__file__).resolve().parent, timeout=5)
        return r.stdout.strip() or None if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def code_state(cwd: str | Path | None = None) -> str | None:
    """The git revision of the package's code, with ``+dirty`` when tracked files differ from
    it (what a task record and a summary were computed with); None outside a git checkout."""
    rev = git_revision(cwd)
    if rev is None:
        return None
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5,
                           cwd=cwd or Path(__file__).resolve().parent)
        dirty = r.returncode == 0 and bool(r.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return rev
    return rev + "+dirty" if dirty else rev


def peak_memory_mb() -> float:
    """Peak resident memory of this process (and finished children), in MiB."""
    import resource

    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0
    return max(self_kb, child_kb) / scale
