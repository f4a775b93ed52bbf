"""envoyproxy/ratelimit's stats over StatsD: the same names, tags, units and flush interval.

``StatsdSink`` is one of ``ServiceStats.sinks``: every flush of the stats' tally
hands it the per-key counts and the other events (``StatsEvents``), and it sends them
every ``--statsd-interval`` seconds (upstream's ``STATS_FLUSH_INTERVAL``, 10 s) as
StatsD lines, over TCP (upstream's default sink) or UDP (``--statsd udp://host:port``).
The names are upstream's, so its StatsD mappings and dashboards keep working::

    ratelimit.service.rate_limit.<domain>.<key>.total_hits         |c  hits asked for
    ratelimit.service.rate_limit.<domain>.<key>.over_limit         |c  hits over the limit
    ratelimit.service.rate_limit.<domain>.<key>.near_limit         |c  hits near it
    ratelimit.service.rate_limit.<domain>.<key>.within_limit       |c  hits under it
    ratelimit.service.rate_limit.<domain>.<key>.shadow_mode        |c  over, let through
    ratelimit.service.rate_limit.<domain>.<key>.over_limit_with_local_cache |c
    ratelimit.service.call.should_rate_limit.redis_error           |c  failed store calls
    ratelimit.service.call.should_rate_limit.service_error         |c  failed calls
    ratelimit.service.call.should_rate_limit.cancelled             |c  calls the client gave up on
    ratelimit.service.config_load_success / config_load_error      |c
    ratelimit_server.ShouldRateLimit.total_requests                |c
    ratelimit_server.ShouldRateLimit.response_time                 |ms one line per call

``<domain>.<key>`` is the stats key (``domain.key_value.subkey``), cleaned as
upstream cleans it (``stats_name``: ``:`` and ``|`` become ``_``, so do the dots
of an IPv4 address, and so does a line break, which upstream would let through to
split the line) and bounded as the Prometheus ``key`` label is. A counter
is sent only when it moved (upstream's store skips zeros). ``--statsd-tags``
(upstream's ``EXTRA_TAGS``, ``k1:v1,k2:v2``) is appended to every name as
upstream's statsd library writes tags: ``.__k1=v1.__k2=v2``, sorted by tag name,
``.``, ``:`` and ``|`` in a value replaced by ``_``. ``dogstatsd.DogStatsdSink`` sends
the same counts as DogStatsD lines, over UDP or a Unix datagram socket.

Sending never blocks a decision: it runs on the event loop every interval,
with a bounded wait; a StatsD server that is down costs one warning line a
minute and the lines of that interval (counters are deltas: later ones are
unaffected). What one interval holds is bounded by the tally's flushes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ratewarden.errors import ConfigurationError
from ratewarden.metrics import LogRateLimiter

__all__ = ["StatsEvents", "StatsdSink", "parse_address", "parse_tags", "stats_name"]

log = logging.getLogger("ratewarden.server.statsd")

#: Per-key counter names, in the order of ``ServiceStats``' tally indices 0-5.
KEY_COUNTERS = (
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
    "over_limit_with_local_cache",
)
RATE_LIMIT = "ratelimit.service.rate_limit."
SHOULD_RATE_LIMIT = "ratelimit.service.call.should_rate_limit."
SERVICE = "ratelimit.service."
SERVER = "ratelimit_server.ShouldRateLimit."
#: Largest datagram sent over UDP: lines are never split, and 1,432 bytes keep a
#: datagram in one Ethernet frame (what upstream's statsd library uses).
UDP_PAYLOAD = 1432
#: Largest datagram sent over a Unix socket (DogStatsD's): datadog-go's size for one.
UNIX_PAYLOAD = 8192
#: Seconds a TCP connect or write may take before the interval's lines are dropped.
SEND_TIMEOUT_S = 1.0
_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
TAG_VALUE = str.maketrans(".:|", "___")
_NAME = str.maketrans({":": "_", "|": "_", "\n": "_", "\r": "_"})


def stats_name(text: str) -> str:
    """``text`` cleaned for a StatsD name as upstream cleans its stats keys."""
    return _IPV4.sub(lambda found: found.group().replace(".", "_"), text.translate(_NAME))


def parse_address(value: str) -> tuple[str, str, int]:
    """``(protocol, host, port)`` of ``tcp://host:port``, ``udp://host:port`` or
    ``host:port`` (TCP, as upstream's sink); raises ``ConfigurationError``."""
    text = value.strip()
    if "://" not in text:
        text = "tcp://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"is not tcp://HOST:PORT or udp://HOST:PORT ({exc})") from None
    if parts.scheme not in ("tcp", "udp"):
        raise ConfigurationError(f"scheme {parts.scheme!r} is not tcp or udp")
    if not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ConfigurationError("must be tcp://HOST:PORT or udp://HOST:PORT (or HOST:PORT)")
    return parts.scheme, parts.hostname, port


def parse_tags(value: str) -> tuple[tuple[str, str], ...]:
    """``k1:v1,k2:v2`` as sorted ``(name, value)`` pairs; raises ``ConfigurationError``.

    Empty names or values are left out, as upstream leaves them out.
    """
    tags: dict[str, str] = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, colon, tag = item.partition(":")
        if not colon:
            raise ConfigurationError(f"tag {item.strip()!r} is not NAME:VALUE")
        name, tag = name.strip(), tag.strip()
        if name and tag:
            tags[name] = tag
    return tuple(sorted(tags.items()))


class StatsEvents:
    """What ``ServiceStats`` hands each of its sinks at a flush, as upstream's StatsD stats.

    The six events (``key_counts``, ``calls``, ``store_error``, ``store_failed_call``,
    ``domain_not_found``, ``config_load``) become counters by upstream's names and the calls'
    response times (``store_error``, one a descriptor, is not one of them); a
    subclass says what those are (``count``, ``response_times``): lines to send
    (``StatsdSink``), or Prometheus metrics by a mapping file (``stats_mapped``).
    ``stats_upstream.BuiltinMetrics`` takes the same events without the StatsD names.
    """

    def __init__(self) -> None:
        self._names: dict[str, str] = {}  # stats key -> its cleaned name prefix

    def key_counts(self, domain: str, key: str, counts: Sequence[int]) -> None:
        """One key's counts since the last flush (indices as ``KEY_COUNTERS``)."""
        stats_key = f"{domain}.{key}"
        prefix = self._names.get(stats_key)
        if prefix is None:
            if len(self._names) >= 65_536:  # keys are bounded upstream of here; names too
                self._names.clear()
            prefix = self._names[stats_key] = RATE_LIMIT + stats_name(stats_key) + "."
        for index, counter in enumerate(KEY_COUNTERS):
            if counts[index]:
                self.count(prefix + counter, counts[index])

    def calls(self, seconds: Sequence[float], failed: int = 0, cancelled: int = 0) -> None:
        """ShouldRateLimit calls answered in ``seconds`` each, ``failed`` of them by the
        fallback (``service_error``), ``cancelled`` of them never, the client gone first
        (``cancelled``: ratewarden's own name, upstream has none)."""
        self.count(SERVER + "total_requests", len(seconds))
        self.response_times(seconds)
        if failed:
            self.count(SHOULD_RATE_LIMIT + "service_error", failed)
        if cancelled:
            self.count(SHOULD_RATE_LIMIT + "cancelled", cancelled)

    def store_error(self) -> None:
        """A descriptor a store failure left to its failure mode: not one of upstream's stats
        (``store_failed_call`` is)."""

    def store_failed_call(self) -> None:
        """A ShouldRateLimit call that the store failed, whatever the descriptors it failed
        for: upstream's ``redis_error``, which its service counts once a failed call."""
        self.count(SHOULD_RATE_LIMIT + "redis_error")

    def domain_not_found(self, domain: str, descriptors: int) -> None:
        """``descriptors`` of a call to ``domain``, which the config does not know."""
        self.count(f"{RATE_LIMIT}{stats_name(domain)}.domain_not_found", descriptors)

    def config_load(self, ok: bool) -> None:
        """A config load finished: ``ok`` if it is now the config in use."""
        self.count(SERVICE + ("config_load_success" if ok else "config_load_error"))

    def count(self, name: str, by: int = 1) -> None:
        """Add ``by`` to the counter ``name`` (a full stat name without the tags)."""
        raise NotImplementedError

    def response_times(self, seconds: Sequence[float]) -> None:
        """The ``response_time`` timer's values (``ratelimit_server.ShouldRateLimit.``)."""
        raise NotImplementedError


class StatsdSink(StatsEvents):
    """Counts from ``ServiceStats`` flushes, sent as StatsD lines every interval."""

    def __init__(
        self,
        protocol: str,
        host: str,
        port: int,
        *,
        tags: Iterable[tuple[str, str]] = (),
    ) -> None:
        if protocol not in ("tcp", "udp", "unix"):
            raise ConfigurationError(f"statsd protocol {protocol!r} is not tcp, udp or unix")
        super().__init__()
        self.protocol = protocol
        self.host = host
        self.port = port
        self.suffix = "".join(f".__{name}={tag.translate(TAG_VALUE)}" for name, tag in sorted(tags))
        self._counters: dict[str, int] = {}
        self._timers: list[int] = []
        self._writer: asyncio.StreamWriter | None = None
        self._datagram: socket.socket | None = None
        self._lines = LogRateLimiter(60.0)
        self.sent = 0
        self.dropped = 0

    def count(self, name: str, by: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + by

    def response_times(self, seconds: Sequence[float]) -> None:
        """A timer line per call, in whole milliseconds, as upstream sends them."""
        self._timers.extend(int(s * 1000) for s in seconds)
        if len(self._timers) > 100_000:  # a sink that cannot send keeps the newest
            del self._timers[:-100_000]

    # --- sending ----------------------------------------------------------------------

    def lines(self) -> list[bytes]:
        """Everything counted since the last call, as StatsD lines (and forget it)."""
        counters, self._counters = self._counters, {}
        timers, self._timers = self._timers, []
        suffix = self.suffix
        out = [f"{name}{suffix}:{value}|c\n".encode() for name, value in counters.items()]
        timer = f"{SERVER}response_time{suffix}:"
        out.extend(f"{timer}{ms}|ms\n".encode() for ms in timers)
        return out

    async def send(self) -> None:
        """Send the lines counted since the last send; a failure drops them with a
        warning (at most one line a minute)."""
        lines = self.lines()
        if not lines:
            return
        try:
            if self.protocol == "tcp":
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation
                # that lands as the send finishes (CPython gh-86296), and the flush loop,
                # cancelled by stop(), would run on and stop() wait for it forever.
                async with asyncio.timeout(SEND_TIMEOUT_S):
                    await self._send_tcp(lines)
            else:
                self._send_datagrams(lines)
        except (TimeoutError, OSError) as exc:
            self.dropped += len(lines)
            await self._close_tcp()
            self._lines.log(
                log,
                logging.WARNING,
                "statsd",
                "cannot send stats to statsd at %s:%d (%s): %d %s dropped",
                self.host,
                self.port,
                exc or type(exc).__name__,
                len(lines),
                "line" if len(lines) == 1 else "lines",
                extra={"event": "statsd_send_failed", "dropped": len(lines)},
            )
        else:
            self.sent += len(lines)

    def _send_datagrams(self, lines: list[bytes]) -> None:
        unix = self.protocol == "unix"
        if self._datagram is None:
            if unix:
                family = socket.AF_UNIX
            else:
                family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            self._datagram = socket.socket(family, socket.SOCK_DGRAM)
            self._datagram.setblocking(False)
        target: Any = self.host if unix else (self.host, self.port)
        for datagram in _datagrams(lines, UNIX_PAYLOAD if unix else UDP_PAYLOAD):
            self._datagram.sendto(datagram, target)

    async def _send_tcp(self, lines: list[bytes]) -> None:
        if self._writer is None or self._writer.is_closing():
            _, self._writer = await asyncio.open_connection(self.host, self.port)
        self._writer.write(b"".join(lines))
        await self._writer.drain()

    async def _close_tcp(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(TimeoutError, OSError):
                async with asyncio.timeout(SEND_TIMEOUT_S):  # not wait_for: as in send
                    await writer.wait_closed()

    async def close(self) -> None:
        """Send what is left, then close the connection or socket."""
        await self.send()
        await self._close_tcp()
        if self._datagram is not None:
            self._datagram.close()
            self._datagram = None

    def __repr__(self) -> str:
        return f"StatsdSink({self.protocol}://{self.host}:{self.port})"


def _datagrams(lines: list[bytes], payload: int) -> list[bytes]:
    """``lines`` packed into datagrams of at most ``payload`` bytes (a longer line goes
    alone)."""
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        if current and size + len(line) > payload:
            out.append(b"".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        out.append(b"".join(current))
    return out
