"""The xDS client: rules from a control plane over ADS, as envoyproxy/ratelimit takes them.

``XdsSubscription.run`` opens ``envoy.service.discovery.v3.AggregatedDiscoveryService/
StreamAggregatedResources`` on the server ``XdsSource.address`` names and asks, in
state-of-the-world mode, for every ``ratelimit.config.ratelimit.v3.RateLimitConfig``
(``messages.TYPE_URL``), as node ``node_id`` with ``node_metadata``, sending
``headers`` as the call's metadata. Each response is a whole new set of rules:

- loaded by ``load`` (the resources through the rule files' reader and checks,
  ``rules.load_resources``): if good, handed to ``apply`` (the server swaps it in
  as a file reload does) and ACKed: the next request carries the response's
  ``version_info`` and ``nonce``;
- if bad, NACKed: the request carries the last version applied, the response's
  nonce and an ``error_detail`` (INVALID_ARGUMENT, every problem); nothing changes,
  one structured log line says why (``event=config_xds_rejected``).

``on_load(ok)`` hears of each (the ``config_load_*`` metrics), and of each response
gRPC refused as larger than ``--xds-max-message-bytes`` (``too_large``: rules that
cannot be loaded, sent again on every stream). When the stream
breaks or the server cannot be reached, the rules in use stay, and the client
connects again after a wait (``backoff``): ``retry_interval`` doubled per failure
in a row, capped at ``retry_max``, jittered between half and one and a half times
(and never above the cap); a stream that delivered a response starts the count
again. Each new stream subscribes afresh (empty ``version_info``), so the server
sends its current rules, applied like any update. ``ready`` is set once the first
rules are applied (``start`` returns then): ``serve`` opens its ports only after it,
unless ``--xds-force-start`` (``start(wait=False)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Generic, TypeVar

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2
from google.rpc import status_pb2

from ratewarden.server import heap
from ratewarden.server.reload import loaded, problems, report_load
from ratewarden.server.xds import rules
from ratewarden.server.xds.messages import TYPE_URL
from ratewarden.server.xds.source import XdsSource

__all__ = ["XdsSubscription", "backoff", "too_large"]

log = logging.getLogger("ratewarden.server.xds")

C = TypeVar("C")

#: The most problems one NACK's error_detail lists (the log line has them all).
MAX_DETAIL_CHARS = 4096


#: How gRPC says that a response was larger than ``grpc.max_receive_message_length``.
_TOO_LARGE = re.compile(r"Received message larger than max \((\d+) vs\. (\d+)\)")


def too_large(exc: grpc.aio.AioRpcError) -> str | None:
    """What to do about a response larger than the largest one accepted, or None when
    ``exc`` is about something else. The server sends the same rules again on every new
    stream, so only a larger limit ends it."""
    found = _TOO_LARGE.search(exc.details() or "")
    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or found is None:
        return None
    return (
        f"the xDS server's rules ({found[1]} bytes) are larger than the largest response "
        f"accepted ({found[2]} bytes): raise --xds-max-message-bytes "
        f"(RATEWARDEN_XDS_MAX_MESSAGE_BYTES) above {found[1]}"
    )


def backoff(failures: int, interval: float, ceiling: float, draw: float) -> float:
    """Seconds to wait after ``failures`` failures in a row (1 or more).

    ``interval`` doubled per failure after the first, capped at ``ceiling``, times a
    jitter factor between 0.5 and 1.5 (``draw`` is uniform in [0, 1)), capped again.
    """
    step = min(ceiling, interval * 2.0 ** min(max(failures, 1) - 1, 32))
    return min(ceiling, step * (0.5 + draw))


class XdsSubscription(Generic[C]):
    """Subscribe to ``source``'s RateLimitConfig resources until cancelled (``run``).

    ``load(messages)`` returns a whole config or raises; ``apply(config)`` swaps it
    in. Counters: ``acks``, ``nacks``, ``streams`` (opened), ``failures`` (in a row);
    ``accepted_version`` is the ``version_info`` of the rules in use, ``last_error``
    the message of the latest NACK (cleared by the next ACK).
    """

    def __init__(
        self,
        source: XdsSource,
        load: Callable[[Sequence[Any]], C],
        apply: Callable[[C], None],
        on_load: Callable[[bool], None] | None = None,
        *,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.source = source
        self._load = load
        self._apply = apply
        self._on_load = on_load
        self._draw = draw
        self.ready = asyncio.Event()
        #: Whether the ports open before the first rules (``start(wait=False)``).
        self.forced = False
        self.accepted_version = ""
        self.acks = 0
        self.nacks = 0
        self.streams = 0
        self.failures = 0
        self.last_error: str | None = None
        self._node = base_pb2.Node(
            id=source.node_id,
            user_agent_name="ratewarden",
            metadata=struct_pb2.Struct(
                fields={
                    key: struct_pb2.Value(string_value=value) for key, value in source.node_metadata
                }
            ),
        )

    async def start(self, *, wait: bool = True) -> asyncio.Task[None]:
        """``run`` as a task, returned once the first good rules are applied (as long as that
        takes; cancelled, the task is cancelled too), or at once if not ``wait``."""
        self.forced = not wait
        task = asyncio.create_task(self.run())
        log.info(
            "waiting for the first rules from the xDS server before serving"
            if wait
            else "serving before the first rules from the xDS server: calls fail until then",
            extra={
                "event": "xds_waiting" if wait else "xds_force_start",
                "server": self.source.address,
                "node": self.source.node_id,
            },
        )
        if not wait:
            return task
        try:
            await self.ready.wait()
        except BaseException:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise
        return task

    async def run(self) -> None:
        """Keep a stream open, reconnecting with ``backoff``, until cancelled."""
        while True:
            received = False
            try:
                async for _ in self._stream():
                    received = True
                reason = "the server closed the stream"
            except grpc.aio.AioRpcError as exc:
                reason = f"{exc.code().name}: {exc.details()}"
                hint = too_large(exc)
                if hint is not None:  # rules that cannot be loaded: a config error, each time
                    reason = f"{reason}; {hint}"
                    self.last_error = hint
                    self._report(False)
            except Exception as exc:  # whatever broke the stream, the loop must go on
                reason = f"{type(exc).__name__}: {exc}"
            self.failures = 1 if received else self.failures + 1
            delay = backoff(
                self.failures, self.source.retry_interval, self.source.retry_max, self._draw()
            )
            log.warning(
                f"no stream to the xDS server; {self._meanwhile()}; connecting again",
                extra={
                    "event": "xds_disconnected",
                    "server": self.source.address,
                    "reason": reason,
                    "failures": self.failures,
                    "retry_in_s": round(delay, 3),
                    "version": self.accepted_version,
                },
            )
            await asyncio.sleep(delay)

    def _meanwhile(self) -> str:
        """What decides until a stream brings rules: the rules in use, or, before the first,
        nothing (the ports stay closed) or failing calls (``--xds-force-start``)."""
        if self.ready.is_set():
            return "keeping the rules in use"
        if self.forced:
            return "no rules loaded yet: every call fails UNAVAILABLE until the first arrive"
        return "no rules loaded yet: the ports stay closed until the first arrive"

    def _channel(self) -> grpc.aio.Channel:
        source = self.source
        options: list[tuple[str, Any]] = []
        if source.max_message_bytes:
            options.append(("grpc.max_receive_message_length", source.max_message_bytes))
        if source.tls is None:
            return grpc.aio.insecure_channel(source.address, options=options)
        if source.tls.server_name:
            options.append(("grpc.ssl_target_name_override", source.tls.server_name))
        credentials = grpc.ssl_channel_credentials(
            root_certificates=source.tls.ca,
            private_key=source.tls.key,
            certificate_chain=source.tls.cert,
        )
        return grpc.aio.secure_channel(source.address, credentials, options=options)

    async def _stream(self) -> AsyncIterator[None]:
        """One stream: subscribe, then answer each response; yields after each."""
        async with self._channel() as channel:
            stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
            call = stub.StreamAggregatedResources(metadata=self.source.headers or None)
            self.streams += 1
            try:
                await call.write(self._request())
                while True:
                    response = await call.read()
                    if response is grpc.aio.EOF:
                        return
                    await call.write(await self._answer(response))
                    yield
            finally:
                call.cancel()

    def _load_paused(self, messages: Sequence[Any]) -> C:
        """``load``, with no full collection walking the half-built rules (server/heap.py)."""
        with heap.loading():
            return self._load(messages)

    def _request(self, **fields: Any) -> Any:
        return discovery_pb2.DiscoveryRequest(node=self._node, type_url=TYPE_URL, **fields)

    async def _answer(self, response: Any) -> Any:
        """Load ``response``'s rules; apply them and ACK, or keep the rules in use and NACK."""
        try:
            if response.type_url != TYPE_URL:
                raise ValueError(
                    f"the response is of type {response.type_url!r}; "
                    f"this client subscribed to {TYPE_URL!r} only"
                )
            messages = rules.decode(response.resources)
            config = await asyncio.to_thread(self._load_paused, messages)
        except Exception as exc:
            return self._reject(response, exc)
        self._apply(config)
        self.accepted_version = response.version_info
        self.acks += 1
        self.last_error = None
        self._report(True)
        self.ready.set()
        log.info(
            "rules from the xDS server applied",
            extra={
                "event": "config_xds_applied",
                "server": self.source.address,
                "version": response.version_info,
                "resources": rules.source_names(messages),  # as the rules' sources name them
                **loaded(config),
            },
        )
        return self._request(version_info=response.version_info, response_nonce=response.nonce)

    def _reject(self, response: Any, exc: Exception) -> Any:
        self.nacks += 1
        self.last_error = str(exc)
        errors = problems(exc)
        log.error(
            f"rules from the xDS server rejected; {self._meanwhile()}",
            extra={
                "event": "config_xds_rejected",
                "server": self.source.address,
                "version": response.version_info,
                "kept_version": self.accepted_version,
                "errors": errors,
                "documents": _documents(response, errors),
                "nacks": self.nacks,
            },
        )
        self._report(False)
        detail = status_pb2.Status(
            code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
            message=self.last_error[:MAX_DETAIL_CHARS],
        )
        return self._request(
            version_info=self.accepted_version,
            response_nonce=response.nonce,
            error_detail=detail,
        )

    def _report(self, ok: bool) -> None:
        report_load(self._on_load, ok)


def _documents(response: Any, errors: Sequence[str]) -> dict[str, str]:
    """The rule-file text of each resource an error names: what its line numbers count in."""
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):  # the resources did not decode: no documents
        messages = rules.decode(response.resources)
        for name, message in zip(rules.source_names(messages), messages, strict=True):
            if any(error.startswith(f"{name}:") for error in errors):
                out[name] = rules.document(message)
    return out
