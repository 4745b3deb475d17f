"""Leakage analysis: what an adversary's view of the messages reveals about honest inputs.

=====================================  =======================================================
module                                 what it holds
=====================================  =======================================================
:mod:`p2pem.leakage.estimators`        KSG mutual information (NPEET's estimator) with confidence
                                       intervals, the full-disclosure ceiling, normalisation
:mod:`p2pem.leakage.closed_forms`      exact mutual information for Gaussian inputs: through
                                       linear maps, of sums, of masks
:mod:`p2pem.leakage.checks`            argument checks shared by the two above
:mod:`p2pem.leakage.views`             adversary models (honest-but-curious, eavesdropper,
                                       both) and their views, built from a message trace
:mod:`p2pem.leakage.reduce`            reductions of a view: principal components and the
                                       adversary's cross-fitted linear estimate (its
                                       population MI is a lower bound, the estimate is
                                       not), exact MI from the view's linear structure
:mod:`p2pem.leakage.theory`            what each protocol discloses by design (closed
                                       forms), honest components and topology warnings
:mod:`p2pem.leakage.config`            the validated ``[leakage]`` table of a scenario
:mod:`p2pem.leakage.inputs`            what every node aggregates per run: the scenario's
                                       own rows, or the paper's Gaussian model
:mod:`p2pem.leakage.montecarlo`        one aggregation over every Monte Carlo run at once,
                                       with its trace and latents; the adversaries
:mod:`p2pem.leakage.measure`           the KSG pipeline per target and iteration
:mod:`p2pem.leakage.report`            the records, leakage.json and summary.json
:mod:`p2pem.leakage.plan`              what runs before it runs: protocols and skips,
                                       inputs, default targets, the run-time estimate
:mod:`p2pem.leakage.analysis`          the planned analysis: Monte Carlo, estimates, floors,
                                       the perturbation sweep
:mod:`p2pem.leakage.plots`             MI against iteration (cf. Fig. 3) in a grid of at most
                                       a screenful, or per node; perturbation sweep
:mod:`p2pem.leakage.cli`               ``p2pem leakage SCENARIO --out DIR``
:mod:`p2pem.leakage.wholerun`          whole-run views: every aggregation of a real EM run
                                       reduced exactly to the group sums it discloses
:mod:`p2pem.leakage.attack`            reconstruction of a group's rows from those sums
:mod:`p2pem.leakage.wholerun_analysis` ``[leakage.whole_run]``, attacks per node, the report
:mod:`p2pem.leakage.multi_mi`          MI over T EM iterations in the Fig. 3 setting
:mod:`p2pem.leakage.wholerun_cli`      ``p2pem leakage SCENARIO --whole-run --out DIR``
=====================================  =======================================================

This package module imports nothing on purpose: the estimators and the analysis pull in
scipy's spatial trees and matplotlib, which the rest of p2pem should not pay for on import.
"""

from __future__ import annotations
