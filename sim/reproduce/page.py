"""Render ``docs/reproductions.md`` from every ``docs/generated/reproduce_<key>.json`` present.

Each seed paper has a script ``sim/reproduce/<key>.py`` (keys: ``dpmsnm``, ``jalko``,
``li2022``, ``hmprivbayes``, ``xi``) that runs the paper's printed setting with p2pem and
writes one JSON document::

    {"paper": str (full citation), "seed": "000".."004", "setting": str,
     "data": str (and what substitutes non-public data),
     "rows": [{"claim": str, "paper": str, "p2pem": str,
               "verdict": "reproduced" | "not reproduced" | "partly" | "explained"}],
     "notes": [str], "quick": bool}

This script only reads those documents (no number on the page is typed by hand), checks each
against the format above (a bad one is a one-line error naming the file and the key) and
writes the page, papers in the order of their seed numbers.  ``make benchmarks`` runs every
script and then this one::

    python sim/reproduce/page.py [--in docs/generated] [--out docs/reproductions.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("dpmsnm", "jalko", "li2022", "hmprivbayes", "xi")
VERDICTS = ("reproduced", "not reproduced", "partly", "explained")
FIELDS = {"paper": str, "seed": str, "setting": str, "data": str, "rows": list, "notes": list, "quick": bool}
ROW_FIELDS = ("claim", "paper", "p2pem", "verdict")


class FormatError(ValueError):
    """A reproduction document that does not follow the format (the message names the file and key)."""


def validate(doc: object, where: str) -> dict:
    """Check one reproduction document; return it.  Raises :class:`FormatError` naming ``where`` and the key."""
    if not isinstance(doc, dict):
        raise FormatError(f"{where}: not a JSON object")
    for key, kind in FIELDS.items():
        if key not in doc:
            raise FormatError(f"{where}: missing key {key!r}")
        if not isinstance(doc[key], kind):
            raise FormatError(f"{where}: {key!r} must be a {kind.__name__}, got {type(doc[key]).__name__}")
    if doc["seed"] not in ("000", "001", "002", "003", "004"):
        raise FormatError(f"{where}: 'seed' must be one of '000'..'004', got {doc['seed']!r}")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise FormatError(f"{where}: rows[{i}] is not an object")
        for key in ROW_FIELDS:
            if not isinstance(row.get(key), str):
                raise FormatError(f"{where}: rows[{i}].{key} must be a string")
        if row["verdict"] not in VERDICTS:
            raise FormatError(f"{where}: rows[{i}].verdict must be one of {', '.join(VERDICTS)}; got {row['verdict']!r}")
    if not all(isinstance(n, str) for n in doc["notes"]):
        raise FormatError(f"{where}: every note must be a string")
    return doc


def write(key: str, doc: dict, out_dir: Path | str = ROOT / "docs" / "generated") -> Path:
    """Validate ``doc`` and write it to ``out_dir/reproduce_<key>.json`` atomically (for the scripts)."""
    if key not in KEYS:
        raise FormatError(f"unknown reproduction key {key!r}: one of {', '.join(KEYS)}")
    path = Path(out_dir) / f"reproduce_{key}.json"
    validate(doc, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(docs: dict[str, dict]) -> str:
    """The page's Markdown for the documents by key."""
    counts = {v: 0 for v in VERDICTS}
    for doc in docs.values():
        for row in doc["rows"]:
            counts[row["verdict"]] += 1
    lines = [
        "# Reproductions of the seed papers",
        "",
        "p2pem implements five papers: the one it is built on (Li et al. 2022) and four it extends or argues",
        "against.  For each, a script in `sim/reproduce/` runs the paper's printed setting with p2pem and",
        "writes a JSON document; this page is generated from those documents by `sim/reproduce/page.py`",
        "(`make benchmarks` reruns everything): no number here is typed by hand.  A verdict is",
        "*reproduced* (p2pem's number agrees with what the paper prints, within the noise stated),",
        "*partly*, *not reproduced*, or *explained* (the paper's claim does not hold here and the row",
        "says why, with the evidence).",
        "",
        "Verdicts over all rows: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS) + ".",
        "",
    ]
    missing = [k for k in KEYS if k not in docs]
    if missing:
        lines += [f"Not yet generated: {', '.join(f'`sim/reproduce/{k}.py`' for k in missing)}.", ""]
    for key, doc in sorted(docs.items(), key=lambda kv: kv[1]["seed"]):
        lines += [f"## {doc['paper']}", ""]
        lines += [f"*Setting*: {doc['setting']}", "", f"*Data*: {doc['data']}", ""]
        rerun = f"`python sim/reproduce/{key}.py`"
        if doc["quick"]:
            lines += [f"!!! warning \"Quick mode\"\n    These numbers come from {rerun} `--quick` (fewer seeds and sizes); rerun without it for the full table.", ""]
        else:
            lines += [f"Regenerate: {rerun}.", ""]
        lines += ["| claim | paper | p2pem | verdict |", "| --- | --- | --- | --- |"]
        lines += [f"| {_cell(r['claim'])} | {_cell(r['paper'])} | {_cell(r['p2pem'])} | {r['verdict']} |" for r in doc["rows"]]
        lines.append("")
        lines += [f"* {_cell(n)}" for n in doc["notes"]]
        if doc["notes"]:
            lines.append("")
    return "\n".join(lines)


def load(in_dir: Path) -> dict[str, dict]:
    """Every ``reproduce_<key>.json`` under ``in_dir``, validated, by key."""
    docs = {}
    for key in KEYS:
        path = in_dir / f"reproduce_{key}.json"
        if not path.exists():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise FormatError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        docs[key] = validate(doc, str(path))
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in", dest="in_dir", type=Path, default=ROOT / "docs" / "generated", help="folder of reproduce_<key>.json (default docs/generated)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproductions.md", help="the page to write (default docs/reproductions.md)")
    args = parser.parse_args(argv)
    try:
        docs = load(args.in_dir)
    except FormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not docs:
        print(f"error: no reproduce_<key>.json under {args.in_dir}: run the sim/reproduce/ scripts first", file=sys.stderr)
        return 2
    text = render(docs)
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {args.out} ({len(docs)} papers: {', '.join(sorted(docs))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
