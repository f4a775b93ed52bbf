"""The command lines' parser class, for ``ratewarden`` and ``python -m ratewarden.regions``,
and what their flags' checks share: ``naming`` (a message prefixed with the flag and its
value, as every flag's is; ``each`` for a repeatable flag's values) and ``rate_algorithm``
(an ``--algorithm`` value)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from ratewarden.errors import ConfigurationError

__all__ = ["CommandParser", "each", "naming", "rate_algorithm"]

T = TypeVar("T")


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


@contextmanager
def naming(flag: str, value: str) -> Iterator[None]:
    """A ConfigurationError raised inside, said as ``FLAG 'value': what was wrong``."""
    try:
        yield
    except ConfigurationError as exc:
        raise ConfigurationError(f"{flag} {value!r}: {exc}") from None


def each(flag: str, values: Iterable[str], parse: Callable[[str], T]) -> list[T]:
    """``parse`` of every value of a repeatable flag; a bad one refused naming ``flag`` and it."""
    parsed = []
    for value in values:
        with naming(flag, value):
            parsed.append(parse(value))
    return parsed


def rate_algorithm(flag: str, name: str, known: Collection[str]) -> str:
    """``name`` when it is one of ``known`` (the rate algorithms); else a ConfigurationError
    naming ``flag``, which tells ``concurrency`` (listed beside them in algorithms.md) where
    its slots are, in the words the Limiter uses for ``algorithm="concurrency"``."""
    if name in known:
        return name
    choices = ", ".join(sorted(known))
    if name == "concurrency":
        raise ConfigurationError(
            f"{flag} 'concurrency': concurrency is not a rate, so it is not an {flag}: every "
            "limiter holds concurrency slots itself, with limiter.slot(key, limit, ttl=...) (a "
            "context manager) or limiter.acquire_slot(key, limit, ttl=...) and "
            f"release_slot(lease) (docs/algorithms.md#concurrency); {flag} is one of: {choices}"
        )
    raise ConfigurationError(f"{flag} {name!r}: unknown algorithm; choose one of: {choices}")
