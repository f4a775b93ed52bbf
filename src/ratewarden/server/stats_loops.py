"""The figures' background loops of a running ``ratewarden serve`` (``server/app.py`` starts them).

``flush_loop`` moves the stats' tally into the registry once a second and sends it to StatsD and
DogStatsD every ``--statsd-interval``; ``publish_loop`` writes one worker's dashboard figures, and
what its mapping file's metrics need beside the multiprocess files, for the other workers once a
second (``--workers``: ``/dashboard.json`` and ``/metrics`` merge them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from ratewarden.server import stats_mapped_shared
from ratewarden.server.dashboard import shared
from ratewarden.server.stats import ServiceStats
from ratewarden.server.statsd import StatsdSink

__all__ = ["FLUSH_INTERVAL_S", "PUBLISH_INTERVAL_S", "flush_loop", "publish_loop"]

log = logging.getLogger("ratewarden.server")

#: Seconds between two publications of a worker's dashboard figures (``--workers``).
PUBLISH_INTERVAL_S = 1.0
#: Seconds between moves of the stats' tally into the registry (ServiceStats.flush).
FLUSH_INTERVAL_S = 1.0


async def publish_loop(stats: ServiceStats, directory: str, *, dashboard: bool = True) -> None:
    """This worker's live figures (if ``dashboard``) and its mapped metrics' state (with a
    mapping file) into ``directory`` every second, until cancelled."""
    mapped = stats.mapped
    while True:
        try:
            if dashboard:
                shared.publish(directory, stats.live.state())
            if mapped is not None:
                stats.flush()  # the series updated until now
                stats_mapped_shared.publish(directory, mapped)
        except OSError as exc:
            log.warning(
                "cannot publish figures to %s: %s",
                directory,
                exc,
                extra={"event": "publish_failed"},
            )
        await asyncio.sleep(PUBLISH_INTERVAL_S)


async def flush_loop(stats: ServiceStats, sinks: Sequence[StatsdSink], interval: float) -> None:
    """The stats' tally into the registry every second; to ``sinks`` every ``interval``."""
    sent = time.monotonic()
    while True:
        await asyncio.sleep(min(FLUSH_INTERVAL_S, interval))
        stats.flush()
        if sinks and time.monotonic() - sent >= interval:
            sent = time.monotonic()
            for sink in sinks:
                await sink.send()
