"""One small hierarchy of errors; the CLI turns each into a one-line message."""

from __future__ import annotations


class P2pemError(Exception):
    """Base class of every error p2pem raises on purpose."""

    exit_code = 1


class ConfigError(P2pemError, ValueError):
    """A scenario, node config or argument is wrong (unknown key, wrong type, bad value).

    A ``ValueError`` too, as Python and scikit-learn call a bad argument.
    """

    exit_code = 2


class DataError(P2pemError, ValueError):
    """Input data is unusable (NaN, non-numeric cells, ragged widths, empty nodes); a ``ValueError`` too."""

    exit_code = 3


class GraphError(ConfigError):
    """The communication graph cannot serve the requested protocol."""


class InitError(ConfigError):
    """Given initial mixture parameters are invalid (:func:`p2pem.gmm.params_from_dict`).

    Attributes
    ----------
    key : str
        The entry at fault, as the user names it: ``"weights"``, ``"means"``,
        ``"covariances[1]"``; a caller reading a file prefixes its file and table.
    problem : str
        What is wrong with it, e.g. ``"is not positive definite"``.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"init {key!r} {problem}")
        self.key = key
        self.problem = problem


class ProtocolError(P2pemError):
    """A protocol run failed (a component collapsed, a message is missing or invalid)."""

    exit_code = 4


class ModelError(DataError, ProtocolError):
    """The model cannot be fitted to this data: a component collapsed onto too few rows, a
    covariance is singular (exit code 3, a data problem: change the data, ``n_components``
    or ``reg_covar``).

    Also a :class:`ProtocolError`, so a caller that stops a run on any failed aggregation
    (a deployment's node, a sweep that counts failed restarts) treats it as before.
    """


class TransportError(P2pemError):
    """A transport failed (broker unreachable, a node fell silent, a timeout)."""

    exit_code = 5


class NotFittedError(P2pemError, ValueError, AttributeError):
    """An estimator was used before ``fit`` (a ValueError and AttributeError, as scikit-learn's)."""

    exit_code = 2
