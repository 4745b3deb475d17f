"""Argument checks shared by the estimators and the closed forms: each failure is one line.

A wrong type or range of a setting (``k``, ``rng``, a count) is a
:class:`~p2pem.errors.ConfigError`; data that is not a finite real array of the expected
shape is a :class:`~p2pem.errors.DataError`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError

__all__ = ["as_real", "as_samples", "check_int", "check_k", "check_rng"]

FloatArray = npt.NDArray[np.float64]


def check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(
            f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    return rng


def check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_k(k: object) -> int:
    return check_int(k, "k", 1)


def as_real(a: npt.ArrayLike, name: str) -> FloatArray:
    """Return ``a`` as a finite float64 array of any shape."""
    try:
        arr = np.asarray(a)
    except (TypeError, ValueError) as exc:  # ragged nested sequences
        raise DataError(f"{name} is not a rectangular numeric array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise DataError(f"{name} must be real numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise DataError(f"{name} has {int(bad.sum())} non-finite values (NaN or inf)")
    return arr


def as_samples(a: npt.ArrayLike, name: str) -> FloatArray:
    """Return ``a`` as a finite float64 array of shape (n_samples, n_features)."""
    arr = as_real(a, name)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    elif arr.ndim != 2:
        raise DataError(f"{name} must be 1-D or 2-D (n_samples, n_features), got {arr.ndim}-D")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"{name} is empty (shape {arr.shape})")
    return arr
