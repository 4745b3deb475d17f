"""A table under a public schema as the rows of the mixed-type family, and back.

The mixed family (:mod:`p2pem.families.mixed`) reads float rows: its Gaussian columns
first, then one category code per discrete column.  :class:`TableEncoding` maps the rows of
a :class:`p2pem.tabular.Table` to that form using **public information only** (the schema),
so the mapping costs no privacy and every party computes it alone:

* a categorical column keeps its code;
* a continuous column is modelled either by a Gaussian, its values mapped affinely from the
  public range ``[low, high]`` to ``[-1, 1]`` (so a differentially private run clips to the
  public box ``bound = 1``, and noise and floors act on one scale for every column), or --
  when listed in ``binned`` -- by a categorical distribution over its ``n_bins`` public
  equal-width bins (:func:`p2pem.tabular.bin_edges`), preceded by one category per public
  **atom** of the column (``atoms``: values that carry mass of their own, such as a zero
  capital gain), so that a row holding exactly an atom keeps it.

Back from model rows to a table (:meth:`TableEncoding.table`): Gaussian values are mapped
back, clipped to the public range and rounded in integer columns; a bin is turned into a
value drawn uniformly inside it (:func:`p2pem.tabular.undiscretize`), an atom into its
value; codes become categories.  That is post-processing with public information.

Why bins: a Gaussian per column and component cannot hold a column whose mass sits on a few
values and spreads around them (Adult's ``hours-per-week``, 47 % at 40), and a noisy
variance smears such a spike across bin edges; a categorical distribution over the public
bins keeps each bin's mass exactly, and its counts have the same sensitivity as any other
categorical column's (``docs/synthetic.md`` measures the choice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.families.mixed import COVARIANCES, MixedFamily
from p2pem.tabular import DEFAULT_BINS, Categorical, Continuous, Schema, Table, bin_edges, discretize, undiscretize

__all__ = ["TableEncoding"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TableEncoding:
    """How the rows of a table under ``schema`` become the mixed family's rows (module docstring).

    Parameters
    ----------
    schema : Schema
        The public schema (must be public: ``schema.public``).
    binned : tuple of str, default ()
        Continuous columns modelled as categorical over their public bins.
    n_bins : int, default 10
        Equal-width bins per binned column.
    atoms : tuple of (str, tuple of float), default ()
        Per binned column, public values modelled as categories of their own before its
        bins (``(("capital-gain", (0.0,)),)``).

    Raises
    ------
    ConfigError
        A binned name is not a continuous column of the schema, ``n_bins`` < 2, or an atom
        belongs to no binned column, lies outside its public range, is not whole in an
        integer column or is listed twice.
    """

    schema: Schema
    binned: tuple[str, ...] = ()
    n_bins: int = DEFAULT_BINS
    atoms: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self) -> None:
        for name in self.binned:
            if not isinstance(self.schema.column(name), Continuous):
                raise ConfigError(f"binned column {name!r} is categorical already (only continuous columns are binned)")
        if len(set(self.binned)) != len(self.binned):
            raise ConfigError(f"binned lists a column twice: {list(self.binned)}")
        if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, int) or self.n_bins < 2:
            raise ConfigError(f"n_bins must be an integer >= 2, got {self.n_bins!r}")
        for name, values in self.atoms:
            if name not in self.binned:
                raise ConfigError(f"atoms of {name!r}: only a binned column has atoms (add it to binned)")
            column = self.schema.column(name)
            assert isinstance(column, Continuous)  # binned columns are continuous (checked above)
            if not values or len(set(values)) != len(values):
                raise ConfigError(f"atoms of {name!r} must be distinct values, got {list(values)}")
            bad = [v for v in values if not column.low <= v <= column.high or (column.integer and v != round(v))]
            if bad:
                raise ConfigError(f"atom {bad[0]!r} of {name!r} is not a {'whole number ' if column.integer else ''}in its public range "
                                  f"[{column.low!r}, {column.high!r}]")
        if len({name for name, _ in self.atoms}) != len(self.atoms):
            raise ConfigError("atoms name a column twice")

    @property
    def gaussian(self) -> tuple[Continuous, ...]:
        """The continuous columns modelled by Gaussians, in schema order (the rows' first entries)."""
        return tuple(c for c in self.schema.continuous if c.name not in self.binned)

    @property
    def discrete(self) -> tuple[Categorical | Continuous, ...]:
        """The columns modelled by categorical distributions, in schema order (the rows' code entries)."""
        return tuple(c for c in self.schema.columns if isinstance(c, Categorical) or c.name in self.binned)

    @property
    def names(self) -> tuple[str, ...]:
        """The schema columns in the order of a model row."""
        return tuple(c.name for c in self.gaussian + self.discrete)

    def atoms_of(self, name: str) -> tuple[float, ...]:
        """The atoms of a column (none for most)."""
        return dict(self.atoms).get(name, ())

    def n_values(self, column: Categorical | Continuous) -> int:
        """Categories of a discrete column (its atoms and bins for a binned one)."""
        return column.n_categories if isinstance(column, Categorical) else len(self.atoms_of(column.name)) + len(bin_edges(column, self.n_bins)) - 1

    def family(
        self,
        *,
        covariance: str = "diag",
        stratify: str | None = None,
        strata_weights: Sequence[float] | None = None,
    ) -> MixedFamily:
        """The mixed family of these rows.

        Parameters
        ----------
        covariance : {"diag", "full"}
        stratify : str, optional
            A categorical column of the schema: one mixture per category.
        strata_weights : sequence of float, optional
            The strata's public shares (declared public), one per category of ``stratify``.
        """
        index = None
        if stratify is not None:
            column = self.schema.column(stratify)
            if not isinstance(column, Categorical):
                raise ConfigError(f"stratify names {stratify!r}, a continuous column: stratify by a categorical one")
            index = [c.name for c in self.discrete].index(stratify)
        if covariance not in COVARIANCES:
            raise ConfigError(f"covariance must be one of {list(COVARIANCES)}, got {covariance!r}")
        weights = None if strata_weights is None else tuple(float(v) for v in strata_weights)
        return MixedFamily(len(self.gaussian), tuple(self.n_values(c) for c in self.discrete), covariance, index, weights)

    def rows(self, table: Table) -> FloatArray:
        """The model rows of ``table`` (Gaussian columns scaled to [-1, 1], then codes and bin indices)."""
        if table.schema != self.schema:
            raise DataError("the table's schema differs from the encoding's")
        binned = discretize(table, self.n_bins)
        position = {name: j for j, name in enumerate(self.schema.names)}
        columns = [self._scale(c, np.asarray(table.column(c.name), dtype=np.float64)) for c in self.gaussian]
        for c in self.discrete:
            codes = binned[:, position[c.name]].astype(np.float64)
            atoms = self.atoms_of(c.name)
            if atoms:  # an atom's own code first; the bins follow
                values = table.column(c.name)
                codes = codes + len(atoms)
                for i, atom in enumerate(atoms):
                    codes = np.where(values == atom, float(i), codes)
            columns.append(codes)
        return np.column_stack(columns) if columns else np.empty((table.n_rows, 0))

    def table(self, X: npt.ArrayLike, *, rng: np.random.Generator) -> Table:
        """A table from model rows (e.g. drawn from a fitted model): the inverse of :meth:`rows`.

        Gaussian values are mapped back, clipped to the public range and rounded in integer
        columns; a binned column's value is drawn uniformly in its bin from ``rng`` (the only
        randomness).

        Raises
        ------
        DataError
            Wrong width, or a code outside its column's categories.
        """
        X = np.asarray(X, dtype=np.float64)
        p = len(self.gaussian)
        if X.ndim != 2 or X.shape[1] != len(self.names):
            raise DataError(f"model rows must have {len(self.names)} columns ({', '.join(self.names)}), got shape {X.shape}")
        codes = X[:, p:]
        whole = codes.astype(np.int64)
        sizes = np.asarray([self.n_values(c) for c in self.discrete])
        bad = (whole != codes) | (whole < 0) | (whole >= sizes)
        if np.any(bad):
            row, j = (int(v) for v in np.argwhere(bad)[0])
            raise DataError(f"model rows: column {self.discrete[j].name!r}, row {row}: {float(codes[row, j])!r} is not a code 0..{sizes[j] - 1}")
        values = {c.name: self._unscale(c, X[:, j]) for j, c in enumerate(self.gaussian)}
        binned = [c.name for c in self.discrete if isinstance(c, Continuous)]
        if binned:
            sub = self.schema.select(binned)
            index = [j for j, c in enumerate(self.discrete) if isinstance(c, Continuous)]
            n_atoms = np.array([len(self.atoms_of(name)) for name in binned])
            bins = np.maximum(whole[:, index] - n_atoms, 0)
            drawn = undiscretize(sub, bins, n_bins=self.n_bins, rng=rng)
            for j, name in enumerate(binned):
                atoms = np.asarray(self.atoms_of(name) + (np.nan,))
                code = whole[:, index[j]]
                values[name] = np.where(code < n_atoms[j], atoms[np.minimum(code, n_atoms[j])], drawn.continuous[:, j])
        position = {c.name: j for j, c in enumerate(self.discrete)}
        continuous = np.column_stack([values[c.name] for c in self.schema.continuous]) if self.schema.continuous else None
        categories = np.column_stack([whole[:, position[c.name]] for c in self.schema.categorical]) if self.schema.categorical else None
        return Table.from_blocks(self.schema, continuous, categories, clip=True)

    def describe(self) -> dict[str, object]:
        """How each column is modelled, for a release's provenance (all public)."""
        return {
            "gaussian": [c.name for c in self.gaussian],
            "binned": list(self.binned),
            "atoms": {name: list(values) for name, values in self.atoms},
            "categorical": [c.name for c in self.schema.categorical],
            "n_bins": self.n_bins,
            "scaling": "each Gaussian column mapped affinely from its public range [low, high] to [-1, 1]",
            "row_order": list(self.names),
        }

    @staticmethod
    def _scale(column: Continuous, values: FloatArray) -> FloatArray:
        mid, half = (column.low + column.high) / 2, (column.high - column.low) / 2
        return (values - mid) / half

    @staticmethod
    def _unscale(column: Continuous, values: FloatArray) -> FloatArray:
        mid, half = (column.low + column.high) / 2, (column.high - column.low) / 2
        return values * half + mid
