"""Mixed-type tables under a public schema: read, check, encode, write.

The pieces, lowest first:

* :mod:`p2pem.tabular.schema` -- :class:`Schema` (ordered :class:`Continuous` and
  :class:`Categorical` columns with public domains, and the CSV layout), read from a TOML
  schema file (:func:`load_schema`) or an inline table (:func:`schema_from_dict`);
* :mod:`p2pem.tabular.table` -- :class:`Table`, the rows as a continuous float block and
  a categorical code block;
* :mod:`p2pem.tabular.io` -- :func:`read_table` (every cell checked against the schema,
  rows with a missing value dropped and counted) and :func:`write_csv`;
* :mod:`p2pem.tabular.encode` -- public equal-width bins (:func:`discretize`,
  :func:`undiscretize`) and one-hot design matrices (:func:`design_matrix`).

Nothing here depends on the EM or the protocols; the synthesizers and the report
(:mod:`p2pem.synth`) build on it.

Examples
--------
>>> schema = load_schema("data/adult.schema.toml")
>>> train = read_table("data/adult.data", schema)
>>> train.n_rows, train.n_dropped
(30162, 2399)
"""

from __future__ import annotations

from p2pem.tabular.encode import DEFAULT_BINS, Design, bin_edges, design_matrix, discretize, domain_sizes, one_hot, undiscretize
from p2pem.tabular.io import read_table, read_table_parties, schema_from_data_NOT_PRIVATE, write_csv
from p2pem.tabular.schema import (
    SCHEMA_FORMAT,
    Categorical,
    Column,
    Continuous,
    CsvLayout,
    Schema,
    SchemaError,
    load_schema,
    schema_from_dict,
    schema_to_toml,
)
from p2pem.tabular.table import Table, concat_tables

__all__ = [
    "DEFAULT_BINS",
    "SCHEMA_FORMAT",
    "Categorical",
    "Column",
    "Continuous",
    "CsvLayout",
    "Design",
    "Schema",
    "SchemaError",
    "Table",
    "bin_edges",
    "concat_tables",
    "design_matrix",
    "discretize",
    "domain_sizes",
    "load_schema",
    "one_hot",
    "read_table",
    "read_table_parties",
    "schema_from_data_NOT_PRIVATE",
    "schema_from_dict",
    "schema_to_toml",
    "undiscretize",
    "write_csv",
]
