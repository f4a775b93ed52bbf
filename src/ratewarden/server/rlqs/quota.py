"""The quota service's state: streams, buckets and rounds. Sans-I/O, on an injected clock.

``QuotaService`` is what the gRPC stream handler (``rlqs/grpc.py``) drives: ``open``
a stream, ``report`` its usage reports, ``tick`` on a timer, ``close`` it,
``swap_config`` on reload, and ``hand_over`` then ``release`` at a graceful stop. Each
call returns the ``Action``s to send (an assignment or an abandon, for a stream and a
bucket); none of them does I/O.

A **bucket** is one ``BucketId`` of one domain. Its rule (``buckets.bucket_rule``)
fixes its answer: no rule, an ``unlimited`` rule, a ``shadow_mode`` rule or the
global ``shadow`` switch answer ALLOW_ALL; a limit of 0 answers DENY_ALL; any other
rule's limit is split between the streams reporting the bucket (``shares``; weighted
by the peer name each stream gave to ``open`` when the rule has ``rlqs_weights``).

A member's **demand** is its rate over its last ``history`` reports (the requests
they count over the time since the report before them, by arrival on this clock):
Envoy reports on its own timer (every 5 s in Envoy 1.40, whatever its
``reporting_interval`` says), so demand is measured per report, not per round.

A **round** (at most one per ``interval`` per bucket, and at once for a new bucket)
recomputes the shares from the members' demands and sends every member its assignment
with ``ttl_s``. An unchanged share is sent unchanged, which Envoy takes as "extend": it
keeps its token bucket rather than starting a full new one. A stream that joins a
bucket between rounds waits for the next round (Envoy's ``no_assignment_behavior``
meanwhile), so no tokens are created outside rounds. A stream that closes keeps its
share reserved until its last assignment's time to live (plus one interval) is over:
its Envoy may still be enforcing it. A stream that reports no request for a bucket for
``idle_s`` seconds is sent an abandon (the protocol's inactive bucket).

A round (``rlqs/rounds.py``) keeps a **budget of changes** (``change_rounds``): a
changed share starts full in Envoy, so what changed shares hand out is capped per window.
A tick runs the due rounds oldest first, in chunks of about ``chunk`` members; ``atick``
sends each chunk's actions and lets the event loop in between (docs/rlqs.md#many-buckets).

With a ``Fleet`` (``rlqs/fleet.py``), a round's shares come from the store instead, over
every replica's demand, and a closed stream's share stays held there. The calls are
flows then (``report_flow``, ``tick_flow``): ``report`` and ``tick`` drive them on a
blocking limiter, ``areport`` and ``atick`` on an asyncio one, one at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

from ratewarden.checks import is_number
from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Flow, Gather, drive
from ratewarden.server.config import RateLimitConfig
from ratewarden.server.rlqs import handover
from ratewarden.server.rlqs.actions import ALLOW_ALL, DENY_ALL, Action
from ratewarden.server.rlqs.buckets import bucket_rule
from ratewarden.server.rlqs.figures import (
    BucketFigures,
    bucket_figures,
    held_by_rule,
    stream_assignments,
)
from ratewarden.server.rlqs.fleet import Fleet
from ratewarden.server.rlqs.members import Bucket, Member
from ratewarden.server.rlqs.reports import BucketKey, ReportError, Usage, bucket_key, check_report
from ratewarden.server.rlqs.rounds import QuotaStats, Rounds
from ratewarden.server.rlqs.shares import Share

__all__ = [
    "ALLOW_ALL",
    "DENY_ALL",
    "Action",
    "BucketKey",
    "QuotaService",
    "QuotaStats",
    "ReportError",
    "Usage",
    "bucket_key",
]

log = logging.getLogger("ratewarden.server.rlqs")
T = TypeVar("T")

#: Seconds a stream reports no request for a bucket before it is told to abandon it (the
#: default of ``idle_s``, ``--rlqs-idle``).
IDLE_S = 60.0
#: Members a chunk of rounds holds, about (a round counts its members, at least one), and
#: bucket usages a chunk of a report: the event loop is served between two chunks.
CHUNK = 200


def _check_options(interval: float, ttl_s: int, idle_s: float, **whole: int) -> None:
    """Refuse the first number that breaks its rule, naming it alone (not every rule)."""
    for what, seconds in (("interval", interval), ("idle_s", idle_s)):
        if not is_number(seconds, 0.0, low_ok=False):
            raise ConfigurationError(f"QuotaService: {what} {seconds!r} must be seconds above 0")
    for what, value in {"ttl_s": ttl_s, **whole}.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"QuotaService: {what} {value!r} must be a whole number >= 1")
    if ttl_s <= interval:  # an assignment would lapse before the round that renews it
        raise ConfigurationError(f"QuotaService: ttl_s {ttl_s} must be above interval {interval}")


class QuotaService:
    """Every stream and bucket of one process. See the module docstring."""

    def __init__(
        self,
        config: RateLimitConfig,
        *,
        clock: Clock,
        interval: float = 1.0,
        ttl_s: int = 5,
        history: int = 2,
        shadow: bool = False,
        fleet: Fleet | None = None,
        idle_s: float = IDLE_S,
        change_rounds: int = 1,
        chunk: int = CHUNK,
    ) -> None:
        whole = {"history": history, "change_rounds": change_rounds, "chunk": chunk}
        _check_options(interval, ttl_s, idle_s, **whole)
        self.config = config
        self.clock = clock
        self.interval = interval
        self.ttl_s = ttl_s
        self.history = history
        self.idle_s = idle_s
        self.change_rounds = change_rounds
        self.chunk = chunk
        self.shadow = shadow
        self.fleet = fleet
        self.stats = QuotaStats()
        #: Requests Envoys reported, by (rule path or "none", "allowed" or "denied").
        self.reported: dict[tuple[str, str], int] = {}
        self._streams: dict[int, str] = {}
        self._peers: dict[int, str] = {}
        #: A bucket's round, as values (``rlqs/rounds.py``).
        self._rounds = Rounds(
            interval, ttl_s, idle_s, change_rounds, shadow, fleet, self._peers, self.stats
        )
        self._buckets: dict[tuple[str, BucketKey], Bucket] = {}
        self._next = 0
        self._turn = asyncio.Lock()
        self._reporting = asyncio.Lock()

    # --- what the stream handler calls ---------------------------------------------

    @property
    def streams(self) -> int:
        return len(self._streams)

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def open(self, peer: str = "") -> int:
        """A new stream's id; its domain comes with its first report. ``peer`` is the name
        its Envoy gave (the rules' ``rlqs_weights`` weigh it by that name)."""
        self._next += 1
        self._streams[self._next] = ""
        self._peers[self._next] = peer
        return self._next

    def report(self, stream: int, domain: str, usages: Sequence[Usage]) -> list[Action]:
        """Take one ``RateLimitQuotaUsageReports``; raises ``ReportError`` (changing nothing)
        when it is malformed."""
        return self._drive(self.report_flow(stream, domain, usages))

    def tick(self) -> list[Action]:
        """Run every round that is due, chunk after chunk; forget buckets nobody holds."""
        return [
            action for chunk in self._chunks() for action in self._drive(self.chunk_flow(chunk))
        ]

    async def areport(self, stream: int, domain: str, usages: Sequence[Usage]) -> list[Action]:
        """``report``, awaiting the fleet's store; one report at a time (the bucket cap is
        checked for the whole). A long one is applied ``chunk`` bucket usages at a time, the
        event loop served and a tick's chunk let in between: buckets are independent, so a
        round that sees part of a report sees a report of those buckets that came sooner."""
        async with self._reporting:
            async with self._turn:
                domain = self._take(stream, domain, usages)
                actions = await self._adrive(self._apply_flow(stream, domain, usages[: self.chunk]))
            for start in range(self.chunk, len(usages), self.chunk):
                await asyncio.sleep(0)
                if stream not in self._streams:
                    break  # closed meanwhile: the rest would make members of nobody
                async with self._turn:
                    part = usages[start : start + self.chunk]
                    actions += await self._adrive(self._apply_flow(stream, domain, part))
            return actions

    async def atick(self, send: Callable[[list[Action]], object]) -> int:
        """``tick``, awaiting the fleet's store: each chunk's actions are given to ``send`` as
        soon as it is run, and the event loop (other streams, the HTTP port) is served
        between two chunks; each chunk waits for the report or chunk in progress. The number
        of chunks run."""
        chunks = self._chunks()
        for index, chunk in enumerate(chunks):
            if index:
                await asyncio.sleep(0)
            async with self._turn:
                send(await self._adrive(self.chunk_flow(chunk)))
        return len(chunks)

    def report_flow(self, stream: int, domain: str, usages: Sequence[Usage]) -> Flow[list[Action]]:
        """``report`` as a flow: its rounds ask the fleet's store (without one, none)."""
        domain = self._take(stream, domain, usages)
        return (yield from self._apply_flow(stream, domain, usages))

    def _take(self, stream: int, domain: str, usages: Sequence[Usage]) -> str:
        """The report's domain once it is checked whole (``ReportError`` when refused)."""
        if stream not in self._streams:
            raise ReportError(f"stream {stream} is not open")
        domain = check_report(
            self._streams[stream], domain, usages, self._buckets, len(self._buckets)
        )
        self._streams[stream] = domain
        self.stats.reports += 1
        return domain

    def _apply_flow(self, stream: int, domain: str, usages: Sequence[Usage]) -> Flow[list[Action]]:
        now = self.clock.now()
        actions: list[Action] = []
        for usage in usages:
            bucket = self._bucket(domain, usage.bucket)
            bucket.allowed += usage.allowed
            bucket.denied += usage.denied
            path = "none" if bucket.rule is None else bucket.rule.path
            for outcome, counted in (("allowed", usage.allowed), ("denied", usage.denied)):
                self.reported[(path, outcome)] = self.reported.get((path, outcome), 0) + counted
            count = usage.allowed + usage.denied
            member = bucket.members.get(stream)
            if member is None:
                member = bucket.members[stream] = Member(
                    now, deque([(now, count)], maxlen=self.history + 1)
                )
                # Back to a bucket it was told to abandon: what that bucket would hold.
                member.back(
                    self._rounds.abandoned.take((domain, bucket.key, stream), now), usage.allowed
                )
                if bucket.last_round is None:
                    actions += yield from self._rounds.run(bucket, now)
                    continue
                fixed = self._rounds.fixed(bucket)
                if fixed is not None:
                    member.share, member.sent_at = fixed, now
                    actions.append(Action(stream, bucket.key, fixed, self.ttl_s))
                continue
            if member.would is not None:  # shadow: admitted beyond what its share would admit
                (share, fill_s), since = member.would, now - member.reports[-1][0]
                room = share.max_tokens + share.tokens_per_fill * since / fill_s
                self.stats.would_deny += max(0, usage.allowed - int(room))
            member.reported(now, usage.allowed, count)
        return actions

    def _chunks(self) -> list[list[Bucket]]:
        """The buckets whose round is due, the longest unrenewed first (their assignments
        expire first), in chunks of about ``chunk`` members; buckets nobody holds forgotten.

        ``_buckets`` is kept in the order of their last rounds (a round moves its bucket to
        the end), so the due ones are its start and the scan stops at the first one not due.
        """
        now, window = self.clock.now(), self.change_rounds * self.interval
        chunks: list[list[Bucket]] = []
        chunk: list[Bucket] = []
        weight = 0
        gone = []
        for name, bucket in self._buckets.items():
            if bucket.last_round is not None and now - bucket.last_round < self.interval:
                break
            if bucket.reserved:
                bucket.reserved = [
                    (until, share) for until, share in bucket.reserved if until > now
                ]
            if not bucket.members and not bucket.reserved:
                # Kept while its recent changes count: a new member must not find the
                # budget of changes fresh.
                if not bucket.spent(now, window):
                    gone.append(name)
                continue
            if weight >= self.chunk:
                chunks.append(chunk)
                chunk, weight = [], 0
            chunk.append(bucket)
            weight += max(1, len(bucket.members))
        for name in gone:
            del self._buckets[name]
        return [*chunks, chunk] if chunk else chunks

    def chunk_flow(self, buckets: Sequence[Bucket]) -> Flow[list[Action]]:
        """The rounds of ``buckets`` (one of ``_chunks``) side by side (an asyncio driver
        awaits their store calls together), at the time it runs; each bucket moves to the
        end of the order. Buckets forgotten or dropped by a reload since are skipped."""
        now = self.clock.now()
        due: list[Flow[list[Action]]] = []
        for bucket in buckets:
            name = (bucket.domain, bucket.key)
            if self._buckets.get(name) is not bucket:
                continue
            del self._buckets[name]
            self._buckets[name] = bucket
            due.append(self._rounds.run(bucket, now))
        if not due:
            return []
        rounds: list[list[Action]] = yield Gather(tuple(due))
        return [action for actions in rounds for action in actions]

    def close(self, stream: int) -> None:
        """The stream ended: its shares stay reserved while its Envoy may still use them."""
        self._streams.pop(stream, None)
        self._peers.pop(stream, None)
        for bucket in self._buckets.values():
            member = bucket.members.pop(stream, None)
            if member is not None and self.fleet is not None:
                bucket.departed.append(stream)  # the store holds its share
            elif isinstance(member, Member) and isinstance(member.share, Share):
                until = member.sent_at + self.ttl_s + self.interval
                bucket.reserved.append((until, member.share))

    def swap_config(self, config: RateLimitConfig) -> list[Action]:
        """A reload: buckets whose rule is gone are abandoned; the others take their new rule
        at their next round."""
        self.config = config
        self._rounds.forget()
        actions: list[Action] = []
        for name, bucket in list(self._buckets.items()):
            domain = config.domains.get(bucket.domain)
            rule = None if domain is None else bucket_rule(domain, dict(bucket.key))
            if bucket.rule is not None and rule is None:
                actions += [Action(stream, bucket.key, None) for stream in bucket.members]
                self.stats.abandoned += len(bucket.members)
                log.info(
                    "quota bucket's rule removed: abandoned",
                    extra={"event": "rlqs_abandon", "domain": bucket.domain,
                           "bucket": dict(bucket.key), "streams": len(bucket.members)},
                )  # fmt: skip
                del self._buckets[name]
            else:
                bucket.rule = rule
        return actions

    def hand_over(self) -> list[Action]:
        """A graceful stop: every assignment the open streams hold, again with a time to live
        of 0 (Envoy expires it at once, to its ``expired_assignment_behavior``). With a fleet,
        ``release_flow`` then gives their shares back to the store (``handover.py``)."""
        return handover.expire_all(self._buckets.values(), self.interval)

    def release_flow(self, streams: Collection[int]) -> Flow[int]:
        """After ``hand_over``: the fleet's store forgets the shares of ``streams`` (closed,
        their Envoys told to expire them); the number of buckets released."""
        if self.fleet is None:
            return 0
        return (yield from handover.release_flow(self.fleet, self._buckets.values(), streams,
                                                 self.interval))  # fmt: skip

    def release(self, streams: Collection[int]) -> int:
        """``release_flow`` on a blocking limiter."""
        return self._drive(self.release_flow(streams))

    async def arelease(self, streams: Collection[int]) -> int:
        """``release_flow``, awaiting the fleet's store; after any round in progress."""
        async with self._turn:
            return await self._adrive(self.release_flow(streams))

    def held(self) -> dict[str, tuple[int, int]]:
        """Per rule path: the streams holding a token bucket of it, and their tokens per fill."""
        return held_by_rule(self._buckets.values())

    def figures(self) -> list[BucketFigures]:
        """Per bucket, read-only: its counts and what its streams ask (requests/s) and hold."""
        return bucket_figures(self._buckets.values(), self.interval)

    def assignments(self) -> list[dict[str, object]]:
        """What every stream holds, per bucket (for introspection and tests)."""
        return stream_assignments(self._buckets.values(), self._peers)

    # --- inside --------------------------------------------------------------------

    def _bucket(self, domain: str, key: BucketKey) -> Bucket:
        bucket = self._buckets.get((domain, key))
        if bucket is None:
            found = self.config.domains.get(domain)
            rule = None if found is None else bucket_rule(found, dict(key))
            bucket = self._buckets[(domain, key)] = Bucket(domain, key, rule)
            if rule is None:
                self.stats.unknown_buckets += 1
                log.info(
                    "quota bucket matches no rule: allowed",
                    extra={"event": "rlqs_unknown_bucket", "domain": domain,
                           "bucket": dict(key), "domain_known": found is not None},
                )  # fmt: skip
        return bucket

    def _drive(self, flow: Flow[T]) -> T:
        return drive(None, flow) if self.fleet is None else self.fleet.run(flow)

    async def _adrive(self, flow: Flow[T]) -> T:
        return drive(None, flow) if self.fleet is None else await self.fleet.arun(flow)
