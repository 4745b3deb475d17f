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
