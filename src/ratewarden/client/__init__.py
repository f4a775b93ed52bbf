"""Retrying HTTP clients that are calm in front of a rate limiter.

A client that retries a 429 at once, or that sends every throttled caller back
at the same instant, turns one limit into a retry storm. These helpers retry
politely:

- a server hint wins: ``Retry-After`` (delay-seconds or an HTTP-date), then the
  IETF ``RateLimit`` field (``"name";r=0;t=5``: the longest ``t`` among the
  exhausted policies; under draft-11 ``t`` is the effective window, so each of
  them has a unit back after exactly its ``t``), then the legacy ``X-RateLimit-Reset`` /
  ``RateLimit-Reset`` when the matching ``Remaining`` is 0 or absent;
- a 429 without ``Retry-After`` whose ``RateLimit`` field lists no exhausted policy
  (every ``r`` above 0) is not retried: no wait lets that request through (ratewarden's
  middleware answers so a cost above what a rule can ever allow);
- a hinted retry waits ``hint + U * hint_jitter`` (``U`` uniform in [0, 1)):
  never earlier than the server said, spread over a bounded window;
- without a hint, exponential backoff with full jitter:
  ``U * min(backoff_cap, backoff_base * 2 ** n)`` for the n-th retry (n from 0);
- the total time slept for one request is capped (``max_wait``); once the next
  wait would pass the cap, the client gives up with the last response (or raises
  ``RetriesExhaustedError`` with ``raise_on_give_up``);
- only idempotent methods are retried, unless ``idempotency_keys`` is on: then
  POST and PATCH carry an ``Idempotency-Key`` made once and kept across retries;
- opt in, shared by every transport given them: a ``RetryBudget`` (retries for the
  whole client: at most ``burst + ratio * requests + min_per_second * seconds``; a
  retry it refuses is not sent and the request ends with its last answer), and a
  circuit breaker per host (``ratewarden.CircuitBreaker(per_node=True)`` as
  ``breaker=``: after failed attempts a host's requests raise
  ``HostCircuitOpenError``, also the library's own transport error, without going
  to the network, until a probe succeeds).

::

    client = httpx.Client(transport=RetryTransport(policy=RetryPolicy(max_wait=30)))
    client = httpx.AsyncClient(transport=AsyncRetryTransport())
    session = retry_session(RetryPolicy(idempotency_keys=True))     # requests
    budget, breaker = RetryBudget(), CircuitBreaker(per_node=True, name="client")
    client = httpx.Client(transport=RetryTransport(budget=budget, breaker=breaker))

Malformed hints are ignored (the backoff applies); parsing never raises.
Time and chance are injected: ``clock`` (``ratewarden.clock.Clock``; tests pass
``ratewarden.testing.ManualClock``, whose sleep returns at once), ``random``
(floats in [0, 1)) and ``key_factory``.
"""

from __future__ import annotations

from ratewarden.client._budget import RetryBudget
from ratewarden.client._circuit import HostBreaker, HostCircuitOpenError
from ratewarden.client._hints import retry_hint
from ratewarden.client._policy import (
    IDEMPOTENT_METHODS,
    KEYED_METHODS,
    RetriesExhaustedError,
    RetryPolicy,
    backoff_delay,
)
from ratewarden.client._transports import (
    AsyncRetryTransport,
    RetryTransport,
    retry_adapter,
    retry_session,
)

__all__ = [
    "IDEMPOTENT_METHODS",
    "KEYED_METHODS",
    "AsyncRetryTransport",
    "HostBreaker",
    "HostCircuitOpenError",
    "RetriesExhaustedError",
    "RetryBudget",
    "RetryPolicy",
    "RetryTransport",
    "backoff_delay",
    "retry_adapter",
    "retry_hint",
    "retry_session",
]
