"""Writing a reproduction's document (the reproductions page's format) and printing its verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def finish(doc: dict[str, Any], path: str) -> int:
    """Write ``doc`` as JSON to ``path`` (parents created) and print one line per row; the exit code."""
    from p2pem.files import write_json

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, doc)
    for r in doc["rows"]:
        print(f"{r['verdict']:>15}  {r['claim']}\n                 p2pem: {r['p2pem']}")
    print(f"wrote {path} in {doc['wall_s']:.0f} s")
    return 0
