"""Synthetic data: the utility and risk report of a release (and, later, the synthesizers).

* :mod:`p2pem.synth.metrics` -- marginal, correlation and closest-record distances (NumPy);
* :mod:`p2pem.synth.models` -- TSTR classifiers and the reproducibility of a named
  regression (scikit-learn and statsmodels, the optional extra ``p2pem[synth]``);
* :mod:`p2pem.synth.report` -- :func:`synth_report` and :func:`report_figure`.

The report depends only on :mod:`p2pem.tabular`, never on the EM or the protocols.
"""

from __future__ import annotations

from p2pem.synth.models import ADULT_INCOME_REGRESSION, Regression
from p2pem.synth.report import REPORT_FORMAT, REPORT_VERSION, report_figure, synth_report

__all__ = ["ADULT_INCOME_REGRESSION", "REPORT_FORMAT", "REPORT_VERSION", "Regression", "report_figure", "synth_report"]
