"""The docs stay true: links resolve, every public name is in the reference, examples run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ratewarden

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    missing = [
        target
        for target, _anchor in _LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith("mailto:")
        and not (page.parent / target).exists()
    ]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


def test_every_public_name_is_in_the_reference() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    absent = [name for name in ratewarden.__all__ if f"`{name}" not in reference]
    assert not absent, f"docs/reference.md does not describe: {absent}"


def test_the_readme_library_examples_run() -> None:
    """Each python block of the README that needs no server runs as written."""
    blocks = _PYTHON_BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    runnable = [block for block in blocks if "redis" not in block.lower()]
    assert runnable, "the README has no runnable python example"
    for block in runnable:
        exec(compile(block, "README.md", "exec"), {"print": lambda *args, **kwargs: None})


def test_the_readme_and_index_give_one_reading_order() -> None:
    """README's "Read in this order" and docs/index.md's "Where to go next" link the same pages
    in the same order (the README starts with index.md itself: why ratewarden)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    order = readme[readme.index("Read in this order:") : readme.index("How the code is laid out")]
    next_pages = index[index.index("## Where to go next") : index.index("## Status")]
    in_readme = [target.removeprefix("docs/") for target, _ in _LINK.findall(order)]
    assert in_readme[0] == "index.md"
    assert in_readme[1:] == [target for target, _ in _LINK.findall(next_pages)]


def test_reliability_does_not_list_lone_surrogate_keys_as_not_done() -> None:
    """A key no store can encode (``"\\ud800"``) is a ConfigurationError on memory, as a
    FairShare tenant is (Redis: tests/storage/test_key_encoding.py); reliability.md must not
    say otherwise, in its "Not done" list or its fuzz table."""
    from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
    from ratewarden.budgets import FairShare

    with pytest.raises(ConfigurationError, match="not valid text"):
        Limiter(MemoryStore()).hit("\ud800", Rate.parse("1/second"))
    with pytest.raises(ConfigurationError, match="not valid text"):
        FairShare(MemoryStore(), "60/minute", {"a": 1}).hit("pool", "\ud800")
    page = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    not_done = page[page.index("## Not done") :]
    assert "surrogate" not in not_done
    assert "still raises `UnicodeEncodeError`" not in page
