"""The reproductions of the seed papers (sim/reproduce/): the quick modes this branch owns run and
write documents in the page's format, and the page renders every document present."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reproduce():
    """sim/reproduce/ on the path (its scripts import ``page``), removed afterwards."""
    path = str(ROOT / "sim" / "reproduce")
    sys.path.insert(0, path)
    yield lambda name: importlib.import_module(name)
    sys.path.remove(path)


@pytest.mark.slow
def test_quick_modes_write_documents_the_page_renders(reproduce, tmp_path: Path) -> None:
    page = reproduce("page")
    for key in ("dpmsnm", "li2022", "xi"):
        assert reproduce(key).main(["--quick", "--out-dir", str(tmp_path)]) == 0
    docs = page.load(tmp_path)
    assert set(docs) == {"dpmsnm", "li2022", "xi"} and all(d["quick"] for d in docs.values())
    by_claim = {key: {r["claim"].split(":")[0]: r for r in doc["rows"]} for key, doc in docs.items()}
    # what the quick runs already show: Li et al.'s Figs. 2 and 3, Xi et al.'s Table 1 (d = 5) and the
    # private classifier never worse than the majority class
    assert by_claim["li2022"]["Fig. 2"]["verdict"] == "reproduced" and by_claim["li2022"]["Fig. 3"]["verdict"] == "reproduced"
    assert by_claim["xi"]["Table 1, d = 5"]["verdict"] == "reproduced"
    assert next(r for r in docs["xi"]["rows"] if r["claim"].startswith("p2pem's DP Bayes"))["verdict"] == "reproduced"
    assert docs["dpmsnm"]["seed"] == "000" and docs["dpmsnm"]["rows"][0]["verdict"] == "explained"
    text = page.render(docs)
    assert text.index(docs["dpmsnm"]["paper"]) < text.index(docs["li2022"]["paper"]) < text.index(docs["xi"]["paper"])  # by seed
    assert "Quick mode" in text and "Not yet generated: `sim/reproduce/jalko.py`, `sim/reproduce/hmprivbayes.py`" in text
    out = tmp_path / "page.md"
    assert page.main(["--in", str(tmp_path), "--out", str(out)]) == 0 and out.read_text() == text + "\n"


def test_page_refuses_a_document_off_the_format_with_one_line(reproduce, tmp_path: Path, capsys) -> None:
    page = reproduce("page")
    good = {"paper": "P", "seed": "004", "setting": "s", "data": "d", "notes": [], "quick": False,
            "rows": [{"claim": "c", "paper": "p", "p2pem": "q", "verdict": "partly"}]}
    page.write("xi", good, tmp_path)
    assert page.main(["--in", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 0
    for broken, message in [
        ({**good, "seed": "5"}, "'seed' must be one of"),
        ({**good, "rows": [{**good["rows"][0], "verdict": "yes"}]}, "rows[0].verdict must be one of"),
        ({k: v for k, v in good.items() if k != "data"}, "missing key 'data'"),
    ]:
        (tmp_path / "reproduce_xi.json").write_text(json.dumps(broken))
        capsys.readouterr()
        assert page.main(["--in", str(tmp_path), "--out", str(tmp_path / "q.md")]) == 2
        err = capsys.readouterr().err
        assert message in err and "reproduce_xi.json" in err and err.count("\n") == 1
    assert not (tmp_path / "q.md").exists()
    with pytest.raises(page.FormatError, match="unknown reproduction key"):
        page.write("nope", good, tmp_path)
