"""A graceful hand-over on shutdown: Envoys fall back at once, the store forgets the shares.

On SIGTERM, before its streams end, a replica sends every assignment its streams hold
again with a time to live of 0. RLQS defines that as "expire now": Envoy drops the
assignment and follows its ``expired_assignment_behavior`` (``no_assignment_behavior``
when none is set) at once, instead of enforcing a share nobody renews until its TTL runs
out (``rlqs.proto``, ``assignment_time_to_live``: "f.e. before the server going into
restart"). With several replicas, the shares of the streams that received it are then
given back in the store, so that the other replicas' next rounds can hand them out: a
round of the store's op for those members with no demand and a hold of one microsecond,
the op's shortest (their Envoys may enforce them for 0 s). A stream that did not receive
it (it ended first, or the hand-over ran out of time) keeps its share held in the store
until it expires, as a closed stream's always is. docs/rlqs.md, "Stopping".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ratewarden.limiter import Flow, Gather
from ratewarden.server.rlqs.actions import Action
from ratewarden.server.rlqs.buckets import rule_budget
from ratewarden.server.rlqs.fleet import Fleet
from ratewarden.server.rlqs.members import Bucket
from ratewarden.server.rlqs.shares import Share

__all__ = ["expire_all", "release_flow"]


def expire_all(buckets: Iterable[Bucket], interval: float) -> list[Action]:
    """What every member holds (a token bucket, ALLOW_ALL or DENY_ALL), with a TTL of 0.

    The same assignment, so that Envoy reads no new token bucket into it (a different one
    would start full before it expires); a member still waiting for its first holds nothing.
    """
    actions: list[Action] = []
    for bucket in buckets:
        for stream, member in bucket.members.items():
            if member.share is None:
                continue
            fill_s = 0
            if isinstance(member.share, Share) and bucket.rule is not None:
                fill_s = rule_budget(bucket.rule, interval).fill_s
            actions.append(Action(stream, bucket.key, member.share, 0, fill_s))
    return actions


def release_flow(
    fleet: Fleet, buckets: Iterable[Bucket], streams: Collection[int], interval: float
) -> Flow[int]:
    """The store forgets the shares of ``streams`` (closed, so listed in their buckets'
    ``departed``) in every bucket it splits; the number of buckets released."""
    flows: list[Flow[None]] = []
    for bucket in buckets:
        gone = [stream for stream in bucket.departed if stream in streams]
        rule = bucket.rule
        if not gone or rule is None or rule.unlimited:  # no split: nothing in the store
            continue
        budget = rule_budget(rule, interval)
        flows.append(fleet.release_flow(bucket.domain, bucket.key, budget, gone))
        bucket.departed = [stream for stream in bucket.departed if stream not in streams]
    if flows:
        yield Gather(tuple(flows))
    return len(flows)
