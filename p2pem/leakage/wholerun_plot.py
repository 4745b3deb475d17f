"""The whole-run figure: attack success against the number of EM iterations seen, per protocol."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from p2pem.leakage.wholerun_analysis import NodeRecord  # noqa: E402

__all__ = ["whole_run_figure"]


def _label(r: NodeRecord, sets: dict[tuple[int, ...], int]) -> str:
    if r.adversary == "eavesdropper":
        return "eavesdropper"
    who = f"set {sets[r.corrupt]}: {len(r.corrupt)} corrupt" + (" + server" if r.server_corrupt else "")
    return f"{r.adversary}, {who}"


def whole_run_figure(records: Sequence[NodeRecord], path: Path, *, title: str, tolerance: float) -> None:
    """Two rows of panels, one column per protocol.

    Top: fraction of the honest rows recovered within ``tolerance``; bottom: median RMS
    reconstruction error over honest nodes divided by the public-model baseline's, both
    against the EM iterations the attack saw; one curve per (adversary, corrupt set).
    """
    by_proto: dict[str, dict[tuple, list[NodeRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_proto[r.protocol][(r.adversary, r.corrupt, r.server_corrupt)].append(r)
    protos = list(by_proto)
    sets: dict[tuple[int, ...], int] = {}
    for r in records:
        if r.corrupt and r.corrupt not in sets:
            sets[r.corrupt] = len(sets) + 1
    fig, axes = plt.subplots(2, len(protos), figsize=(4.6 * len(protos), 7.0), squeeze=False, sharex=True)
    for col, proto in enumerate(protos):
        top, bottom = axes[0, col], axes[1, col]
        for key, recs in by_proto[proto].items():
            x = np.array(recs[0].iterations_seen, dtype=float)
            rows = np.array([r.rows for r in recs], dtype=float)
            rec = np.array([r.rows_recovered for r in recs])
            frac = rows @ rec / rows.sum()
            ratio = np.median(np.array([r.reconstruction_error for r in recs]) / np.array([[max(r.baseline_error, 1e-300)] for r in recs]), axis=0)
            style = "--" if key[0] == "eavesdropper" else "-" if key[0] == "honest-but-curious" else ":"
            line = top.plot(x, frac, style, marker="o", ms=3, label=_label(recs[0], sets))[0]
            bottom.plot(x, np.maximum(ratio, 1e-12), style, marker="o", ms=3, color=line.get_color())
        top.set_title(proto)
        top.set_ylim(-0.03, 1.03)
        top.set_ylabel(f"honest rows recovered (within {tolerance:g})")
        bottom.set_yscale("log")
        bottom.axhline(1.0, color="gray", lw=0.8)
        bottom.set_ylabel("median RMS error / public-model baseline")
        bottom.set_xlabel("EM iterations seen (0: initialisation only)")
        bottom.set_xscale("symlog", linthresh=1.0)
        top.legend(fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
