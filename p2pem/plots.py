"""Figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from p2pem.simulate import RunResult  # noqa: E402

#: The look of each protocol's line, the same in every figure p2pem draws (simulation, leakage).
_STYLES: dict[str, dict[str, Any]] = {
    "centralized": dict(color="black", linestyle="-", linewidth=2.5, alpha=0.35),
    "federated": dict(color="tab:orange", linestyle="--", marker="s", markevery=(6, 10)),
    "secure-sum": dict(color="tab:green", linestyle=":", marker="^", markevery=(3, 10)),
    "pdmm-sp": dict(color="tab:blue", linestyle="-", marker="o", markevery=(0, 10), markerfacecolor="none"),
}


#: Colours for protocols without a look of their own (the private ones), none used by ``_STYLES``.
_PALETTE = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")


def protocol_style(label: str) -> dict[str, Any]:
    """Matplotlib keywords of a protocol's line, by the first word of its label (``"pdmm-sp (c=0.4)"``);
    empty for a protocol without a look of its own."""
    return dict(_STYLES.get(label.split(" ")[0], {}))


def protocol_styles(labels: list[str]) -> dict[str, dict[str, Any]]:
    """The look of every label of one figure: each protocol's own, and for the others
    (``dp-central-gaussian``, ...) distinct colours that no protocol of the figure uses,
    in order of appearance, so no two lines share a colour."""
    styles: dict[str, dict[str, Any]] = {}
    spare = iter(_PALETTE * (1 + len(labels) // len(_PALETTE)))
    for label in dict.fromkeys(labels):
        style = protocol_style(label)
        styles[label] = style or {"color": next(spare), "linestyle": "-", "marker": "d", "markevery": (1, 10), "markersize": 4}
    return styles


def loglik_figure(runs: list[RunResult], path: Path, *, title: str) -> None:
    """Log-likelihood against EM iteration per protocol (cf. Fig. 2 of Li et al. 2022).

    The top panel is the paper's figure; the curves lie on top of each other, so the bottom
    panel shows each protocol's distance from the centralised reference on a log scale.
    A protocol that releases no log-likelihood (the differentially private ones) has no
    curve: the figure names it under the title instead of giving it a legend entry.
    """
    ref = next((r for r in runs if r.protocol == "centralized"), None)
    shown = [r for r in runs if np.any(np.isfinite(np.asarray(r.loglik, dtype=float)))]
    hidden = [r.protocol for r in runs if r not in shown]
    styles = protocol_styles([r.protocol for r in shown])
    rows = 2 if ref is not None and len(shown) > 1 else 1
    fig, axes = plt.subplots(rows, 1, figsize=(6.4, 3.6 * rows), dpi=120, sharex=True, squeeze=False)
    ax = axes[0, 0]
    for r in shown:
        ax.plot(range(len(r.loglik)), r.loglik, label=r.protocol, **styles[r.protocol])
    ax.set_ylabel("average log-likelihood per row")
    ax.set_title(title if not hidden else f"{title}\nnot plotted (no log-likelihood released): {', '.join(hidden)}", fontsize=10)
    ax.grid(alpha=0.3)
    if shown:
        ax.legend()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # EM iterations are whole numbers
    if rows == 2 and ref is not None:
        ax2 = axes[1, 0]
        ref_ll = np.asarray(ref.loglik)
        for r in shown:
            if r is ref:
                continue
            n = min(len(r.loglik), len(ref_ll))
            diff = np.abs(np.asarray(r.loglik[:n]) - ref_ll[:n]) / np.abs(ref_ll[:n])
            ax2.semilogy(range(n), np.maximum(diff, 1e-17), label=r.protocol, **styles[r.protocol])
        ax2.set_ylabel("relative difference\nfrom centralized")
        ax2.set_ylim(1e-17, 1e-6)
        ax2.grid(alpha=0.3, which="both")
    axes[-1, 0].set_xlabel("EM iteration")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def selection_figure(doc: dict[str, Any], path: Path) -> None:
    """BIC and AIC (top) and the log-likelihood (bottom) against the number of components, one
    line per family, the smallest BIC of each family marked (``p2pem select``)."""
    families = list(doc["families"])
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6.4), dpi=120, sharex=True)
    for i, name in enumerate(families):
        rows = [r for r in doc["rows"] if r["family"] == name]
        ks = [r["n_components"] for r in rows]
        colour = f"C{i}"
        ax.plot(ks, [r["bic"] for r in rows], marker="o", color=colour, label=f"{name} BIC")
        ax.plot(ks, [r["aic"] for r in rows], marker="s", markerfacecolor="none", linestyle="--", color=colour, label=f"{name} AIC")
        best = min(rows, key=lambda r: r["bic"])
        ax.plot([best["n_components"]], [best["bic"]], marker="*", markersize=16, color=colour, linestyle="none")
        ax2.plot(ks, [r["loglik"] for r in rows], marker="o", color=colour, label=name)
        for r in rows:
            if r["boundary"]:
                ax2.annotate("boundary", (r["n_components"], r["loglik"]), textcoords="offset points", xytext=(4, -12), fontsize=7, color=colour)
    ax.set_ylabel("information criterion (lower is better)")
    ax.set_title(f"{doc['scenario']}: {doc['n_rows']} rows over {doc['n_nodes']} nodes, {doc['protocol']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax2.set_ylabel("log-likelihood (network total)")
    ax2.set_xlabel("number of components G")
    ax2.set_xticks(sorted({r["n_components"] for r in doc["rows"]}))
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
