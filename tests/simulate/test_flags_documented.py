"""Every flag ``ratewarden simulate --help`` lists is in docs/simulate.md too."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ratewarden.cli import _parser

DOCS = Path(__file__).resolve().parents[2] / "docs"


def flags_of(command: str) -> set[str]:
    """The long options of ``ratewarden COMMAND``, --help aside."""
    parser = _parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        option
        for action in commands.choices[command]._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def undocumented(command: str, page: str) -> set[str]:
    text = (DOCS / page).read_text()
    return {
        flag for flag in flags_of(command) if not re.search(re.escape(flag) + r"(?![\w-])", text)
    }


def test_every_simulate_flag_is_in_the_guide() -> None:
    """--requests, --sources and --seed (the accuracy report's) were in the help alone."""
    assert undocumented("simulate", "simulate.md") == set()
