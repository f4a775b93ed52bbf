"""The quota service's state: streams, buckets and rounds. Sans-I/O, on an injected clock.

``QuotaService`` is what the gRPC stream handler (``rlqs/grpc.py``) drives: ``open``
a stream, ``report`` its usage reports, ``tick`` on a timer, ``close`` it, and
``swap_config`` on reload. Each call returns the ``Action``s to send (an assignment
or an abandon, for a stream and a bucket); none of them does I/O.

A **bucket** is one ``BucketId`` of one domain. Its rule (``buckets.bucket_rule``)
fixes its answer: no rule, an ``unlimited`` rule, a ``shadow_mode`` rule or the
global ``shadow`` switch answer ALLOW_ALL; a limit of 0 answers DENY_ALL; any other
rule's limit is split between the streams reporting the bucket (``shares``).

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
``IDLE_S`` seconds is sent an abandon (the protocol's inactive bucket).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError
from ratewarden.server.config import DescriptorRule, RateLimitConfig
from ratewarden.server.rlqs.buckets import bucket_rule
from ratewarden.server.rlqs.figures import BucketFigures, rate
from ratewarden.server.rlqs.shares import Budget, Share, split

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
    "rule_budget",
]

log = logging.getLogger("ratewarden.server.rlqs")

BucketKey = tuple[tuple[str, str], ...]
ALLOW_ALL = "allow_all"
DENY_ALL = "deny_all"
#: Algorithms with a bucket capacity (the rule's ``burst``); the others are windows.
BUCKET_ALGORITHMS = ("gcra", "token_bucket", "leaky_bucket")
#: Most requests one report may count for one bucket: more is not a real Envoy's count.
MAX_COUNT = 10**12
#: Most buckets the service tracks at once (every stream together).
MAX_BUCKETS = 100_000
#: Seconds a stream reports no request for a bucket before it is told to abandon it.
IDLE_S = 60.0


class ReportError(ConfigurationError):
    """A usage report the service refuses; nothing of it was applied."""


@dataclass(frozen=True, slots=True)
class Usage:
    """One bucket's counts in one report."""

    bucket: BucketKey
    allowed: int
    denied: int


@dataclass(frozen=True, slots=True)
class Action:
    """Send ``stream`` an assignment for ``bucket`` (a ``Share`` refilled every ``fill_s``
    seconds, ``ALLOW_ALL`` or ``DENY_ALL``; for ``ttl_s`` seconds) or, when ``assignment``
    is None, an abandon."""

    stream: int
    bucket: BucketKey
    assignment: Share | str | None
    ttl_s: int = 0
    fill_s: int = 0


@dataclass(slots=True)
class QuotaStats:
    """Counts since start, for logs and tests."""

    reports: int = 0
    rounds: int = 0
    unknown_buckets: int = 0
    abandoned: int = 0
    #: Requests shadow buckets' Envoys reported beyond what their would-be shares admit between
    #: two reports (an estimate: the bucket taken as full at each report).
    would_deny: int = 0


def rule_budget(rule: DescriptorRule, interval_s: float) -> Budget:
    """The fleet budget of a rule with limits: its tightest limit's tokens per period."""
    limit = min(rule.limits, key=lambda lim: Fraction(lim.requests_per_unit, lim.period_us))
    burst = None
    if rule.algorithm in BUCKET_ALGORITHMS:
        burst = limit.burst if limit.burst is not None else limit.requests_per_unit
    return Budget.of(limit.requests_per_unit, limit.period_us // 1_000_000, burst, interval_s)


@dataclass(slots=True)
class _Member:
    #: When it last reported a request for the bucket (when it joined, at first).
    asked_at: float
    #: Its last reports for the bucket: (arrival, requests counted), the oldest first.
    reports: deque[tuple[float, int]]
    share: Share | str | None = None
    sent_at: float = 0.0
    #: Under a shadow rule: the share it would hold, and its fill interval in seconds.
    would: tuple[Share, int] | None = None

    def demand(self, fill_s: int, interval: float) -> Fraction:
        """Its rate in requests per ``fill_s`` seconds over its reports (the first report's
        count over one ``interval`` while it has only that one)."""
        first, last = self.reports[0][0], self.reports[-1][0]
        if len(self.reports) > 1 and last > first:
            counted = sum(count for _, count in list(self.reports)[1:])
            span = Fraction(last - first).limit_denominator(1_000_000)
        else:
            counted = sum(count for _, count in self.reports)
            span = Fraction(interval).limit_denominator(1_000_000)
        return Fraction(counted * fill_s) / span


@dataclass(slots=True)
class _Bucket:
    domain: str
    key: BucketKey
    rule: DescriptorRule | None
    members: dict[int, _Member] = field(default_factory=dict)
    reserved: list[tuple[float, Share]] = field(default_factory=list)
    last_round: float | None = None
    #: Requests its Envoys reported, allowed and denied, since it is tracked.
    allowed: int = 0
    denied: int = 0


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
    ) -> None:
        if interval <= 0 or ttl_s < 1 or ttl_s <= interval or history < 1:
            raise ValueError(
                f"interval {interval} > 0, ttl_s {ttl_s} >= 1 and above interval, history >= 1"
            )
        self.config = config
        self.clock = clock
        self.interval = interval
        self.ttl_s = ttl_s
        self.history = history
        self.shadow = shadow
        self.stats = QuotaStats()
        #: Requests Envoys reported, by (rule path or "none", "allowed" or "denied").
        self.reported: dict[tuple[str, str], int] = {}
        self._streams: dict[int, str] = {}
        self._buckets: dict[tuple[str, BucketKey], _Bucket] = {}
        self._next = 0

    # --- what the stream handler calls ---------------------------------------------

    @property
    def streams(self) -> int:
        return len(self._streams)

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def open(self) -> int:
        """A new stream's id; its domain comes with its first report."""
        self._next += 1
        self._streams[self._next] = ""
        return self._next

    def report(self, stream: int, domain: str, usages: Sequence[Usage]) -> list[Action]:
        """Take one ``RateLimitQuotaUsageReports``; raises ``ReportError`` (changing nothing)
        when it is malformed."""
        domain = self._check(stream, domain, usages)
        self._streams[stream] = domain
        self.stats.reports += 1
        now = self.clock.now()
        actions: list[Action] = []
        for usage in usages:
            bucket = self._bucket(domain, usage.bucket)
            count = usage.allowed + usage.denied
            member = bucket.members.get(stream)
            if member is None:
                member = bucket.members[stream] = _Member(
                    now, deque([(now, count)], maxlen=self.history + 1)
                )
                if bucket.last_round is None:
                    actions += self._round(bucket, now)
                    continue
                fixed = self._fixed(bucket)
                if fixed is not None:
                    member.share, member.sent_at = fixed, now
                    actions.append(Action(stream, bucket.key, fixed, self.ttl_s))
                continue
            if member.would is not None:  # shadow: beyond what its share would have admitted
                (share, fill_s), since = member.would, now - member.reports[-1][0]
                room = share.max_tokens + share.tokens_per_fill * since / fill_s
                self.stats.would_deny += max(0, count - int(room))
            member.reports.append((now, count))
            if count:
                member.asked_at = now
        for usage in usages:
            counted = self._buckets[(domain, usage.bucket)]
            counted.allowed += usage.allowed
            counted.denied += usage.denied
            rule = counted.rule
            path = "none" if rule is None else rule.path
            for outcome, count in (("allowed", usage.allowed), ("denied", usage.denied)):
                self.reported[(path, outcome)] = self.reported.get((path, outcome), 0) + count
        return actions

    def tick(self) -> list[Action]:
        """Run every round that is due; forget buckets nobody holds."""
        now = self.clock.now()
        actions: list[Action] = []
        for name, bucket in list(self._buckets.items()):
            bucket.reserved = [(until, share) for until, share in bucket.reserved if until > now]
            if not bucket.members and not bucket.reserved:
                del self._buckets[name]
            elif bucket.last_round is not None and now - bucket.last_round >= self.interval:
                actions += self._round(bucket, now)
        return actions

    def close(self, stream: int) -> None:
        """The stream ended: its shares stay reserved while its Envoy may still use them."""
        self._streams.pop(stream, None)
        for bucket in self._buckets.values():
            member = bucket.members.pop(stream, None)
            if isinstance(member, _Member) and isinstance(member.share, Share):
                until = member.sent_at + self.ttl_s + self.interval
                bucket.reserved.append((until, member.share))

    def swap_config(self, config: RateLimitConfig) -> list[Action]:
        """A reload: buckets whose rule is gone are abandoned; the others take their new rule
        at their next round."""
        self.config = config
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

    def held(self) -> dict[str, tuple[int, int]]:
        """Per rule path: the streams holding a token bucket of it, and their tokens per fill."""
        out: dict[str, tuple[int, int]] = {}
        for bucket in self._buckets.values():
            if bucket.rule is None:
                continue
            shares = [m.share for m in bucket.members.values() if isinstance(m.share, Share)]
            streams, tokens = out.get(bucket.rule.path, (0, 0))
            out[bucket.rule.path] = (
                streams + len(shares),
                tokens + sum(share.tokens_per_fill for share in shares),
            )
        return out

    def figures(self) -> list[BucketFigures]:
        """Per bucket, read-only: its counts and what its streams ask (requests/s) and hold."""
        out: list[BucketFigures] = []
        fills: dict[str, int] = {}  # by rule path: a budget is costly to make
        for b in self._buckets.values():
            fill_s = 1
            if b.rule is not None and b.rule.limits:
                if b.rule.path not in fills:
                    fills[b.rule.path] = rule_budget(b.rule, self.interval).fill_s
                fill_s = fills[b.rule.path]
            held = [(rate(m.reports, self.interval), m.share) for m in b.members.values()]
            counts = (b.allowed, b.denied)
            out.append(BucketFigures.of(b.domain, b.key, b.rule, counts, fill_s, held))
        return out

    def assignments(self) -> list[dict[str, object]]:
        """What every stream holds, per bucket (for introspection and tests)."""
        out: list[dict[str, object]] = []
        for bucket in self._buckets.values():
            for stream, member in bucket.members.items():
                held = member.share
                out.append(
                    {
                        "domain": bucket.domain,
                        "bucket": dict(bucket.key),
                        "rule": None if bucket.rule is None else bucket.rule.path,
                        "stream": stream,
                        "assignment": held if not isinstance(held, Share) else {
                            "tokens_per_fill": held.tokens_per_fill,
                            "max_tokens": held.max_tokens,
                        },
                    }
                )  # fmt: skip
        return out

    # --- inside --------------------------------------------------------------------

    def _check(self, stream: int, domain: str, usages: Iterable[Usage]) -> str:
        if stream not in self._streams:
            raise ReportError(f"stream {stream} is not open")
        known = self._streams[stream]
        if not domain and not known:
            raise ReportError(
                "RateLimitQuotaUsageReports.domain is empty in the stream's first report; "
                "Envoy sets it from the rate_limit_quota filter's domain"
            )
        if domain and known and domain != known:
            raise ReportError(
                f"RateLimitQuotaUsageReports.domain {domain!r} differs from the stream's "
                f"{known!r}; open a new stream for another domain"
            )
        domain = domain or known
        fresh = 0
        for usage in usages:
            if not usage.bucket:
                raise ReportError("a bucket_quota_usages entry has an empty bucket_id")
            if any(not key or not value for key, value in usage.bucket):
                raise ReportError(f"bucket_id {dict(usage.bucket)!r} has an empty key or value")
            if usage.allowed + usage.denied > MAX_COUNT:
                raise ReportError(
                    f"bucket_id {dict(usage.bucket)!r} reports "
                    f"{usage.allowed + usage.denied} requests in one report (most: {MAX_COUNT})"
                )
            fresh += (domain, usage.bucket) not in self._buckets
        if len(self._buckets) + fresh > MAX_BUCKETS:
            raise ReportError(f"more than {MAX_BUCKETS} quota buckets at once; refused")
        return domain

    def _bucket(self, domain: str, key: BucketKey) -> _Bucket:
        bucket = self._buckets.get((domain, key))
        if bucket is None:
            found = self.config.domains.get(domain)
            rule = None if found is None else bucket_rule(found, dict(key))
            bucket = self._buckets[(domain, key)] = _Bucket(domain, key, rule)
            if rule is None:
                self.stats.unknown_buckets += 1
                log.info(
                    "quota bucket matches no rule: allowed",
                    extra={"event": "rlqs_unknown_bucket", "domain": domain,
                           "bucket": dict(key), "domain_known": found is not None},
                )  # fmt: skip
        return bucket

    def _fixed(self, bucket: _Bucket) -> str | None:
        """The bucket's answer when it is not split: ALLOW_ALL or DENY_ALL, else None."""
        rule = bucket.rule
        if rule is None or rule.unlimited or rule.shadow_mode or self.shadow:
            return ALLOW_ALL
        if rule.always_over:
            return DENY_ALL
        return None

    def _round(self, bucket: _Bucket, now: float) -> list[Action]:
        self.stats.rounds += 1
        bucket.last_round = now
        bucket.reserved = [(until, share) for until, share in bucket.reserved if until > now]
        actions = []
        for stream, member in list(bucket.members.items()):
            if now - member.asked_at >= IDLE_S:
                # Envoy erases an abandoned bucket at once: nothing left to reserve.
                del bucket.members[stream]
                actions.append(Action(stream, bucket.key, None))
                self.stats.abandoned += 1
        fixed = self._fixed(bucket)
        rule = bucket.rule
        # Split when enforcing, and for a shadow rule too: what it would have assigned.
        budget = None if rule is None or rule.unlimited else rule_budget(rule, self.interval)
        shares = {} if budget is None else self._shares(bucket, budget)
        for stream, member in bucket.members.items():
            held: Share | str | None = fixed
            member.would = None
            if fixed is None:
                share = shares[stream]
                held = DENY_ALL if share.empty else share
            elif budget is not None:  # shadow: what it would hold, for its next reports
                member.would = (shares[stream], budget.fill_s)
            member.share, member.sent_at = held, now
            fill_s = budget.fill_s if budget is not None else 0
            actions.append(Action(stream, bucket.key, held, self.ttl_s, fill_s))
        return actions

    def _shares(self, bucket: _Bucket, budget: Budget) -> dict[int, Share]:
        held = [share for _, share in bucket.reserved]
        pool = Budget(
            max(0, budget.tokens - sum(share.tokens_per_fill for share in held)),
            budget.fill_s,
            max(0, budget.burst - sum(share.max_tokens for share in held)),
        )
        streams = list(bucket.members)
        demands = [
            bucket.members[stream].demand(budget.fill_s, self.interval) for stream in streams
        ]
        return dict(zip(streams, split(pool, demands), strict=True))


def bucket_key(bucket: Mapping[str, str]) -> BucketKey:
    """The service's key of a ``BucketId`` map: its items in key order (the map has none)."""
    return tuple(sorted(bucket.items()))
