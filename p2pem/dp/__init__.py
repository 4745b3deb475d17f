"""Differentially private EM baselines and the privacy-accuracy trade-off.

======================  ===============================================================
module                  what it holds
======================  ===============================================================
``mechanisms``          released statistics, their sensitivities, Laplace/Gaussian noise
``accounting``          budget splits and composition over EM iterations (dp-accounting)
``postprocess``         weight clipping, covariance repair (eigclamp, diagshift, xi)
``releases``            each model family's released blocks, sensitivities and EM hook
``protocols``           ``dp-central`` and ``dp-distributed`` (named in :mod:`p2pem.registry`)
``tradeoff``            ``p2pem tradeoff``: epsilon sweeps against the non-private protocols
``bayes``               the private Bayes classifier (one mixture per class)
======================  ===============================================================
"""
