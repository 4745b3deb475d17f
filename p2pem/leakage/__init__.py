"""Leakage analysis: what an adversary's view of the messages reveals about honest inputs.

The estimation core lives in :mod:`p2pem.leakage.estimators` (KSG mutual information
with confidence intervals and a normalisation, Gaussian closed forms for linear
views, and a linear reduction of high-dimensional views).  This package module stays
empty on purpose: importing the estimators pulls in scikit-learn through
``npeet-plus``, which the rest of p2pem should not pay for on import.
"""

from __future__ import annotations
