"""The mixture synthesizer: a mixed-type mixture fitted across the nodes, sampled into rows.

The model is :class:`p2pem.families.mixed.MixedFamily` over the rows of a table under a
public schema, encoded by :class:`p2pem.families.encoding.TableEncoding` (Gaussian columns
scaled to [-1, 1] by their public ranges, binned columns and categories as codes); a table
whose columns are all continuous may name any family of continuous rows instead
(``[em] family = "skew-normal"`` or ``"gaussian"``: full covariances, skewed components).  It is
fitted with the scenario's protocol -- any of them: an exact private aggregation
(``pdmm-sp``, ``secure-sum``), ``federated``, ``centralized`` or a differentially private
one (``dp-central``, ``dp-distributed``) -- and released as its parameters.  A sample is a
draw from the mixture mapped back to the schema's columns (Jälkö et al., *Patterns* 2021).

A private protocol's public data domain is the box the encoding maps the Gaussian columns to,
so ``bound`` defaults to 1 here (a bound given in the scenario is kept).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from p2pem.builders import build_graph, em_settings, load_data, with_public_box
from p2pem.errors import ConfigError, DataError, InitError
from p2pem.families import MixedFamily, family_from_document
from p2pem.families.encoding import TableEncoding
from p2pem.protocols import Centralized, ProtocolSpec
from p2pem.scenario import Scenario
from p2pem.simulate import run_protocol
from p2pem.dp.mechanisms import FLOAT_SAMPLER, HARDENED_SAMPLER, hardened_noise
from p2pem.dp.publication import Publication
from p2pem.streams import scenario_streams
from p2pem.synth.synthesizer import Progress, publish, release_header, release_schema, run_seed
from p2pem.tabular import Table

__all__ = ["MixtureSynthesizer"]


@dataclasses.dataclass(frozen=True)
class MixtureSynthesizer:
    """``mixture``: the mixed-type mixture of the scenario's ``[em]`` (module docstring)."""

    name: str = "mixture"

    def fit(self, scenario: Scenario, protocol: ProtocolSpec, *, progress: Progress | None = None,
            publication: Publication | None = None) -> dict[str, Any]:
        """Fit the scenario's mixed-type mixture with ``protocol``; the release document.

        The protocol's randomness (a private protocol's noise) comes from ``publication``
        (None: OS entropy, :func:`p2pem.synth.synthesizer.publish`).  Declared public besides
        the header: the encoding, the family, the number of components and of EM iterations
        (fixed in a private run); the parameters are the noisy releases, post-processed.

        Raises
        ------
        ConfigError
            The scenario's data has no schema, or its family is not the mixed family.
        """
        encoding = scenario.data.encoding
        family = scenario.em.family
        if encoding is None:
            raise ConfigError(f"{scenario.path}: the mixture synthesizer needs a [data] schema (a table of named, typed columns)")
        if encoding.discrete and not isinstance(family, MixedFamily):
            raise ConfigError(f"{scenario.path}: a table with categorical or binned columns is fitted by the mixed family, not {family.name!r}")
        protocol = with_public_box(scenario, protocol)  # a private run's box: the encoding's [-1, 1]
        parts = load_data(scenario)
        graph = build_graph(scenario)
        if not isinstance(protocol, Centralized):
            protocol.validate(graph)
        # one party draws dp-central's noise: from OpenDP's exact samplers when publishing (noise shares stay numpy's)
        hardened = protocol.name == "dp-central" and not (publication is not None and publication.reproducible)
        with hardened_noise() if hardened else contextlib.nullcontext():
            run = run_protocol(parts, graph, protocol, em_settings(scenario), seed=scenario_streams(run_seed(publication))["protocol"],
                               progress=progress)
        public = [
            f"the encoding: Gaussian columns {', '.join(c.name for c in encoding.gaussian) or '(none)'} scaled by their public ranges; "
            f"binned columns {', '.join(encoding.binned) or '(none)'} on {encoding.n_bins} public equal-width bins (or the schema's public edges)"
            + (f", with the atoms {dict(encoding.atoms)}" if encoding.atoms else ""),
            f"the model's size: {scenario.em.n_components} components, {scenario.em.max_iter} EM iterations",
        ]
        if isinstance(family, MixedFamily) and family.stratify is not None:
            column = encoding.discrete[family.stratify].name
            public.append(
                f"the strata of {column!r}: their shares {list(family.strata_weights)}, declared public"
                if family.strata_weights is not None
                else f"the strata of {column!r}: one mixture per category (their sizes are released through the weights)"
            )
        return publish({
            **release_header(
                self.name, scenario, encoding.schema, training_rows=sum(len(p) for p in parts), protocol_params=run.protocol_params,
                protocol=run.protocol, public=public,
            ),
            "encoding": encoding.describe(),
            "family": family.describe(),
            "n_components": scenario.em.n_components,
            "n_iter": run.n_iter,
            "parameters": family.to_dict(run.params),
        }, publication, ("encoding", "family", "n_components", "n_iter"), sampler=HARDENED_SAMPLER if hardened else FLOAT_SAMPLER)

    def sample(self, release: Mapping[str, Any], n_rows: int, rng: np.random.Generator) -> Table:
        """``n_rows`` rows drawn from the release's mixture, in random order.

        Raises
        ------
        DataError
            The document is not a mixture release, or its model is invalid.
        """
        schema = release_schema(release)
        if release.get("model") != self.name:
            raise DataError(f"not a {self.name!r} release (model {release.get('model')!r})")
        try:
            enc = release["encoding"]
            atoms = tuple((name, tuple(float(v) for v in values)) for name, values in enc.get("atoms", {}).items())
            encoding = TableEncoding(schema, tuple(enc["binned"]), int(enc["n_bins"]), atoms)
            family = family_from_document(release["family"])
            params = family.params_from_dict(release["parameters"], int(release["n_components"]), len(encoding.names))
        except (KeyError, TypeError) as exc:
            raise DataError(f"mixture release: missing or malformed entry ({exc})") from None
        except (ConfigError, InitError) as exc:
            raise DataError(f"mixture release: invalid model ({exc})") from None
        X, _ = family.sample(params, n_rows, rng)
        return encoding.table(X[rng.permutation(len(X))], rng=rng)
