"""Figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pem.simulate import RunResult  # noqa: E402

_STYLES = {
    "centralized": dict(color="black", linestyle="-", linewidth=2.5, alpha=0.35),
    "federated": dict(color="tab:orange", linestyle="--", marker="s", markevery=10),
    "secure-sum": dict(color="tab:green", linestyle=":", marker="^", markevery=10),
    "pdmm-sp": dict(color="tab:blue", linestyle="-", marker="o", markevery=10, markerfacecolor="none"),
}


def loglik_figure(runs: list[RunResult], path: Path, *, title: str) -> None:
    """Average log-likelihood per row against EM iteration, one curve per protocol (cf. Fig. 2)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for r in runs:
        style = _STYLES.get(r.protocol.split(" ")[0], {})
        ax.plot(range(len(r.loglik)), r.loglik, label=r.protocol, **style)
    ax.set_xlabel("EM iteration")
    ax.set_ylabel("average log-likelihood per row")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
