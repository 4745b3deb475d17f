"""Writing files so that a reader never sees half of one, and reading CSV files: the one place p2pem does each.

* :func:`atomic_write` -- one file: written to a temporary sibling with its final
  permissions, flushed to disk, then renamed over the target (``os.replace`` is atomic on
  POSIX), so the target holds either the old or the new content;
* :func:`write_json` -- the same for a JSON document (``NaN`` is refused, not written);
* :func:`atomic_output` -- a whole output folder: files appear in it only when every one
  was written;
* :func:`read_csv` -- a CSV file handed to a parser as a ``csv.reader``, every failure to
  read it one :class:`~p2pem.errors.DataError` line naming the file; :func:`csv_records`
  -- its non-blank records with their line numbers.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from p2pem.errors import ConfigError, DataError

__all__ = ["atomic_output", "atomic_write", "csv_records", "read_csv", "write_json"]

T = TypeVar("T")


def csv_records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """The non-blank records of a ``csv.reader`` with the line each starts on.

    A record is blank when it has no field or one field of spaces (an empty line); a
    quoted field may span lines, so the line is taken before the record is read.
    """
    while True:
        line = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            return
        if record and not (len(record) == 1 and not record[0].strip()):
            yield line, record


def read_csv(path: str | os.PathLike[str], parse: Callable[[Any, str], T], **options: Any) -> T:
    """Open a UTF-8 CSV file and return ``parse(reader, where)``.

    ``reader`` is a ``csv.reader`` over the file (``options`` are its dialect keywords, e.g.
    ``delimiter``), ``where`` the path as text for messages.  A byte-order mark is ignored.
    A missing, unreadable or non-UTF-8 file, or malformed CSV, is one DataError line naming
    the file (and the line, for malformed CSV); ``parse`` raises its own errors.
    """
    where = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, **options)
            try:
                return parse(reader, where)
            except csv.Error as exc:
                raise DataError(f"{where} line {reader.line_num}: malformed CSV ({exc})") from None
    except FileNotFoundError:
        raise DataError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{where}: is a directory, not a CSV file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{where}: cannot read ({exc.strerror or exc})") from None


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
