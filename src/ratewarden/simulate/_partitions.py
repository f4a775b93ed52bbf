"""Links cut between simulated regions: ``ratewarden simulate --region ... --partition``.

A partition says which region cannot read which peer's region store, and when (seconds
from the start of the run, the end excluded):

- ``us@60-120``: ``us`` and every peer cannot read each other (a symmetric partition);
- ``us->eu@60-120``: ``us`` cannot read ``eu``, while ``eu`` still reads ``us``;
- ``us->*@60-120``: ``us`` reads no peer, while every peer still reads ``us`` (the
  asymmetric partition that docs/regions.md says the bound does not cover);
- ``*->us@60-120``: no peer reads ``us``, while ``us`` reads them all.

While a link is down, the reader's exchange calls to that peer's store raise
``StorageUnavailableError``, as a real link's failed connection does: the round names the
peer in ``SyncReport.failed``, merges what did arrive and leaves the cap as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ratewarden.checks import init_checked
from ratewarden.errors import ConfigurationError, StorageUnavailableError

__all__ = ["CutLink", "Partition", "SimulatedPartitionError", "parse_partition", "quiet"]


class SimulatedPartitionError(StorageUnavailableError):
    """A reader's call to a peer's store while a simulated partition cuts their link."""


_FORMS = "NAME@START-END, NAME->PEER@START-END, NAME->*@START-END or *->NAME@START-END"


@init_checked
@dataclass(frozen=True, slots=True)
class Partition:
    """Links (reader, peer) down from ``start_us`` to ``end_us`` (from the run's start)."""

    text: str
    links: frozenset[tuple[str, str]]
    start_us: int
    end_us: int

    def cuts(self, reader: str, peer: str, at_us: int) -> bool:
        """Whether ``reader`` cannot read ``peer`` at ``at_us`` (from the run's start)."""
        return self.start_us <= at_us < self.end_us and (reader, peer) in self.links

    def overlaps(self, start_us: int, end_us: int) -> bool:
        """Whether any link is down at some time in [start_us, end_us)."""
        return self.start_us < end_us and start_us < self.end_us


def _seconds_us(text: str, raw: str, what: str) -> int:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(
            f"--partition {text!r}: its {what} {raw!r} is not a number of seconds"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise ConfigurationError(f"--partition {text!r}: its {what} must be a number >= 0")
    return round(value * 1_000_000)


def _side(text: str, raw: str, names: Sequence[str]) -> tuple[str, ...]:
    if raw == "*":
        return tuple(names)
    if raw not in names:
        raise ConfigurationError(
            f"--partition {text!r}: {raw!r} is not a region (the regions are {', '.join(names)})"
        )
    return (raw,)


def parse_partition(text: str, names: Sequence[str], duration_us: int) -> Partition:
    """One ``--partition`` flag read against the regions ``names`` and the run's length."""
    who, at, when = text.partition("@")
    start, dash, end = when.partition("-")
    if not at or not dash or not who:
        raise ConfigurationError(f"--partition {text!r}: give {_FORMS} (seconds into the run)")
    if not start:  # us@-5-20: the '-' of a negative start is taken for the separator
        raise ConfigurationError(
            f"--partition {text!r}: its start is missing or negative; give {_FORMS} in seconds >= 0"
        )
    start_us = _seconds_us(text, start, "start")
    end_us = _seconds_us(text, end, "end")
    if end_us <= start_us:
        raise ConfigurationError(f"--partition {text!r}: its end must come after its start")
    if end_us > duration_us:
        raise ConfigurationError(
            f"--partition {text!r}: it ends after the run's --duration "
            f"({duration_us / 1_000_000:g} s)"
        )
    reader, arrow, peer = who.partition("->")
    if arrow:
        if reader == "*" and peer == "*":
            raise ConfigurationError(
                f"--partition {text!r}: name a region on one side of '->' at least"
            )
        readers, peers = _side(text, reader, names), _side(text, peer, names)
        links = {(r, p) for r in readers for p in peers if r != p}
        if not links:  # us->us: a region always reads its own counts
            raise ConfigurationError(
                f"--partition {text!r}: cuts a region off from itself, which no link joins; "
                "name another region on one side of '->'"
            )
    elif who == "*":
        raise ConfigurationError(f"--partition {text!r}: cut one region off, not '*'")
    else:
        (cut,) = _side(text, who, names)
        links = {pair for p in names if p != cut for pair in ((cut, p), (p, cut))}
    return Partition(text, frozenset(links), start_us, end_us)


class CutLink:
    """A peer's region store as one reader sees it: its exchange calls fail while a
    partition cuts the link; everything else is the store's own."""

    def __init__(
        self,
        store: Any,
        reader: str,
        peer: str,
        partitions: Sequence[Partition],
        elapsed_us: Callable[[], int],
    ) -> None:
        self._store = store
        self._reader = reader
        self._peer = peer
        self._partitions = tuple(partitions)
        self._elapsed_us = elapsed_us

    def _reached(self) -> Any:
        at_us = self._elapsed_us()
        for partition in self._partitions:
            if partition.cuts(self._reader, self._peer, at_us):
                raise SimulatedPartitionError(
                    f"simulated partition {partition.text!r}: {self._reader} cannot reach "
                    f"{self._peer}'s store"
                )
        return self._store

    def active(self, *args: Any) -> Any:
        """The peer's keys, unless the link is down."""
        return self._reached().active(*args)

    def read_counts(self, *args: Any) -> Any:
        """The peer's counts, unless the link is down."""
        return self._reached().read_counts(*args)

    def read_round(self, *args: Any) -> Any:
        """The peer's counts and last round, unless the link is down."""
        return self._reached().read_round(*args)

    def demand(self, *args: Any) -> Any:
        """The peer's demand, unless the link is down."""
        return self._reached().demand(*args)

    def demand_and_taken(self, *args: Any) -> Any:
        """The peer's demand and the weights it took (a quota's round), unless the link is
        down."""
        return self._reached().demand_and_taken(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _not_simulated(record: logging.LogRecord) -> bool:
    if getattr(record, "event", None) in _HELD_EVENTS:
        return False  # a peer held at its budget because the simulation cut its links
    if isinstance(getattr(record, "error", None), SimulatedPartitionError):
        return False  # a peer's read failed because the simulation cut the link
    args = record.args if isinstance(record.args, tuple) else ()
    return not any(isinstance(arg, SimulatedPartitionError) for arg in args)


#: The events of a budget holding a silent peer's budget, and letting it go.
_HELD_EVENTS = frozenset({"region_peer_held", "region_peer_back"})


@contextmanager
def quiet() -> Iterator[None]:
    """Leave out the regions' warnings about peers the simulation itself cut off (the run
    counts those rounds), and about the budgets held for them; every other warning is
    logged as usual."""
    logger = logging.getLogger("ratewarden.regions")
    logger.addFilter(_not_simulated)
    try:
        yield
    finally:
        logger.removeFilter(_not_simulated)
