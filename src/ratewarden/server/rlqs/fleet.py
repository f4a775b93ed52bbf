"""Several ``ratewarden serve`` replicas, one budget: a bucket's shares through the store.

With ``Fleet``, a ``QuotaService`` does not split a bucket's limit in this process: each
round of a bucket is one atomic store operation (``quota_shares``, run by the decision
core's ``apply_flow``) that records the demand of this replica's Envoys, reads every
replica's (and, for a rule with ``rlqs_weights``, their weights), and gives this
replica's Envoys their fair part of what the others do not hold. A member of the store's
bucket is one stream on one replica: this replica's id (random unless given) and the
stream's number. Each replica keeps its own streams and rounds; what they share is the
store (Redis or a Redis Cluster for a fleet, Redis ``TIME`` as the one clock; or memcached,
where a round's keys are one item written with compare-and-set, on each replica's own clock;
a memory store serves one process). The bound is stated for ``R`` replicas in docs/rlqs.md.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, TypeVar

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, FleetRound, Flow, Limiter, quota_shares_op
from ratewarden.server.rlqs.reports import BucketKey
from ratewarden.server.rlqs.shares import Budget, Sent, Share

__all__ = ["Fleet"]

T = TypeVar("T")


class Fleet:
    """The store a replica's ``QuotaService`` keeps its buckets' shares in (the limiter's),
    and the replica's name there (``replica``: ASCII without spaces, unique in the fleet;
    random unless given)."""

    def __init__(
        self,
        limiter: Limiter | AsyncLimiter,
        *,
        replica: str | None = None,
        prefix: str | None = None,
    ) -> None:
        if replica is not None and (not replica or " " in replica or not replica.isascii()):
            raise ConfigurationError(f"replica {replica!r} must be non-empty ASCII without spaces")
        self.limiter = limiter
        self.replica = replica or uuid.uuid4().hex[:12]
        #: The store's key prefix (the store's own unless given).
        self.prefix: str = prefix or str(getattr(limiter.store, "prefix", "rw"))

    def member(self, stream: int) -> str:
        """The store's name of this replica's ``stream``."""
        return f"{self.replica}:{stream}"

    def shares_flow(
        self,
        domain: str,
        key: BucketKey,
        budget: Budget,
        hold_s: float,
        demands: Mapping[int, Fraction],
        departed: Sequence[int],
        weights: Mapping[int, int] | None = None,
        holding: Mapping[int, Share] | None = None,
        spent: int | None = None,
    ) -> Flow[Sent]:
        """One round of the bucket: each of ``demands``' streams' share (``demands`` in
        requests per ``budget.fill_s``), with what its changes hand out and hold back;
        ``departed`` streams give up their demand, their shares stay held in the store for
        ``hold_s`` after they were sent. ``weights`` (by stream, when the rule has
        ``rlqs_weights``) are stored with the demands, and the split is then weighted
        max-min fair over every replica's members. ``holding`` is what each stream holds
        now (missing: nothing) and ``spent`` what this replica's changes handed out within
        its change window: a change that does not fit in ``max(burst, members) - spent``
        keeps its stream on what it holds (None: no budget of changes)."""
        held = holding or {}
        members = [
            (self.member(stream), min(10**15, math.ceil(demand * 1000)))
            for stream, demand in demands.items()
        ]
        op = quota_shares_op(
            self.prefix,
            _bucket(domain, key),
            budget.tokens,
            budget.burst,
            math.ceil(hold_s * 1_000_000),
            members,
            [self.member(stream) for stream in departed],
            None if weights is None else [weights[stream] for stream in demands],
            [_pair(held.get(stream)) for stream in demands],
            spent,
        )
        found = FleetRound.of((yield from self.limiter.apply_flow(op)))
        shares = {stream: Share(*pair) for stream, pair in zip(demands, found.shares, strict=True)}
        return Sent(shares, found.spent, found.held_back)

    def release_flow(
        self, domain: str, key: BucketKey, budget: Budget, streams: Sequence[int]
    ) -> Flow[None]:
        """The store forgets ``streams``' shares, their Envoys told to expire them (a graceful
        stop, ``handover.py``): a round for them with no demand, held the shortest time."""
        members = [(self.member(stream), 0) for stream in streams]
        op = quota_shares_op(self.prefix, _bucket(domain, key), budget.tokens, budget.burst, 1,
                             members)  # fmt: skip
        yield from self.limiter.apply_flow(op)

    def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` on a blocking limiter's store."""
        if isinstance(self.limiter, AsyncLimiter):
            raise TypeError("this Fleet's limiter is an AsyncLimiter: use areport / atick")
        return self.limiter.run(flow)

    async def arun(self, flow: Flow[T]) -> T:
        """Drive ``flow`` on the limiter's store, awaiting it when the limiter is async."""
        if isinstance(self.limiter, AsyncLimiter):
            return await self.limiter.run(flow)
        return self.limiter.run(flow)

    def __repr__(self) -> str:
        limiter: Any = self.limiter
        return f"Fleet(replica={self.replica!r}, store={limiter.store!r})"


def _pair(share: Share | None) -> tuple[int, int]:
    return (0, 0) if share is None else (share.tokens_per_fill, share.max_tokens)


def _bucket(domain: str, key: BucketKey) -> str:
    """The store's name of a bucket: its domain and entries, as JSON."""
    return json.dumps([domain, [list(entry) for entry in key]])
