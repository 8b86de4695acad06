"""The analysis scripts of the repository (``analyses/*.py``, ``probes/*.py``) by name, for
``icr analyse NAME [ARGS...]``.

The scripts stay where they are and stay thin: ``icr analyse logit_lens runs/cr --checkpoints
all`` runs ``analyses/logit_lens.py`` with the same arguments, in this process, exactly as
``python analyses/logit_lens.py runs/cr --checkpoints all`` would (``__main__``, its folder
first on ``sys.path`` so ``_common`` imports, ``sys.argv[0]`` its path), from any working
directory: relative paths among the arguments are the caller's. The folders are found next to
the package (``mechinterp_icr/..``), which is where a clone installed with ``pip install -e``
(``make``) has them; a copy of the package installed without the repository has none, and the
command then says so in one line.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from mechinterp_icr.config import ConfigError

__all__ = ["SCRIPT_FOLDERS", "script_dirs", "scripts", "find_script", "run_script"]

SCRIPT_FOLDERS = ("analyses", "probes")


def script_dirs() -> list[Path]:
    """The folders holding the scripts (those of :data:`SCRIPT_FOLDERS` that exist)."""
    root = Path(__file__).resolve().parents[2]
    return [root / f for f in SCRIPT_FOLDERS if (root / f).is_dir()]


def scripts() -> dict[str, Path]:
    """Every script by name (``logit_lens`` -> ``.../analyses/logit_lens.py``), in folder
    order then by name; helpers (a name starting with ``_``) are left out."""
    out: dict[str, Path] = {}
    for d in script_dirs():
        for p in sorted(d.glob("*.py")):
            if not p.name.startswith("_"):
                out.setdefault(p.stem, p)
    return out


def find_script(name: str) -> Path:
    """The script called ``name`` (with or without ``.py``, or ``analyses/NAME``); a
    ConfigError listing the names otherwise."""
    have = scripts()
    if not have:
        raise ConfigError("icr analyse needs the repository's analyses/ and probes/ folders next "
                          f"to the package ({Path(__file__).resolve().parents[2]}); install a "
                          "clone with pip install -e (make does)")
    key = Path(str(name)).name.removesuffix(".py")
    if key not in have:
        raise ConfigError(f"analysis = {name!r} is not allowed; expected one of "
                          f"{', '.join(have)}")
    return have[key]


def run_script(path: Path, args: list[str] | tuple[str, ...]) -> int:
    """Run the script at ``path`` as ``__main__`` with arguments ``args``; its exit code (a
    script that returns normally: 0). ``sys.argv`` and ``sys.path`` are restored after."""
    argv, syspath = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *map(str, args)]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv[:], sys.path[:] = argv, syspath
    return 0
