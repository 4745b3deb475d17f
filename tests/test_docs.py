"""Every code block of the README and the documentation runs, page by page, as a reader would
run it: in a fresh folder that holds the repository's scenarios and data.

How a block is run depends on its language:

* ``python``: executed; the blocks of one page share their names, in order;
* ``console`` (lines starting with ``$ ``; the others are what it prints), ``bash``, ``sh``:
  every command must exit 0;
* ``toml``: parsed; a block that is a whole scenario (``[data]``, ``[graph]``, ``[em]``) is
  loaded with :func:`p2pem.scenario.load_scenario`;
* ``json``: parsed;
* ``text``: output or a listing, never run.

A block preceded by ``<!-- file: NAME -->`` is also written to NAME, for the blocks after it;
a block preceded by ``<!-- no-test: reason -->`` is not run (and needs a reason).  A block
without a language is an error: say what it is.  The mkdocs hooks that generate the CLI and
format references are checked here too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "generated" not in p.parts)]
RUN = {"python", "console", "bash", "sh", "toml", "json", "text"}
#: what a reader's folder holds: the repository's inputs, linked
LINKED = ("scenarios", "data", "sim", "nodes", "docs")
#: pages whose commands take more than a few seconds (whole analyses, deployments)
SLOW = {"howto/leakage.md", "howto/dp-tradeoff.md", "tutorials/deploy.md", "howto/model-choice.md", "tutorials/first-run.md"}

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<lang>[^\s`]*)\s*$")
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"\n$')
MARK = re.compile(r"^\s*<!--\s*(?P<kind>no-test|file):\s*(?P<value>.*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    file: str | None = None
    skip: str | None = None

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page, with their markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m["indent"]), m["fence"], m["lang"]
        marks: dict[str, str] = {}
        j = i - 1
        while j >= 0 and (mark := MARK.match(lines[j])):
            marks[mark["kind"]] = mark["value"]
            j -= 1
        body = []
        k = i + 1
        while k < len(lines) and lines[k].strip() != fence:
            body.append(lines[k][indent:] if lines[k][:indent].strip() == "" else lines[k])
            k += 1
        text = "\n".join(body) + "\n"
        if (snippet := SNIPPET.match(text)) is not None:  # an included file (pymdownx.snippets): its text
            text = (ROOT / snippet["path"]).read_text(encoding="utf-8")
        out.append(Block(page, i + 1, lang, text, marks.get("file"), marks.get("no-test")))
        i = k + 1
    return out


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT / "docs")) if page.is_relative_to(ROOT / "docs") else page.name


def _commands(block: Block) -> list[str]:
    """The commands of a shell block (console: the ``$`` lines), continuation lines joined."""
    commands: list[str] = []
    pending: str | None = None
    for line in block.text.splitlines():
        if pending is not None:  # the line continues the command before it
            text = line
        elif block.lang == "console":
            if not line.startswith("$ "):
                continue  # what the command prints
            text = line[2:]
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        else:
            text = line
        if text.rstrip().endswith("\\"):
            pending = (pending or "") + text.rstrip()[:-1] + " "
            continue
        commands.append((pending or "") + text)
        pending = None
    return commands


def _run_block(block: Block, folder: Path, namespace: dict) -> None:
    if block.file:
        target = folder / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
    if block.lang == "python":
        code = compile(block.text, block.where(), "exec")
        exec(code, namespace)  # noqa: S102 - the documentation's own examples
    elif block.lang in ("console", "bash", "sh"):
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg",
               "COLUMNS": "100"}
        commands = _commands(block)
        assert commands, f"{block.where()}: a ```{block.lang} block without a command (console: lines start with '$ ')"
        for command in commands:
            done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{block.where()}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"
    elif block.lang == "toml":
        doc = tomllib.loads(block.text)
        if {"data", "graph", "em"} <= doc.keys():
            from p2pem.scenario import load_scenario

            path = folder / (block.file or f"docs-block-{block.line}.toml")
            if not block.file:
                path = folder / "scenarios-docs" / path.name  # beside scenarios/: "../data/..." resolves as there
                path.parent.mkdir(exist_ok=True)
                path.write_text(block.text, encoding="utf-8")
            load_scenario(path)
    elif block.lang == "json":
        json.loads(block.text)


def _params():
    for page in PAGES:
        marks = [pytest.mark.slow] if _page_id(page) in SLOW else []
        yield pytest.param(page, id=_page_id(page), marks=marks)


@pytest.mark.parametrize("page", list(_params()))
def test_every_code_block_of_the_page_runs(page: Path, tmp_path: Path, monkeypatch) -> None:
    found = blocks(page)
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    module = types.ModuleType("p2pem_docs_page")  # a real module: dataclasses in a block look it up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for block in found:
        assert block.lang, f"{block.where()}: a code block without a language: mark it ```text (not code) or name its language"
        if block.skip is not None:
            assert block.skip, f"{block.where()}: <!-- no-test: ... --> needs a reason"
            continue
        if block.lang not in RUN:
            assert block.file, f"{block.where()}: a ```{block.lang} block is neither run nor written: use one of {sorted(RUN)}"
            _run_block(block, tmp_path, namespace)
            continue
        _run_block(block, tmp_path, namespace)


def test_the_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    skipped = [b for page in PAGES for b in blocks(page) if b.skip is not None]
    assert len(skipped) <= 12, [b.where() for b in skipped]  # few, each with its reason
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_the_generated_references_name_every_command_and_format() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from p2pem.cli import _leaf_parsers, build_parser
    from p2pem.schemas import FORMATS

    cli = mkdocs_hooks.on_page_markdown("a\n<!-- generated: cli -->\nb")
    for leaf in _leaf_parsers(build_parser()):
        assert f"## `{leaf.prog}`" in cli and leaf.format_usage().split()[1] in cli
    formats = mkdocs_hooks.on_page_markdown("<!-- generated: formats -->")
    for fmt in FORMATS:
        assert f"## `{fmt}`" in formats
    assert "`protocols[].loglik`" in formats
    pages = {p.name: p.read_text(encoding="utf-8") for p in PAGES}
    assert "<!-- generated: cli -->" in pages["cli.md"] and "<!-- generated: formats -->" in pages["formats.md"]


def test_the_block_reader() -> None:
    page = ROOT / "docs" / "index.md"
    found = blocks(page)
    assert found and found[0].lang == "console" and found[0].skip
    sample = "<!-- file: a.toml -->\n```toml\nx = 1\n```\n\n  ```python\n  print(1)\n  ```\n"
    tmp = ROOT / "build" / "docs-block-reader.md"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text(sample)
    try:
        got = blocks(tmp)
    finally:
        tmp.unlink()
    assert [(b.lang, b.file, b.text) for b in got] == [("toml", "a.toml", "x = 1\n"), ("python", None, "print(1)\n")]
    assert _commands(Block(page, 1, "console", "$ a \\\n  --b\nout\n$ c\n")) == ["a    --b", "c"]
