"""docs/simulate.md's example and labels are the command's (finding 9 of the operator3 walk):
the "reproduce a row" command named an ``onoff | 0.05 | all`` row the accuracy table does not
have, and the traffic table's labels (``retry-storm, no jitter``) were not what the command
prints (``retry-storm 50 clients x1.5 no jitter``)."""

from __future__ import annotations

import re
from pathlib import Path

from ratewarden.simulate import patterns
from ratewarden.simulate.command import _DEFAULT_PATTERNS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "simulate.md").read_text()


def _table(header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = DOC[DOC.index(header) :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_reproduce_a_row_example_is_a_row_of_the_table() -> None:
    """Its --model, --load and --counting name a row of the accuracy table."""
    example = re.search(r"Reproduce a row with, for example,\s+`([^`]+)`", DOC)
    assert example is not None
    flags = dict(re.findall(r"--(model|load|counting) (\S+)", example.group(1)))
    rows = _table("| model | load | counting |")
    assert [flags["model"], flags["load"], flags["counting"]] in [row[:3] for row in rows]


def test_the_traffic_tables_labels_are_the_commands() -> None:
    """Every pattern label in the table is one the default patterns print."""
    printed = {patterns.parse(spec).describe() for spec in _DEFAULT_PATTERNS}
    labels = {row[0] for row in _table("| pattern | algorithm | offered |")}
    assert labels <= printed, labels - printed
