"""A quota bucket and its members, as ``QuotaService`` keeps them; a member's demand.

A member is one stream holding one bucket. Its **demand** is its rate over its last
reports for the bucket (the requests they count over the time since the report before
them, by arrival): Envoy reports on its own timer, so demand is measured per report,
not per round. A member's **weight** is its Envoy's under the bucket's rule
(``rlqs_weights``, by the peer name its stream gave). Pure: the times are handed in.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from ratewarden.limiter import hold_back
from ratewarden.server.config import DescriptorRule
from ratewarden.server.rlqs.refill import Refill
from ratewarden.server.rlqs.reports import BucketKey
from ratewarden.server.rlqs.shares import NOTHING, Budget, Sent, Share, split

__all__ = ["DEMAND_SPAN_S", "Bucket", "Member"]

#: Two reports closer than this (a microsecond) measure no span: the demand is read as the
#: count over one interval, as with a single report (a shorter span rounds to zero).
DEMAND_SPAN_S = 1e-6


@functools.lru_cache(maxsize=1024)
def _lone(pool: Budget, most: int) -> tuple[int, int]:
    """The share of a bucket's only member: ``split`` of ``pool`` for one demand, which gives
    it the whole whatever the demand (and weight) is; exact arithmetic, so made once."""
    share = split(pool, [Fraction(1)], None, most)[0]
    return share.tokens_per_fill, share.max_tokens


@dataclass(slots=True)
class Member:
    """One stream holding one bucket: its recent reports and what it was sent."""

    #: When it last reported a request for the bucket (when it joined, at first).
    asked_at: float
    #: Its last reports for the bucket: (arrival, requests counted), the oldest first.
    reports: deque[tuple[float, int]]
    share: Share | str | None = None
    sent_at: float = 0.0
    #: Under a shadow rule: the share it would hold, and its fill interval in seconds.
    would: tuple[Share, int] | None = None
    #: Reports taken for the bucket: a round whose members' counts are unchanged since the
    #: last split has the same demands (``Bucket.split``).
    taken: int = 1
    #: What its Envoy's token bucket holds at least (``refill.py``; None: no token bucket).
    refill: Refill | None = None
    #: It came back to a bucket it was told to abandon before that bucket was full again:
    #: ``refill`` is that bucket, and caps what it is sent until it would hold its share.
    returning: bool = False

    def reported(self, now: float, allowed: int, count: int) -> None:
        """A report of ``count`` requests, ``allowed`` of them admitted, arrived at ``now``."""
        self.reports.append((now, count))
        self.taken += 1
        if self.refill is not None:
            self.refill.take(now, allowed)
        if count:
            self.asked_at = now

    def back(self, refill: Refill | None, allowed: int) -> None:
        """A new member that was told to abandon the bucket, whose Envoy's bucket would hold
        ``refill`` (None: none remembered), its first report admitting ``allowed``."""
        if refill is not None:
            self.refill, self.returning = refill, True
            refill.take(self.asked_at, allowed)

    def demand(self, fill_s: int, interval: float) -> Fraction:
        """Its rate in requests per ``fill_s`` seconds over its reports (the first report's
        count over one ``interval`` while it has only that one)."""
        first, last = self.reports[0][0], self.reports[-1][0]
        if len(self.reports) > 1 and last - first >= DEMAND_SPAN_S:
            counted = sum(count for _, count in list(self.reports)[1:])
            span = Fraction(last - first).limit_denominator(1_000_000)
        else:
            counted = sum(count for _, count in self.reports)
            span = Fraction(interval).limit_denominator(1_000_000)
        return Fraction(counted * fill_s) / span


@dataclass(slots=True)
class Bucket:
    """One ``BucketId`` of one domain: its rule, members, reserved shares and rounds."""

    domain: str
    key: BucketKey
    rule: DescriptorRule | None
    members: dict[int, Member] = field(default_factory=dict)
    reserved: list[tuple[float, Share]] = field(default_factory=list)
    last_round: float | None = None
    #: With a fleet: streams gone since the last round, whose demand the store drops.
    departed: list[int] = field(default_factory=list)
    #: Requests its Envoys reported, allowed and denied, since it is tracked.
    allowed: int = 0
    denied: int = 0
    #: Its changed shares' capacity handed out at its recent rounds: (when, capacity).
    changes: deque[tuple[float, int]] = field(default_factory=deque)
    #: The budget its last split round split (a reload that changes it lifts the budget
    #: of changes for one round: the shares held were cut for another budget).
    split_budget: Budget | None = None
    #: Its last split in this process (``local_shares``): what it was made from, and the
    #: shares it aimed at (before the budget of changes), for a round with the same inputs.
    split: tuple[object, list[tuple[int, int]]] | None = None

    def spent(self, now: float, window: float) -> int:
        """The capacity its changed shares handed out less than ``window`` seconds ago."""
        while self.changes and now - self.changes[0][0] >= window:
            self.changes.popleft()
        return sum(capacity for _, capacity in self.changes)

    def weights(self, peers: Mapping[int, str]) -> dict[int, int] | None:
        """Each member's weight by its stream's peer name in ``peers`` (unnamed: ""), or
        None when the rule has no ``rlqs_weights`` (split by demand)."""
        if self.rule is None or not self.rule.rlqs_weights:
            return None
        return {stream: self.rule.rlqs_weight(peers.get(stream, "")) for stream in self.members}

    def local_shares(
        self,
        budget: Budget,
        interval: float,
        weights: Mapping[int, int] | None,
        holding: Mapping[int, Share] | None = None,
        spent: int | None = None,
    ) -> Sent:
        """The members' shares of ``budget`` in this process (no fleet), out of what the
        closed streams' reserved shares leave, with what its changes hand out and hold back.

        A reserved share is still a holder: the capacity held, reserved and new, stays
        within ``max(burst, holders)``. So when the reserved shares leave less room than one
        token for each member that would hold a share, the weakest get nothing until the
        reserved shares expire (as the fleet's script does, ``lua/quota_shares.lua``).

        ``holding`` is the token bucket each member's Envoy holds (missing: none), ``spent``
        what its changes handed out within the change window: the changes of this round fit
        in ``max(burst, members) - spent`` or the members that do not fit keep what they hold
        (``hold_back``; None: no budget of changes).
        """
        held = [share for _, share in self.reserved if not share.empty]
        held_burst = sum(share.max_tokens for share in held)
        pool = budget
        if held:
            pool = Budget(
                max(0, budget.tokens - sum(share.tokens_per_fill for share in held)),
                budget.fill_s,
                max(0, budget.burst - held_burst),
            )
        streams = list(self.members)
        most = len(streams)
        while most > 0 and max(budget.burst, len(held) + most) - held_burst < most:
            most -= 1
        # The split reads the members' demands, which change only with their reports; a lone
        # member's part is the whole whatever it asks and weighs (``_lone``).
        alone = len(streams) == 1
        given = None if weights is None or alone else [weights[stream] for stream in streams]
        taken = tuple((stream, 0 if alone else self.members[stream].taken) for stream in streams)
        inputs = (pool, most, interval, taken, None if given is None else tuple(given))
        worked = False
        if self.split is not None and self.split[0] == inputs:
            targets = self.split[1]
        elif alone:
            targets = [_lone(pool, most)]
        else:
            worked = True
            demands = [self.members[stream].demand(budget.fill_s, interval) for stream in streams]
            targets = [(s.tokens_per_fill, s.max_tokens) for s in split(pool, demands, given, most)]
        self.split = (inputs, targets)
        held_now = holding or {}
        had = [held_now.get(stream, NOTHING) for stream in streams]
        room = None if spent is None else max(budget.burst, len(streams)) - spent
        sent, spent_now = hold_back(
            targets,
            [(share.tokens_per_fill, share.max_tokens) for share in had],
            room,
            pool.tokens,
            budget.burst,
            held_burst,
            len(held),
        )
        held_back = sum(1 for target, got in zip(targets, sent, strict=True) if target != got)
        shares = {stream: Share(*pair) for stream, pair in zip(streams, sent, strict=True)}
        return Sent(shares, spent_now, held_back, worked)
