"""Every synthesizer by the name ``[synth] model`` takes (:class:`p2pem.synth.synthesizer.Synthesizer`).

To add one: a module with its synthesizer (``fit`` a release document from a scenario,
``sample`` rows from a release document alone) and one line here.
"""

from __future__ import annotations

from p2pem.synth.marginal import MarginalSynthesizer
from p2pem.synth.mixture import MixtureSynthesizer
from p2pem.synth.privbayes import BayesNetSynthesizer
from p2pem.synth.synthesizer import Synthesizer

__all__ = ["SYNTHESIZERS"]

#: Synthesizers by the names users type.
SYNTHESIZERS: dict[str, Synthesizer] = {
    "mixture": MixtureSynthesizer(),
    "privbayes": BayesNetSynthesizer("privbayes"),
    "hmprivbayes": BayesNetSynthesizer("hmprivbayes"),
    "mst": MarginalSynthesizer("mst"),
    "aim": MarginalSynthesizer("aim"),
}
