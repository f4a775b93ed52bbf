"""The gRPC port on pygrpc-native: HTTP/2 and gRPC framing in Rust, the decisions in Python.

``NativeGrpcServer`` is ``GrpcServer``'s twin for ``--transport native``: the same
constructor, ``start``/``set_serving``/``stop`` and the same answers, over
``pygrpc_native.NativeGrpcFront``; its ``answer`` may also return the response's wire
bytes (the service's ``should_rate_limit_wire``), which it sends as they are. The front
runs HTTP/2 (framing, flow control, keep-alive, deadlines, cancellation) on its own
threads outside the GIL and hands the calls to Python in small batches (``BATCH``): one
thread here waits for a batch, and the event loop then decodes every call of it and
starts each, in arrival order, in one turn of the loop. A call is started in that turn,
not in a task: one the store answers at once (the memory store, the over-limit cache) is
decided there and then, with no task, and only a call that waits (on Redis) becomes a
task, resumed where it waits, which keeps its own deadline and cancellation
(``resumed.Resumed``). So the calls of a batch reach the store together: the Redis store writes
the requests made in one turn as one pipelined batch (each request keeping its own
deadline), and the memory store decides them one after the other. Each call's answer is
what deciding it alone, in arrival order, gives; a call that fails fails alone. The
answers made in one turn of the loop are handed to the front together at the start of
the next (``_flush_answers``): the front's threads then wake once for them, not once per
answer (measured: their CPU per call fell by a quarter to a third).

What it serves, as ``GrpcServer`` does:

- ``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``: bytes that are not a
  ``RateLimitRequest`` (or a request the service refuses) are ``INVALID_ARGUMENT``, a call
  before the first rules (``--xds-force-start``) ``UNAVAILABLE``; an unexpected failure is
  ``UNKNOWN`` with no detail (the composition root's answer has already turned every store
  failure into an answer, so this is a bug's path only).
- ``grpc.health.v1.Health`` ``Check`` and ``Watch`` for the names in
  ``HEALTH_SERVICES``; an unknown name is ``NOT_FOUND`` (``Check``) or
  ``SERVICE_UNKNOWN`` (``Watch``), as grpcio's health servicer answers.
- A call's deadline or its client's cancellation cancels its task; the front has already
  answered the client (``DEADLINE_EXCEEDED`` / reset stream). Over 4 MiB of request is
  ``RESOURCE_EXHAUSTED``, as grpcio's default limit.

What it cannot do is refused when the server is built, never dropped: TLS (the front
has none yet: ``--transport grpcio`` serves TLS and mutual TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import grpc
from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from ratewarden.errors import ConfigurationError, ServiceUnavailableError
from ratewarden.server.grpc import (
    HEALTH_SERVICES,
    RATE_LIMIT_SERVICE,
    Answer,
    GrpcTls,
    cannot_listen,
    grpc_address,
)
from ratewarden.server.resumed import Resumed
from ratewarden.server.tracing import Tracing

__all__ = ["NATIVE_TRANSPORT_PACKAGE", "NativeGrpcServer"]

log = logging.getLogger("ratewarden.server.grpc")

#: The distribution ``--transport native`` runs on.
NATIVE_TRANSPORT_PACKAGE = "pygrpc-native"

_SHOULD_RATE_LIMIT = f"/{RATE_LIMIT_SERVICE}/ShouldRateLimit"
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
#: Method ids, in the order the front is given the paths.
_RLS, _CHECK, _WATCH = 0, 1, 2
#: Calls handed over per batch at most (the front's own queue holds the rest). Small, so that
#: the first calls' answers leave while the loop decides the next ones: with 64, the calls in
#: flight moved as one clump (decided together, answered together, sent again together) and
#: the loop waited between clumps. On 2 CPUs, 3 descriptors, h2load on 4 connections, three
#: alternations: memory at 16 in flight 24,460-27,158 calls/s with 6 against 15,762-20,789
#: with 64, and at 64 in flight 21,809-25,223 against 20,340-25,466; Redis at 16 in flight
#: alike (11,037-12,960 against 11,690-13,148).
BATCH = 6
#: The largest request accepted, as grpcio's default (``grpc.max_receive_message_length``).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: Seconds a graceful stop waits, after the last call's answer, before it closes the front:
#: the front writes answers on its own threads and drops what it has not written at close.
FLUSH_S = 0.25

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_UNKNOWN_SERVICE = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
_INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
_NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]
_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


def io_threads() -> int:
    """The front's HTTP/2 threads: one on a machine of up to three CPUs, else two (the
    package's default). On two CPUs shared with the event loop, Redis and the clients, a
    second thread only took turns with the first: ``ratewarden serve`` on Redis, 3
    descriptors, 16 calls in flight, four alternations: 6,898-12,403 calls/s with one
    (its threads 23-27 us of CPU a call) against 6,880-11,837 with two (26-35 us)."""
    return 1 if (os.cpu_count() or 1) <= 3 else 2


class _BindWarning(logging.Filter):
    """pygrpc-native's warning that it could not bind: the OSError it raises then says the
    same, and ``ratewarden serve`` prints that once, in its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("gRPC server could not bind ")


@contextlib.contextmanager
def _without_bind_warning() -> Iterator[None]:
    """Drop only that warning, only while the front binds (its constructor logs it before it
    raises, on the calling thread); every other record of the package's logger passes."""
    front_log = logging.getLogger("pygrpc_native")
    dropped = _BindWarning()
    front_log.addFilter(dropped)
    try:
        yield
    finally:
        front_log.removeFilter(dropped)


def _status_bytes(status: int) -> bytes:
    return bytes(health_pb2.HealthCheckResponse(status=status).SerializeToString())


class NativeGrpcServer:
    """The rate limit and health services on pygrpc-native. ``start`` binds, ``stop`` drains."""

    def __init__(
        self, answer: Answer, *, tls: GrpcTls | None = None, tracing: Tracing | None = None
    ) -> None:
        if tls is not None:
            raise ConfigurationError(
                f"--transport native cannot serve {tls.source}: {NATIVE_TRANSPORT_PACKAGE} has "
                "no TLS yet; use --transport grpcio (or auto, which picks grpcio when TLS is on)"
            )
        self._answer = answer
        self._tracing = tracing
        self._front: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._status = dict.fromkeys(HEALTH_SERVICES, _NOT_SERVING)
        #: Watch calls open per service name (call ids), sent every change of status.
        self._watchers: dict[str, set[int]] = {}
        self._watching: dict[int, str] = {}
        self._cancel = -1
        #: Answers made in this turn of the loop, handed to the front at the next.
        self._answers: list[tuple[int, bytes]] = []
        self._flush: asyncio.Handle | None = None
        self._stopping = False
        self._shut_down = False

    async def start(
        self, host: str, port: int, *, reuse_port: bool = False, uds: str | None = None
    ) -> int:
        """Listen on ``host:port`` (or the Unix socket ``uds``); return the port bound (useful
        with port 0; 0 on a Unix socket).

        Raises ``OSError`` (``cannot_listen``'s, with the OS's errno) when the address cannot
        be bound.
        """
        from pygrpc_native import EVENT_CANCEL, NativeGrpcFront

        address = grpc_address(host, port, uds)
        methods = [(_SHOULD_RATE_LIMIT, False), (_HEALTH_CHECK, False), (_HEALTH_WATCH, True)]
        try:
            # call_details: the front then tracks deadlines and reports cancellations
            # (without it no EVENT_CANCEL comes). Keep-alive as grpc-core servers do:
            # ping only connections with calls.
            with _without_bind_warning():
                front = NativeGrpcFront(
                    address,
                    methods,
                    call_details=True,
                    reuse_port=reuse_port,
                    keepalive_permit_without_calls=False,
                    io_threads=io_threads(),
                )
        except OSError as exc:
            raise cannot_listen(address, host, exc) from None
        self._front = front
        self._cancel = EVENT_CANCEL
        self._loop = asyncio.get_running_loop()
        front.start()
        self._thread = threading.Thread(
            target=self._receive, name="ratewarden-grpc-native", daemon=True
        )
        self._thread.start()
        return 0 if uds is not None else int(front.bound_port)

    async def set_serving(self, serving: bool) -> None:
        if self._shut_down:
            return
        status = _SERVING if serving else _NOT_SERVING
        for name in HEALTH_SERVICES:
            self._set_status(name, status)

    async def stop(self, grace: float) -> None:
        """Report NOT_SERVING for good, refuse new calls, give calls in flight ``grace`` seconds."""
        for name in HEALTH_SERVICES:
            self._set_status(name, _NOT_SERVING)
        self._shut_down = True
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        tasks = list(self._tasks.values())
        if grace and tasks:
            await asyncio.wait(tasks, timeout=grace)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._flush_answers()
        if grace:
            # The front writes answers on its own threads, and close() drops any it has not
            # written yet (its client gets UNAVAILABLE): give the last ones a moment to
            # leave, within the grace.
            await asyncio.sleep(min(FLUSH_S, max(0.0, deadline - loop.time())))
        front, self._front = self._front, None
        if front is not None:
            for call_id in list(self._watching):
                front.stream_end(call_id)
            await asyncio.get_running_loop().run_in_executor(None, front.close)
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)

    # --- the front's thread ---------------------------------------------------------

    def _receive(self) -> None:
        """Wait for batches of calls (without the GIL) and hand each to the event loop."""
        front, loop = self._front, self._loop
        assert front is not None and loop is not None
        while (events := front.recv_batch_details(BATCH)) is not None:
            try:
                loop.call_soon_threadsafe(self._on_events, events)
            except RuntimeError:  # the loop is closed: nobody is left to answer
                front.close()
                return

    # --- the event loop ---------------------------------------------------------------

    def _on_events(self, events: list[tuple[Any, ...]]) -> None:
        front = self._front
        if front is None:
            return
        create_task = asyncio.get_running_loop().create_task
        for kind, call_id, method_id, payload, _client, details in events:
            if kind == self._cancel:  # the client went away or the deadline passed
                self._cancelled(call_id)
            elif self._stopping:
                front.fail(call_id, _UNAVAILABLE, "the server is shutting down")
            elif len(payload) > MAX_REQUEST_BYTES:
                front.fail(
                    call_id,
                    _RESOURCE_EXHAUSTED,
                    f"the request is {len(payload)} bytes, over the {MAX_REQUEST_BYTES} accepted",
                )
            elif method_id == _RLS:
                try:
                    request = rls_pb2.RateLimitRequest.FromString(payload)
                except DecodeError as exc:
                    front.fail(
                        call_id,
                        _INVALID_ARGUMENT,
                        f"the request is not a valid RateLimitRequest: {exc}",
                    )
                    continue
                # Started here, not in a task of its own: a call the store answers at once
                # (the memory store, the over-limit cache) is decided in this turn, and only
                # a call that waits (on Redis) becomes a task, resumed where it waits.
                call = self._decide(front, call_id, request, details)
                try:
                    waiting = call.send(None)
                except StopIteration:
                    continue  # decided: its answer goes to the front with the turn's others
                self._tasks[call_id] = create_task(Resumed(call, waiting))
            elif method_id == _CHECK:
                self._check(front, call_id, payload)
            else:
                self._watch(front, call_id, payload)

    async def _decide(self, front: Any, call_id: int, request: Any, details: Any) -> None:
        tracing = self._tracing
        span = None if tracing is None else tracing.start(request, details and details[0])
        try:
            response = await self._answer(request)
        except ConfigurationError as exc:
            code, message = _INVALID_ARGUMENT, str(exc)
        except ServiceUnavailableError as exc:
            code, message = _UNAVAILABLE, str(exc)
        except asyncio.CancelledError:  # the front has answered already (deadline, reset, stop)
            code, message = _CANCELLED, ""
        except Exception:
            log.exception(
                "ShouldRateLimit raised past the failure mode", extra={"event": "call_failed"}
            )
            code, message = _UNKNOWN, ""
        else:
            if tracing is not None:
                tracing.answered(span, response)
            data = response if type(response) is bytes else response.SerializeToString()
            self._answers.append((call_id, data))
            if self._flush is None:
                self._flush = asyncio.get_running_loop().call_soon(self._flush_answers)
            return
        finally:
            self._tasks.pop(call_id, None)
        if tracing is not None:
            tracing.failed(span, code, message)
        if code != _CANCELLED:
            front.fail(call_id, code, message)

    def _flush_answers(self) -> None:
        """Hand the answers made in the last turn to the front (a call gone meanwhile, by its
        deadline or its client, is skipped by the front)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        answers, self._answers = self._answers, []
        front = self._front
        if front is not None:
            respond = front.respond
            for call_id, data in answers:
                respond(call_id, data)

    def _cancelled(self, call_id: int) -> None:
        task = self._tasks.pop(call_id, None)
        if task is not None:
            task.cancel()
        name = self._watching.pop(call_id, None)
        if name is not None:
            self._watchers.get(name, set()).discard(call_id)

    def _check(self, front: Any, call_id: int, payload: bytes) -> None:
        name = self._health_name(front, call_id, payload)
        if name is None:
            return
        status = self._status.get(name)
        if status is None:
            front.fail(call_id, _NOT_FOUND, "unknown service")
        else:
            front.respond(call_id, _status_bytes(status))

    def _watch(self, front: Any, call_id: int, payload: bytes) -> None:
        name = self._health_name(front, call_id, payload)
        if name is None:
            return
        self._watchers.setdefault(name, set()).add(call_id)
        self._watching[call_id] = name
        front.stream_try_send(call_id, _status_bytes(self._status.get(name, _UNKNOWN_SERVICE)))

    @staticmethod
    def _health_name(front: Any, call_id: int, payload: bytes) -> str | None:
        try:
            name: str = health_pb2.HealthCheckRequest.FromString(payload).service
        except DecodeError as exc:
            front.fail(call_id, _INVALID_ARGUMENT, f"not a HealthCheckRequest: {exc}")
            return None
        return name

    def _set_status(self, name: str, status: int) -> None:
        if self._status.get(name) == status:
            return
        self._status[name] = status
        front = self._front
        if front is None:
            return
        data = _status_bytes(status)
        for call_id in list(self._watchers.get(name, ())):
            # A watcher too far behind to take the update misses it, as with grpcio's
            # servicer, which keeps only the newest status for a slow watcher.
            with contextlib.suppress(Exception):
                front.stream_try_send(call_id, data)
