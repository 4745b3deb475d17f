"""pdmm-sp's batch engine: every node's synchronous rounds at once, bit for bit the message-level nodes.

The same update functions (``updates``), step parameters (``steps``) and stopping
rule (``stopping``) as ``node.PdmmNode``, on NumPy (bit-identical to the nodes) or,
with ``device``, on another array-API namespace (CuPy, ``device``).  On NumPy a round reuses
preallocated buffers and SciPy's CSC product, which adds each node's neighbour terms in the
node's own order; the settle test skips its full form while a cheap, exact prefilter already
fails every node (see ``updates.settled``).  With ``threads`` > 1 the round's sparse product
and its elementwise updates run over contiguous blocks of nodes (``device.RowBlocks``) on
that many threads, with the same bits as one thread.  From ``LOCALITY_NODES`` nodes on the
CPU the round runs on the nodes renumbered into a locality order (``device.Locality``: each
node's neighbour sum keeps its original order, so the bits are unchanged), mapped back in what
the engine returns and records.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from functools import partial
from typing import Any

import numpy as np

from p2pem.errors import ConfigError
from p2pem.messages import Message
from p2pem.protocols.base import AggregateOutcome, Topology
from p2pem.protocols.pdmm.device import Locality, NeighbourMin, RowBlocks, SparseProduct, namespace, to_host
from p2pem.protocols.pdmm.spectra import per_topology
from p2pem.protocols.pdmm.steps import Options, step_params
from p2pem.protocols.pdmm.stopping import StopRule, check_precision
from p2pem.protocols.pdmm.updates import sums_update


def aggregate(spec: Options, values, topology: Topology, rngs, iteration: int, *, record: bool = False) -> AggregateOutcome:
    """All nodes at once on ``spec.device``: the same arithmetic as ``node.PdmmNode``, in the same order.

    The vector work (primal, sparse product, dual sums, settle test) and the integer
    stopping counters run on the array namespace of the device.  On the CPU the initial
    duals come from the per-node generators (bit for bit the message-level engine); on a
    device they are drawn there as one block (``dual_sums_device``).
    """
    if spec.asynchronous:
        raise NotImplementedError("asynchronous pdmm-sp runs only at message level")
    if record and spec.device != "cpu":
        raise ConfigError("pdmm-sp: recording a message trace needs device = 'cpu'")
    xp, sparse = namespace(spec.device)
    t_ = topology
    n, p = values.shape
    prm = per_topology(t_, ("steps", spec.accel, spec.accelerated, spec.c, spec.momentum, spec.theta, spec.stop_tol, spec.stop), lambda: step_params(spec, t_))
    theta = spec.theta
    trace: list[Message] | None = [] if record else None
    worst = int(np.argmin(np.max(np.abs(values), axis=1))) if n else 0
    check_precision(spec, values[worst], worst, stacklevel=4)  # past this function and PdmmSP.aggregate
    on_host = spec.device == "cpu"
    if on_host:
        u, v = dual_sums_host(spec, values, t_, rngs, iteration, trace)
    else:
        u, v = dual_sums_device(spec, p, t_, rngs, xp, sparse)
    # the round's rows in a locality order (public, cached per topology); None: the original ids
    order = per_topology(t_, "locality", lambda: Locality(t_)) if on_host and n >= LOCALITY_NODES else None
    n_threads = thread_count(spec, t_)
    indptr = t_.indptr if order is None else order.indptr
    blocks = per_topology(t_, ("blocks", n_threads, order is None), lambda: RowBlocks(indptr, n_threads)) if n_threads > 1 else None
    # the product's matrix (on the device) is built once per topology, step parameters and blocks
    product = per_topology(t_, ("product", spec.device, prm.c, prm.beta, prm.schedule is None, n_threads, order is None), lambda: (
        SparseProduct(t_.adjacency if prm.weights is None else t_.weighted_adjacency(prm.weights), xp, sparse, blocks)
        if order is None else
        SparseProduct(order.matrix(np.ones(t_.dst.size) if prm.weights is None else prm.weights), xp, sparse, blocks, in_order=True)))
    # min(a_i, min over i's neighbours of a_j): the stopping counters' one reduction; the
    # counters live beside x (host for the CPU, else the device: no transfer per round)
    nb_min = per_topology(t_, ("nb_min", spec.device, order is None), lambda: NeighbourMin(t_, xp, on_host, order))
    rows = (lambda a: a) if order is None else order.rows

    def dev(a):
        return a if not isinstance(a, np.ndarray) else xp.asarray(a)

    u, v, s_dev = dev(rows(u)), dev(rows(v)), dev(np.ascontiguousarray(rows(values), dtype=float))
    denom, two_cd, w, degree = dev(rows(prm.denom)), dev(rows(prm.two_cd)), dev(rows(prm.w)), dev(rows(prm.degree))
    two_c = prm.two_c
    ecc = rows(t_.eccentricity) if on_host else xp.asarray(t_.eccentricity)
    rule = StopRule(ecc, tol=spec.stop_tol, max_iter=spec.max_iter, settle_after=prm.settle_after, n_nodes=n, xp=xp,
                    fixed_stop=prm.fixed_stop)
    x_prev = None
    # on NumPy the round runs in preallocated buffers (same operations, same bits): x goes
    # into `spare`, sums_update writes the new u and v over nb_sum and the old u
    inplace = xp is np and theta == 1.0
    spare = np.empty_like(u) if inplace else None
    # with blocks, each elementwise step runs block by block on the pool's threads (rows are
    # independent: the same bits), the product as RowBlocks describes
    split = inplace and blocks is not None
    x: Any = None
    t = 0
    with ThreadPoolExecutor(len(blocks) - 1, thread_name_prefix="pdmm-sp") if blocks is not None else nullcontext() as pool:
        while True:
            t += 1
            if prm.schedule is not None:
                denom, two_c, two_cd, _ = prm.at(t)
                w = two_cd - two_c * degree  # as prm.at computes it, on the device
            if split and blocks is not None:
                blocks.run(pool, partial(_primal_rows, s_dev, u, denom, spare))
                x = spare
            elif inplace:
                x = np.divide(np.subtract(s_dev, u, out=spare), denom, out=spare)
            else:
                x = (s_dev - u) / denom
            if trace is not None:
                g, stop_at = rule.g, rule.stop_at
                at = range(n) if order is None else order.inv.tolist()  # node i's row
                for i, k in enumerate(at):
                    trace.append(Message(i, t_.neighbours[i], iteration, t, "primal", x[k].copy(), False, (int(g[k]), int(stop_at[k]))))
            nb_sum = product(x, pool)
            if rule.advance(t, x, x_prev, nb_sum, degree, nb_min, nb_min):
                break
            spare = v if x_prev is None else x_prev  # free after this round (trace rows are copies)
            if split and blocks is not None:
                blocks.run(pool, partial(_update_rows, u, v, x, nb_sum, two_c, two_cd, w))
                u, v = nb_sum, u  # where _update_rows wrote them, as sums_update in place does
            else:
                u, v = sums_update(u, v, x, nb_sum, two_c, two_cd, theta, w, inplace=inplace)
            x_prev = x
    n_edges = t_.dst.size
    messages = n_edges + n * t
    nbytes = n_edges * 8 * p + n * t * (8 * p + 16)
    return AggregateOutcome(to_host(x) if order is None else order.back(x), t, messages, nbytes, rule.converged, trace)


#: The CPU round runs renumbered (``device.Locality``) from this many nodes: at 10^4 the edge
#: state no longer fits in the caches and the product's reads in the drawn order wait on
#: memory (``sim/bench_rounds.py``); below, the renumbering costs more than it saves.
LOCALITY_NODES = 5_000


#: ``threads = "auto"`` gives each thread at least this many directed edges: below, a round
#: costs little more than the calls that hand blocks to threads (``sim/bench_rounds.py``).
EDGES_PER_THREAD = 250_000


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def thread_count(spec: Options, topology: Topology) -> int:
    """Threads of a round on ``topology``: ``spec.threads``, or for "auto" one per
    ``EDGES_PER_THREAD`` directed edges up to the usable cores; always 1 off the CPU."""
    if spec.device != "cpu":
        return 1
    if spec.threads != "auto":
        return int(spec.threads)
    return max(1, min(usable_cores(), topology.dst.size // EDGES_PER_THREAD))


def _rows(a, lo: int, hi: int):
    """Rows lo:hi of a per-node column (n, 1), or a scalar coefficient itself."""
    return a[lo:hi] if isinstance(a, np.ndarray) and a.ndim else a


def _primal_rows(s, u, denom, out, lo: int, hi: int) -> None:
    """x = (s - u) / denom on rows lo:hi, into ``out`` (the engine's in-place primal)."""
    np.divide(np.subtract(s[lo:hi], u[lo:hi], out=out[lo:hi]), _rows(denom, lo, hi), out=out[lo:hi])


def _update_rows(u, v, x, nb_sum, two_c, two_cd, w, lo: int, hi: int) -> None:
    """``sums_update`` in place (theta = 1) on rows lo:hi: the new u into ``nb_sum``, the new v into ``u``."""
    sums_update(u[lo:hi], v[lo:hi], x[lo:hi], nb_sum[lo:hi], two_c, _rows(two_cd, lo, hi), 1.0,
                None if w is None else _rows(w, lo, hi), inplace=True)


def dual_sum_matrices(topology: Topology):
    """Sparse (n, m) matrices taking the per-edge initial duals (CSR edge order) to
    u_i = sum_j B_{i|j} z_{i|j} and v_i = sum_j B_{i|j} z_{j|i}.

    Their product adds a row's terms from zero in neighbour order, as
    ``updates.neighbour_sum`` does on a node (same bits), without the (m, p)
    temporaries of a gather.
    """
    import scipy.sparse as sp  # lazily: a node process never runs the batch engine

    n, m = topology.n_nodes, topology.dst.size
    sign = topology.sign.astype(float)
    return (sp.csr_matrix((sign, np.arange(m), topology.indptr), shape=(n, m)),
            sp.csr_matrix((sign, topology.reverse, topology.indptr), shape=(n, m)))


def dual_sums_host(spec: Options, values, t_: Topology, rngs, iteration: int, trace):
    """u_i = sum_j s_ij z_{i|j}(0) and v_i = sum_j s_ij z_{j|i}(0) from every node's own stream.

    Node i draws the initial duals of its outgoing edges from its generator, as
    ``node.PdmmNode`` does, so this engine and the message-level one agree bit for bit.
    """
    n, p = values.shape
    z = np.empty((t_.dst.size, p))
    bounds = t_.indptr.tolist()
    for i in range(n):
        lo, hi = bounds[i], bounds[i + 1]
        z[lo:hi] = rngs[i].normal(0.0, spec.perturbation_std, size=(hi - lo, p))
    if trace is not None:
        src = t_.src
        for d in range(t_.dst.size):
            trace.append(Message(int(src[d]), (int(t_.dst[d]),), iteration, 0, "dual-init", z[d].copy(), spec.encrypt_duals))
    to_u, to_v = per_topology(t_, "dual_sums", lambda: dual_sum_matrices(t_))
    return to_u @ z, to_v @ z


def dual_sums_device(spec: Options, p: int, t_: Topology, rngs, xp, sparse):
    """u and v as in ``dual_sums_host``, with the initial duals drawn on the device.

    At 10^5 nodes the per-node host draws (a Python loop over the nodes, then 7 million
    edges times p columns copied to the device) cost seconds per aggregation, more than the
    consensus itself on a GPU.  Here one block of N(0, std^2) duals is drawn on the device
    from a generator seeded by the run's last protocol stream (the asynchronous schedule's,
    unused by synchronous runs): the same distribution, not the same numbers as the CPU
    engine, so device and CPU results agree to the consensus tolerance, not bit for bit.
    A simulation, not a deployment: nothing here is a secret.
    """
    if len(rngs) <= t_.n_nodes:
        raise ConfigError("pdmm-sp on a device needs the run's protocol streams (p2pem.simulate.protocol_streams)")
    seed = int(rngs[t_.n_nodes].integers(2**63))
    m = t_.dst.size
    if spec.device == "cuda":
        import cupy  # the optional gpu extra

        z = cupy.random.default_rng(seed).standard_normal((m, p)) * spec.perturbation_std
    else:  # array-api-strict has no random numbers: drawn by NumPy, then moved
        z = xp.asarray(np.random.default_rng(seed).normal(0.0, spec.perturbation_std, size=(m, p)))
    to_u, to_v = per_topology(t_, ("dual_sums", spec.device), lambda: tuple(
        SparseProduct(a, xp, sparse) for a in dual_sum_matrices(t_)))
    return to_u(z), to_v(z)
