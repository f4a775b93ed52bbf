"""How a store reads a Sentinel service's primary again (``_redis_sentinel.Watch``).

Pure logic: the Sentinels' answers are given as redis-py parses ``SENTINEL MASTER``.
The failover itself, on real servers, is tests/faults/test_sentinel_switch.py.
"""

from __future__ import annotations

from typing import Any

from ratewarden.storage._redis_sentinel import Watch


def master(port: int, epoch: int) -> dict[str, Any]:
    return {"ip": "127.0.0.1", "port": port, "config-epoch": epoch, "flags": "master"}


class Switches:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_the_newest_configuration_wins_and_its_sentinel_is_asked_first() -> None:
    """Sentinels may disagree during a failover: the highest config epoch is the newest
    failover's, and a new connection asks that Sentinel first."""
    a, b, c = object(), object(), object()
    sentinels = [a, b, c]
    switches = Switches()
    watch = Watch("svc", switches)
    watch.read(sentinels, {id(a): master(1, 0), id(b): master(2, 1), id(c): master(1, 0)})
    assert sentinels[0] is b
    assert switches.count == 1  # the first reading: connections made before it may be stale


def test_only_a_change_of_address_makes_the_connections_connect_again() -> None:
    """The same primary read again changes nothing; a new one switches once."""
    a, b = object(), object()
    sentinels = [a, b]
    switches = Switches()
    watch = Watch("svc", switches)
    watch.read(sentinels, {id(a): master(1, 0), id(b): master(1, 0)})
    watch.read(sentinels, {id(a): master(1, 0), id(b): master(1, 0)})
    assert switches.count == 1
    watch.read(sentinels, {id(a): master(1, 0), id(b): master(2, 1)})
    assert switches.count == 2
    assert sentinels[0] is b


def test_sentinels_that_failed_are_skipped_and_none_answering_changes_nothing() -> None:
    """An error (a Sentinel down, an unknown service) is no answer; with no answer at all
    the store keeps its connections."""
    a, b = object(), object()
    sentinels = [a, b]
    switches = Switches()
    watch = Watch("svc", switches)
    watch.read(sentinels, {id(a): ConnectionError("down"), id(b): master(1, 0)})
    assert switches.count == 1
    assert sentinels[0] is b
    watch.read(sentinels, {id(a): ConnectionError("down"), id(b): TimeoutError()})
    assert switches.count == 1


def test_one_reading_at_a_time_and_none_before_the_next_is_due() -> None:
    """``due`` starts one reading; until it ends no other starts, and after it the next
    waits ``CHECK_EVERY_S``."""
    watch = Watch("svc", Switches())
    assert watch.due()
    assert not watch.due()
    watch.failed()
    assert not watch.due()
