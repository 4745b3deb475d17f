"""Saved models: one versioned JSON document (format ``p2pem-model``) that keeps a fitted model.

A saved model is everything needed to use the model again and to know where it came from:

* the model: its family (name and public configuration) and parameters, in the family's own
  names (:meth:`~p2pem.families.base.MixtureFamily.to_dict`, read back through
  :meth:`~p2pem.families.base.MixtureFamily.params_from_dict`, so every family saves the
  same way);
* the input: the raw feature names and the preprocessing constants (standardisation
  centre and scale, the PCA centre and components), so a model fitted with
  ``standardize = true`` scores new *raw* rows;
* how it was fitted: the protocol with its parameters and privacy block (epsilon and what
  it excludes, for a private run), the EM settings and log-likelihood trace, the graph
  (edges, and the parties' own ids when there were any) and the node of every row;
* the p2pem version and the time it was written (UTC).

Floats are written as JSON numbers with Python's shortest round-trip repr, so a loaded model
has the same bits as the saved one and scores every row exactly as before saving.  The schema
is ``p2pem/schemas/model.schema.json``; :func:`read_model` checks what it reads and says in
one line which file and key is wrong.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.data import Preprocessing
from p2pem.errors import ConfigError, InitError
from p2pem.families import MixtureFamily, family_from_document
from p2pem.files import atomic_write
from p2pem.version import __version__

__all__ = ["MODEL_FORMAT", "SavedModel", "read_model", "write_model"]

#: Format name and version of a saved model.
MODEL_FORMAT = ("p2pem-model", 1)

_PREPROCESSING_KEYS = ("center", "scale", "pca_center", "components")


@dataclass(frozen=True, eq=False)
class SavedModel:
    """A fitted model and its provenance, as :func:`write_model` saves it.

    Attributes
    ----------
    family : MixtureFamily
    params : the family's single parameters (GMMParams for the Gaussian family)
    n_features_in : int
        Raw columns a row must have (before the preprocessing).
    feature_names : tuple of str or None
        Their names, when known.
    preprocessing : Preprocessing or None
        Applied to raw rows before the model sees them (None: none).
    protocol : dict
        ``{"name", "label", "params"}``: the protocol as registered, its label in results,
        and its parameters with the privacy block of a private run.
    fit : dict
        ``n_iter``, ``converged``, ``loglik`` (mean per row at every EM iteration; None
        where not released), ``n_rows``, ``max_iter``, ``tol``, ``reg_covar``, ``seed``.
    graph : dict or None
        ``{"n_nodes", "edges", "node_ids"}``: node ids are the parties' own (a scenario's
        node column, the estimator's ``node_ids``), or None when the nodes are 0..n-1.
    row_nodes : list of int or None
        The node (0..n-1) of every row of the training data, in the data's row order.
    scenario : dict or None
        ``{"name", "file", "seed"}`` when the model came from a scenario run.
    p2pem : str
        The version that wrote it.
    created : str
        When, as an ISO 8601 UTC time.
    """

    family: MixtureFamily
    params: Any
    n_features_in: int
    feature_names: tuple[str, ...] | None = None
    preprocessing: Preprocessing | None = None
    protocol: dict[str, Any] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    graph: dict[str, Any] | None = None
    row_nodes: list[int] | None = None
    scenario: dict[str, Any] | None = None
    p2pem: str = ""
    created: str = ""

    @property
    def n_components(self) -> int:
        return int(np.asarray(self.params.weights).shape[0])

    def to_json(self) -> dict[str, Any]:
        """The ``p2pem-model`` document (NaN log-likelihoods as null)."""
        fmt, version = MODEL_FORMAT
        pre = self.preprocessing
        fit = dict(self.fit)
        if "loglik" in fit:
            fit["loglik"] = [None if v is None or v != v else float(v) for v in fit["loglik"]]
        return {
            "format": fmt,
            "version": version,
            "p2pem": self.p2pem or __version__,
            "created": self.created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "family": self.family.describe(),
            "n_components": self.n_components,
            "params": self.family.to_dict(self.params),
            "features": {"n_features_in": self.n_features_in, "names": None if self.feature_names is None else list(self.feature_names)},
            "preprocessing": None if pre is None else {key: _array(getattr(pre, key)) for key in _PREPROCESSING_KEYS},
            "protocol": _plain(self.protocol),
            "fit": _plain(fit),
            "graph": _plain(self.graph),
            "row_nodes": self.row_nodes,
            "scenario": self.scenario,
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SavedModel:
        """Check a ``p2pem-model`` document; every problem is a ConfigError naming ``where`` and the key."""

        def fail(key: str, problem: str) -> ConfigError:
            return ConfigError(f"{where}: {key!r} {problem}")

        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT[0]:
            found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise ConfigError(f"{where}: not a saved p2pem model (format {found!r}, expected {MODEL_FORMAT[0]!r})")
        if doc.get("version") != MODEL_FORMAT[1]:
            raise fail("version", f"is {doc.get('version')!r}; this p2pem reads version {MODEL_FORMAT[1]} (written by p2pem {doc.get('p2pem')})")
        for key in ("family", "n_components", "params", "features"):
            if key not in doc:
                raise fail(key, "is missing")
        fam = doc["family"]
        if not isinstance(fam, dict) or not isinstance(fam.get("name"), str):
            raise fail("family", "must be an object with a 'name'")
        try:
            family = family_from_document(fam)
        except ConfigError as exc:
            raise fail("family", str(exc)) from None
        features = doc["features"]
        if not isinstance(features, dict) or not _is_count(features.get("n_features_in")):
            raise fail("features.n_features_in", "must be a positive integer")
        n_in = int(features["n_features_in"])
        names = features.get("names")
        if names is not None and not (isinstance(names, list) and len(names) == n_in and all(isinstance(n, str) for n in names)):
            raise fail("features.names", f"must be null or {n_in} strings")
        pre = _preprocessing(doc.get("preprocessing"), n_in, fail)
        width = n_in if pre is None or pre.components is None else int(pre.components.shape[0])
        if not _is_count(doc["n_components"]):
            raise fail("n_components", "must be a positive integer")
        try:
            params = family.params_from_dict(doc["params"], int(doc["n_components"]), width)
        except InitError as exc:
            raise fail(f"params.{exc.key}", exc.problem) from None
        except (TypeError, ValueError, KeyError) as exc:
            raise fail("params", f"is malformed ({exc})") from None
        row_nodes = doc.get("row_nodes")
        if row_nodes is not None and not (isinstance(row_nodes, list) and all(_is_count(v, zero=True) for v in row_nodes)):
            raise fail("row_nodes", "must be null or a list of node ids >= 0")
        return cls(
            family=family,
            params=params,
            n_features_in=n_in,
            feature_names=None if names is None else tuple(names),
            preprocessing=pre,
            protocol=dict(doc.get("protocol") or {}),
            fit=dict(doc.get("fit") or {}),
            graph=doc.get("graph"),
            row_nodes=row_nodes,
            scenario=doc.get("scenario"),
            p2pem=str(doc.get("p2pem", "")),
            created=str(doc.get("created", "")),
        )

    def transform(self, X: Any) -> np.ndarray:
        """Raw rows (n, n_features_in) as the model's rows: the preprocessing applied."""
        array = np.asarray(X, dtype=np.float64)
        return array if self.preprocessing is None else self.preprocessing.apply(array)


def write_model(model: SavedModel, path: str | os.PathLike[str]) -> Path:
    """Write ``model`` as a ``p2pem-model`` JSON document, atomically: one top-level key per
    line, each value on its line (a row-to-node list of 30 000 rows stays one line)."""
    doc = model.to_json()
    lines = [f" {json.dumps(key)}: {json.dumps(value, allow_nan=False)}" for key, value in doc.items()]
    return atomic_write(path, "{\n" + ",\n".join(lines) + "\n}\n")


def read_model(path: str | os.PathLike[str]) -> SavedModel:
    """Read a model written by :func:`write_model`.

    Raises
    ------
    ConfigError
        One line naming the file: missing, not JSON, not a saved model, a version this
        p2pem does not read, or a key that is wrong (the dotted key named).
    """
    where = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such model file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return SavedModel.from_json(doc, where)


# ------------------------------------------------------------------------------ helpers


def _array(value: Any) -> Any:
    return None if value is None else np.asarray(value, dtype=np.float64).tolist()


def _plain(value: Any) -> Any:
    """JSON-ready: arrays as lists, NaN and infinities as null (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _is_count(value: Any, *, zero: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= (0 if zero else 1)


def _preprocessing(raw: Any, n_in: int, fail: Any) -> Preprocessing | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail("preprocessing", "must be null or an object")
    arrays: dict[str, np.ndarray | None] = {}
    for key in _PREPROCESSING_KEYS:
        value = raw.get(key)
        if value is None:
            arrays[key] = None
            continue
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise fail(f"preprocessing.{key}", "must be an array of numbers") from None
        ndim = 2 if key == "components" else 1
        if array.ndim != ndim or array.shape[-1] != n_in or not np.all(np.isfinite(array)):
            raise fail(f"preprocessing.{key}", f"must be a finite {ndim}-D array over the {n_in} input columns")
        arrays[key] = array
    if (arrays["center"] is None) != (arrays["scale"] is None):
        raise fail("preprocessing", "needs both 'center' and 'scale', or neither")
    if arrays["scale"] is not None and np.any(arrays["scale"] <= 0):
        raise fail("preprocessing.scale", "must hold numbers > 0")
    return Preprocessing(arrays["center"], arrays["scale"], arrays["components"], arrays["pca_center"])
