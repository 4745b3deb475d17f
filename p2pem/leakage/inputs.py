"""What every node aggregates in the leakage Monte Carlo: the scenario's own data, or the paper's model.

The quantity studied is one network aggregation of the M-step: node i contributes its
responsibility-weighted first moment (the numerator of the mean update) with uniform
responsibilities normalised to sum to one over the K = ``em.n_components`` components,
r = 1/K.  Each component's statistic is then the same scaled copy, so one column per run
carries everything.  Where that statistic comes from is ``[leakage] inputs``:

``"data"`` (the default)
    The scenario's rows, read, prepared and split over the nodes exactly as ``p2pem
    simulate`` does (:func:`p2pem.scenario.load_data`).  Node i holds n_i rows; in every run
    it aggregates r times the sum of one feature over n_i rows drawn with replacement from
    all the scenario's rows, so the runs vary what an adversary does not know (which rows of
    the population a node holds) at the scale and shape of the real data.  The feature is
    ``[leakage] feature`` (a column of the prepared data), by default the one of largest
    spread: under pdmm-sp's absolute ``perturbation_std`` it is the least hidden.  A node's
    input has variance n_i r^2 var(x), var over the rows.
``"gaussian"``
    The model of Li et al. (ICASSP 2022, Fig. 3): one private value per node and run,
    X_i ~ N(0, 1), aggregated as r X_i.  The scenario's rows are not used.

The closed forms beside the estimates (the floor, the exact value from the view's linear
structure) assume Gaussian inputs; with the data they are the values for Gaussian inputs of
the same variances (a sum of many rows is close to Gaussian), while the KSG estimate is
computed on the data's own draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pem.errors import DataError
from p2pem.leakage.config import LeakageConfig
from p2pem.builders import load_data
from p2pem.scenario import Scenario

__all__ = ["Inputs", "draw_inputs"]

FloatArray = npt.NDArray[np.float64]

#: Features whose spread is within this fraction of the largest count as tied (the first wins).
_SPREAD_RTOL = 1e-9


@dataclass(frozen=True, eq=False)
class Inputs:
    """Every node's input in every Monte Carlo run, and where it came from.

    Attributes
    ----------
    values : numpy.ndarray, shape (n_nodes, runs)
    sd : numpy.ndarray, shape (n_nodes,)
        Each node's standard deviation under the model the runs are drawn from.
    kind : {"data", "gaussian"}
    description : str
        One line saying what the runs aggregate (printed and written to summary.json).
    feature : int or None
        The column of the prepared data (``"data"`` only).
    rows : tuple of int
        Rows each node holds (``"data"`` only).
    """

    values: FloatArray
    sd: FloatArray
    kind: str
    description: str
    feature: int | None = None
    rows: tuple[int, ...] = ()

    @property
    def scale(self) -> float:
        """The statistic's typical standard deviation: root mean square of the nodes' (r for ``"gaussian"``)."""
        return float(self.sd[0]) if self.kind == "gaussian" else float(np.sqrt(np.mean(self.sd**2)))

    @property
    def variances(self) -> FloatArray | None:
        """The nodes' variances when they differ by design (``"data"``); None for i.i.d. inputs."""
        return None if self.kind == "gaussian" else self.sd**2

    def to_json(self) -> dict:
        out: dict = {"kind": self.kind, "description": self.description, "statistic_std": self.scale}
        if self.kind == "data":
            out |= {"feature": self.feature, "rows_per_node": list(self.rows), "node_std": [float(v) for v in self.sd]}
        return out


def draw_inputs(scenario: Scenario, config: LeakageConfig, n_nodes: int, rng: np.random.Generator) -> Inputs:
    """Draw every node's input for ``config.runs`` runs (see the module docstring).

    Raises
    ------
    DataError
        The data cannot be read or prepared (as for ``p2pem simulate``), the chosen feature
        does not exist or is constant.
    """
    resp = 1.0 / scenario.em.n_components
    r_text = f"1/{scenario.em.n_components}"
    if config.inputs == "gaussian":
        values = resp * rng.standard_normal((n_nodes, config.runs))
        return Inputs(
            values,
            np.full(n_nodes, resp),
            "gaussian",
            f"the paper's model ([leakage] inputs = \"gaussian\"): X_i ~ N(0, 1) per node and run, aggregated as "
            f"{r_text} X_i; the scenario's rows are not used",
        )
    parts = load_data(scenario)
    X = np.vstack(parts)
    n_rows, width = X.shape
    spread = X.std(axis=0)
    where = f"{scenario.path}: 'leakage.feature'"
    if config.feature is None:
        if not np.any(spread > 0):
            raise DataError(f"{scenario.path}: every feature of the prepared data is constant: no leakage to measure")
        feature = int(np.flatnonzero(spread >= (1 - _SPREAD_RTOL) * spread.max())[0])
        why = "of largest spread" if width > 1 else "the only one"
    else:
        feature = config.feature
        if feature >= width:
            raise DataError(f"{where} = {feature}, but the prepared data has {width} features (0..{width - 1})")
        if spread[feature] == 0:
            raise DataError(f"{where} = {feature} is constant in the scenario's rows: no leakage to measure; choose another")
        why = "[leakage] feature"
    column = X[:, feature]
    rows = tuple(len(p) for p in parts)
    values = np.empty((n_nodes, config.runs))
    for i, n_i in enumerate(rows):
        values[i] = resp * column[rng.integers(0, n_rows, size=(config.runs, n_i))].sum(axis=1)
    sd = resp * spread[feature] * np.sqrt(np.asarray(rows, dtype=np.float64))
    lo, hi = min(rows), max(rows)
    held = f"{lo}" if lo == hi else f"{lo}-{hi}"
    source = scenario.data.path.name if scenario.data.path is not None else "synthetic mixture"
    return Inputs(
        values,
        sd,
        "data",
        f"the scenario's data ({source}, {n_rows} rows, feature {feature} of {width}, {why}): node i aggregates "
        f"{r_text} x the sum of that feature over its {held} rows, redrawn with replacement from all {n_rows} rows in every run",
        feature=feature,
        rows=rows,
    )
