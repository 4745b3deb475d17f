"""PDMM average consensus with subspace perturbation (``pdmm-sp``).

Average consensus as the problem min sum_i 1/2 ||x_i - s_i||^2 subject to x_i = x_j on every
edge, solved by PDMM (Zhang & Heusdens 2018) on per-node dual sums, with the initial duals
drawn large and exchanged once, encrypted, so that their never-converging part hides each
input (subspace perturbation, Li, Heusdens & Christensen 2020), accelerated by heavy ball and,
by default, a polynomial fitted to the public spectrum before it (``schedules``), which keep
that part untouched.

One room per job, lower rooms never importing higher ones (an import-linter contract):

* ``updates``: the update formulas (dual, dual sums, settle test), each written once;
* ``spectra``: weighted Laplacians and their eigenvalues, cached per topology;
* ``schedules``: per-round schedules, deflated heavy ball and Leja polynomials;
* ``steps``: step parameters from the spectrum (plain c, heavy ball, which schedule);
* ``stopping``: the stopping rule (settled counters, eccentricity waits, stop rounds);
* ``device``: array namespaces and the two device operations (sparse product, neighbour min);
* ``engine``: the batch engine, all nodes at once, bit for bit the nodes;
* ``node``: one node's state machine (simulator and deployment);
* ``spec``: ``PdmmSP``, the parameters a user sets.
"""

from __future__ import annotations

from p2pem.protocols.pdmm.node import PdmmNode
from p2pem.protocols.pdmm.schedules import Schedule, leja_roots, schedule_from_steps
from p2pem.protocols.pdmm.spec import PdmmSP
from p2pem.protocols.pdmm.spectra import (
    DENSE_NODES,
    LAMBDA2_MARGIN,
    dense_laplacian,
    laplacian_extremes,
    low_eigenvalues,
    metropolis_extremes,
    metropolis_spectrum,
    metropolis_weights,
    sparse_laplacian,
)
from p2pem.protocols.pdmm.steps import (
    DEFLATE_NODES,
    N_DEFLATE,
    N_EXACT,
    POLYNOMIAL_NODES,
    StepParams,
    auto_c,
    deflation_schedule,
    heavy_ball_params,
    polynomial_schedule,
    polynomial_target,
    predicted_rounds,
    step_params,
)
from p2pem.protocols.pdmm.stopping import NEVER, PrecisionWarning, StopRule, check_precision
from p2pem.protocols.pdmm.updates import dual_update, neighbour_sum, settled, sums_update

__all__ = [
    "DEFLATE_NODES",
    "DENSE_NODES",
    "LAMBDA2_MARGIN",
    "NEVER",
    "N_DEFLATE",
    "N_EXACT",
    "POLYNOMIAL_NODES",
    "PdmmNode",
    "PdmmSP",
    "PrecisionWarning",
    "Schedule",
    "StepParams",
    "StopRule",
    "auto_c",
    "check_precision",
    "deflation_schedule",
    "dense_laplacian",
    "dual_update",
    "heavy_ball_params",
    "leja_roots",
    "laplacian_extremes",
    "low_eigenvalues",
    "metropolis_extremes",
    "metropolis_spectrum",
    "metropolis_weights",
    "neighbour_sum",
    "polynomial_schedule",
    "polynomial_target",
    "predicted_rounds",
    "schedule_from_steps",
    "settled",
    "sparse_laplacian",
    "step_params",
    "sums_update",
]
