"""One small hierarchy of errors; the CLI turns each into a one-line message."""

from __future__ import annotations


class P2pemError(Exception):
    """Base class of every error p2pem raises on purpose."""

    exit_code = 1


class ConfigError(P2pemError):
    """A scenario, node config or argument is wrong (unknown key, wrong type, bad value)."""

    exit_code = 2


class DataError(P2pemError):
    """Input data is unusable (NaN, non-numeric cells, ragged widths, empty nodes)."""

    exit_code = 3


class GraphError(ConfigError):
    """The communication graph cannot serve the requested protocol."""


class ProtocolError(P2pemError):
    """A protocol run failed (a component collapsed, a message is missing or invalid)."""

    exit_code = 4


class TransportError(P2pemError):
    """A transport failed (broker unreachable, a node fell silent, a timeout)."""

    exit_code = 5


class NotFittedError(P2pemError, ValueError, AttributeError):
    """An estimator was used before ``fit`` (a ValueError and AttributeError, as scikit-learn's)."""

    exit_code = 2
