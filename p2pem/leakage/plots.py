"""Leakage figures (matplotlib, Agg backend): MI against iteration (cf. Fig. 3 of the paper)
and the perturbation sweep."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from p2pem.leakage.report import LeakageRun  # noqa: E402
from p2pem.plots import protocol_style  # noqa: E402

_INSECURE_COLOR = "tab:red"

#: Bits below this are drawn on the bottom edge of the log axis.
FLOOR_BITS = 1e-3


def _style(protocol: str) -> dict:
    """The protocol's colour and marker from :func:`p2pem.plots.protocol_style`; red when insecure."""
    look = protocol_style(protocol)
    color = _INSECURE_COLOR if "INSECURE" in protocol else look.get("color", "tab:gray")
    return {"color": color, "marker": look.get("marker", "x")}


def _styles(runs: Sequence[LeakageRun]) -> dict[str, dict]:
    """One style per run label: the protocol's colour for its first run, others from tab10."""
    out: dict[str, dict] = {}
    tab10 = plt.get_cmap("tab10")
    spare = [tab10(i) for i in range(10)]
    used: set[str] = set()
    for r in runs:
        if r.label in out:
            continue
        st = _style(r.label)
        if r.protocol in used:
            st["color"] = spare[len(out) % len(spare)]
        used.add(r.protocol)
        out[r.label] = st
    return out


def _floor(values: Sequence[float]) -> list[float]:
    return [max(v, FLOOR_BITS) for v in values]


def leakage_figure(runs: Sequence[LeakageRun], path: Path, *, title: str, ceiling_bits: float) -> None:
    """MI in bits against iteration: one panel per (adversary, node), one curve per protocol.

    The shaded band is the confidence interval; the dashed line of the same colour is the
    floor, what any exact protocol discloses (drawn at the estimator's full-disclosure
    ceiling for full disclosure); the dotted line is the exact leakage of the view where its
    linear structure gives one.  Runs of the same protocol are told apart by their labels.  The y axis is logarithmic, values below 1e-3 bits sit on its
    bottom edge.
    """
    adversaries = list(dict.fromkeys(r.adversary for r in runs))
    nodes = list(dict.fromkeys((r.node, r.node_label) for r in runs))
    n_rows, n_cols = len(adversaries), len(nodes)
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(3.4 * n_cols + 0.6, 3.0 * n_rows + 0.9), dpi=120, squeeze=False, sharex=True, sharey=True
    )
    top = ceiling_bits * 1.6
    styles = _styles(runs)
    for row, adv in enumerate(adversaries):
        for col, (node, label) in enumerate(nodes):
            ax = axes[row][col]
            for r in runs:
                if r.adversary != adv or r.node != node:
                    continue
                st = styles[r.label]
                its = list(r.iterations)
                ax.plot(its, _floor(r.mi_bits), label=r.label, color=st["color"], marker=st["marker"], markersize=3.5, linewidth=1.4)
                ax.fill_between(its, _floor([c[0] for c in r.mi_ci]), _floor([c[1] for c in r.mi_ci]), color=st["color"], alpha=0.15, linewidth=0)
                if r.floor_bits is not None:
                    level = ceiling_bits if math.isinf(r.floor_bits) else max(r.floor_bits, FLOOR_BITS)
                    ax.axhline(level, color=st["color"], linestyle="--", linewidth=1.0, alpha=0.9)
                if r.exact_bits is not None and r.floor_bits is not None and not math.isinf(r.floor_bits):
                    exact = [ceiling_bits if math.isinf(v) else v for v in r.exact_bits]
                    ax.plot(its, _floor(exact), color=st["color"], linestyle=":", linewidth=1.0)
            ax.set_yscale("log")
            ax.set_ylim(FLOOR_BITS * 0.8, top)
            ax.grid(alpha=0.3, which="both", linewidth=0.5)
            ax.set_title(f"node {label}" + (f" · {adv}" if n_rows > 1 else ""), fontsize=10)
            if row == n_rows - 1:
                ax.set_xlabel("iteration")
            if col == 0:
                ax.set_ylabel("I(X; view) [bits]")
    handles, labels = axes[0][0].get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.0))
    labels.append("floor: what any exact protocol discloses (full disclosure: estimator ceiling)")
    handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.0))
    labels.append("exact leakage of the view")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.09 if n_rows == 1 else 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def sweep_figure(runs: Sequence[LeakageRun], path: Path, *, title: str, ceiling_bits: float) -> None:
    """Leakage (left) and EM accuracy (right) against the initial-dual standard deviation."""
    fig, (ax_mi, ax_acc) = plt.subplots(1, 2, figsize=(10.0, 4.0), dpi=120)
    groups = list(dict.fromkeys((r.protocol, r.adversary, r.node, r.node_label) for r in runs))
    cmap = plt.get_cmap("tab10")
    for g_idx, (protocol, adv, node, label) in enumerate(groups):
        sel = sorted((r for r in runs if (r.protocol, r.adversary, r.node) == (protocol, adv, node)), key=lambda r: r.perturbation_std or 0.0)
        std = [r.perturbation_std for r in sel]
        est = [max(r.mi_bits[-1], FLOOR_BITS) for r in sel]
        lo = [max(r.mi_ci[-1][0], FLOOR_BITS) for r in sel]
        hi = [max(r.mi_ci[-1][1], FLOOR_BITS) for r in sel]
        color = cmap(g_idx % 10)
        name = f"node {label}" + (f" ({adv})" if len({g[1] for g in groups}) > 1 else "")
        ax_mi.errorbar(std, est, yerr=[[e - a for e, a in zip(est, lo, strict=True)], [b - e for e, b in zip(est, hi, strict=True)]], color=color, marker="o", markersize=4, capsize=2, linewidth=1.2, label=f"{name}: KSG estimate")
        exacts = [r.exact_bits[-1] for r in sel if r.exact_bits is not None]
        if len(exacts) == len(sel):
            exact = [ceiling_bits if math.isinf(v) else max(v, FLOOR_BITS) for v in exacts]
            ax_mi.plot(std, exact, color=color, linestyle=":", linewidth=1.2, label=f"{name}: exact (linear structure)")
        bound = sel[0].floor_bits
        if bound is not None:
            ax_mi.axhline(ceiling_bits if math.isinf(bound) else bound, color=color, linestyle="--", linewidth=0.9, alpha=0.8)
    ax_mi.set_xscale("log")
    ax_mi.set_yscale("log")
    ax_mi.set_ylim(FLOOR_BITS * 0.8, ceiling_bits * 1.6)
    ax_mi.set_xlabel("initial-dual standard deviation (units of the statistic r X)")
    ax_mi.set_ylabel(f"I(X; view) after iteration {runs[0].iterations[-1]} [bits]")
    ax_mi.set_title("leakage (dashed: the floor, the honest-component sum)", fontsize=10)
    ax_mi.grid(alpha=0.3, which="both", linewidth=0.5)
    ax_mi.legend(fontsize=7)

    acc = sorted({(r.perturbation_std, r.em_rel_err) for r in runs if r.em_rel_err is not None})
    if acc:
        ax_acc.plot([a[0] for a in acc], [max(a[1], 1e-17) for a in acc], marker="o", color="black")
    ax_acc.set_xscale("log")
    ax_acc.set_yscale("log")
    ax_acc.set_xlabel("initial-dual standard deviation")
    ax_acc.set_ylabel("EM: max relative error vs centralized")
    ax_acc.set_title("accuracy of the fitted GMM", fontsize=10)
    ax_acc.grid(alpha=0.3, which="both", linewidth=0.5)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
