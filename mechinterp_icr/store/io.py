"""Safe file I/O: the one atomic-write helper family, and the one guarded reader.

A file is written to a hidden temporary name in its own folder (``.<name>.tmp<pid>``),
flushed and fsynced, then renamed into place, so a reader sees the old file or the new one,
never half of one. The temporary file is removed when the write fails; one left by a killed
process is found by :func:`stale_temp_files` (its process is gone) and removed on resume.

:func:`read_regular_file` reads only regular files, checks the size before reading and never
blocks: a FIFO, a device (a symlink to ``/dev/zero``) or an oversized file is refused with
:class:`UnsafeFileError` instead of hanging or filling memory. :func:`read_json_file` is the
one reader of a JSON file a user hands in (``icr check FILE``, ``icr reproduce --eta-from
FILE``, job records): a regular file of bounded size, UTF-8, JSON nested at most
:data:`MAX_JSON_DEPTH` levels, or :class:`JSONFileError` with a one-line reason.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "ensure_file", "atomic_write_json",
           "atomic_write_csv",
           "json_default", "write_or_check",
           "UnsafeFileError", "read_regular_file", "JSONFileError", "read_json_file",
           "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_depth", "stale_temp_files",
           "remove_stale_temp_files", "target_of_temp"]

_TMP_RE = re.compile(r"^\.(?P<name>.+)\.tmp(?P<pid>\d+)$")


class UnsafeFileError(OSError):
    """A file that should be a regular file of bounded size is not (FIFO, device, too big)."""


def read_regular_file(path: str | Path, max_bytes: int, expected_size: int | None = None
                      ) -> bytes:
    """The bytes of ``path`` if it is a regular file (symlinks followed) of at most
    ``max_bytes`` (and exactly ``expected_size`` when given); the size is checked before
    reading and the open never blocks (FIFOs are opened non-blocking and then refused)."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file (a FIFO, device or directory); "
                                  "refusing to read it")
        if st.st_size > max_bytes:
            raise UnsafeFileError(f"{path} has {st.st_size:,} bytes, more than the "
                                  f"{max_bytes:,} allowed for it; refusing to read it")
        if expected_size is not None and st.st_size != expected_size:
            raise UnsafeFileError(f"{path} is truncated or replaced: {st.st_size:,} bytes, "
                                  f"expected {expected_size:,}")
        chunks, left = [], st.st_size + 1  # +1: notice a file that grew since the stat
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        raise UnsafeFileError(f"{path} changed while it was read ({len(data):,} bytes read, "
                              f"{st.st_size:,} expected)")
    return data


MAX_JSON_BYTES = 64 * 1024**2
MAX_JSON_DEPTH = 100


class JSONFileError(ValueError):
    """A JSON file cannot be read: not a regular file, too big, not UTF-8, not JSON, or
    nested too deep. The message is one line and names the file."""


def json_depth(obj: Any, limit: int) -> int:
    """The nesting depth of a parsed JSON value (a scalar: 0), counted without recursion and
    at most ``limit + 1``."""
    depth, level = 0, [obj]
    while level and depth <= limit:
        nxt = []
        for x in level:
            if isinstance(x, dict):
                nxt.extend(x.values())
            elif isinstance(x, list):
                nxt.extend(x)
        if not nxt and not any(isinstance(x, (dict, list)) for x in level):
            break
        depth += 1
        level = nxt
    return depth


def read_json_file(path: str | Path, max_bytes: int = MAX_JSON_BYTES,
                   max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The parsed JSON of ``path``: a regular file (never a FIFO or a device; the open never
    blocks) of at most ``max_bytes``, UTF-8, nested at most ``max_depth`` levels. Raises
    :class:`JSONFileError` with a one-line reason naming the file."""
    try:
        data = read_regular_file(path, max_bytes)
    except UnsafeFileError as e:
        raise JSONFileError(str(e)) from None
    except OSError as e:
        raise JSONFileError(f"{path} cannot be read: {e.strerror or e}") from None
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise JSONFileError(f"{path} is not UTF-8 text") from None
    except RecursionError:
        raise JSONFileError(f"{path} is nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise JSONFileError(f"{path} is not valid JSON: {' '.join(str(e).split())[:200]}"
                            ) from None
    if json_depth(obj, max_depth) > max_depth:
        raise JSONFileError(f"{path} is nested deeper than {max_depth} levels")
    return obj


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except (OverflowError, ValueError):  # not a possible pid
        return False
    return True


def target_of_temp(path: str | Path) -> Path | None:
    """The file an atomic write's temporary file ``.<name>.tmp<pid>`` stands for, else None."""
    m = _TMP_RE.match(Path(path).name)
    return Path(path).with_name(m["name"]) if m else None


def stale_temp_files(folder: str | Path) -> list[Path]:
    """Temporary files of atomic writes in ``folder`` whose writing process no longer runs
    (left by a kill -9 or a crash)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        m = _TMP_RE.match(p.name)
        if m and p.is_file() and not p.is_symlink() and not _pid_alive(int(m["pid"])):
            out.append(p)
    return sorted(out)


def remove_stale_temp_files(folder: str | Path) -> list[Path]:
    """Remove :func:`stale_temp_files` of ``folder``; returns what was removed."""
    removed = []
    for p in stale_temp_files(folder):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:  # removed meanwhile by another resume
            pass
    return removed


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if e.filename is None:  # a failed buffered write names no file: name the target
            e.filename = str(path)
        raise
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def ensure_file(path: str | Path, text: str) -> bool:
    """Make ``path`` hold exactly ``text`` (a shared asset such as ``plotly.min.js`` beside a
    page): an existing file is reused only when it is a regular file (not a symlink, FIFO or
    device) of the same size and content; anything else, a stale or truncated copy included,
    is replaced atomically. True when it was (re)written."""
    path = Path(path)
    data = text.encode("utf-8")
    try:
        st = os.lstat(path)
        same = (stat.S_ISREG(st.st_mode) and st.st_size == len(data)
                and read_regular_file(path, len(data)) == data)
    except OSError:
        same = False
    if not same:
        atomic_write_bytes(path, data)
    return not same


def write_or_check(path: str | Path, text: str, check: bool, stale: str) -> int:
    """A generated file (docs/claims.md, README's claim table): with ``check``, 0 when
    ``path`` holds ``text`` and 1 (``stale`` printed to stderr) when it does not or cannot be
    read; else ``text`` written atomically and 0."""
    if check:
        try:
            same = Path(path).read_text() == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            print(stale, file=sys.stderr)
        return 0 if same else 1
    atomic_write_text(path, text)
    return 0


def atomic_write_csv(path: str | Path, rows: list[dict], cols: list[str] | None = None,
                     heads: list[str] | None = None) -> Path:
    """Write the columns ``cols`` of ``rows`` (default: the first row's scalar columns) as CSV,
    atomically, creating the parent folder; ``heads`` renames the header; None is empty."""
    import csv
    import io

    if cols is None:
        cols = [k for k in rows[0] if isinstance(rows[0][k], (int, float, str, bool))]
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(heads or cols)
    for r in rows:
        wr.writerow(["" if r.get(c) is None else r.get(c) for c in cols])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, buf.getvalue())


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays and paths."""
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def atomic_write_json(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=indent, default=json_default))
