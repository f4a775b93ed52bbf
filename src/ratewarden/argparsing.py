"""The command lines' parser class, for ``ratewarden`` and ``python -m ratewarden.regions``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["CommandParser"]


class CommandParser(argparse.ArgumentParser):
    """A parser that refuses an unknown argument itself, so a subcommand's error shows
    its own usage (``ratewarden plan --bogus``: plan's), not the top-level one: argparse
    hands a subcommand's unknown arguments up to the top-level parser, which reports them.
    ``add_subparsers`` makes every subcommand's parser of its parent's class."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown
