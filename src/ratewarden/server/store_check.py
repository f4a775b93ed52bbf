"""Whether ``ratewarden serve``'s store can decide: asked at start and by the health loop;
and the circuit breaker in front of it.

A store that does not answer (down, too slow) is a passing state: the service reports
NOT_SERVING until it answers. A store that answers but cannot be used (a Redis older
than 6.2: ``storage/_redis_server.py``; one that refuses the password, user or database
number, or whose ACL forbids the store's keys, scripts or TIME: ``storage/_redis_errors.py``,
found by the Redis store's ``ping``, which probes with a peek under the key prefix) will
not get better by waiting, so
``ratewarden serve`` refuses to start on it, and the health loop says why it is not
serving.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.metrics import Metrics
from ratewarden.server.store_url import redacted
from ratewarden.tiers import CircuitBreaker

__all__ = ["named_fault", "refuse_unusable", "store_breaker", "store_fault"]

#: Why a store is not serving when its ping fails or times out.
NO_ANSWER = "store does not answer"


class Pinged(Protocol):
    """What is asked of the store here (every ``AsyncStore`` has it)."""

    async def ping(self) -> bool: ...


async def store_fault(store: Pinged, timeout: float) -> str | None:
    """None when ``store`` answers a ping within ``timeout`` seconds, else why not: a store
    that does not answer says ``NO_ANSWER`` and, in brackets, what its ping met (connection
    refused, a timeout, a name that does not resolve: raised, or kept by a Redis store whose
    ping answered False, ``last_ping_error``), so the health line names the cause at once."""
    try:
        # Not asyncio.wait_for: on Python 3.11 it returns the result when a cancellation
        # lands as the ping answers (CPython gh-86296), and the health loop, cancelled by
        # stop(), would run on and stop() wait for it forever.
        async with asyncio.timeout(timeout):
            alive = await store.ping()
    except StorageUnavailableError as exc:
        # The store's own words up to its advice to callers ("; the failure mode decides").
        return f"{NO_ANSWER} ({str(exc).split('; ')[0]})"
    except StorageError as exc:  # it answers, but cannot be used
        return str(exc)
    except TimeoutError:
        return f"{NO_ANSWER} (no answer to its ping within {timeout:g} s)"
    except Exception as exc:  # an error the store's own boundary missed
        return f"{NO_ANSWER} ({type(exc).__name__}: {exc})"
    if alive:
        return None
    # A Redis store's ping answers False for an outage, and keeps what it met.
    met = getattr(store, "last_ping_error", None)
    return f"{NO_ANSWER} ({str(met).split('; ')[0]})" if met is not None else NO_ANSWER


def named_fault(fault: str | None, url: str) -> str | None:
    """``fault`` for the health line: a store that does not answer named by its URL (its
    password hidden), as ``store 'redis://127.0.0.1:6379/0' does not answer (...)``."""
    if fault is None or not fault.startswith(NO_ANSWER):
        return fault
    return fault.replace(NO_ANSWER, f"store {redacted(url)!r} does not answer", 1)


async def refuse_unusable(store: Pinged, timeout: float) -> None:
    """Raise ``ConfigurationError`` when ``store`` answers but cannot be used."""
    fault = await store_fault(store, timeout)
    if fault is not None and not fault.startswith(NO_ANSWER):
        raise ConfigurationError(f"the store cannot be used: {fault}")


#: Store calls a failure ratio is judged over unless ``--breaker-window`` says.
RATIO_WINDOW = 100


def store_breaker(
    failures: int,
    cooldown: float,
    metrics: Metrics,
    failure_ratio: float | None = None,
    window: int | None = None,
) -> CircuitBreaker | None:
    """One breaker for the store, a circuit per Cluster primary: an outage costs a few
    timeouts, not one per call, and one primary's outage opens its own circuit only.
    ``failures`` consecutive failures open a circuit (0: no breaker); so does, with a
    ``failure_ratio``, that share of failures among a circuit's last ``window`` calls
    (judged once that many are in), which catches a store failing some calls of many
    (an overloaded primary timing out one call in two never fails five in a row for long)."""
    if failures == 0:
        return None
    calls = window if window is not None else RATIO_WINDOW
    return CircuitBreaker(
        failures=failures,
        failure_ratio=failure_ratio,
        window=calls,
        min_calls=calls,
        cooldown=cooldown,
        metrics=metrics,
        per_node=True,
    )
