"""The pages a newcomer reads stay readable: the README in five minutes, the measured results
as the current state only, every code fence closed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_its_fences_close() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert text.count("```") % 2 == 0


def test_results_hold_the_current_state_only() -> None:
    assert len((ROOT / "benchmarks" / "RESULTS.md").read_text().splitlines()) <= 400


def test_every_docs_page_closes_its_fences() -> None:
    for page in [ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")]:
        assert page.read_text().count("```") % 2 == 0, page.name
