"""MkDocs hooks: reference pages generated from the code, so they cannot drift from it.

A page marks where generated text goes with an HTML comment on a line of its own:

* ``<!-- generated: cli -->``: every command's ``--help``, from :func:`p2pem.cli.build_parser`;
* ``<!-- generated: formats -->``: every JSON output format, from the JSON Schemas in
  ``p2pem/schemas/`` (``p2pem.schemas.FORMATS``).

It also renders what docstrings carry over from Sphinx (roles, ``::``) as plain Markdown
would, after the page is converted (:func:`on_page_content`).

``mkdocs.yml`` names this file under ``hooks``; ``tests/test_docs.py`` checks that both
markers are in the site and that the generated text names every command and format.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

MARKERS = ("cli", "formats")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace every generation marker of a page by its generated text."""
    for name in MARKERS:
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, GENERATORS[name]())
    return markdown


#: a Sphinx role left in a docstring, as the Markdown renderer leaves it: :func:<code>~a.b</code>
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj|const):<code>(~?)([^<]+)</code>")


def on_page_content(html: str, **kwargs: Any) -> str:
    """Docstrings are NumPy style, some with Sphinx roles and ``::`` that Markdown does not know:
    render a role as the code it names (``~`` keeps the last name, as Sphinx does) and a
    paragraph's closing ``::`` as ``:``."""
    html = _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)
    return html.replace("::</p>", ":</p>")


def cli_reference(width: int = 100) -> str:
    """Every command's help as argparse prints it (at ``width`` columns), one section each."""
    import argparse

    from p2pem.cli import _leaf_parsers, build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)  # argparse wraps to the terminal's width: fix it
    try:
        parser = build_parser()
        sections = ["## `p2pem`", "", "```text", parser.format_help().rstrip(), "```", ""]
        seen: set[int] = set()
        for leaf in _leaf_parsers(parser):
            if id(leaf) in seen or leaf is parser:
                continue
            seen.add(id(leaf))
            sections += [f"## `{leaf.prog}`", "", "```text", leaf.format_help().rstrip(), "```", ""]
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:  # a command with actions of its own (keys): its overview too
            for name, child in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    sections += [f"## `p2pem {name}`", "", "```text", child.format_help().rstrip(), "```", ""]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(sections)


def formats_reference() -> str:
    """One section per output format: its title and a table of its keys (two levels deep)."""
    from p2pem.schemas import FORMATS, load_schema

    out: list[str] = []
    for fmt, file in FORMATS.items():
        schema = load_schema(fmt)
        version = schema.get("properties", {}).get("version", {})
        out += [f"## `{fmt}`", "", f"{schema.get('title', fmt)}. Schema: `p2pem/schemas/{file}`"
                + (f"; version {version['const']}" if "const" in version else "") + ".", ""]
        if schema.get("description"):
            out += [_one_line(schema["description"]), ""]
        out += ["| key | type | required | meaning |", "| --- | --- | --- | --- |"]
        out += _rows(schema, "")
        out.append("")
    return "\n".join(out)


def _rows(schema: dict[str, Any], prefix: str, depth: int = 0) -> list[str]:
    rows = []
    required = set(schema.get("required", []))
    for key, sub in schema.get("properties", {}).items():
        name = f"{prefix}{key}"
        rows.append(f"| `{name}` | {_type(sub)} | {'yes' if key in required else ''} | {_one_line(sub.get('description', ''))} |")
        if depth < 1:
            if sub.get("type") == "object" and "properties" in sub:
                rows += _rows(sub, f"{name}.", depth + 1)
            items = sub.get("items")
            if isinstance(items, dict) and "properties" in items:
                rows += _rows(items, f"{name}[].", depth + 1)
    return rows


def _type(sub: dict[str, Any]) -> str:
    if "const" in sub:
        return f"`{json.dumps(sub['const'])}`"
    if "enum" in sub:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in sub["enum"])
    kind = sub.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(sub.get("items"), dict) and sub["items"].get("type"):
        inner = sub["items"]["type"]
        return f"array of {' or '.join(inner) if isinstance(inner, list) else inner}"
    if kind:
        return str(kind)
    if "$ref" in sub:
        return f"`{sub['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in sub or "oneOf" in sub:
        return " or ".join(_type(s) for s in sub.get("anyOf", sub.get("oneOf", [])))
    return "any"


def _one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


GENERATORS = {"cli": cli_reference, "formats": formats_reference}
