"""Writing files so that a reader never sees half of one: the one place p2pem does it.

* :func:`atomic_write` -- one file: written to a temporary sibling with its final
  permissions, flushed to disk, then renamed over the target (``os.replace`` is atomic on
  POSIX), so the target holds either the old or the new content;
* :func:`write_json` -- the same for a JSON document (``NaN`` is refused, not written);
* :func:`atomic_output` -- a whole output folder: files appear in it only when every one
  was written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from p2pem.errors import ConfigError

__all__ = ["atomic_output", "atomic_write", "write_json"]


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically, with permissions ``mode`` from the start.

    Raises
    ------
    OSError
        The folder is missing or not writable, or the disk is full; the target is then
        untouched and no temporary file is left.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_json(path: str | os.PathLike[str], data: Any, *, indent: int = 2) -> Path:
    """Write ``data`` as JSON atomically; NaN and infinities raise ValueError."""
    return atomic_write(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


@contextmanager
def atomic_output(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Write into a temporary sibling folder and move files into ``out_dir`` only on success.

    Nothing half-written is left behind: on any exception the temporary folder, and any
    parent folders this call created, are removed and ``out_dir`` is untouched.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    parent = out.resolve().parent
    created: list[Path] = []
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        for folder in reversed(created):
            folder.mkdir()
    except OSError as exc:
        raise ConfigError(f"{out}: cannot create its folder ({exc.strerror})") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.resolve().parent))
    ok = False
    try:
        yield tmp
        out.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, out / f.name)
        ok = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not ok:
            for folder in created:
                try:
                    folder.rmdir()
                except OSError:
                    break
