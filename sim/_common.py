"""Helpers shared by the benchmark scripts (run them as ``python sim/bench_*.py``)."""

from __future__ import annotations


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Aligned columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def write_markdown(path: str, command: str, headers: list[str], rows: list[list[str]], notes: list[str]) -> None:
    """A table for the documentation (``docs/generated/``, included by a page with ``--8<--``):
    the command that measured it, the table, then notes (machine, load, goals)."""
    import os
    from pathlib import Path

    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    text = [f"Measured by `{command}` on {len(os.sched_getaffinity(0))} cores at load average {os.getloadavg()[0]:.1f}:", "",
            line(headers), "| " + " | ".join(["---"] + ["---:"] * (len(headers) - 1)) + " |", *map(line, rows), "", *notes]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(text) + "\n", encoding="utf-8")


def exact_metropolis_extremes(topo) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the Metropolis Laplacian by ARPACK (shift-invert for lambda_2):
    slower than the LOBPCG estimate pdmm-sp uses, but exact, as a lower bound needs."""
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from p2pem.protocols.pdmm import metropolis_weights

    W = topo.weighted_adjacency(metropolis_weights(topo))
    lap = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()
    lmax = float(spla.eigsh(lap, k=1, which="LA", return_eigenvectors=False)[0])
    lam2 = float(spla.eigsh(lap.tocsc(), k=2, sigma=-1e-3 * lmax, which="LM", return_eigenvectors=False).max())
    return lam2, lmax


def chebyshev_gossip_rounds(topo, x0, mean, target, max_rounds=20000) -> int | None:
    """Rounds of Chebyshev semi-iteration on M = I - gamma L_g from x0 until max|x - mean|/max|mean| <= target.

    L_g is the Metropolis Laplacian (the weighting pdmm-sp's heavy ball uses), gamma =
    2 / (lambda_2 + lambda_max), rho = (lambda_max - lambda_2) / (lambda_max + lambda_2),
    x(k+1) = w(k+1) M x(k) + (1 - w(k+1)) x(k-1), w1 = 1, w2 = 2 / (2 - rho^2),
    w(k+1) = 1 / (1 - rho^2 w(k) / 4) (Golub & Varga 1961): the fewest rounds any
    fixed-weight polynomial iteration on that interval needs.  Round 1 is x0 itself, as PDMM's
    round 1 is its first broadcast.  None if not reached within ``max_rounds``.
    """
    import numpy as np
    import scipy.sparse as sp

    from p2pem.protocols.pdmm import metropolis_weights

    W = topo.weighted_adjacency(metropolis_weights(topo))
    lap = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()
    lam2, lmax = exact_metropolis_extremes(topo)
    gamma, rho = 2.0 / (lam2 + lmax), (lmax - lam2) / (lmax + lam2)
    scale = np.max(np.abs(mean))

    def err(x):
        return np.max(np.abs(x - mean)) / scale

    prev, x = x0, x0 - gamma * (lap @ x0)
    if err(x0) <= target:
        return 1
    w = 1.0
    for k in range(2, max_rounds + 1):
        if err(x) <= target:
            return k
        w = 2.0 / (2.0 - rho**2) if k == 2 else 1.0 / (1.0 - rho**2 * w / 4.0)
        prev, x = x, w * (x - gamma * (lap @ x)) + (1.0 - w) * prev
    return None


def before_issue10(topo):
    """(spec, topology) of pdmm-sp's default before issue 10, on ``topo``'s graph.

    Plain PDMM with c = 1/sqrt(lambda_2 lambda_max) of the unit Laplacian (by shift-invert,
    as then) and every node waiting the diameter bound D to stop (today's rule with every
    eccentricity bound set to D): reproduces the old default's rounds exactly.
    """
    import numpy as np
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    from p2pem.protocols import PdmmSP
    from p2pem.protocols.base import Topology

    lap = (sp.diags(topo.degrees.astype(float)) - topo.adjacency).tocsc()
    lmax = float(spla.eigsh(lap, k=1, which="LA", return_eigenvectors=False)[0])
    lam2 = float(spla.eigsh(lap, k=2, sigma=-1e-3, which="LM", return_eigenvectors=False).max())
    before = Topology(topo.n_nodes, diameter=topo.diameter, indptr=topo.indptr, indices=topo.dst)
    before.__dict__["eccentricity"] = np.full(topo.n_nodes, topo.diameter)
    return PdmmSP(accel="none", c=1.0 / (lam2 * lmax) ** 0.5), before


def cpu_info() -> dict:
    """The host a benchmark ran on: CPU model, the cores this process may use, NumPy, SciPy, Python."""
    import platform
    from pathlib import Path

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy as np
    import scipy

    from p2pem.protocols.pdmm.engine import usable_cores

    return {"model": model, "usable_cores": usable_cores(), "numpy": np.__version__, "scipy": scipy.__version__,
            "python": platform.python_version()}


def cuda_info() -> dict:
    """The GPU the device path runs on: model, memory, NVIDIA driver (from ``nvidia-smi``, None
    where it is missing), CUDA driver API and runtime versions, CuPy's version."""
    import shutil
    import subprocess

    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"]
    driver = None
    if shutil.which("nvidia-smi"):
        try:
            driver = subprocess.run(["nvidia-smi", f"--id={dev.id}", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30, check=True).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            driver = None

    def version(v: int) -> str:
        return f"{v // 1000}.{v % 1000 // 10}"

    return {"model": name.decode() if isinstance(name, bytes) else str(name), "memory_gib": props["totalGlobalMem"] / 2**30,
            "compute_capability": f"{props['major']}.{props['minor']}", "driver": driver,
            "cuda_driver_api": version(cupy.cuda.runtime.driverGetVersion()),
            "cuda_runtime": version(cupy.cuda.runtime.runtimeGetVersion()), "cupy": cupy.__version__}
