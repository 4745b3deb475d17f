"""Leakage figures (matplotlib, Agg backend): MI against the rounds of one aggregation (cf. Fig. 3 of the paper)
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


#: The curves grid has at most this many panel columns and rows; a figure with more panels
#: shows the leakage after the last iteration per node instead (:func:`_by_node_figure`), so
#: the figure stays within a screenful (about 1700 x 1100 px at 120 dpi) for any number of nodes.
MAX_COLUMNS = 4
MAX_ROWS = 3

#: Panel size in inches, and the most width the by-node figure takes.
PANEL_W, PANEL_H = 3.4, 2.7
MAX_WIDTH = 14.0
#: Inches per line of a figure's note.
_NOTE_LINE_H = 0.16


def grid_layout(n_adversaries: int, n_nodes: int) -> tuple[int, int, int] | None:
    """``(rows, columns, rows per adversary)`` of the curves grid, or None when it would not fit.

    With at most :data:`MAX_COLUMNS` nodes each adversary is one row of panels; otherwise the
    nodes wrap over several rows of :data:`MAX_COLUMNS`, one block of rows per adversary.
    """
    cols = min(n_nodes, MAX_COLUMNS)
    per_adversary = math.ceil(n_nodes / cols)
    rows = n_adversaries * per_adversary
    return (rows, cols, per_adversary) if rows <= MAX_ROWS else None


def leakage_figure(runs: Sequence[LeakageRun], path: Path, *, title: str, ceiling_bits: float, note: str = "") -> None:
    """MI in bits against the rounds of one aggregation: one panel per (adversary, node), one curve per protocol.

    The shaded band is the confidence interval; the dashed line of the same colour is the
    floor, what any exact protocol discloses (drawn at the estimator's full-disclosure
    ceiling for full disclosure); the dotted line is the exact leakage of the view where its
    linear structure gives one.  Runs of the same protocol are told apart by their labels.  The
    y axis is logarithmic, values below 1e-3 bits sit on its bottom edge.  The panels wrap into
    a grid of at most :data:`MAX_COLUMNS` x :data:`MAX_ROWS`; more (adversary, node) pairs than
    that are drawn as the leakage after the last round per node (:func:`_by_node_figure`).
    ``note`` (the schedule analysed, the scope of one aggregation) is printed under the legend.
    """
    adversaries = list(dict.fromkeys(r.adversary for r in runs))
    nodes = list(dict.fromkeys((r.node, r.node_label) for r in runs))
    layout = grid_layout(len(adversaries), len(nodes))
    if layout is None:
        _by_node_figure(runs, path, title=title, ceiling_bits=ceiling_bits, note=note)
        return
    n_rows, n_cols, per_adversary = layout
    extra = _NOTE_LINE_H * len(note.splitlines())
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(PANEL_W * n_cols + 0.6, PANEL_H * n_rows + 1.0 + extra), dpi=120, squeeze=False, sharex=True, sharey=True
    )
    top = ceiling_bits * 1.6
    styles = _styles(runs)
    for a, adv in enumerate(adversaries):
        for k, (node, label) in enumerate(nodes):
            row, col = a * per_adversary + k // n_cols, k % n_cols
            ax = axes[row][col]
            for r in runs:
                if r.adversary != adv or r.node != node:
                    continue
                st = styles[r.label]
                its = list(r.rounds)
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
            ax.set_title(f"node {label}" + (f" · {adv}" if len(adversaries) > 1 else ""), fontsize=10)
            if col == 0:
                ax.set_ylabel("I(X; view) [bits]")
            ax.tick_params(labelbottom=True)
            ax.set_xlabel("round of the aggregation", fontsize=9)
        for k in range(len(nodes), per_adversary * n_cols):  # empty cells of the adversary's last row
            axes[a * per_adversary + k // n_cols][k % n_cols].set_visible(False)
    fig.suptitle(title, fontsize=11)
    _legend(fig, axes[0][0], note)
    fig.savefig(path)
    plt.close(fig)


def _note(fig: plt.Figure, note: str) -> float:
    """``note`` at the bottom of the figure, small; returns the inches it takes."""
    if not note:
        return 0.0
    fig.text(0.01, 0.01, note, fontsize=7, ha="left", va="bottom", wrap=True)
    return _NOTE_LINE_H * len(note.splitlines())


def _legend(fig: plt.Figure, ax: plt.Axes, note: str = "") -> None:
    """The protocols' labels and the two line styles, below the panels (and the note below them)."""
    from matplotlib.lines import Line2D  # a submodule pyplot does not import by name

    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.0))
    labels.append("floor: what any exact protocol discloses (full disclosure: estimator ceiling)")
    handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.0))
    labels.append("exact leakage of the view")
    height = fig.get_size_inches()[1]
    below = _note(fig, note)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False, bbox_to_anchor=(0.5, below / height))
    fig.tight_layout(rect=(0, (0.75 + below) / height, 1, 1 - 0.35 / height))  # room for the legend, the note and the title


def _by_node_figure(runs: Sequence[LeakageRun], path: Path, *, title: str, ceiling_bits: float, note: str = "") -> None:
    """The leakage after the last round of the aggregation per node: one panel per adversary, nodes along x.

    Each protocol is a marker with its confidence interval as an error bar, offset a little
    so that protocols do not hide one another; its floor is a short dash and its exact value
    an open circle, in the same colour.  The width grows with the number of nodes up to
    :data:`MAX_WIDTH` inches; beyond about 60 nodes only every k-th node is labelled.
    """
    adversaries = list(dict.fromkeys(r.adversary for r in runs))
    nodes = list(dict.fromkeys((r.node, r.node_label) for r in runs))
    labels = list(dict.fromkeys(r.label for r in runs))
    position = {node: x for x, (node, _) in enumerate(nodes)}
    width = min(MAX_WIDTH, 3.0 + 0.3 * len(nodes))
    extra = _NOTE_LINE_H * len(note.splitlines())
    fig, axes = plt.subplots(len(adversaries), 1, figsize=(width, PANEL_H * len(adversaries) + 1.2 + extra), dpi=120, squeeze=False,
                             sharex=True)
    styles = _styles(runs)
    spread = 0.6 / max(len(labels), 1)
    for a, adv in enumerate(adversaries):
        ax = axes[a][0]
        for j, lab in enumerate(labels):
            sel = [r for r in runs if r.adversary == adv and r.label == lab]
            if not sel:
                continue
            st = styles[lab]
            xs = [position[r.node] + (j - (len(labels) - 1) / 2) * spread for r in sel]
            est = _floor([r.mi_bits[-1] for r in sel])
            lo = _floor([r.mi_ci[-1][0] for r in sel])
            hi = _floor([r.mi_ci[-1][1] for r in sel])
            yerr = [[max(e - v, 0.0) for e, v in zip(est, lo, strict=True)], [max(v - e, 0.0) for e, v in zip(est, hi, strict=True)]]
            ax.errorbar(xs, est, yerr=yerr, color=st["color"], marker=st["marker"], markersize=4, linestyle="none", capsize=1.5, elinewidth=0.8, label=lab)
            floors = [(x, ceiling_bits if math.isinf(r.floor_bits) else max(r.floor_bits, FLOOR_BITS)) for x, r in zip(xs, sel, strict=True) if r.floor_bits is not None]
            if floors:
                ax.plot([f[0] for f in floors], [f[1] for f in floors], color=st["color"], marker="_", markersize=10, linestyle="none")
            exact = [(x, ceiling_bits if math.isinf(r.exact_bits[-1]) else max(r.exact_bits[-1], FLOOR_BITS)) for x, r in zip(xs, sel, strict=True) if r.exact_bits is not None]
            if exact:
                ax.plot([e[0] for e in exact], [e[1] for e in exact], color=st["color"], marker="o", markerfacecolor="none", markersize=4, linestyle="none")
        ax.set_yscale("log")
        ax.set_ylim(FLOOR_BITS * 0.8, ceiling_bits * 1.6)
        ax.grid(alpha=0.3, which="both", linewidth=0.5)
        ax.set_ylabel("I(X; view) [bits]")
        ax.set_title(f"{adv}: leakage after round {runs[0].rounds[-1]} of one aggregation", fontsize=10)
    step = max(1, math.ceil(len(nodes) / 60))
    ax = axes[-1][0]
    ax.set_xticks(range(0, len(nodes), step))
    ax.set_xticklabels([label for _, label in nodes][::step], fontsize=7 if len(nodes) > 30 else 9, rotation=90 if len(nodes) > 30 else 0)
    ax.set_xlim(-0.6, len(nodes) - 0.4)
    ax.set_xlabel("node")
    from matplotlib.lines import Line2D  # a submodule pyplot does not import by name

    handles, names = axes[0][0].get_legend_handles_labels()
    handles += [Line2D([], [], color="black", marker="_", markersize=10, linestyle="none"),
                Line2D([], [], color="black", marker="o", markerfacecolor="none", linestyle="none")]
    names += ["floor: what any exact protocol discloses (full disclosure: estimator ceiling)", "exact leakage of the view"]
    height = fig.get_size_inches()[1]
    below = _note(fig, note)
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=8, frameon=False, bbox_to_anchor=(0.5, below / height))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, (0.75 + below) / height, 1, 1 - 0.3 / height))  # room for the legend, the note and the title
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
    ax_mi.set_ylabel(f"I(X; view) after round {runs[0].rounds[-1]} [bits]")
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
