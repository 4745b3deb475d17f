"""Spectral clustering of attributes on a (released, noisy) similarity matrix.

HMPrivBayes (Zhang, Shen & Yang, 计算机系统应用 2022, Sec. 3.1) splits the attributes into
groups of related ones and builds one network per group.  The similarity of two
attributes is their maximal information coefficient; here it is released with Laplace
noise (:mod:`p2pem.bayesnet.privacy`), so the clustering below is post-processing:

1. the affinity W: the noisy similarities, symmetrised and clipped to [0, 1], zero diagonal;
2. the normalised Laplacian ``L = I - D^{-1/2} W D^{-1/2}`` (Ng, Jordan & Weiss, NIPS 2001);
3. the eigenvectors of its ``n_clusters`` smallest eigenvalues, rows scaled to unit length;
4. k-means++ seeding (Arthur & Vassilvitskii, SODA 2007) and Lloyd iterations on those rows.

Randomness comes only from the generator passed in (in a run: the shared stream every node
holds), so every node computes the same clusters from the same released matrix.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = ["kmeans_plus_plus", "spectral_clusters"]


def kmeans_plus_plus(points: FloatArray, n_clusters: int, rng: np.random.Generator, *, max_iter: int = 100) -> IntArray:
    """Labels of k-means on ``points`` (n, f) from k-means++ seeds, Lloyd iterations to a fixed point.

    Ties go to the lowest cluster index; a cluster left empty keeps its centre.
    """
    n = points.shape[0]
    centres = [points[int(rng.integers(n))]]
    for _ in range(1, n_clusters):
        d2 = np.min(((points[:, None, :] - np.asarray(centres)[None]) ** 2).sum(-1), axis=1)
        total = d2.sum()
        if total <= 0:  # every point sits on a centre already: take the next unused one
            taken = {tuple(c) for c in centres}
            free = [i for i in range(n) if tuple(points[i]) not in taken]
            centres.append(points[free[0]] if free else points[0])
            continue
        draw = rng.random() * total
        centres.append(points[min(int(np.searchsorted(np.cumsum(d2), draw, side="right")), n - 1)])
    c = np.asarray(centres)
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(max_iter):
        new = np.argmin(((points[:, None, :] - c[None]) ** 2).sum(-1), axis=1).astype(np.int64)
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(n_clusters):
            members = points[labels == j]
            if members.size:
                c[j] = members.mean(axis=0)
    return labels


def spectral_clusters(similarity: FloatArray, n_clusters: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Groups of attributes from a similarity matrix (module docstring), as sorted tuples.

    Parameters
    ----------
    similarity : (d, d) array
        Released similarities (any real values: symmetrised and clipped here).
    n_clusters : int
        1 <= n_clusters <= d.
    rng : numpy.random.Generator

    Returns
    -------
    list of tuple of int
        The non-empty groups, ordered by their smallest attribute.
    """
    d = similarity.shape[0]
    if not 1 <= n_clusters <= d:
        raise ConfigError(f"the number of attribute clusters must be in 1..{d}, got {n_clusters}")
    if n_clusters == 1:
        return [tuple(range(d))]
    w = np.clip((similarity + similarity.T) / 2.0, 0.0, 1.0)
    np.fill_diagonal(w, 0.0)
    degree = w.sum(axis=1)
    scale = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 0.0)
    laplacian = np.eye(d) - scale[:, None] * w * scale[None, :]
    _, vectors = np.linalg.eigh(laplacian)
    embedding = vectors[:, :n_clusters]
    norms = np.linalg.norm(embedding, axis=1, keepdims=True)
    embedding = embedding / np.where(norms > 0, norms, 1.0)
    labels = kmeans_plus_plus(embedding, n_clusters, rng)
    groups = [tuple(int(a) for a in np.flatnonzero(labels == j)) for j in range(n_clusters)]
    return sorted((g for g in groups if g), key=lambda g: g[0])
