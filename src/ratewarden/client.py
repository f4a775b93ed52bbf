"""Retrying HTTP clients that are calm in front of a rate limiter.

A client that retries a 429 at once, or that sends every throttled caller back
at the same instant, turns one limit into a retry storm. These helpers retry
politely:

- a server hint wins: ``Retry-After`` (delay-seconds or an HTTP-date), then the
  IETF ``RateLimit`` field (``"name";r=0;t=5``: the longest ``t`` among the
  exhausted policies; under draft-11 ``t`` is the effective window, so each of
  them has a unit back after exactly its ``t``), then the legacy ``X-RateLimit-Reset`` /
  ``RateLimit-Reset`` when the matching ``Remaining`` is 0 or absent;
- a hinted retry waits ``hint + U * hint_jitter`` (``U`` uniform in [0, 1)):
  never earlier than the server said, spread over a bounded window;
- without a hint, exponential backoff with full jitter:
  ``U * min(backoff_cap, backoff_base * 2 ** n)`` for the n-th retry (n from 0);
- the total time slept for one request is capped (``max_wait``); once the next
  wait would pass the cap, the client gives up with the last response (or raises
  ``RetriesExhaustedError`` with ``raise_on_give_up``);
- only idempotent methods are retried, unless ``idempotency_keys`` is on: then
  POST and PATCH carry an ``Idempotency-Key`` made once and kept across retries.

::

    client = httpx.Client(transport=RetryTransport(policy=RetryPolicy(max_wait=30)))
    client = httpx.AsyncClient(transport=AsyncRetryTransport())
    session = retry_session(RetryPolicy(idempotency_keys=True))     # requests

Malformed hints are ignored (the backoff applies); parsing never raises.
Time and chance are injected: ``clock`` (``ratewarden.clock.Clock``; tests pass
``ratewarden.testing.ManualClock``, whose sleep returns at once), ``random``
(floats in [0, 1)) and ``key_factory``.
"""

from __future__ import annotations

import email.utils
import functools
import importlib
import math
import random as _random
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import httpx

from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError, RatewardenError

__all__ = [
    "IDEMPOTENT_METHODS",
    "KEYED_METHODS",
    "AsyncRetryTransport",
    "RetriesExhaustedError",
    "RetryPolicy",
    "RetryTransport",
    "backoff_delay",
    "retry_adapter",
    "retry_hint",
    "retry_session",
]

#: Methods RFC 9110 defines as idempotent: retried by default.
IDEMPOTENT_METHODS = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "PUT", "TRACE"})
#: Methods retried only with an ``Idempotency-Key`` (``idempotency_keys=True``).
KEYED_METHODS = frozenset({"PATCH", "POST"})
IDEMPOTENCY_KEY = "Idempotency-Key"

# Up to 15 digits (an sf-integer), an optional fraction: bounded, so never a huge int parse.
_NUMBER = re.compile(r"\d{1,15}(?:\.\d{1,9})?")
# Transport failures worth another attempt; not UnsupportedProtocol or LocalProtocolError,
# which are mistakes in the request that a retry would only repeat.
_HTTPX_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
# Legacy reset values at or above this are epoch seconds (2001-09-09), below it deltas.
_EPOCH_THRESHOLD = 1_000_000_000


class RetriesExhaustedError(RatewardenError):
    """The retry budget ran out (``raise_on_give_up=True``); ``response`` is the last one."""

    def __init__(self, message: str, response: Any) -> None:
        super().__init__(message)
        self.response = response


def _positive(name: str, value: object, *, zero_ok: bool = False) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if zero_ok else value > 0)
    )
    if not ok:
        bound = "zero or more" if zero_ok else "more than zero"
        raise ConfigurationError(f"RetryPolicy.{name}={value!r}: must be a finite number {bound}")
    return float(value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, how long and what to retry. Durations in seconds.

    - ``max_attempts``: attempts in all, the first one included.
    - ``backoff_base`` / ``backoff_cap``: the full-jitter backoff without a hint.
    - ``max_wait``: the most one request sleeps, summed over its retries.
    - ``hint_jitter``: the window of uniform jitter added above a server hint.
    - ``statuses``: responses that are retried (429 and 503).
    - ``methods``: methods retried without a key (the idempotent ones).
    - ``idempotency_keys``: also retry POST and PATCH, each with one Idempotency-Key.
    - ``retry_transport_errors``: retry timeouts and connection failures too.
    - ``raise_on_give_up``: raise ``RetriesExhaustedError`` rather than return the last response.
    """

    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_wait: float = 60.0
    hint_jitter: float = 1.0
    statuses: frozenset[int] = field(default=frozenset({429, 503}))
    methods: frozenset[str] = IDEMPOTENT_METHODS
    idempotency_keys: bool = False
    retry_transport_errors: bool = True
    raise_on_give_up: bool = False

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.max_attempts={attempts!r}: must be a whole number >= 1 "
                "(1 means no retries)"
            )
        for name in ("backoff_base", "backoff_cap", "max_wait"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        jitter = _positive("hint_jitter", self.hint_jitter, zero_ok=True)
        object.__setattr__(self, "hint_jitter", jitter)
        object.__setattr__(self, "statuses", _statuses(self.statuses))
        object.__setattr__(self, "methods", _methods(self.methods))

    def delay(self, retry: int, hint: float | None, u: float) -> float:
        """Seconds before retry number ``retry`` (0 = first retry) given a hint and U in [0, 1)."""
        u = u if 0.0 <= u <= 1.0 else (1.0 if u > 1.0 else 0.0)  # NaN counts as 0
        if hint is None:
            return backoff_delay(retry, self.backoff_base, self.backoff_cap, u)
        return hint + u * self.hint_jitter


def _statuses(values: Iterable[object]) -> frozenset[int]:
    out = frozenset(values)
    for status in out:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ConfigurationError(
                f"RetryPolicy.statuses has {status!r}: each must be an HTTP status 100..599"
            )
    return out  # type: ignore[return-value]


def _methods(values: Iterable[object]) -> frozenset[str]:
    if isinstance(values, str):
        raise ConfigurationError(
            f"RetryPolicy.methods={values!r}: pass a set of method names, not one string"
        )
    out = set()
    for method in values:
        if not isinstance(method, str) or not method.isalpha():
            raise ConfigurationError(
                f"RetryPolicy.methods has {method!r}: each must be a method name such as 'GET'"
            )
        out.add(method.upper())
    return frozenset(out)


def backoff_delay(retry: int, base: float, cap: float, u: float) -> float:
    """AWS "full jitter": ``u * min(cap, base * 2 ** retry)``, u in [0, 1)."""
    # 2 ** 1100 overflows a float: past the cap the exponent no longer matters.
    ceiling = cap if retry >= 64 else min(cap, base * 2.0**retry)
    return u * ceiling


def _seconds(text: str) -> float | None:
    text = text.strip()
    return float(text) if _NUMBER.fullmatch(text) else None


def _retry_after(value: str, now: float) -> float | None:
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return max(when.timestamp() - now, 0.0)
    except (OverflowError, OSError, ValueError):
        return None


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == sep and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _ratelimit_field(value: str) -> float | None:
    """The wait the ``RateLimit`` field asks for: the longest ``t`` among items with ``r=0``.

    Items whose ``r`` or ``t`` is not a plain number are skipped.
    """
    waits = []
    for item in _split_outside_quotes(value, ","):
        params = {}
        for param in _split_outside_quotes(item, ";")[1:]:
            name, _, text = param.partition("=")
            params[name.strip().lower()] = _seconds(text)
        remaining, reset = params.get("r"), params.get("t")
        if remaining == 0 and reset is not None:
            waits.append(reset)
    return max(waits, default=None)


def _legacy_reset(headers: Mapping[str, str], prefix: str, now: float) -> float | None:
    reset = headers.get(f"{prefix}reset")
    if reset is None:
        return None
    remaining = headers.get(f"{prefix}remaining")
    if remaining is not None and _seconds(remaining) != 0:
        return None
    seconds = _seconds(reset)
    if seconds is None:
        return None
    return max(seconds - now, 0.0) if seconds >= _EPOCH_THRESHOLD else seconds


def retry_hint(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asked the client to wait, or None when it gave no usable hint.

    ``headers`` is any mapping of response headers; ``now`` is epoch seconds (for
    HTTP-dates and epoch resets). Never raises on malformed values.
    """
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    for seconds in (
        _retry_after(lowered["retry-after"], now) if "retry-after" in lowered else None,
        _ratelimit_field(lowered["ratelimit"]) if "ratelimit" in lowered else None,
        _legacy_reset(lowered, "x-ratelimit-", now),
        _legacy_reset(lowered, "ratelimit-", now),
    ):
        if seconds is not None and math.isfinite(seconds):
            return seconds
    return None


def _new_key() -> str:
    return str(uuid.uuid4())


class _Run:
    """The retry state of one logical request: attempts made and seconds slept."""

    __slots__ = ("_retrier", "attempts", "reason", "waited")

    def __init__(self, retrier: _Retrier) -> None:
        self._retrier = retrier
        self.attempts = 1
        self.waited = 0.0
        self.reason = ""

    def after_response(self, status: int, headers: Mapping[str, str]) -> float | None:
        """The wait before the next attempt, or None to keep this response."""
        if status not in self._retrier.policy.statuses:
            return None
        hint = retry_hint(headers, self._retrier.clock.now())
        return self._next(hint, f"HTTP {status}")

    def after_error(self, exc: BaseException) -> float | None:
        """The wait before the next attempt after a transport error, or None to raise it."""
        if not self._retrier.policy.retry_transport_errors:
            return None
        return self._next(None, f"{type(exc).__name__}: {exc}")

    def _next(self, hint: float | None, what: str) -> float | None:
        policy = self._retrier.policy
        if self.attempts >= policy.max_attempts:
            self.reason = f"{what} after {self.attempts} attempts (max_attempts)"
            return None
        delay = policy.delay(self.attempts - 1, hint, self._retrier.random())
        if self.waited + delay > policy.max_wait:
            self.reason = (
                f"{what}; waiting {delay:.3f} s more would pass max_wait={policy.max_wait:g} s "
                f"(already waited {self.waited:.3f} s over {self.attempts} attempts)"
            )
            return None
        self.attempts += 1
        self.waited += delay
        return delay

    def raises(self) -> bool:
        """Whether the retries ran out and the policy wants an exception, not the response."""
        return bool(self.reason) and self._retrier.policy.raise_on_give_up

    def error(self, response: Any) -> RetriesExhaustedError:
        """The exception for a run that gave up on ``response``."""
        return RetriesExhaustedError(f"gave up retrying: {self.reason}", response)


class _Retrier:
    """Everything but the I/O, shared by the httpx transports and the requests adapter."""

    __slots__ = ("clock", "key_factory", "policy", "random")

    def __init__(
        self,
        policy: RetryPolicy | None,
        clock: Clock | None,
        random: Callable[[], float] | None,
        key_factory: Callable[[], str] | None,
    ) -> None:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise ConfigurationError(f"policy={policy!r}: pass a RetryPolicy")
        self.policy = policy or RetryPolicy()
        self.clock: Clock = clock or SystemClock()
        self.random = random or _random.random
        self.key_factory = key_factory or _new_key

    def begin(self, method: str, headers: MutableMapping[str, str]) -> _Run | None:
        """A run for a retryable request (adding its Idempotency-Key), else None."""
        method = method.upper()
        if self.policy.idempotency_keys and method in KEYED_METHODS:
            if IDEMPOTENCY_KEY not in headers:
                headers[IDEMPOTENCY_KEY] = self.key_factory()
            return _Run(self)
        return _Run(self) if method in self.policy.methods else None


class RetryTransport(httpx.BaseTransport):
    """An httpx transport that retries through ``transport`` (a new HTTPTransport by default)."""

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        key_factory: Callable[[], str] | None = None,
    ) -> None:
        self._transport = transport or httpx.HTTPTransport()
        self._retrier = _Retrier(policy, clock, random, key_factory)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, waiting and sending again while the policy allows."""
        run = self._retrier.begin(request.method, request.headers)
        if run is None:
            return self._transport.handle_request(request)
        request.read()  # a streamed body must be replayable
        while True:
            try:
                response = self._transport.handle_request(request)
            except _HTTPX_RETRYABLE as exc:
                delay = run.after_error(exc)
                if delay is None:
                    raise
            else:
                delay = run.after_response(response.status_code, response.headers)
                if delay is None:
                    if run.raises():
                        response.read()
                        raise run.error(response)
                    return response
                response.close()
            self._retrier.clock.sleep(delay)

    def close(self) -> None:
        self._transport.close()


class AsyncRetryTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of ``RetryTransport``."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        key_factory: Callable[[], str] | None = None,
    ) -> None:
        self._transport = transport or httpx.AsyncHTTPTransport()
        self._retrier = _Retrier(policy, clock, random, key_factory)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, waiting and sending again while the policy allows."""
        run = self._retrier.begin(request.method, request.headers)
        if run is None:
            return await self._transport.handle_async_request(request)
        await request.aread()
        while True:
            try:
                response = await self._transport.handle_async_request(request)
            except _HTTPX_RETRYABLE as exc:
                delay = run.after_error(exc)
                if delay is None:
                    raise
            else:
                delay = run.after_response(response.status_code, response.headers)
                if delay is None:
                    if run.raises():
                        await response.aread()
                        raise run.error(response)
                    return response
                await response.aclose()
            await self._retrier.clock.asleep(delay)

    async def aclose(self) -> None:
        await self._transport.aclose()


@functools.cache
def _adapter_class() -> type[Any]:
    adapters = importlib.import_module("requests.adapters")
    exceptions = importlib.import_module("requests.exceptions")
    transport_errors = (exceptions.ConnectionError, exceptions.Timeout)

    class RetryAdapter(adapters.HTTPAdapter):  # type: ignore[misc, name-defined]
        """A requests adapter that retries like ``RetryTransport``."""

        def __init__(self, retrier: _Retrier, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.retrier = retrier

        def send(self, request: Any, **kwargs: Any) -> Any:
            run = self.retrier.begin(request.method or "GET", request.headers)
            # A generator or file body cannot be sent twice.
            if run is None or not isinstance(request.body, bytes | str | None):
                return super().send(request, **kwargs)
            while True:
                try:
                    response = super().send(request, **kwargs)
                except transport_errors as exc:
                    delay = run.after_error(exc)
                    if delay is None:
                        raise
                else:
                    delay = run.after_response(response.status_code, response.headers)
                    if delay is None:
                        if run.raises():
                            raise run.error(response)
                        return response
                    response.close()
                self.retrier.clock.sleep(delay)

    return RetryAdapter


def retry_adapter(
    policy: RetryPolicy | None = None,
    *,
    clock: Clock | None = None,
    random: Callable[[], float] | None = None,
    key_factory: Callable[[], str] | None = None,
    **adapter_kwargs: Any,
) -> Any:
    """A ``requests`` HTTPAdapter that retries; mount it on a Session. Needs ``requests``.

    ``adapter_kwargs`` go to ``HTTPAdapter`` (``pool_maxsize`` ...). Leave its own
    ``max_retries`` alone: it retries failed connections without any backoff.
    """
    try:
        cls = _adapter_class()
    except ImportError as exc:
        raise ConfigurationError(
            "retry_adapter needs the requests package: pip install requests"
        ) from exc
    return cls(_Retrier(policy, clock, random, key_factory), **adapter_kwargs)


def retry_session(
    policy: RetryPolicy | None = None,
    *,
    session: Any = None,
    clock: Clock | None = None,
    random: Callable[[], float] | None = None,
    key_factory: Callable[[], str] | None = None,
) -> Any:
    """A ``requests.Session`` (new, or ``session``) with a retrying adapter on http and https."""
    adapter = retry_adapter(policy, clock=clock, random=random, key_factory=key_factory)
    if session is None:
        session = importlib.import_module("requests").Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
