"""Reconstruction attacks on the sums an adversary learns over a whole EM run.

Every protocol here discloses, per aggregation, the sums of the EM statistics over some
groups of honest nodes (:mod:`p2pem.leakage.wholerun` derives them from the view).  For a
group holding the rows x_1 .. x_m, aggregation t reveals

    S(t) = sum_r f(x_r; theta_{t-1})

with f the per-row statistics of :func:`p2pem.gmm.batch_statistics` (responsibilities r_k,
r_k (x - mu_k), r_k (x - mu_k)(x - mu_k)^T, log p(x)) at the public model theta_{t-1}, and the
initialisation aggregation reveals (m, sum x, sum x x^T).  With T iterations seen that is up to
T (K + K d + K d (d + 1) / 2 + 1) + 1 + d + d (d + 1) / 2 equations in m d unknowns.

:func:`reconstruct_rows` solves them by nonlinear least squares (``scipy.optimize.least_squares``
with the analytic Jacobian of :func:`row_statistics`) from several random starts drawn from
the group's own first two moments (disclosed by the initialisation) and keeps the best fit.
Rows are identified at best up to their order inside the group: :func:`match_rows` scores an
estimate by the optimal assignment of estimated to true rows.  :func:`public_guess_error` is
the baseline the attack must beat: rows drawn from the public final model, scored the same
way, i.e. what an adversary knows without the group's sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares, linear_sum_assignment
from scipy.special import logsumexp

from p2pem.errors import DataError
from p2pem.gmm import GMMParams

__all__ = [
    "Observation",
    "Reconstruction",
    "init_row_statistics",
    "match_rows",
    "public_guess_error",
    "reconstruct_rows",
    "row_statistics",
]

FloatArray = npt.NDArray[np.float64]

#: A fit whose residual norm, relative to the norm of the sums, is below this solves the
#: equations: further starts cannot do better.
SOLVED_RTOL = 1e-10


def row_statistics(X: FloatArray, model: GMMParams) -> tuple[FloatArray, FloatArray]:
    """Per-row E-step statistics and their derivatives with respect to the row.

    Parameters
    ----------
    X : (m, d) array
    model : GMMParams
        The public model the statistics are computed at.

    Returns
    -------
    stats : (m, P) array
        Row r is f(x_r; model) in the layout of :func:`p2pem.gmm.batch_statistics` without
        the continue flag: a (K), b (K d, component-major), C (K d(d+1)/2, upper triangle in
        ``numpy.triu_indices`` order), log p(x).
    jac : (m, P, d) array
        d f / d x_r.

    Notes
    -----
    With g_k = d log N_k / dx = -P_k (x - mu_k) and gbar = sum_k r_k g_k, the responsibility
    derivative is r_k (g_k - gbar) (softmax rule) and d log p / dx = gbar; the moments follow
    by the product rule.  Cost O(m K d^3).
    """
    X = np.asarray(X, dtype=float)
    cov = model.covariances
    stats, jac = _batch_row_statistics(X, np.log(model.weights)[None], model.means[None], np.linalg.inv(cov)[None], np.linalg.slogdet(cov)[1][None])
    return stats[0], jac[0]


def init_row_statistics(X: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per-row initialisation statistics (1, x, x x^T upper) and their derivatives.

    The layout of :func:`p2pem.gmm.init_statistics`.  Returns (m, Q) and (m, Q, d).
    """
    X = np.asarray(X, dtype=float)
    m, d = X.shape
    iu = np.triu_indices(d)
    eye = np.eye(d)
    stats = np.concatenate([np.ones((m, 1)), X, X[:, iu[0]] * X[:, iu[1]]], axis=1)
    dsec = eye[iu[0]][None] * X[:, iu[1], None] + X[:, iu[0], None] * eye[iu[1]][None]
    jac = np.concatenate([np.zeros((m, 1, d)), np.broadcast_to(eye, (m, d, d)), dsec], axis=1)
    return stats, jac


@dataclass(frozen=True, eq=False)
class Observation:
    """What one aggregation disclosed about a group.

    Attributes
    ----------
    model : GMMParams or None
        The public model the statistics were computed at; None for the initialisation
        aggregation, whose statistics are (count, sum x, sum x x^T).
    sums : (P,) array
        The group's sums, without the continue flag; with ``transform``, the Q values observed.
    transform : (Q, P) array or None
        What was observed is ``transform`` applied to the group's sums in the layout of
        :func:`row_statistics` (:func:`init_row_statistics` for the initialisation); None:
        the sums themselves.  A private run releases other coordinates (uncentred sums, no
        log-likelihood) with noise: its transform maps to those and whitens them, so the
        least-squares fit is the maximum-likelihood one (:mod:`p2pem.leakage.private`).
    """

    model: GMMParams | None
    sums: FloatArray
    transform: FloatArray | None = None

    def layout_sums(self) -> FloatArray:
        """The sums in the statistics layout (least squares through ``transform``; a coordinate
        the transform drops comes back as 0)."""
        if self.transform is None:
            return self.sums
        return np.asarray(np.linalg.lstsq(self.transform, self.sums, rcond=None)[0], dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Reconstruction:
    """The best fit over all starts.

    Attributes
    ----------
    rows : (m, d) array
        Estimated rows, in no particular order.
    residual : float
        Norm of the misfit relative to the norm of the sums (0 for an exact solution).
    starts : int
        Starts tried (fewer than asked when one solved the equations).
    """

    rows: FloatArray
    residual: float
    starts: int


class _Equations:
    """The disclosed sums of all aggregations seen as one vectorised function of the rows.

    Model-dependent constants (precisions, log-determinants) are computed once; an
    evaluation is one batch over (aggregation, row, component) with no Python loop.
    """

    def __init__(self, observations: Sequence[Observation]) -> None:
        self.init = [o for o in observations if o.model is None]
        with_model = [o for o in observations if o.model is not None]
        models = [o.model for o in with_model if o.model is not None]
        self.target = np.concatenate([o.sums for o in self.init] + [o.sums for o in with_model])
        self.n_models = len(models)
        # per-model transforms (None: the sums are observed as they are)
        self.transforms = None if all(o.transform is None for o in with_model) else [o.transform for o in with_model]
        if models:
            self.log_w = np.log(np.stack([p.weights for p in models]))  # (T, K)
            self.means = np.stack([p.means for p in models])  # (T, K, d)
            cov = np.stack([p.covariances for p in models])
            self.prec = np.linalg.inv(cov)
            self.logdet = np.linalg.slogdet(cov)[1]

    def __call__(self, X: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Model sums (n_eq,) and their Jacobian (n_eq, m d), columns in X.ravel() order."""
        m, d = X.shape
        vals, jacs = [], []
        for o in self.init:
            s, j = init_row_statistics(X)
            v, jj = s.sum(axis=0), np.transpose(j, (1, 0, 2)).reshape(j.shape[1], m * d)
            if o.transform is not None:
                v, jj = o.transform @ v, o.transform @ jj
            vals.append(v)
            jacs.append(jj)
        if self.n_models:
            s, j = _batch_row_statistics(X, self.log_w, self.means, self.prec, self.logdet)
            t, _, p = s.shape
            if self.transforms is None:
                vals.append(s.sum(axis=1).ravel())
                jacs.append(np.transpose(j, (0, 2, 1, 3)).reshape(t * p, m * d))
            else:
                sums, jsum = s.sum(axis=1), np.transpose(j, (0, 2, 1, 3)).reshape(t, p, m * d)
                for k, a in enumerate(self.transforms):
                    vals.append(sums[k] if a is None else a @ sums[k])
                    jacs.append(jsum[k] if a is None else a @ jsum[k])
        return np.concatenate(vals), np.concatenate(jacs, axis=0)


def _batch_row_statistics(X, log_w, means, prec, logdet) -> tuple[FloatArray, FloatArray]:
    """:func:`row_statistics` for T models at once: (T, m, P) and (T, m, P, d)."""
    m, d = X.shape
    t, k = log_w.shape
    diff = X[None, :, None, :] - means[:, None]  # (T, m, K, d)
    pd = np.einsum("tkab,tmkb->tmka", prec, diff)
    logp = log_w[:, None] - 0.5 * (d * math.log(2 * math.pi) + logdet[:, None] + np.einsum("tmka,tmka->tmk", diff, pd))
    norm = logsumexp(logp, axis=2)
    r = np.exp(logp - norm[..., None])  # (T, m, K)
    gbar = -np.einsum("tmk,tmka->tma", r, pd)
    dr = r[..., None] * (-pd - gbar[:, :, None, :])  # (T, m, K, d)
    eye = np.eye(d)
    iu = np.triu_indices(d)
    b = r[..., None] * diff
    db = dr[..., None, :] * diff[..., None] + r[..., None, None] * eye
    c = b[..., iu[0]] * diff[..., iu[1]]
    dc = dr[..., None, :] * (diff[..., iu[0]] * diff[..., iu[1]])[..., None] + r[..., None, None] * (
        eye[iu[0]] * diff[..., iu[1], None] + diff[..., iu[0], None] * eye[iu[1]]
    )
    stats = np.concatenate([r, b.reshape(t, m, -1), c.reshape(t, m, -1), norm[..., None]], axis=2)
    jac = np.concatenate([dr, db.reshape(t, m, k * d, d), dc.reshape(t, m, -1, d), gbar[:, :, None, :]], axis=2)
    return stats, jac


def _start_sampler(observations: Sequence[Observation], m: int, d: int) -> Callable[[np.random.Generator], FloatArray]:
    """Draw starting rows from the mixture the disclosed sums themselves describe.

    The sums at a model theta give each component's weight a_k, mean mu_k + b_k / a_k and
    covariance C_k / a_k - delta delta^T (the M-step, eq. (5)-(7) of Li et al. 2022, applied
    to the group alone); the last aggregation seen is used.  With only the initialisation,
    the group's mean and covariance.
    """
    iu = np.triu_indices(d)
    with_model = [o for o in observations if o.model is not None]
    comps = []
    if with_model:
        obs = with_model[-1]
        assert obs.model is not None  # filtered above
        k = obs.model.n_components
        sums = obs.layout_sums()
        a = sums[:k]
        b = sums[k : k + k * d].reshape(k, d)
        tri = sums[k + k * d : -1].reshape(k, -1)
        for j in range(k):
            if a[j] <= 1e-9 * m:
                continue
            second = np.zeros((d, d))
            second[iu] = tri[j] / a[j]
            second = second + np.triu(second, 1).T
            delta = b[j] / a[j]
            comps.append((a[j], obs.model.means[j] + delta, second - np.outer(delta, delta)))
        if not comps:  # noise left no component with a positive count: the public model's
            comps = [(w, mu, cov) for w, mu, cov in zip(obs.model.weights, obs.model.means, obs.model.covariances, strict=True)]
    else:
        obs = observations[0]
        sums = obs.layout_sums()
        mean = sums[1 : 1 + d] / m
        second = np.zeros((d, d))
        second[iu] = sums[1 + d :] / m
        second = second + np.triu(second, 1).T
        comps.append((1.0, mean, second - np.outer(mean, mean)))
    weights = np.array([c[0] for c in comps])
    weights = weights / weights.sum()
    chols = []
    for _, _, cov in comps:
        vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
        chols.append(vecs * np.sqrt(np.clip(vals, 0.0, None)))
    means = np.array([c[1] for c in comps])

    def draw(rng: np.random.Generator) -> FloatArray:
        which = rng.choice(len(comps), size=m, p=weights)
        noise = rng.standard_normal((m, d))
        return means[which] + np.einsum("mab,mb->ma", np.array(chols)[which], noise)

    return draw


def reconstruct_rows(
    observations: Sequence[Observation],
    n_rows: int,
    *,
    rng: np.random.Generator,
    starts: int = 4,
    max_nfev: int | None = None,
    initial: FloatArray | None = None,
) -> Reconstruction:
    """Find m rows whose statistics reproduce the disclosed sums of every aggregation seen.

    Parameters
    ----------
    observations : sequence of Observation
        The disclosed sums of the aggregations seen, in any order.
    n_rows : int
        Rows in the group (disclosed: the count of the initialisation, or sum_k a_k).
    rng : numpy.random.Generator
        Source of the starting points.
    starts : int
        Random starts; stops early once a start solves the equations (relative residual
        below :data:`SOLVED_RTOL`).
    max_nfev : int or None
        Function evaluations per start (None: scipy's default, 100 per unknown).
    initial : (m, d) array, optional
        A first start to try before the random ones (e.g. the fit to fewer aggregations).

    Returns
    -------
    Reconstruction

    Raises
    ------
    DataError
        No observation, or sums of the wrong length.

    Notes
    -----
    Nonlinear least squares on sum_t ||sum_r f(x_r; theta_{t-1}) - S(t)||^2 / m^2 (trust
    region reflective, analytic Jacobian).  Starting rows are drawn from the mixture the group's
    own sums describe (:func:`_start_sampler`).  Each evaluation costs O(T m K d^3); a step of the
    solver O(T P (m d)^2).
    """
    if not observations:
        raise DataError("the attack needs at least one disclosed aggregation")
    first = next((o for o in observations if o.model is not None), None)
    if first is not None and first.model is not None:
        d = first.model.n_features
    else:
        q = observations[0].sums.shape[0]
        d = int(round((-3 + math.sqrt(9 + 8 * (q - 1))) / 2))
    m = int(n_rows)
    equations = _Equations(observations)
    target = equations.target
    def size(o: Observation) -> int:
        return (1 + d + d * (d + 1) // 2) if o.model is None else (o.model.n_components * (1 + d + d * (d + 1) // 2) + 1)

    for o in observations:
        if o.transform is not None and (o.transform.ndim != 2 or o.transform.shape != (o.sums.shape[0], size(o))):
            raise DataError(f"an observation's transform has shape {o.transform.shape}, its sums and model imply {(o.sums.shape[0], size(o))}")
    expected = sum(size(o) if o.transform is None else o.transform.shape[0] for o in observations)
    if target.shape[0] != expected:
        raise DataError(f"disclosed sums have {target.shape[0]} entries, the models imply {expected}")
    scale = 1.0 / m
    norm = float(np.linalg.norm(target * scale)) or 1.0
    draw = _start_sampler(observations, m, d)
    # least_squares asks for the residuals and then the Jacobian at the same point: one
    # evaluation serves both (the equations depend on the point alone, so a start may reuse it)
    cache: dict[bytes, tuple[FloatArray, FloatArray]] = {}

    def evaluate(flat: FloatArray) -> tuple[FloatArray, FloatArray]:
        key = flat.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = equations(flat.reshape(m, d))
        return cache[key]

    def fun(flat: FloatArray) -> FloatArray:
        return (evaluate(flat)[0] - target) * scale

    def jac(flat: FloatArray) -> FloatArray:
        return evaluate(flat)[1] * scale

    best: Reconstruction | None = None
    tried = 0
    for s in range(starts):
        tried += 1
        x0 = initial if (s == 0 and initial is not None) else draw(rng)
        with np.errstate(over="ignore", under="ignore"):
            fit = least_squares(fun, x0.ravel(), jac=jac, method="trf", x_scale="jac", max_nfev=max_nfev, xtol=1e-15, ftol=1e-15, gtol=1e-15)
        res = float(np.linalg.norm(fit.fun)) / norm
        if best is None or res < best.residual:
            best = Reconstruction(fit.x.reshape(m, d), res, tried)
        if res < SOLVED_RTOL:
            break
    assert best is not None  # at least one start ran
    return Reconstruction(best.rows, best.residual, tried)


def match_rows(true_rows: FloatArray, estimates: FloatArray) -> FloatArray:
    """Distance of each true row to the estimate the optimal one-to-one assignment gives it.

    Parameters
    ----------
    true_rows : (m, d) array
    estimates : (m', d) array

    Returns
    -------
    (m,) array
        Euclidean distances; rows left unassigned (m > m') get ``inf``.
    """
    t = np.asarray(true_rows, dtype=float)
    e = np.asarray(estimates, dtype=float)
    cost = np.sum((t[:, None, :] - e[None, :, :]) ** 2, axis=-1)
    rows, cols = linear_sum_assignment(cost)
    out = np.full(t.shape[0], np.inf)
    out[rows] = np.sqrt(cost[rows, cols])
    return out


def public_guess_error(model: GMMParams, true_rows: FloatArray, *, rng: np.random.Generator, draws: int = 5) -> FloatArray:
    """Baseline: distances of the true rows to rows drawn from the public model, matched.

    The adversary who ignores the group's sums can only draw plausible rows from the final
    public model; scoring those draws with the same optimal matching as the attack makes the
    two comparable.  Returns (m,) distances averaged over ``draws`` draws.
    """
    t = np.asarray(true_rows, dtype=float)
    m = t.shape[0]
    out = np.zeros(m)
    for _ in range(draws):
        comp = rng.choice(model.n_components, size=m, p=model.weights / model.weights.sum())
        chol = np.linalg.cholesky(model.covariances)
        rows = model.means[comp] + np.einsum("mab,mb->ma", chol[comp], rng.standard_normal(t.shape))
        out += match_rows(t, rows)
    return out / draws
