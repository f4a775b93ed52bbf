"""The command lines' parser class, for ``ratewarden`` and ``python -m ratewarden.regions``,
and what their flags' checks share: ``naming`` (a message prefixed with the flag and its
value, as every flag's is; ``each`` for a repeatable flag's values), ``rate_algorithm``
(an ``--algorithm`` value) and ``whole`` (a whole-number flag, read alike by every command)."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn, TypeVar

from ratewarden.errors import ConfigurationError

__all__ = ["WHOLE_MAX", "CommandParser", "each", "naming", "rate_algorithm", "whole"]

T = TypeVar("T")


class CommandParser(argparse.ArgumentParser):
    """A parser whose every refusal is one line, exit 2: ``PROG: error: WHAT; see PROG
    --help``, not the command's whole usage before it (41 lines for ``serve``). An unknown
    flag is named with the nearest one the command takes (``did you mean --grpc-port?``), a
    bad choice with the nearest choice.

    It refuses an unknown argument itself, so a subcommand's error names its own prog
    (``ratewarden plan --bogus``: plan's), not the top-level one: argparse hands a
    subcommand's unknown arguments up to the top-level parser, which reports them.
    ``add_subparsers`` makes every subcommand's parser of its parent's class.

    ``flag_hints``: flags a newcomer may guess that no spelling is near, each with the flags
    meant (``--port``: ``--grpc-port``, ``--http-port``). ``positional_flag``: the flag a
    command's values go with when it takes no positional (``serve PATH``: ``--config PATH``).
    """

    def __init__(
        self,
        *args: Any,
        flag_hints: Mapping[str, Sequence[str]] | None = None,
        positional_flag: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.flag_hints: Mapping[str, Sequence[str]] = flag_hints or {}
        self.positional_flag = positional_flag

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, unknown = super().parse_known_args(args, namespace)
        # A stand-in for a command whose extra is not installed (cli.py) takes any flags:
        # its answer is what to install, not which flag is unknown.
        if unknown and getattr(parsed, "missing_module", None) is None:
            self.error(self._unknown(unknown))
        return parsed, unknown

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")

    def _unknown(self, unknown: Sequence[str]) -> str:
        """The unknown flags, each with the nearest known one (``--x=1``: its flag); with
        none, the arguments no positional took."""
        flags = [given.split("=", 1)[0] for given in unknown if given.startswith("-")]
        if not flags:
            said = f"unexpected argument{'s' * (len(unknown) > 1)}: {' '.join(unknown)}"
            if self.positional_flag is None:
                return said
            return f"{said} (did you mean {self.positional_flag} {' '.join(unknown)}?)"
        # compared without the dashes, which every flag shares: --bogus is not near --host
        known = {flag[2:]: flag for flag in self._option_string_actions if flag.startswith("--")}
        named = []
        for flag in flags:
            near = _nearest(flag.lstrip("-"), known)
            meant = [known[near]] if near is not None else self.flag_hints.get(flag, [])
            named.append(f"{flag} (did you mean {' or '.join(meant)}?)" if meant else flag)
        return f"unknown flag{'s' * (len(flags) > 1)} {', '.join(named)}"

    def _check_value(self, action: argparse.Action, value: object) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError:
            choices = [str(choice) for choice in action.choices or ()]
            near = _nearest(str(value), choices)
            if near is None:
                raise
            listed = ", ".join(repr(choice) for choice in choices)
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}; did you mean {near!r}? (choose from {listed})"
            ) from None


def _nearest(given: str, known: Collection[str]) -> str | None:
    """The one of ``known`` nearest ``given``, if one is near enough: 0.7 of difflib's ratio, so
    that a swapped or missing letter is (grpc-prot: grpc-port, 0.89) and no mere likeness
    (bogus: burst, 0.6); or the only one two swapped neighbouring letters away, which in a
    short name falls under the ratio (rsp: rps, 0.67)."""
    near = difflib.get_close_matches(given, known, n=1, cutoff=0.7)
    if near:
        return near[0]
    swapped = [name for name in known if _swapped(given, name)]
    return swapped[0] if len(swapped) == 1 else None


def _swapped(given: str, name: str) -> bool:
    """Whether ``name`` is ``given`` with two neighbouring letters swapped."""
    differ = [i for i, (a, b) in enumerate(zip(given, name, strict=False)) if a != b]
    return (
        len(given) == len(name)
        and len(differ) == 2
        and differ[1] == differ[0] + 1
        and given[differ[0]] == name[differ[1]]
        and given[differ[1]] == name[differ[0]]
    )


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


#: The largest whole number a flag takes unless it says less (``ratewarden plan``'s ceiling):
#: past any count a command makes, and it keeps ``1e999999999`` from becoming a huge int.
WHOLE_MAX = 10**15


def whole(flag: str, minimum: int = 1, maximum: int = WHOLE_MAX) -> Callable[[str], int]:
    """The converter (argparse's ``type=``) of a flag that takes a whole number: written out or
    in e-notation (``1e15`` is 10^15, ``2.5e3`` is 2,500; ``1.5`` is refused), compared exactly
    (a Decimal, not a float). A value refused is named with the flag, as written, and the
    range."""
    most = "10^15" if maximum == WHOLE_MAX else f"{maximum:,}"

    def convert(raw: str) -> int:
        text = raw.strip()
        try:
            value = Decimal(text) if re.fullmatch(r"[0-9][0-9_.eE+]*", text) else None
        except InvalidOperation:
            value = None
        if value is None or value != value.to_integral_value() or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{flag} {raw!r} must be a whole number >= {minimum}, at most {most}"
            )
        return int(value)

    return convert
