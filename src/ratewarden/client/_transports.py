"""The retrying transports: httpx (blocking and asyncio) and a requests adapter.

Each drives the one retry flow (``_retry.Retrier.flow``); all a transport says is
how it sends a request once, what its I/O is called, and which of its library's
errors a request refused by an open circuit raises.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from ratewarden.checks import keywords_checked, refuse_unknown
from ratewarden.client._budget import RetryBudget
from ratewarden.client._circuit import HostBreaker, HostCircuitOpenError
from ratewarden.client._policy import RetryPolicy
from ratewarden.client._retry import Io, Retrier, adrive, drive
from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError

__all__ = ["AsyncRetryTransport", "RetryTransport", "retry_adapter", "retry_session"]

# Transport failures worth another attempt; not UnsupportedProtocol or LocalProtocolError,
# which are mistakes in the request that a retry would only repeat.
_HTTPX_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

T = TypeVar("T")


class HTTPXHostCircuitOpenError(HostCircuitOpenError, httpx.TransportError):
    """The host's circuit is open (an ``httpx.TransportError``): the request was not sent."""


class _Retrying(Generic[T]):
    """What both httpx transports hold: the inner transport and the retrier over its I/O."""

    _IO: Io
    #: The inner transport's methods this one calls, and what to pass instead.
    _NEEDS: tuple[str, ...]
    _WANTED: str

    @keywords_checked
    def __init__(
        self,
        transport: T | None = None,
        *,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        random: Callable[[], float] | None = None,
        key_factory: Callable[[], str] | None = None,
        budget: RetryBudget | None = None,
        breaker: HostBreaker | None = None,
    ) -> None:
        owner = type(self).__name__
        for name, kind in (("policy", RetryPolicy), ("budget", RetryBudget)):
            if isinstance(transport, kind):
                raise ConfigurationError(
                    f"{owner}: its first argument is the inner transport, and a "
                    f"{kind.__name__} was given; did you mean {name}=?"
                )
        self._retrier = Retrier(
            policy,
            clock,
            random,
            key_factory,
            self._IO,
            owner=owner,
            budget=budget,
            breaker=breaker,
        )
        if transport is not None:
            missing = [name for name in self._NEEDS if not callable(getattr(transport, name, None))]
            if missing:
                raise ConfigurationError(
                    f"{owner}: transport={transport!r:.60} has no {' or '.join(missing)}(): "
                    f"{self._WANTED}"
                )
        self._transport: T = transport or self._default_transport()

    def _default_transport(self) -> T:
        raise NotImplementedError


class RetryTransport(_Retrying[httpx.BaseTransport], httpx.BaseTransport):
    """An httpx transport that retries through ``transport`` (a new HTTPTransport by default).

    ``budget`` (a ``RetryBudget``) and ``breaker`` (``CircuitBreaker(per_node=True)``: a
    circuit per host) are shared with every other transport or adapter given them.
    """

    _IO = Io(_HTTPX_RETRYABLE, "close", "read", "sleep", HTTPXHostCircuitOpenError)
    _NEEDS = ("handle_request", "close")
    _WANTED = (
        "pass a blocking httpx transport (httpx.HTTPTransport()), or use AsyncRetryTransport "
        "for an httpx.AsyncClient"
    )

    def _default_transport(self) -> httpx.BaseTransport:
        return httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, waiting and sending again while the policy allows."""
        send = functools.partial(self._transport.handle_request, request)
        # request.read: a streamed body must be replayable
        flow = self._retrier.flow(
            request.method, request.headers, send, request.read, str(request.url)
        )
        response: httpx.Response = drive(flow)
        return response

    def close(self) -> None:
        self._transport.close()


class AsyncRetryTransport(_Retrying[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """The asyncio twin of ``RetryTransport``."""

    _IO = Io(_HTTPX_RETRYABLE, "aclose", "aread", "asleep", HTTPXHostCircuitOpenError)
    _NEEDS = ("handle_async_request", "aclose")
    _WANTED = (
        "pass an asyncio httpx transport (httpx.AsyncHTTPTransport()), or use RetryTransport "
        "for an httpx.Client"
    )

    def _default_transport(self) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, waiting and sending again while the policy allows."""
        send = functools.partial(self._transport.handle_async_request, request)
        flow = self._retrier.flow(
            request.method, request.headers, send, request.aread, str(request.url)
        )
        response: httpx.Response = await adrive(flow)
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()


def _nothing() -> None:
    """The replay step of a body that is already bytes: nothing to do."""


@functools.cache
def _adapter_class() -> type[Any]:
    adapters = importlib.import_module("requests.adapters")
    exceptions = importlib.import_module("requests.exceptions")

    class RequestsHostCircuitOpenError(HostCircuitOpenError, exceptions.ConnectionError):  # type: ignore[misc, name-defined]
        """The host's circuit is open (a ``requests.ConnectionError``): the request was not
        sent."""

    class RetryAdapter(adapters.HTTPAdapter):  # type: ignore[misc, name-defined]
        """A requests adapter that retries like ``RetryTransport``."""

        # requests reads the body after the adapter returns: nothing to read on giving up.
        IO = Io(
            (exceptions.ConnectionError, exceptions.Timeout),
            "close",
            None,
            "sleep",
            RequestsHostCircuitOpenError,
        )

        def __init__(self, retrier: Retrier, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.retrier = retrier

        def send(self, request: Any, **kwargs: Any) -> Any:
            send = functools.partial(super().send, request, **kwargs)
            # A generator or file body cannot be sent twice.
            replay = _nothing if isinstance(request.body, bytes | str | None) else None
            flow = self.retrier.flow(
                request.method or "GET", request.headers, send, replay, request.url or ""
            )
            return drive(flow)

    return RetryAdapter


_OWN = ("policy", "clock", "random", "key_factory", "budget", "breaker")


def _check_adapter_kwargs(given: dict[str, Any]) -> None:
    """The keywords ``retry_adapter`` passes on are ``HTTPAdapter``'s (a misspelt one of
    ours or its is named, with the nearest), and ``max_retries`` is left alone."""
    adapter = importlib.import_module("requests.adapters").HTTPAdapter
    parameters = inspect.signature(adapter.__init__).parameters
    theirs = [name for name in parameters if name not in ("self", "max_retries")]
    refuse_unknown("retry_adapter", set(given) - {"max_retries"}, (*_OWN, *theirs))
    retries = given.get("max_retries", 0)
    if isinstance(retries, bool) or retries != 0:
        raise ConfigurationError(
            f"retry_adapter: max_retries={retries!r}: leave it out; this adapter retries by "
            "its policy (RetryPolicy.max_attempts), and urllib3's retries, which know nothing "
            "of Retry-After or the budget, would multiply ours"
        )


def retry_adapter(
    policy: RetryPolicy | None = None,
    *,
    clock: Clock | None = None,
    random: Callable[[], float] | None = None,
    key_factory: Callable[[], str] | None = None,
    budget: RetryBudget | None = None,
    breaker: HostBreaker | None = None,
    **adapter_kwargs: Any,
) -> Any:
    """A ``requests`` HTTPAdapter that retries; mount it on a Session. Needs ``requests``.

    ``adapter_kwargs`` go to ``HTTPAdapter`` (``pool_maxsize`` ...). Leave its own
    ``max_retries`` alone: it retries failed connections without any backoff.
    ``budget`` and ``breaker`` are shared, as on ``RetryTransport``.
    """
    try:
        cls = _adapter_class()
    except ImportError as exc:
        raise ConfigurationError(
            "retry_adapter needs the requests package: pip install requests"
        ) from exc
    _check_adapter_kwargs(adapter_kwargs)
    retrier = Retrier(
        policy,
        clock,
        random,
        key_factory,
        cls.IO,
        owner="retry_adapter",
        budget=budget,
        breaker=breaker,
    )
    return cls(retrier, **adapter_kwargs)


def retry_session(
    policy: RetryPolicy | None = None,
    *,
    session: Any = None,
    clock: Clock | None = None,
    random: Callable[[], float] | None = None,
    key_factory: Callable[[], str] | None = None,
    budget: RetryBudget | None = None,
    breaker: HostBreaker | None = None,
) -> Any:
    """A ``requests.Session`` (new, or ``session``) with a retrying adapter on http and https."""
    adapter = retry_adapter(
        policy,
        clock=clock,
        random=random,
        key_factory=key_factory,
        budget=budget,
        breaker=breaker,
    )
    if session is None:
        session = importlib.import_module("requests").Session()
    elif not callable(getattr(session, "mount", None)):
        raise ConfigurationError(
            f"retry_session: session={session!r:.60} has no mount(): pass a requests.Session, "
            "or leave session out for a new one"
        )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
