"""docs/budgets.md stays true: each of its python examples runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "budgets.md"


def test_every_python_example_in_the_budgets_page_runs() -> None:
    """The page's python blocks run top to bottom on the memory store."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {"print": lambda *args, **kwargs: None})
