"""Validation of TOML tables with one-line errors naming the file and the dotted key.

Shared by scenario files (:mod:`p2pem.scenario`) and deployment rosters and node configs
(:mod:`p2pem.deploy.roster`, :mod:`p2pem.deploy.config`), so every config file p2pem reads fails the same way:
``scenarios/x.toml: 'graph.n_nodes' must be an integer, got "80" (a string)``.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn, TypeGuard

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError

REQUIRED: Any = object()


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def show(value: object) -> str:
    """A value as the user wrote it in TOML, with its TOML type."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"{value} (a date/time)"


def did_you_mean(word: object, known: Sequence[str]) -> str:
    """``"; did you mean 'max_iter'?"`` for the known name closest to a misspelt one, else ``""``."""
    close = difflib.get_close_matches(str(word), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class Table:
    """One TOML table being validated; every error names the file and dotted key."""

    def __init__(self, where: str, table: Any, prefix: str, known: Sequence[str] | None) -> None:
        self.where = where
        self.prefix = prefix
        if not isinstance(table, dict):
            self.fail(f"{prefix!r} must be a table, got {show(table)}")
        self.table = table
        if known is not None:
            unknown = [key for key in table if key not in known]
            if unknown:
                noun = "key" if len(unknown) == 1 else "keys"
                listed = ", ".join(repr(self.key(key)) for key in unknown)
                self.fail(f"unknown {noun} {listed} (known: {', '.join(known)}){did_you_mean(unknown[0], known)}")

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.where}: {message}")

    def fail_key(self, name: str, message: str) -> NoReturn:
        """Fail naming the dotted key: ``FILE: 'table.name' message``."""
        self.fail(f"{self.key(name)!r} {message}")

    def fraction(self, name: str, *, default: Any = REQUIRED) -> Any:
        """A number strictly between 0 and 1."""
        present, value = self._get(name, default)
        if present and (not is_number(value) or not 0 < value < 1):
            self.fail_key(name, f"must be a number in (0, 1), got {show(value)}")
        return float(value) if value is not None else value

    def node_list(self, name: str, n_nodes: int, *, allow: Sequence[int] = ()) -> tuple[int, ...] | None:
        """Distinct node ids 0..n_nodes-1 (plus the ids in ``allow``), sorted; None when absent."""
        if name not in self.table:
            return None
        value = self.table[name]
        if not isinstance(value, list):
            self.fail_key(name, f"must be an array of node ids, got {show(value)}")
        for v in value:
            if not (is_int(v) and (0 <= v < n_nodes or v in allow)):
                self.fail_key(name, f"holds {v!r}, not a node id 0..{n_nodes - 1}")
        if len(set(value)) != len(value):
            self.fail_key(name, "names a node more than once")
        return tuple(sorted(value))

    def has(self, name: str) -> bool:
        return name in self.table

    def require(self, name: str) -> Any:
        if name not in self.table:
            self.fail(f"missing required key {self.key(name)!r}")
        return self.table[name]

    def _get(self, name: str, default: Any) -> tuple[bool, Any]:
        if name in self.table:
            return True, self.table[name]
        if default is REQUIRED:
            self.require(name)
        return False, default

    def _wrong(self, name: str, expected: str, value: object) -> NoReturn:
        self.fail(f"{self.key(name)!r} must be {expected}, got {show(value)}")

    def integer(self, name: str, *, default: Any = REQUIRED, minimum: int | None = None) -> Any:
        present, value = self._get(name, default)
        if not present:
            return value
        if not is_int(value):
            self._wrong(name, "an integer", value)
        if minimum is not None and value < minimum:
            self.fail(f"{self.key(name)!r} must be >= {minimum}, got {value}")
        return value

    def number(
        self,
        name: str,
        *,
        default: Any = REQUIRED,
        minimum: float | None = None,
        positive: bool = False,
    ) -> Any:
        present, value = self._get(name, default)
        if not present:
            return value
        if not is_number(value) or not math.isfinite(value):
            self._wrong(name, "a finite number", value)
        if minimum is not None and value < minimum:
            self.fail(f"{self.key(name)!r} must be >= {minimum}, got {value}")
        if positive and value <= 0:
            self.fail(f"{self.key(name)!r} must be > 0, got {value}")
        return float(value)

    def boolean(self, name: str, *, default: Any = REQUIRED) -> Any:
        present, value = self._get(name, default)
        if present and not isinstance(value, bool):
            self._wrong(name, "true or false", value)
        return value

    def string(self, name: str, *, default: Any = REQUIRED) -> Any:
        present, value = self._get(name, default)
        if present and not isinstance(value, str):
            self._wrong(name, "a string", value)
        return value

    def choice(self, name: str, choices: Sequence[str], *, default: Any = REQUIRED) -> Any:
        value = self.string(name, default=default)
        if value not in choices:
            self.fail(f"{self.key(name)!r} must be one of {', '.join(map(repr, choices))}, got {value!r}{did_you_mean(value, choices)}")
        return value

    def string_list(self, name: str, *, default: Any = REQUIRED) -> Any:
        present, value = self._get(name, default)
        if not present:
            return value
        if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            self._wrong(name, "an array of strings", value)
        if len(set(value)) != len(value):
            self.fail(f"{self.key(name)!r} names a column more than once")
        return tuple(value)

    def number_array(self, name: str, *, ndim: int) -> npt.NDArray[np.float64]:
        value = self.require(name)
        shape_words = {1: "an array of numbers", 2: "an array of arrays of numbers", 3: "an array of matrices"}

        def walk(item: object, depth: int) -> None:
            if depth == ndim:
                if not (is_number(item) and math.isfinite(item)):
                    self.fail(f"{self.key(name)!r} must be {shape_words[ndim]}, holds {show(item)}")
            elif not isinstance(item, list):
                self.fail(f"{self.key(name)!r} must be {shape_words[ndim]}, holds {show(item)}")
            else:
                for element in item:
                    walk(element, depth + 1)

        walk(value, 0)
        try:
            array = np.array(value, dtype=np.float64)
        except ValueError:
            self.fail(f"{self.key(name)!r} is ragged: its rows must all have the same length")
        if array.ndim != ndim or array.size == 0:
            self.fail(f"{self.key(name)!r} must be a non-empty {ndim}-D array, got shape {array.shape}")
        return array

    def section(self, name: str, known: Sequence[str] | None) -> Table:
        if name not in self.table:
            self.fail(f"missing required table [{self.key(name)}]")
        value = self.table[name]
        if not isinstance(value, dict):
            self._wrong(name, "a table", value)
        return Table(self.where, value, self.key(name), known)

    def free_table(self, name: str) -> Mapping[str, Any]:
        if name not in self.table:
            return MappingProxyType({})
        value = self.table[name]
        if not isinstance(value, dict):
            self._wrong(name, "a table", value)
        return MappingProxyType(copy.deepcopy(value))

    def int_list(self, name: str, *, default: Any = REQUIRED) -> Any:
        present, value = self._get(name, default)
        if not present:
            return value
        if not (isinstance(value, list) and all(is_int(item) for item in value)):
            self._wrong(name, "an array of integers", value)
        return list(value)

    def path(self, name: str, base: Path, *, default: Any = REQUIRED) -> Any:
        """A file path; relative paths are taken relative to ``base``."""
        value = self.string(name, default=default)
        if value is None or value is default:
            return value
        if not value:
            self.fail(f"{self.key(name)!r} must not be empty")
        p = Path(value)
        return p if p.is_absolute() else base / p


def read_toml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """Parse the TOML file ``path``; every failure is one ConfigError line naming it as a ``what`` file."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such {what} file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: is a directory, not a {what} file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
