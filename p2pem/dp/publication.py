"""Where a published artifact's randomness comes from, and what its privacy block says about it.

A **simulation** (``p2pem simulate``, ``tradeoff``, the leakage Monte Carlo) is reproducible by
design: its protocol noise comes from the scenario seed (:mod:`p2pem.streams`), so anyone with
the scenario file can recompute the noise and subtract it.  Such a result describes a
mechanism; it is not a release.

A **publication** (a synthetic release, a private saved model) is what leaves the data holders.
Its DP noise and every DP selection (the exponential mechanism) must be unpredictable: they are
drawn from the operating system's entropy and no document records anything that determines
them.  Only under an explicit, loudly labelled flag (``--insecure-reproducible-seed``, for tests
and benchmarks) are they drawn from the scenario seed, and then the release itself says
``differentially_private: false``.

Every command that publishes goes through one :class:`Publication`::

    pub = Publication.secure()                       # or Publication.insecure(scenario.seed)
    seed = pub.seed()                                # the run's seed: 128 bits of OS entropy
    run = run_protocol(..., seed=scenario_streams(seed)["protocol"])
    block = pub.privacy_block(provenance)            # the release's "privacy", completed
    rows = synthesizer.sample(release, n, pub.rng())  # sampling: OS entropy too

``privacy_block`` adds to a protocol's provenance the fields every privacy block of a
publication carries: ``release`` (true), ``noise`` (``"os-entropy"`` or
``"insecure-reproducible-seed"``), ``neighbours`` (:data:`NEIGHBOURS`), and ``public`` (the
document's fields that are declared public rather than derived from the noisy releases).

The neighbouring relation (one for the whole package)
------------------------------------------------------
Neighbouring data sets have the same number of rows n, which is public, and differ in the
values of one row (*replace-one*, bounded DP).  Row counts (``n_rows``, ``training_rows``,
every node's count) are therefore published as they are and listed as public.  The EM
releases' sensitivities are stated for adding or removing a row (:mod:`p2pem.dp.mechanisms`);
a replacement moves a release by at most twice that, so the calibration uses
:data:`REPLACE_ONE` times them (:meth:`p2pem.dp.protocols.DPProtocol.bind`).  PrivBayes'
sensitivities are already stated for replace-one (:mod:`p2pem.bayesnet.privacy`).

This module imports the standard library and NumPy only.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["INSECURE_FLAG", "NEIGHBOURS", "REPLACE_ONE", "RESULT_PUBLIC", "SIMULATION", "Publication", "simulation_block"]

#: The command-line flag that makes a publication reproducible, and not private.
INSECURE_FLAG = "--insecure-reproducible-seed"

#: The neighbouring relation every privacy block states (module docstring).
NEIGHBOURS = ("replace-one: neighbouring data sets have the same number of rows n (public) and differ in one row's values; "
              "row counts are published as public")

#: How much a replacement moves a release, in units of its add-or-remove-one sensitivity.
REPLACE_ONE = 2.0

#: What a simulation result's privacy block says it is.
SIMULATION = ("a simulation of the mechanism, not a release: its noise comes from the scenario seed, so anyone with the "
              "scenario file can recompute and remove it; publish a model only through `p2pem model --fresh-noise` "
              "or `p2pem synth`")


#: The fields of ``result.json`` declared public (``protocols[]`` stands for every run): the scenario's
#: facts and settings, the row count (public under replace-one), the accounting, and how each run
#: went (rounds, messages, bytes, timing, the nodes' spread: side channels that the privacy block's
#: ``excluded`` names, published as they are).  The fitted parameters are post-processing of the
#: noisy releases.
RESULT_PUBLIC = (
    "format", "version", "scenario", "scenario_file", "seed", "parties", "family", "graph", "n_rows",
    *(f"protocols[].{key}" for key in ("protocol", "protocol_params", "resolved_params", "n_iter", "converged", "loglik",
                                        "consensus_iterations", "init_consensus_iterations", "messages", "bytes", "wall_s",
                                        "node_spread", "unconverged_iterations")),
)


def simulation_block() -> dict[str, Any]:
    """The fields a simulation's privacy block adds: ``release: false`` and why, the neighbouring relation,
    and the result's fields declared public (:data:`RESULT_PUBLIC`)."""
    return {"release": False, "noise": "scenario-seed", "note": SIMULATION, "neighbours": NEIGHBOURS, "public": list(RESULT_PUBLIC)}


@dataclass(frozen=True)
class Publication:
    """The randomness of one publication (module docstring).

    Parameters
    ----------
    insecure_seed : int or None
        None (the default): every draw from OS entropy.  An integer: every draw from that
        seed, reproducible and therefore **not** differentially private.
    """

    insecure_seed: int | None = None

    @classmethod
    def secure(cls) -> Publication:
        """Noise and selections from OS entropy."""
        return cls(None)

    @classmethod
    def insecure(cls, seed: int) -> Publication:
        """Noise and selections from ``seed`` (tests and benchmarks only: not private)."""
        return cls(int(seed))

    @property
    def reproducible(self) -> bool:
        """True under ``--insecure-reproducible-seed``."""
        return self.insecure_seed is not None

    def seed(self) -> int:
        """The seed of the run's random streams: 128 fresh bits from :mod:`secrets`, or the insecure seed.

        Each call of a secure publication gives a new seed; call it once per run and record it
        nowhere.
        """
        return secrets.randbits(128) if self.insecure_seed is None else self.insecure_seed

    def rng(self, *key: int) -> np.random.Generator:
        """A generator for post-processing draws (sampling rows): OS entropy, or the insecure seed and ``key``."""
        if self.insecure_seed is None:
            return np.random.default_rng()
        return np.random.default_rng(np.random.SeedSequence(self.insecure_seed, spawn_key=tuple(key)))

    @property
    def noise(self) -> str:
        """Where the noise came from, as the privacy block says it."""
        return "insecure-reproducible-seed" if self.reproducible else "os-entropy"

    def privacy_block(self, provenance: Mapping[str, Any], public: Iterable[str]) -> dict[str, Any]:
        """A publication's privacy block: the protocol's ``provenance`` with the fields of the module docstring.

        Parameters
        ----------
        provenance : mapping
            What the protocol says (``differentially_private``, ``epsilon``, ...).
        public : iterable of str
            The document's top-level fields (or dotted paths) that are declared public: published
            as they are, not derived from the noisy releases and not covered by epsilon.
        """
        out = dict(provenance)
        out["release"] = True
        out["noise"] = self.noise
        out["neighbours"] = NEIGHBOURS
        out["public"] = sorted(set(public))
        if self.reproducible and out.get("differentially_private"):
            out["differentially_private"] = False
            out["note"] = (f"INSECURE: drawn with {INSECURE_FLAG}: the noise and every selection follow from the scenario seed, "
                           "so anyone with the scenario file can undo them; NOT differentially private")
        return out
