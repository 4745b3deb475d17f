"""Writing files so that a reader never sees half of one, and reading CSV files: the one place p2pem does each.

* :func:`atomic_write` -- one file: written to a temporary sibling with its final
  permissions, flushed to disk, then renamed over the target (``os.replace`` is atomic on
  POSIX), so the target holds either the old or the new content;
* :func:`write_json` -- the same for a JSON document (``NaN`` is refused, not written);
* :func:`atomic_output` -- a whole output folder: files appear in it only when every one
  was written;
* :func:`claim_output` -- the one overwrite policy of every command's ``--out``: missing
  parent folders are created, an existing non-empty folder (or file) is refused unless
  ``force``, an unwritable place is one ConfigError line;
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from p2pem.errors import ConfigError, DataError

__all__ = ["Claim", "atomic_output", "atomic_write", "claim_output", "csv_records", "is_number", "read_csv", "write_json"]

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


def is_number(cell: str) -> bool:
    """Whether a CSV cell reads as a number (what tells a header row from a data row)."""
    try:
        float(cell)
    except ValueError:
        return False
    return True


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


@dataclass(frozen=True)
class Claim:
    """What :func:`claim_output` did: the parent folders it created (deepest first)."""

    path: Path
    created: tuple[Path, ...] = ()

    def release(self) -> None:
        """Remove the parent folders the claim created, if they are still empty (the command failed)."""
        for folder in self.created:
            try:
                folder.rmdir()
            except OSError:
                break


def claim_output(path: str | os.PathLike[str], *, force: bool = False, kind: str = "folder") -> Claim:
    """Make ``path`` ready to receive a command's output, or refuse it in one line.

    The one overwrite policy of every p2pem command: an output that exists (a folder with
    anything in it, or a file) is refused unless ``force`` (then the command writes into it,
    replacing files of the same names); missing parent folders are created (and removed
    again by :meth:`Claim.release` when the command fails); a place that cannot be written
    is refused before any work starts.

    Parameters
    ----------
    path : path-like
        The ``--out`` argument.
    force : bool
        Accept an existing output.
    kind : {"folder", "file"}
        What the command writes at ``path``.

    Raises
    ------
    ConfigError
        Naming ``path``: it exists (without ``force``), is of the other kind, or its folder
        cannot be created or written.
    """
    out = Path(path)
    if out.exists() or out.is_symlink():
        if kind == "folder" and not out.is_dir():
            raise ConfigError(f"{out}: exists and is not a folder (--out names the output folder)")
        if kind == "file" and out.is_dir():
            raise ConfigError(f"{out}: is a folder (--out names the file to write)")
        if not force and kind == "file":
            raise ConfigError(f"{out}: already exists; choose a new --out, or pass --force to replace it")
        if not force and any(out.iterdir()):
            raise ConfigError(
                f"{out}: already exists and is not empty; choose a new --out, or pass --force to write into it (files of the same names are replaced)"
            )
    parent = out.absolute().parent
    created: list[Path] = []
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{out}: cannot create its folder: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{out}: cannot write in {parent} (permission denied)")
    claim = Claim(out, tuple(created))
    try:
        for folder in reversed(created):
            folder.mkdir()
    except OSError as exc:
        claim.release()
        raise ConfigError(f"{out}: cannot create its folder {exc.filename or parent} ({exc.strerror})") from None
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"{out}: cannot write in it (permission denied)")
    return claim


@contextmanager
def atomic_output(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Write into a temporary sibling folder and move files into ``out_dir`` only on success.

    Nothing half-written is left behind: on any exception the temporary folder, and any
    parent folders this call created, are removed and ``out_dir`` is untouched.
    """
    out = Path(out_dir)
    claim = claim_output(out, force=True)  # existing output accepted: the command's policy is the caller's
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.absolute().parent))
    ok = False
    try:
        yield tmp
        out.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            if f.is_dir() and (out / f.name).is_dir():  # a subfolder is replaced whole (os.replace needs it empty)
                shutil.rmtree(out / f.name)
            os.replace(f, out / f.name)
        ok = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not ok:
            claim.release()
