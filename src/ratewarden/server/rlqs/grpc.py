"""``StreamRateLimitQuotas`` over grpcio: usage reports in, assignments out.

``RateLimitQuotaServicer`` drives a ``QuotaService`` (``rlqs/quota.py``): each
stream's reports are decoded here (bytes that are not a
``RateLimitQuotaUsageReports``, or a report the service refuses, end the stream
with ``INVALID_ARGUMENT`` naming the reason, and change nothing), the actions the
service returns are grouped into one ``RateLimitQuotaResponse`` per stream and put
on that stream's queue, and ``run`` ticks the service's rounds on the running loop.
``hand_over`` is the graceful stop: every stream is told to expire what it holds, then
ends, and the fleet's store forgets those shares (``rlqs/handover.py``).
The native transport (pygrpc-native) serves unary calls only, so this is grpcio's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from envoy.service.rate_limit_quota.v3 import rlqs_pb2
from envoy.type.v3 import ratelimit_strategy_pb2
from google.protobuf.message import DecodeError

from ratewarden.errors import StorageError
from ratewarden.server.config.rlqs_weights import MAX_PEER_NAME, peer_name_problem
from ratewarden.server.rlqs.quota import (
    ALLOW_ALL,
    Action,
    QuotaService,
    ReportError,
    Usage,
    bucket_key,
)
from ratewarden.server.rlqs.shares import Share

__all__ = ["PEER_HEADER", "RATE_LIMIT_QUOTA_SERVICE", "RateLimitQuotaServicer", "peer_name",
           "response", "usages"]  # fmt: skip

log = logging.getLogger("ratewarden.server.rlqs")

RATE_LIMIT_QUOTA_SERVICE = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"
#: The gRPC metadata an Envoy names itself with on its quota stream (docs/rlqs.md#weights).
PEER_HEADER = "x-ratewarden-rlqs-peer"
_Strategy = ratelimit_strategy_pb2.RateLimitStrategy
_Action = rlqs_pb2.RateLimitQuotaResponse.BucketAction
_END = object()
#: What a stream is ended with when the service failed on one of its reports (a bug).
_FAILED = object()
#: The end of a stream at a graceful stop, queued after the hand-over's assignments: a
#: handler that reaches it has written them.
_HANDED = object()


def usages(reports: Any) -> list[Usage]:
    """A ``RateLimitQuotaUsageReports``' bucket usages as the service's values."""
    return [
        Usage(
            bucket_key(usage.bucket_id.bucket),
            usage.num_requests_allowed,
            usage.num_requests_denied,
        )
        for usage in reports.bucket_quota_usages
    ]


def fill_marker(fill_s: int) -> int:
    """The nanoseconds a token bucket's ``fill_interval`` carries beside its ``fill_s``
    seconds: ``fill_s`` again (below 10**9), so that Envoy, which compares the nanoseconds of
    two intervals and not their seconds, sees a change of period. Envoy reads the interval
    in whole seconds, so the rate it enforces is unchanged; a client that reads the
    nanoseconds too is off by one part in a billion."""
    return fill_s % 1_000_000_000


def response(actions: Iterable[Action]) -> Any:
    """One ``RateLimitQuotaResponse`` holding ``actions`` (all for one stream).

    Durations are whole seconds: Envoy reads a token bucket's ``fill_interval`` and an
    assignment's time to live in whole seconds. A bucket's ``fill_interval`` also carries
    its seconds again as nanoseconds (``fill_marker``), because Envoy tells a new bucket from
    the one it holds by ``max_tokens``, ``tokens_per_fill`` and the interval's nanoseconds
    alone: without the marker, a reload that changes only a rule's period (10 a second to
    10 an hour) would leave Envoy on the old bucket.
    """
    out = rlqs_pb2.RateLimitQuotaResponse()
    for action in actions:
        entry = out.bucket_action.add()
        entry.bucket_id.bucket.update(dict(action.bucket))
        if action.assignment is None:
            entry.abandon_action.SetInParent()
            continue
        assignment = entry.quota_assignment_action
        assignment.assignment_time_to_live.seconds = action.ttl_s
        strategy = assignment.rate_limit_strategy
        if isinstance(action.assignment, Share):
            bucket = strategy.token_bucket
            bucket.max_tokens = action.assignment.max_tokens
            bucket.tokens_per_fill.value = action.assignment.tokens_per_fill
            bucket.fill_interval.seconds = action.fill_s
            bucket.fill_interval.nanos = fill_marker(action.fill_s)
        elif action.assignment == ALLOW_ALL:
            strategy.blanket_rule = _Strategy.ALLOW_ALL
        else:
            strategy.blanket_rule = _Strategy.DENY_ALL
    return out


def peer_name(context: Any) -> str:
    """The name an Envoy gives itself on its stream (``PEER_HEADER``, set through the
    ``rlqs_server`` grpc_service's ``initial_metadata``; a rule's ``rlqs_weights`` weigh it
    by that name), or "" when it gives none or one no rule could name (logged)."""
    for key, value in context.invocation_metadata() or ():
        if key == PEER_HEADER:
            name = value.strip() if isinstance(value, str) else ""
            problem = peer_name_problem(name)
            if problem is None:
                return name
            log.warning(
                "quota stream's %s %s: weighed as unnamed", PEER_HEADER, problem,
                extra={"event": "rlqs_bad_peer", "peer": name[:MAX_PEER_NAME]},
            )  # fmt: skip
    return ""


class RateLimitQuotaServicer:
    """The RLQS stream handler over one ``QuotaService``; ``run`` is its round timer."""

    def __init__(self, quota: QuotaService) -> None:
        self.quota = quota
        self._queues: dict[int, asyncio.Queue[Any]] = {}
        #: Set by ``hand_over``: reports are dropped from then on.
        self._stopping = False
        #: Streams that wrote the hand-over and ended, and the event of the last one's end.
        self._handed: set[int] = set()
        self._ended = asyncio.Event()
        #: Why new streams are refused UNAVAILABLE (no rules yet: --xds-force-start), or None.
        self.refusing: str | None = None

    def handler(self) -> grpc.GenericRpcHandler:
        """The service for ``server.add_generic_rpc_handlers``, taking reports as raw bytes."""
        method = grpc.stream_stream_rpc_method_handler(
            self.StreamRateLimitQuotas,
            request_deserializer=None,
            response_serializer=rlqs_pb2.RateLimitQuotaResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(
            RATE_LIMIT_QUOTA_SERVICE, {"StreamRateLimitQuotas": method}
        )

    async def StreamRateLimitQuotas(  # noqa: N802 - grpc's name
        self, requests: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[Any]:
        if self._stopping:
            return  # opened during the hand-over: nothing to hand, the server is stopping
        if self.refusing is not None:  # Envoy keeps its no_assignment_behavior and retries
            await context.abort(grpc.StatusCode.UNAVAILABLE, self.refusing)
        stream = self.quota.open(peer_name(context))
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queues[stream] = queue
        reader = asyncio.create_task(self._read(stream, requests, queue))
        try:
            while True:
                item = await queue.get()
                if item is _HANDED:
                    self._handed.add(stream)
                    return
                if item is _END:
                    return
                if isinstance(item, ReportError):
                    log.warning(
                        "quota report refused: %s",
                        item,
                        extra={"event": "rlqs_bad_report", "stream": stream},
                    )
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(item))
                if item is _FAILED:
                    await context.abort(
                        grpc.StatusCode.INTERNAL, "the quota service failed; see its log"
                    )
                yield item
        finally:
            reader.cancel()
            del self._queues[stream]
            self.quota.close(stream)
            if not self._queues:
                self._ended.set()

    async def _read(
        self, stream: int, requests: AsyncIterator[bytes], queue: asyncio.Queue[Any]
    ) -> None:
        try:
            async for raw in requests:
                if self._stopping:
                    continue  # handed over: what it reports now is dropped, as when stopped
                try:
                    reports = rlqs_pb2.RateLimitQuotaUsageReports.FromString(raw)
                    actions = await self.quota.areport(stream, reports.domain, usages(reports))
                except DecodeError as exc:
                    queue.put_nowait(
                        ReportError(f"the message is not a RateLimitQuotaUsageReports: {exc}")
                    )
                    return
                except ReportError as exc:
                    queue.put_nowait(exc)
                    return
                self.send(actions)
        except grpc.RpcError:
            pass  # the client went away: the handler's finally closes the stream
        except Exception:
            log.exception("quota report failed", extra={"event": "rlqs_report_failed"})
            queue.put_nowait(_FAILED)
            return
        queue.put_nowait(_END)

    def send(self, actions: Iterable[Action]) -> None:
        """Queue ``actions`` on their streams, one response per stream (closed ones skipped)."""
        by_stream: dict[int, list[Action]] = {}
        for action in actions:
            by_stream.setdefault(action.stream, []).append(action)
        for stream, mine in by_stream.items():
            queue = self._queues.get(stream)
            if queue is not None:
                queue.put_nowait(response(mine))

    def state(self) -> dict[str, Any]:
        """What ``/rlqs.json`` shows: streams, buckets, counts and every assignment."""
        quota = self.quota
        return {
            "streams": quota.streams,
            "buckets": quota.buckets,
            "interval_s": quota.interval,
            "ttl_s": quota.ttl_s,
            "replica": None if quota.fleet is None else quota.fleet.replica,
            "stats": dataclasses.asdict(quota.stats),
            "assignments": quota.assignments(),
        }

    async def hand_over(self, timeout: float) -> None:
        """The graceful stop: each stream is sent its assignments again with a time to live
        of 0 (its Envoy falls back to its ``expired_assignment_behavior`` at once), then ends;
        the store then forgets the shares of the streams that wrote it, so that the other
        replicas can hand them out. At most ``timeout`` seconds; a stream that had not ended
        by then, or a store that does not answer, leaves its shares held until they expire."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._stopping = True
        actions = self.quota.hand_over()
        self.send(actions)
        streams = len(self._queues)
        for queue in self._queues.values():
            queue.put_nowait(_HANDED)
        released = 0
        try:
            # asyncio.timeout_at, not wait_for: Python 3.11's wait_for can lose a
            # cancellation that lands as the wait ends (CPython gh-86296).
            async with asyncio.timeout_at(deadline):
                if self._queues:
                    self._ended.clear()
                    await self._ended.wait()
                if self._handed:
                    released = await self.quota.arelease(set(self._handed))
        except TimeoutError:
            log.warning(
                "quota hand-over: out of time after %g s", timeout,
                extra={"event": "rlqs_hand_over_late", "ended": len(self._handed)},
            )  # fmt: skip
        except StorageError as exc:
            log.warning(
                "quota hand-over: the store did not answer: %s", exc,
                extra={"event": "rlqs_hand_over_store_failed"},
            )  # fmt: skip
        log.info(
            "quota streams handed over",
            extra={"event": "rlqs_hand_over", "streams": streams, "assignments": len(actions),
                   "ended": len(self._handed), "released_buckets": released},
        )  # fmt: skip
        self._handed.clear()

    async def run(self) -> None:
        """Tick the service's rounds, four times an interval, until cancelled."""
        while True:
            await asyncio.sleep(self.quota.interval / 4)
            try:
                await self.quota.atick(self.send)
            except Exception:
                log.exception("quota round failed", extra={"event": "rlqs_round_failed"})
