"""One request's retries, written once as a flow that every transport drives.

The flow is a generator: it yields *steps*, each a call without arguments (send
the request once, make its body replayable, close or read a response, sleep on
the clock), and receives what the call returned; an error the call raised is
thrown into it at that step. It decides everything else (whether the method is
retried, the Idempotency-Key, the server's hint, the backoff, the caps, the
shared retry budget, the host's circuit). A blocking transport's steps return
their results (``drive``); an asyncio transport's return awaitables (``adrive``).
One loop runs both.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import numbers
import random as _random
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableMapping
from typing import Any, NamedTuple

from ratewarden.client._budget import RetryBudget
from ratewarden.client._circuit import Circuit, HostBreaker, HostCircuitOpenError, check_breaker
from ratewarden.client._hints import no_wait_helps, retry_hint
from ratewarden.client._policy import (
    IDEMPOTENCY_KEY,
    KEYED_METHODS,
    RetriesExhaustedError,
    RetryPolicy,
)
from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError

__all__ = ["Io", "Retrier", "RetryFlow", "adrive", "drive"]

#: A call without arguments: its result, or (asyncio) an awaitable of it.
Step = Callable[[], Any]
#: Yields steps, receives each step's result, returns the response kept.
RetryFlow = Generator[Step, Any, Any]


class Io(NamedTuple):
    """A transport's I/O as the flow names it: the errors its send raises that are worth
    another attempt, the methods that close or read a response (``read``: None when
    there is nothing to read) and sleep on the clock, blocking or coroutine methods, and
    the error raised when a host's circuit is open (its library's kind of transport
    error as well as ``HostCircuitOpenError``)."""

    errors: tuple[type[Exception], ...]
    close: str
    read: str | None
    sleep: str
    refused: type[HostCircuitOpenError] = HostCircuitOpenError


def _new_key() -> str:
    return str(uuid.uuid4())


def _says_when(response: Any) -> bool:
    """Does ``response`` carry a ``Retry-After``? A keyed request's 409 that does is an
    original still running (the idempotency middleware's answer), worth waiting for; a
    409 without one is a conflict, the answer."""
    return any(str(name).lower() == "retry-after" for name in response.headers)


def _verdict(status: int, headers: Any) -> bool | None:
    """What a response the client does not retry tells its host's circuit: a 5xx is a
    failure, and a 429 is none (the client did not wait, so it did not give up on a wait),
    or a success when no wait helps (the request is the trouble, not the host)."""
    if status == 429:
        return False if no_wait_helps(headers) else None
    return status >= 500


class Retrier:
    """Everything but the I/O: the policy, the clock, the jitter and key sources, the
    shared retry budget and host breaker (both optional), the flow. ``owner`` names the
    transport or adapter in error messages."""

    __slots__ = ("breaker", "budget", "clock", "io", "key_factory", "owner", "policy", "random")

    def __init__(
        self,
        policy: RetryPolicy | None,
        clock: Clock | None,
        random: Callable[[], float] | None,
        key_factory: Callable[[], str] | None,
        io: Io,
        *,
        owner: str = "Retrier",
        budget: RetryBudget | None = None,
        breaker: HostBreaker | None = None,
    ) -> None:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise ConfigurationError(f"policy={policy!r}: pass a RetryPolicy")
        if budget is not None and not isinstance(budget, RetryBudget):
            raise ConfigurationError(f"budget={budget!r}: pass a RetryBudget (or None)")
        # What the flow will call, checked now: else the mistake shows at the first retry.
        missing = [
            f"{name}()" for name in ("now", io.sleep) if not callable(getattr(clock, name, None))
        ]
        if clock is not None and missing:
            raise ConfigurationError(
                f"{owner}: clock={clock!r:.60} has no {' or '.join(missing)}: pass a "
                "ratewarden.clock.Clock (SystemClock(), ratewarden.testing.ManualClock()), "
                "or leave clock out for the system clock"
            )
        for name, value, what in (
            ("random", random, "a function returning floats in [0, 1), such as random.random"),
            ("key_factory", key_factory, "a function returning an Idempotency-Key (a str)"),
        ):
            if value is not None and not callable(value):
                raise ConfigurationError(
                    f"{owner}: {name}={value!r:.60} is not callable: pass {what}"
                )
        self.owner = owner
        self.policy = policy or RetryPolicy()
        self.clock: Clock = clock or SystemClock()
        self.random = random or _random.random
        self.key_factory = key_factory or _new_key
        self.io = io
        self.budget = budget
        self.breaker = check_breaker(breaker)

    def flow(
        self,
        method: str,
        headers: MutableMapping[str, str],
        send: Step,
        replay: Step | None,
        url: str = "",
    ) -> RetryFlow:
        """Send a request (``send``), and again while the policy allows; return the response.

        ``replay`` makes the request's body readable twice (None: it cannot be, so the
        request is sent once). A retried POST or PATCH gets its Idempotency-Key here.
        ``url`` names the host whose circuit the attempts go through (with a breaker).
        """
        policy, io = self.policy, self.io
        method = method.upper()
        keyed = policy.idempotency_keys and method in KEYED_METHODS
        if keyed and IDEMPOTENCY_KEY not in headers:
            headers[IDEMPOTENCY_KEY] = self._new_key()
        retried = replay is not None and (keyed or method in policy.methods)
        if retried and replay is not None:
            yield replay
        circuit = Circuit(self.breaker, url)
        self._admit(circuit, None)
        if self.budget is not None:
            self.budget.deposit()
        attempts, waited, error = 1, 0.0, None
        try:
            while True:
                try:
                    response = yield send
                except io.errors as exc:
                    circuit.report(True)
                    if not (retried and policy.retry_transport_errors):
                        raise
                    what = f"{type(exc).__name__}: {exc}"
                    delay = self._next(attempts, waited, None, what, circuit)
                    if isinstance(delay, str):
                        raise
                    error = exc
                else:
                    status = response.status_code
                    failed = status >= 500 or status == 429
                    retryable = retried and (
                        status in policy.statuses
                        or (status == 409 and IDEMPOTENCY_KEY in headers and _says_when(response))
                    )
                    hint = None  # the server's wish: the retry's wait, the circuit's hold
                    if retryable or (failed and self.breaker is not None):
                        hint = retry_hint(response.headers, self.clock.now())
                    if not retryable:
                        circuit.report(_verdict(status, response.headers), hint)
                        return response
                    if status >= 500:
                        circuit.report(True, hint)
                    if status == 429 and no_wait_helps(response.headers):
                        # The request is the trouble, not the host: a verdict of success.
                        # (The RateLimit field outranks a legacy reset here as in the hint.)
                        circuit.report(False)
                        delay = (
                            "HTTP 429 that no retry can pass (no Retry-After, and the "
                            "RateLimit field reports quota left for every policy)"
                        )
                    else:
                        delay = self._next(attempts, waited, hint, f"HTTP {status}", circuit)
                    if isinstance(delay, str):
                        circuit.report(status == 429, hint)  # given up on: a 429 counts now
                        if not policy.raise_on_give_up:
                            return response
                        if io.read is not None:
                            yield getattr(response, io.read)
                        raise RetriesExhaustedError(f"gave up retrying: {delay}", response)
                    circuit.report(None)  # a 429 retried is no verdict on the host
                    error = None
                    yield _whole(getattr(response, io.close))
                attempts, waited = attempts + 1, waited + delay
                yield functools.partial(getattr(self.clock, io.sleep), delay)
                self._admit(circuit, error)
        finally:
            circuit.report(None)  # an attempt cut short (cancelled, a bug) gives its place back

    def _new_key(self) -> str:
        """An Idempotency-Key from ``key_factory``, checked before anything is sent. (It is
        not called when built: a factory may count its keys, or log them.)"""
        key = self.key_factory()
        if not isinstance(key, str) or not key:
            raise ConfigurationError(
                f"{self.owner}: key_factory returned {key!r:.60}; it must return a non-empty "
                "str, the Idempotency-Key (str(uuid.uuid4()) by default)"
            )
        return key

    def _draw(self) -> float:
        """U for the jitter from ``random``: out of [0, 1) is clamped, not a number refused."""
        u = self.random()
        if isinstance(u, bool) or not isinstance(u, numbers.Real):
            raise ConfigurationError(
                f"{self.owner}: random returned {u!r:.60}; it must return floats in [0, 1)"
            )
        return float(u)

    def _admit(self, circuit: Circuit, error: BaseException | None) -> None:
        """Let the next attempt through the host's circuit, or raise ``io.refused``."""
        retry_in = circuit.admit()
        if retry_in is not None:
            raise self.io.refused(circuit.origin, retry_in) from error

    def _next(
        self, attempts: int, waited: float, hint: float | None, what: str, circuit: Circuit
    ) -> float | str:
        """Seconds before attempt ``attempts + 1``, or (a str) why there is none."""
        policy = self.policy
        tries = f"{attempts} attempt{'' if attempts == 1 else 's'}"
        if attempts >= policy.max_attempts:
            return f"{what} after {tries} (max_attempts)"
        delay = policy.delay(attempts - 1, hint, self._draw())
        if waited + delay > policy.max_wait:
            return (
                f"{what}; waiting {delay:.3f} s more would pass max_wait={policy.max_wait:g} s "
                f"(already waited {waited:.3f} s over {tries})"
            )
        open_for = circuit.open_for()
        if open_for > delay:
            return (
                f"{what}; the circuit for {circuit.origin} is open for {open_for:.3f} s more, "
                f"past the {delay:.3f} s wait (after {attempts} attempts)"
            )
        if self.budget is not None and not self.budget.withdraw():
            return f"{what}; the retry budget is empty (after {attempts} attempts; {self.budget!r})"
        return delay


def _whole(step: Step) -> Step:
    """``step``, not cut short by a cancellation of its asyncio caller: closing a response
    before a retry, which is where a caller's timeout lands (the retry waits next). httpx
    gives the connection back to its pool only at the end of that close (httpcore shields
    it from anyio's cancel scopes, not from ``task.cancel()``): a close cut short kept a
    pool slot for ever, and ``max_connections`` such cuts left every request a
    ``PoolTimeout``. A blocking step is just called."""

    def run() -> Any:
        result = step()
        return _to_the_end(result) if inspect.isawaitable(result) else result

    return run


async def _to_the_end(work: Awaitable[Any]) -> Any:
    """``await work`` in a task of its own, waited for to its end (again after each
    cancellation: anyio's cancel scopes repeat theirs every loop turn); a cancellation of
    the caller meanwhile is raised after it, and outranks what the work raised."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait((task,))  # which, cancelled, leaves the task running
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the caller's cancellation goes on instead
        raise cancelled
    return task.result()


async def adrive(flow: RetryFlow, *, blocking: bool = False) -> Any:
    """Run ``flow``: each step awaited, or called (``blocking``: then nothing is awaited)."""
    try:
        step = next(flow)
        while True:
            try:
                answer = step() if blocking else await step()
            except Exception as exc:  # the flow decides which errors are worth a retry
                step = flow.throw(exc)
            else:
                step = flow.send(answer)
    except StopIteration as done:
        return done.value
    finally:
        flow.close()


def drive(flow: RetryFlow) -> Any:
    """Run ``flow`` with blocking steps: ``adrive`` awaits nothing then, so its coroutine
    ends at the first resumption, with no event loop."""
    coroutine: Coroutine[Any, Any, Any] = adrive(flow, blocking=True)
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a blocking retry flow awaited something")
