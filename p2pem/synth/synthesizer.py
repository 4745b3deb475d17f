"""The synthesizer interface: a release is a model plus a sampler.

A synthesizer has two halves, as DataSynthesizer's describer and generator:

``fit(scenario, protocol, *, progress=None) -> release``
    Fits the model of a scenario to its training rows, spread over the scenario's nodes,
    with one of its protocols (any: exact or differentially private), and returns the
    **release document**: a JSON-ready dict with ``format``, ``version``, ``model``, the
    public ``schema``, the fitted model's parameters and the provenance (protocol and its
    parameters, the epsilon spent per accountant and against how many colluders, the seed,
    what was treated as public).  Everything a sampler needs is in it, nothing else: no
    row, no scenario.
``sample(release, n_rows, rng) -> Table``
    Draws rows from the release document alone, with the one random generator given.
    Sampling is post-processing of the release, so it costs no further privacy: any
    number of rows and of releases.

A synthesizer is registered by name in :data:`p2pem.synth.registry.SYNTHESIZERS` (one line);
``[synth] model`` picks it and ``p2pem synth`` runs it, draws the releases, writes them and
the utility and risk report.  :func:`release_header` starts every release document with the
fields all synthesizers share.

Publishing (shared by every synthesizer and any command that publishes a model)
-------------------------------------------------------------------------------
A release leaves the data holders, so its DP noise and every DP selection come from OS
entropy and no field records what determines them (:mod:`p2pem.dp.publication`).  A
synthesizer's ``fit`` takes a ``publication`` (None: :meth:`Publication.secure`) and

1. seeds its run with :func:`run_seed` (128 fresh bits, or the insecure seed), recorded
   nowhere: the scenario seed still places rows on nodes and builds the graph (public);
2. ends with :func:`publish`, which completes the ``privacy`` block: ``release``, ``noise``
   (``os-entropy`` or ``insecure-reproducible-seed``, which also sets
   ``differentially_private: false``), ``neighbours`` (replace-one, n public) and
   ``public``: the top-level fields declared public.  Every other field must be
   post-processing of the noisy releases: the auditor's replay test (tests/test_publication.py)
   fits a neighbouring data set with the same noisy releases and fails on any other field
   that differs.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from p2pem.dp.publication import Publication
from p2pem.errors import DataError
from p2pem.protocols import ProtocolSpec
from p2pem.runner import output_header
from p2pem.scenario import Scenario
from p2pem.tabular import Schema, Table, schema_from_dict, schema_to_toml

__all__ = ["HEADER_PUBLIC", "RELEASE_FORMAT", "Synthesizer", "privacy_provenance", "publish", "release_header", "release_schema",
           "run_seed"]

#: The fields of :func:`release_header` that are declared public (every release's ``privacy.public``
#: lists them with the synthesizer's own): facts of the scenario, its settings and the accounting.
HEADER_PUBLIC = ("format", "version", "scenario", "scenario_file", "seed", "parties", "model", "schema", "training_rows", "n_nodes", "protocol",
                 "privacy", "public")

#: ``format`` and ``version`` of a release document.
RELEASE_FORMAT = ("p2pem-synth-release", 1)

#: What a long fit reports: (EM or other iteration, iterations in all).
Progress = Callable[[int, int], None]


class Synthesizer(Protocol):
    """Fits a release document from a scenario; samples rows from a release document alone (module docstring)."""

    @property
    def name(self) -> str:
        """The name ``[synth] model`` takes and a release document's ``model``."""
        ...

    def fit(self, scenario: Scenario, protocol: ProtocolSpec, *, progress: Progress | None = None,
            publication: Publication | None = None) -> dict[str, Any]:
        """The release document of ``scenario``'s model fitted with ``protocol``, its noise and
        selections drawn as ``publication`` says (None: OS entropy; see :func:`publish`)."""
        ...

    def sample(self, release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
        """``n_rows`` rows drawn from ``release`` (a document :meth:`fit` returned, or read back from JSON)."""
        ...


def release_header(model: str, scenario: Scenario, schema: Schema, *, training_rows: int, protocol_params: Mapping[str, Any],
                   protocol: str, public: list[str]) -> dict[str, Any]:
    """The fields every release document starts with.

    Parameters
    ----------
    model : str
        The synthesizer's name.
    scenario : Scenario
        Where the release comes from (name, file and seed are recorded).
    schema : Schema
        The public schema of the rows (written in full: the sampler reads it back).
    training_rows : int
        Rows the model was fitted to.
    protocol_params : mapping
        The protocol's parameters after the run (a private one's epsilon spent included).
    protocol : str
        How the run is labelled (e.g. ``dp-pdmm-sp-gaussian``).
    public : list of str
        What the release treats as public, beyond the schema (preprocessing, shares, ...).
    """
    return {
        **output_header(RELEASE_FORMAT, scenario),
        "model": model,
        "schema": schema_document(schema),
        "training_rows": int(training_rows),
        "n_nodes": scenario.graph.n_nodes,
        "protocol": {"name": protocol, "params": dict(protocol_params)},
        "privacy": privacy_provenance(protocol, protocol_params),
        "public": [
            "the schema: column names, types, order, numeric ranges and category lists"
            + ("" if schema.public else " -- NOT PUBLIC: the schema says it was read off the data"),
            f"the graph of {scenario.graph.n_nodes} nodes, the parties' names ('parties', when they have names) and every node's row count",
            SEED_PUBLIC,
            *public,
        ],
    }


#: What the recorded scenario seed determines in a release (its ``public`` list says it).
SEED_PUBLIC = ("the scenario seed: which node holds which row, the graph and the public initial draw; the DP noise, the "
               "selections and the sampled rows come from OS entropy and are recorded nowhere (unless the privacy block says "
               "noise = 'insecure-reproducible-seed')")


def run_seed(publication: Publication | None) -> int:
    """The seed of a publication's run (:meth:`Publication.seed`): OS entropy unless insecure; record it nowhere."""
    return (publication or Publication.secure()).seed()


def publish(release: dict[str, Any], publication: Publication | None, public: tuple[str, ...] | list[str] = (), *,
            sampler: str | None = None) -> dict[str, Any]:
    """Complete a release document's privacy blocks for publication (module docstring), in place; returns it.

    ``release["privacy"]`` becomes :meth:`Publication.privacy_block` of itself with the public
    fields :data:`HEADER_PUBLIC` plus ``public`` and, for a private release, ``sampler``: how
    its noise was sampled (:data:`p2pem.dp.mechanisms.HARDENED_SAMPLER` or ``FLOAT_SAMPLER``);
    the protocol's own block (``protocol.params.privacy``, a simulation's by default) is marked
    a release too.
    """
    pub = publication or Publication.secure()
    release["privacy"] = pub.privacy_block(release["privacy"], (*HEADER_PUBLIC, *public))
    if sampler is not None and "epsilon" in release["privacy"]:
        release["privacy"]["sampler"] = sampler
    inner = release.get("protocol", {}).get("params", {}).get("privacy")
    if isinstance(inner, dict):
        inner.pop("note", None)
        inner.update(release=True, noise=pub.noise)
    return release


def schema_document(schema: Schema) -> dict[str, Any]:
    """The schema as the plain data of its TOML file (:func:`p2pem.tabular.schema_to_toml`)."""
    return tomllib.loads(schema_to_toml(schema))


def release_schema(release: Mapping[str, Any]) -> Schema:
    """The schema of a release document (checked as a schema file is).

    Raises
    ------
    DataError
        Not a release document of a known version.
    """
    fmt, version = RELEASE_FORMAT
    if release.get("format") != fmt or release.get("version") != version:
        raise DataError(f"not a {fmt} version {version} document (format {release.get('format')!r}, version {release.get('version')!r})")
    return schema_from_dict(release["schema"], where="release", prefix="schema")


def privacy_provenance(protocol: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """What a release's privacy is, from its protocol's parameters (as ``result.json`` records them).

    A differentially private protocol (one with an ``epsilon``) reports its budget, the
    epsilon each accountant certifies and, where the protocol states them, against how
    many colluding nodes it holds and what it excludes.  An exact protocol adds no noise:
    the release is as good as the central non-private fit, and as revealing.
    """
    if "epsilon" not in params:
        return {
            "differentially_private": False,
            "note": f"{protocol} adds no noise: the fitted model equals the central non-private fit (to its numerical "
            "tolerance); what the protocol protects is the nodes' individual statistics during the run, not the "
            "released model, which reveals whatever the exact model reveals",
        }
    epsilon = params.get("epsilon")
    from_data = bool(params.get("bound_from_data"))
    out: dict[str, Any] = {
        "differentially_private": not from_data and epsilon is not None and math.isfinite(float(epsilon)),
        "epsilon": epsilon,
        "delta": params.get("delta"),
        "mechanism": params.get("mechanism"),
        "accountant": params.get("accountant"),
        "epsilon_spent": params.get("epsilon_spent"),
    }
    block = params.get("privacy")
    if isinstance(block, Mapping):  # against whom epsilon holds and what it excludes, where the protocol states it
        out["colluders"] = block.get("colluders")
        out["epsilon_against"] = block.get("epsilon")
        out["excluded"] = block.get("excluded")
    if from_data:
        out["note"] = "the data domain (bound) was read off the data: NOT differentially private"
    return out
