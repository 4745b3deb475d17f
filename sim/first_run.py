"""The numbers of the first-run tutorial, measured: ``p2pem simulate scenarios/parkinsons.toml``.

Runs the tutorial's command in a temporary folder and writes the table it prints, with the
command, the machine's cores and load and the p2pem version, to a Markdown file that
``docs/tutorials/first-run.md`` includes (``--8<--``), so no number on that page is typed by
hand.  Regenerate after any change that moves rounds, messages or log-likelihoods::

    .venv/bin/python sim/first_run.py --markdown docs/generated/first_run.md

Not a test: nothing is asserted (``tests/test_docs.py`` runs the tutorial's command itself).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "scenarios/parkinsons.toml"


def simulate_table() -> list[str]:
    """The lines of the protocol table ``p2pem simulate`` prints for the tutorial's scenario."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "p2pem", "-q", "simulate", SCENARIO, "--out", str(Path(tmp) / "first")],
                              cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"p2pem simulate failed (exit {done.returncode}): {done.stderr.strip()}")
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("protocol "))
    end = start + 2
    while end < len(lines) and lines[end].strip() and not lines[end].startswith(("wrote ", " ")) and ":" not in lines[end]:
        end += 1
    return lines[start:end]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", metavar="PATH", help="write the table for the documentation (docs/generated/first_run.md)")
    args = parser.parse_args(argv)
    from p2pem.version import __version__

    table = simulate_table()
    print("\n".join(table))
    if args.markdown:
        command = f"python sim/first_run.py --markdown {args.markdown}"
        text = [
            "```text",
            *table,
            "```",
            "",
            f"(Written by `{command}`: p2pem {__version__}, {len(os.sched_getaffinity(0))} cores at load average "
            f"{os.getloadavg()[0]:.1f}; the wall times are this machine's, the other columns are the same on any.)",
        ]
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text("\n".join(text) + "\n", encoding="utf-8")
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
