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
    """The model cannot be fitted to this data: the model's own arithmetic failed on the
    averages it was given (a component collapsed onto too few rows, a covariance is not
    positive definite, an M-step is not finite).  Change the data, ``n_components`` or
    ``reg_covar``.

    Not a protocol violation: in a deployment it stops the run without a culprit (unless the
    member whose message made the average unusable is known).  A :class:`DataError` (a
    ``ValueError``) and a :class:`ProtocolError`, so code that catches either still catches
    it; its own exit code, 6, tells it apart.
    """

    exit_code = 6


class TransportError(P2pemError):
    """A transport failed (broker unreachable, a node fell silent, a timeout)."""

    exit_code = 5


class NotFittedError(P2pemError, ValueError, AttributeError):
    """An estimator was used before ``fit`` (a ValueError and AttributeError, as scikit-learn's)."""

    exit_code = 2


class ConvergenceWarning(UserWarning):
    """An estimator's EM stopped at ``max_iter`` before its tolerance was met, or ended with a
    degenerate component (scikit-learn warns with its own ``ConvergenceWarning`` in both cases;
    p2pem does not depend on scikit-learn, so this is its own class of the same kind)."""
