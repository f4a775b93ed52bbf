"""A bucket's round: idle members abandoned, the limit split, every member's assignment.

``Rounds`` holds what a round needs from the quota service (``rlqs/quota.py``), as
values: its settings, the fleet (or None), the peer names the streams gave, and the
``QuotaStats`` it counts into. ``run`` is one round of one bucket, a flow (a fleet's
round asks the store); ``fixed`` is a bucket's answer when its rule is not split.

The **budget of changes** (``change_rounds``, K) lives here: a changed share starts full
in Envoy, so the capacity a bucket's changed shares hand out within any ``K * interval``
seconds is kept within ``max(burst, members)``; a member whose change does not fit keeps
the share it holds, sent unchanged (``members.Bucket.local_shares``, ``hold_back``).
Going to DENY_ALL and abandoning hand out nothing and are never held back. K = 1 lets
every round's changes through, as before (rounds are at least an interval apart).

An abandon does not refill a bucket (``refill.py``): a member abandoned before its Envoy's
bucket would be full again is remembered (``abandoned``), and when its stream comes back
to the bucket it is sent no more than that bucket would hold by then.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ratewarden.errors import StorageError
from ratewarden.limiter import Flow
from ratewarden.server.config import DescriptorRule
from ratewarden.server.rlqs.actions import ALLOW_ALL, DENY_ALL, Action
from ratewarden.server.rlqs.buckets import rule_budget
from ratewarden.server.rlqs.fleet import Fleet
from ratewarden.server.rlqs.members import Bucket
from ratewarden.server.rlqs.refill import Abandoned, Refill
from ratewarden.server.rlqs.shares import NOTHING, Budget, Sent, Share

__all__ = ["QuotaStats", "Rounds"]

log = logging.getLogger("ratewarden.server.rlqs")


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
    #: Rounds the fleet's store did not answer (nothing split was sent; the next one retries).
    store_failures: int = 0
    #: Share changes the budget of changes held back (the member kept what it held).
    held_back: int = 0
    #: Rounds that worked a split out in exact arithmetic, in this process (no fleet): the
    #: costly part of a round, skipped when nothing the split is made from changed since the
    #: bucket's last round and for a bucket's only member (its share is the whole).
    splits: int = 0


@dataclass(frozen=True, slots=True)
class Rounds:
    """How the quota service runs a bucket's round (see the module docstring)."""

    interval: float
    ttl_s: int
    idle_s: float
    change_rounds: int
    shadow: bool
    fleet: Fleet | None
    #: Each stream's peer name (weights are by it); the service adds and removes streams.
    peers: Mapping[int, str]
    stats: QuotaStats
    #: Each rule's budget, by the rule's id (the rule kept with it); ``forget`` at a reload.
    budgets: dict[int, tuple[DescriptorRule, Budget]] = field(default_factory=dict)
    #: Abandoned members' buckets not full yet, by (domain, bucket key, stream).
    abandoned: Abandoned = field(default_factory=Abandoned)

    def budget(self, rule: DescriptorRule) -> Budget:
        """``rule_budget`` of ``rule``, made once a rule: it is exact arithmetic, costly."""
        found = self.budgets.get(id(rule))
        if found is None or found[0] is not rule:
            found = self.budgets[id(rule)] = (rule, rule_budget(rule, self.interval))
        return found[1]

    def forget(self) -> None:
        """A reload: the rules' budgets are made again as the buckets meet their new rules."""
        self.budgets.clear()

    def fixed(self, bucket: Bucket) -> str | None:
        """The bucket's answer when it is not split: ALLOW_ALL or DENY_ALL, else None."""
        rule = bucket.rule
        if rule is None or rule.unlimited or rule.shadow_mode or self.shadow:
            return ALLOW_ALL
        if rule.always_over:
            return DENY_ALL
        return None

    def run(self, bucket: Bucket, now: float) -> Flow[list[Action]]:
        """One round of ``bucket`` at ``now``: the actions to send."""
        self.stats.rounds += 1
        bucket.last_round = now
        if bucket.reserved:
            bucket.reserved = [(until, s) for until, s in bucket.reserved if until > now]
        actions = []
        for stream, member in list(bucket.members.items()):
            if now - member.asked_at >= self.idle_s:
                # Envoy erases an abandoned bucket at once: nothing left to reserve (a
                # fleet's store keeps its share until it expires, on the safe side); what
                # its bucket would hold is remembered for the stream's return.
                del bucket.members[stream]
                if member.refill is not None:
                    key = (bucket.domain, bucket.key, stream)
                    self.abandoned.remember(key, member.refill, now)
                if self.fleet is not None:
                    bucket.departed.append(stream)
                actions.append(Action(stream, bucket.key, None))
                self.stats.abandoned += 1
        fixed = self.fixed(bucket)
        rule = bucket.rule
        # Split when enforcing, and for a shadow rule too: what it would have assigned.
        budget = None if rule is None or rule.unlimited else self.budget(rule)
        try:
            shares = {} if budget is None else (yield from self._shares(bucket, budget, now))
        except StorageError as exc:
            # Nothing split is sent: Envoys keep what they hold until its TTL, a newcomer
            # follows its no_assignment_behavior, and the bucket's next round retries.
            self.stats.store_failures += 1
            log.warning(
                "quota round: the store did not answer: %s", exc,
                extra={"event": "rlqs_store_failed", "domain": bucket.domain},
            )  # fmt: skip
            if fixed is None:
                return actions
            shares, budget = {}, None
        for stream, member in list(bucket.members.items()):
            held: Share | str | None = fixed
            member.would = None
            if fixed is None:
                share = shares[stream]
                held = DENY_ALL if share.empty else share
            elif fixed == ALLOW_ALL and budget is not None:
                # shadow (a split rule answered ALLOW_ALL): what it would hold, for its next
                # reports; a DENY_ALL rule admits nothing and would deny nothing more.
                member.would = (shares[stream], budget.fill_s)
            fill_s = budget.fill_s if budget is not None else 0
            if not member.returning:
                fresh = held != member.share or now - member.sent_at >= self.ttl_s
                if not isinstance(held, Share):
                    member.refill = None
                elif fresh:
                    member.refill = Refill.full(held, fill_s, now)
            member.share, member.sent_at = held, now
            actions.append(Action(stream, bucket.key, held, self.ttl_s, fill_s))
        return actions

    def _shares(self, bucket: Bucket, budget: Budget, now: float) -> Flow[dict[int, Share]]:
        """The round's shares; for an enforced rule, within the budget of changes (none for
        a shadow rule, whose shares are not sent, nor at the first round of a new budget)."""
        enforced = self.fixed(bucket) is None
        spent = bucket.spent(now, self.change_rounds * self.interval)
        limited = enforced and bucket.split_budget == budget
        weights = bucket.weights(self.peers)
        # What each member's Envoy holds: after rounds that sent nothing for a TTL (a store
        # that did not answer), its assignment expired, and sent again it would start full.
        holding = {
            stream: member.share
            for stream, member in bucket.members.items()
            if isinstance(member.share, Share)
            and not member.share.empty
            and now - member.sent_at < self.ttl_s
        }
        sent = yield from self._split(
            bucket, budget, weights, holding, spent if limited else None, now
        )
        self.stats.splits += sent.worked
        if enforced:
            sent = _returning(bucket, sent, holding, now)
            bucket.split_budget = budget
            self.stats.held_back += sent.held_back
            if sent.spent:
                bucket.changes.append((now, sent.spent))
        return sent.shares

    def _split(
        self,
        bucket: Bucket,
        budget: Budget,
        weights: dict[int, int] | None,
        holding: dict[int, Share],
        spent: int | None,
        now: float,
    ) -> Flow[Sent]:
        if self.fleet is not None:
            departed, bucket.departed = bucket.departed, []
            asked = {
                stream: member.demand(budget.fill_s, self.interval)
                for stream, member in bucket.members.items()
            }
            hold = self.ttl_s + self.interval
            try:
                return (
                    yield from self.fleet.shares_flow(
                        bucket.domain, bucket.key, budget, hold, asked, departed, weights,
                        holding, spent,
                    )
                )  # fmt: skip
            except StorageError:
                bucket.departed[:0] = departed  # for the next round
                raise
        return bucket.local_shares(budget, self.interval, weights, holding, spent)


def _returning(bucket: Bucket, sent: Sent, holding: dict[int, Share], now: float) -> Sent:
    """``sent``, the members that came back to an abandoned bucket capped by what it would
    hold (``Refill.cap``), and what the changes hand out counted again for them."""
    shares, spent = sent.shares, sent.spent
    for stream, member in bucket.members.items():
        if not member.returning or member.refill is None:
            continue
        share, had = shares[stream], holding.get(stream, NOTHING)
        capped = member.refill.cap(share, had, now)
        if capped is None:
            member.returning = False  # its share from now on, as any member's
            continue
        if shares is sent.shares:
            shares = dict(shares)
        shares[stream] = capped
        # A change to a non-empty share costs its capacity (``hold_back``).
        spent -= share.max_tokens if not share.empty and share != had else 0
        spent += capped.max_tokens if not capped.empty and capped != had else 0
    if shares is sent.shares:
        return sent
    return Sent(shares, spent, sent.held_back, sent.worked)
