"""Per-bucket figures of the quota service, and the few buckets an operator is shown.

``QuotaService.figures()`` gives one ``BucketFigures`` per bucket tracked: what its
Envoys reported (allowed, denied, since it is tracked), what they ask now (demand, in
requests a second, summed over its streams) and what they hold (the token buckets'
tokens a second and capacity, summed). Bucket ids are request values, as many as
callers send (up to ``quota.MAX_BUCKETS``), so no per-bucket output lists them all:
``top`` keeps the ``n`` buckets with the highest demand (then the most requests
reported) and sums the rest into one ``Rest``. The metrics (``metrics.py``), the
``top_buckets`` of ``/rlqs.json`` and its dashboard panel show that selection.

Pure values; ``introspection`` is the part of ``/rlqs.json`` built from them, and
``stream_assignments`` and ``held_by_rule`` the two views of what each stream holds
(``QuotaService.assignments`` and ``held``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratewarden.labels import bounded
from ratewarden.server.config import DescriptorRule
from ratewarden.server.rlqs.buckets import rule_budget
from ratewarden.server.rlqs.members import DEMAND_SPAN_S, Bucket
from ratewarden.server.rlqs.shares import Share

__all__ = [
    "JSON_BUCKETS",
    "BucketFigures",
    "Rest",
    "bucket_figures",
    "bucket_label",
    "held_by_rule",
    "introspection",
    "rate",
    "stream_assignments",
    "top",
]

#: Buckets ``/rlqs.json`` lists under ``top_buckets`` (the rest summed: ``other_buckets``).
JSON_BUCKETS = 100


def rate(reports: Sequence[tuple[float, int]], interval: float) -> float:
    """Requests a second over a member's ``reports`` ((arrival, count), oldest first), as the
    shares read its demand (``members.Member.demand``), in floats: a figure to show, 20 times
    cheaper than the shares' exact fractions. tests/rlqs/test_ops_figures.py keeps them equal."""
    first, last = reports[0][0], reports[-1][0]
    if len(reports) > 1 and last - first >= DEMAND_SPAN_S:
        return sum(count for _, count in list(reports)[1:]) / (last - first)
    return sum(count for _, count in reports) / interval


def bucket_figures(buckets: Iterable[Bucket], interval: float) -> list[BucketFigures]:
    """One ``BucketFigures`` a bucket (``QuotaService.figures``)."""
    out: list[BucketFigures] = []
    fills: dict[str, int] = {}  # by rule path: a budget is costly to make
    for b in buckets:
        fill_s = 1
        if b.rule is not None and b.rule.limits:
            if b.rule.path not in fills:
                fills[b.rule.path] = rule_budget(b.rule, interval).fill_s
            fill_s = fills[b.rule.path]
        held = [(rate(m.reports, interval), m.share) for m in b.members.values()]
        counts = (b.allowed, b.denied)
        out.append(BucketFigures.of(b.domain, b.key, b.rule, counts, fill_s, held))
    return out


_ESCAPES = str.maketrans({"\\": "\\\\", ",": "\\,", "=": "\\="})


def bucket_label(bucket: tuple[tuple[str, str], ...]) -> str:
    """A bucket id as one bounded text, unambiguous: two ids never give the same text (up to
    ``bounded``'s hash) because a backslash, comma or equals sign in a key or value is escaped
    by a backslash: ``{path: "x,tenant=a", tenant: b}`` is ``path=x\\,tenant\\=a,tenant=b``."""
    return bounded(
        ",".join(f"{key.translate(_ESCAPES)}={value.translate(_ESCAPES)}" for key, value in bucket)
    )


@dataclass(frozen=True, slots=True)
class BucketFigures:
    """One bucket: its id, rule, counts reported, and its streams' demand and holdings."""

    domain: str
    bucket: tuple[tuple[str, str], ...]
    #: The rule's path; None when the bucket matches no rule.
    rule: str | None
    allowed: int
    denied: int
    streams: int
    #: Requests a second its streams ask, summed (each over its last reports).
    demand: float
    #: Streams holding a token bucket, their tokens a second and capacity, summed.
    token_buckets: int
    assigned: float
    max_tokens: int
    #: What the streams hold: ``token_bucket``, ``allow_all``, ``deny_all`` or ``waiting``
    #: (none yet), the kinds present joined by ``+``; ``none`` when no open stream holds it
    #: (closed streams' shares still reserved, or its recent changes still counted).
    answer: str

    @classmethod
    def of(
        cls,
        domain: str,
        bucket: tuple[tuple[str, str], ...],
        rule: DescriptorRule | None,
        counts: tuple[int, int],
        fill_s: int,
        held: Iterable[tuple[float, Share | str | None]],
    ) -> BucketFigures:
        """From the bucket's members: (demand in requests a second, what each holds)."""
        demand, assigned, capacity, holders, streams = 0.0, 0, 0, 0, 0
        kinds = set()
        for asked, share in held:
            streams += 1
            demand += asked
            if isinstance(share, Share):
                holders += 1
                assigned += share.tokens_per_fill
                capacity += share.max_tokens
                kinds.add("token_bucket")
            else:
                kinds.add(share or "waiting")
        return cls(
            domain, bucket, None if rule is None else rule.path, counts[0], counts[1], streams,
            demand, holders, assigned / fill_s, capacity, "+".join(sorted(kinds)) or "none",
        )  # fmt: skip

    @property
    def label(self) -> str:
        """The bucket id as one bounded text: ``key=value`` pairs, by key, comma-separated,
        with ``\\``, ``,`` and ``=`` in a key or value escaped by a backslash (``bucket_label``)."""
        return bucket_label(self.bucket)

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": bounded(self.domain),
            "bucket": self.label,
            "rule": self.rule,
            "streams": self.streams,
            "answer": self.answer,
            "demand_per_s": round(self.demand, 3),
            "assigned_per_s": round(self.assigned, 3),
            "max_tokens": self.max_tokens,
            "token_buckets": self.token_buckets,
            "allowed": self.allowed,
            "denied": self.denied,
        }


@dataclass(frozen=True, slots=True)
class Rest:
    """The buckets ``top`` left out, summed."""

    buckets: int = 0
    streams: int = 0
    demand: float = 0.0
    assigned: float = 0.0
    allowed: int = 0
    denied: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "buckets": self.buckets,
            "streams": self.streams,
            "demand_per_s": round(self.demand, 3),
            "assigned_per_s": round(self.assigned, 3),
            "allowed": self.allowed,
            "denied": self.denied,
        }


def _rank(figures: BucketFigures) -> tuple[float, int, str, tuple[tuple[str, str], ...]]:
    return (-figures.demand, -(figures.allowed + figures.denied), figures.domain, figures.bucket)


def top(figures: Sequence[BucketFigures], n: int) -> tuple[list[BucketFigures], Rest]:
    """The ``n`` buckets with the highest demand (ties: most reported, then by id), and the
    rest summed."""
    shown = heapq.nsmallest(n, figures, key=_rank) if n > 0 else []
    kept = {(f.domain, f.bucket) for f in shown}
    rest = [f for f in figures if (f.domain, f.bucket) not in kept]
    return shown, Rest(
        len(rest),
        sum(f.streams for f in rest),
        sum(f.demand for f in rest),
        sum(f.assigned for f in rest),
        sum(f.allowed for f in rest),
        sum(f.denied for f in rest),
    )


def introspection(figures: Sequence[BucketFigures], n: int = JSON_BUCKETS) -> dict[str, Any]:
    """What ``/rlqs.json`` adds to the servicer's state: the top ``n`` buckets, the rest summed."""
    shown, rest = top(figures, n)
    return {"top_buckets": [f.to_dict() for f in shown], "other_buckets": rest.to_dict()}


def held_by_rule(buckets: Iterable[Bucket]) -> dict[str, tuple[int, int]]:
    """Per rule path: the streams holding a token bucket of it, and their tokens per fill."""
    out: dict[str, tuple[int, int]] = {}
    for bucket in buckets:
        if bucket.rule is None:
            continue
        shares = [m.share for m in bucket.members.values() if isinstance(m.share, Share)]
        streams, tokens = out.get(bucket.rule.path, (0, 0))
        out[bucket.rule.path] = (
            streams + len(shares),
            tokens + sum(share.tokens_per_fill for share in shares),
        )
    return out


def stream_assignments(
    buckets: Iterable[Bucket], peers: Mapping[int, str]
) -> list[dict[str, object]]:
    """What every stream holds, per bucket, and the name its Envoy gave (``peers``, by
    stream): ``/rlqs.json``'s ``assignments``."""
    out: list[dict[str, object]] = []
    for bucket in buckets:
        for stream, member in bucket.members.items():
            share = member.share
            out.append(
                {
                    "domain": bucket.domain,
                    "bucket": dict(bucket.key),
                    "rule": None if bucket.rule is None else bucket.rule.path,
                    "stream": stream,
                    "peer": peers.get(stream, ""),
                    "assignment": share if not isinstance(share, Share) else {
                        "tokens_per_fill": share.tokens_per_fill,
                        "max_tokens": share.max_tokens,
                    },
                }
            )  # fmt: skip
    return out
