"""The aligned text tables every simulate report prints."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["aligned"]


def aligned(lines: Sequence[Sequence[str]], left: int) -> str:
    """Rows of cells (the header first) as text: each column as wide as its widest cell, the
    first ``left`` columns flush left and the rest flush right, two spaces apart."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [
        "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    ]
    return "\n".join(text) + "\n"
