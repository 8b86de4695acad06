"""Provenance stamped on checkpoints and summaries: package versions, git revision, memory."""

from __future__ import annotations

import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TreeState", "code_state", "git_revision", "package_versions", "peak_memory_mb",
           "tree_state"]


def package_versions() -> dict[str, str]:
    """Package versions and the kernel setting the process rounds under (``rounding``:
    config.rounding)."""
    from importlib import metadata

    from mechinterp_icr.config.rounding import current_rounding

    out = {"python": platform.python_version(), "rounding": current_rounding()}
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
    it (what a job record and a summary were computed with); None outside a git checkout."""
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


@dataclass(frozen=True)
class TreeState:
    """The checkout a report is written from: its commit and the files that differ from it
    (tracked files changed, staged or not, and untracked files git does not ignore: a new
    module the code imports is uncommitted code too), outside the excluded folders."""

    revision: str
    dirty_files: tuple[str, ...] = ()

    @property
    def dirty(self) -> bool:
        return bool(self.dirty_files)

    @property
    def label(self) -> str:
        """``<revision>`` or ``<revision> (dirty: N tracked files changed)``."""
        if not self.dirty:
            return self.revision
        n = len(self.dirty_files)
        return f"{self.revision} (dirty: {n} file{'s' if n > 1 else ''} not committed)"


def tree_state(cwd: str | Path | None = None, exclude=()) -> TreeState | None:
    """The commit of the git checkout holding ``cwd`` (default: this package) and the files
    that differ from it (:class:`TreeState`), ignoring those under the ``exclude`` folders (a
    report's own output folder: publishing into ``figures/`` changes ``figures/``, which says
    nothing about the code the report is written with); None outside a git checkout or when
    git fails."""
    where = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, cwd=where, timeout=5)
        rev = git_revision(where)
        if top.returncode != 0 or not top.stdout.strip() or rev is None:
            return None
        root = Path(top.stdout.strip()).resolve()
        # tracked files whose content differs from HEAD, in the work tree or the index
        r = subprocess.run(["git", "diff", "--name-only", "-z", "HEAD", "--"],
                           capture_output=True, text=True, cwd=root, timeout=30)
        u = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"],
                           capture_output=True, text=True, cwd=root, timeout=30)
        if r.returncode != 0 or u.returncode != 0:
            return None
    except (OSError, subprocess.SubprocessError):
        return None
    skip = []
    for e in exclude:
        try:
            rel = Path(e).resolve().relative_to(root).as_posix()
        except ValueError:  # outside the checkout: nothing of it is tracked here
            continue
        skip.append("" if rel == "." else rel)
    files = {f for f in (r.stdout + "\0" + u.stdout).split("\0") if f}
    files = [f for f in files if not any(x == "" or f == x or f.startswith(x + "/")
                                         for x in skip)]
    return TreeState(rev, tuple(sorted(files)))


def peak_memory_mb() -> float:
    """Peak resident memory of this process (and finished children), in MiB."""
    import resource

    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0
    return max(self_kb, child_kb) / scale
