"""The ``icr`` command group and its error handling: every command's expected errors become
one line on stderr and exit code 2 (:func:`error_line`); anything else is a bug and keeps its
traceback. The commands register on :data:`main` from :mod:`mechinterp_icr.cli` and
:mod:`mechinterp_icr.cli.summaries`."""

from __future__ import annotations

import json
import sys

import click

from mechinterp_icr.config import ConfigError

__all__ = ["error_line", "main", "parse_seeds", "profile_option", "set_option"]


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: distinct non-negative integers joined by commas (ConfigError otherwise);
    the commands' and the analysis scripts' one parser."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds = {text!r} is not allowed; expected comma-separated integers "
                          "such as 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds = {text!r} is not allowed; expected distinct non-negative "
                          "integers such as 0,1,2")
    return seeds


def profile_option(config: str):
    """``--profile`` of the commands that build a config (``config``: whose, in the help)."""
    return click.option("--profile", default="quick", show_default=True,
                        help=f"Profile of the {config}: quick (minutes on a laptop CPU) or paper.")


def set_option(config: str, extra: str = ""):
    """``--set KEY=VALUE`` (repeatable) of the commands that build a config."""
    return click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                        help=f"Dotted override of any field of the {config}{extra}.")


def _fail(msg: str) -> None:
    msg = " ".join(str(msg).split())  # one line
    if len(msg) > 2000:
        msg = msg[:1997] + "..."
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _os_error_line(e: OSError) -> str:
    """One line for an I/O error: what happened and to which file (the file an atomic write's
    temporary file stands for, not the temporary name)."""
    import errno

    from mechinterp_icr.store.io import target_of_temp

    name = None if e.filename is None else str(target_of_temp(e.filename) or e.filename)
    where = f" ({name})" if name else ""
    what = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG:
            "file size limit reached", errno.EACCES: "permission denied", errno.EPERM:
            "operation not permitted",
            errno.EROFS: "read-only file system", errno.ENOENT: "no such file or directory",
            errno.ENOTDIR: "not a directory", errno.EISDIR: "is a directory",
            errno.EMFILE: "too many open files"}.get(e.errno)
    if what is None:
        return str(e) if e.errno is None else f"{e.strerror or e}{where}"
    return f"{what}{where}; files written before are intact"


def error_line(e: BaseException) -> str | None:
    """The one-line message for an expected error (bad config, damaged checkpoint or run
    directory, I/O, disk full, permissions, bad JSON, out of memory); None for a bug."""
    if isinstance(e, ConfigError):  # before the store (and torch) is imported: stays fast
        return str(e)
    from mechinterp_icr.store.checkpoint import CheckpointError
    from mechinterp_icr.store.rundir import RunError

    if isinstance(e, (CheckpointError, RunError)):
        return str(e)
    if isinstance(e, OSError):
        return _os_error_line(e)
    if isinstance(e, json.JSONDecodeError):
        return f"invalid JSON: {e}"
    if isinstance(e, UnicodeDecodeError):
        return f"a file is not UTF-8 text: {e}"
    if isinstance(e, MemoryError):
        return ("out of memory; use a smaller model, batch or selection (the resource estimate "
                "is checked against resources.max_gib)")
    return None


class _Main(click.Group):
    """The command group: every command's expected errors become one line and exit code 2
    (:func:`error_line`); anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Exception as e:  # noqa: BLE001 - re-raised unless expected
            if isinstance(e, click.ClickException | click.exceptions.Exit
                          | click.exceptions.Abort):
                raise
            line = error_line(e)
            if line is None:
                raise
            _fail(line)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """mechinterp_icr: train small HookedTransformers on in-context recall tasks, checkpoint
    them, and take them apart (attention, OV/QK circuits, patching, task vectors, probes).

    Start with `icr reproduce all --profile quick --out out/` (what `make reproduce` runs), or
    `icr train --help` for a single run. Every command takes a run directory; analyses take
    `--checkpoints all|last|first|phase:NAME|phase:NAME:last|steps:A-B|<name>`.
    """
