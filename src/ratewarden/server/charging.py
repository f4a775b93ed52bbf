"""How a request of several descriptors is decided and charged (step 3 of "How one
request is decided" in ``server/service.py``).

- Budget checks first: a token budget's check (hits 0) charges nothing, so when a request
  has one beside other descriptors it is asked alone, first. A request it denies goes no
  further than the looks its response needs; one it admits is decided on the rest.
- The rest in one atomic store step when they may go together (``server/joint_step.py``).
- Otherwise checked, then charged: every counter but a budget's charge (which records
  tokens already spent and is never over, so is looked at only when the request is denied)
  is checked at cost 0, and all are charged only if no enforcing descriptor would deny. A
  descriptor whose check the store failed keeps its failure mode's answer: the store is not
  asked again to charge it (a second timeout, a second error counted), and the ``local``
  mode charges its in-process bucket instead. One the open circuit breaker refused is asked
  again, as any other: that costs no wait, and a probe may have closed the circuit since
  (under asyncio a request's checks go side by side, and only one of them is the probe). A
  second refusal is not reported: each descriptor counts one ``store_error`` (and one
  degraded decision) a request.

``Charging`` is a base class of the service: it calls the service's ``_decide`` (one
descriptor's call) and ``_run`` (several, side by side) and reads its limiter, reports and
options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratewarden.errors import CircuitOpenError
from ratewarden.limiter import AsyncLimiter, EachCall, Flow, Limiter
from ratewarden.server.descriptors import (
    Item,
    Result,
    counter_id,
    denied,
    joint_algorithm,
    settled,
    to_check,
)
from ratewarden.server.hooks import Reports
from ratewarden.server.joint_step import cached_check, joint_step, joint_step_algorithm

__all__ = ["Charging"]


class Charging:
    """The strategies for a request of several descriptors; no state of its own."""

    limiter: Limiter | AsyncLimiter
    quota_mode: bool
    _joint: bool  # the store has ``hit_all`` and quota mode is off
    _reports: Reports
    budgets: Any  # the service's RuleBudgets or AsyncRuleBudgets

    def _run(self, calls: list[tuple[Item, int]]) -> Flow[None]:
        raise NotImplementedError  # the service's: each item gets its ``result``

    def _decide(self, item: Item, cost: int) -> Flow[Result]:
        raise NotImplementedError  # the service's: one descriptor's call at ``cost``

    def _several(self, items: list[Item], stored: list[Item]) -> Flow[None]:
        """Decide ``stored`` (two or more items needing the store) of the request ``items``."""
        checks = [item for item in stored if item.cost == 0 and item.rule and item.rule.budget]
        if checks and len(checks) < len(stored):  # a budget check charges nothing: ask it first
            yield from self._run([(item, 0) for item in checks])
            stored = [item for item in stored if item.result is None]
            if denied(items, quota_mode=self.quota_mode):  # the rest only looked at
                yield from self._check_then_charge(items, stored)
                return
            if len(stored) == 1:
                stored[0].result = yield from self._decide(stored[0], stored[0].cost)
                return
        algorithm = joint_step_algorithm(stored, self.limiter) if self._joint else None
        if algorithm is None or not (
            yield from joint_step(stored, algorithm, self.limiter, self._reports)
        ):
            yield from self._check_then_charge(items, stored)

    def _budget_step(self, calls: list[tuple[Item, int]]) -> Flow[None]:
        """Several budget descriptors' calls (checks, looks, charges), each answered as
        ``_decide`` answers it alone, in this order, their store steps made together
        (``RuleBudgets.hit_all``: one step in memory, one pipeline on Redis)."""
        pending = []
        for item, cost in calls:
            rule = item.rule
            assert rule is not None
            if cost == 0 and item.cost == 0:  # a check a remembered spent budget answers
                spent = self.budgets.cached(rule.rates[0], item.key)
                if spent is not None:
                    item.result = Result(False, spent, None, False, cached=True)
                    continue
            pending.append((item, cost, rule))
        if len(pending) < 2:
            for item, cost, _ in pending:
                item.result = yield from self._decide(item, cost)
            return
        errors: list[list[Exception]] = [[] for _ in pending]
        each = [
            EachCall(
                item.key,
                rule.rates,
                cost,
                rule.failure_mode,
                rule.algorithm,
                self._failed_hook(item, errors[i]),
            )
            for i, (item, cost, rule) in enumerate(pending)
        ]

        def via_all(positions: list[int]) -> Any:
            asked = [pending[i] for i in positions]
            return self.budgets.hit_all(
                [
                    (rule.rates[0], item.key, 0 if item.cost == 0 else 1, cost)
                    for item, cost, rule in asked
                ]
            )

        found = yield from self.limiter.hit_each_flow(each, via_all)
        for (item, cost, rule), (decision, asked), failures in zip(
            pending, found, errors, strict=True
        ):
            if decision.degraded:
                if cost > 0 and not asked:  # the open breaker answered: the store not asked
                    self.budgets.owe(rule.rates[0], item.key, cost)
                item.result = settled(decision, cost)
                item.result.refused = bool(failures) and isinstance(failures[0], CircuitOpenError)
            elif not asked:  # the over-limit cache answered
                item.result = Result(False, decision, None, False, cached=True)
            else:
                allowed = decision.allowed
                item.result = Result(allowed, decision, None, allowed and cost > 0)

    def _failed_hook(self, item: Item, errors: list[Exception]) -> Callable[[Exception], None]:
        """A call's ``on_failure``: the error kept (was it the open breaker?) and reported,
        unless a failure mode answered the item earlier in its request (a check the breaker
        refused, asked again to be charged): it was reported then."""
        rule, reported = item.rule, item.result is not None and item.result.failure is not None
        assert rule is not None  # every item the store decides has one

        def failed(error: Exception) -> None:
            errors.append(error)
            if not reported:
                self._reports.store_error(rule, error)

        return failed

    def _check(self, stored: list[Item]) -> Flow[None]:
        """Check every stored item (cost 0): a denial the over-limit cache holds answers its
        item, and the others are checked in one atomic store step when they may go together
        (a request denied from the cache, the usual case in a flood of denied requests,
        then costs one store call, not one per descriptor), else each on its own."""
        pending = stored
        if self._joint and len(stored) > 1:
            pending = []
            for item in stored:
                cached = cached_check(item, self.limiter)
                if cached is None:
                    pending.append(item)
                else:
                    item.result = cached
            algorithm = joint_algorithm(pending) if len(pending) > 1 else None
            if algorithm is not None and (
                yield from joint_step(pending, algorithm, self.limiter, self._reports, check=True)
            ):
                return
        yield from self._run([(item, 0) for item in pending])

    def _check_then_charge(self, items: list[Item], stored: list[Item]) -> Flow[None]:
        looked = to_check(stored)  # budget charges are looked at only if the request is denied
        yield from self._check(looked)
        short = shortfalls(looked)
        failed = [item for item in looked if _failed(item.result)]
        gone = {id(item) for item in failed}  # their failure modes answered: not asked again
        charge = [item for item in stored if item.cost > 0 and id(item) not in gone]
        if not denied(items, lambda item: id(item) in short, quota_mode=self.quota_mode):
            self._charge_locally(failed)
            yield from self._run([(item, item.cost) for item in charge])
            return
        # Denied: re-run the descriptors short on their own at full cost, for their exact
        # retry times (a denial consumes nothing). One that fits alone but not with its
        # twins on the same counter is over as checked: re-running it would charge it.
        alone = {id(item) for item in charge if id(item) in short and is_short(item, item.cost)}
        checks = [item for item in looked if item.cost == 0]  # short of its twins' hits
        for item in charge + failed + checks:  # a failure mode's short bucket: over as checked
            if id(item) in short and id(item) not in alone:
                assert item.result is not None
                item.result.allowed = False
        unlooked = [(item, 0) for item in stored if item.result is None]  # budget charges
        yield from self._run([(item, item.cost) for item in charge if id(item) in alone] + unlooked)
        # A re-run may pass after all (room freed in between): then charge the rest too.
        if not denied(items, quota_mode=self.quota_mode):
            self._charge_locally(failed)
            yield from self._run([(item, item.cost) for item in charge if id(item) not in short])

    def _charge_locally(self, failed: list[Item]) -> None:
        """Charge, in this process, the ``local`` failure mode's descriptors of an admitted
        request whose check the store failed (``open`` and ``closed`` have nothing to charge)."""
        for item in failed:
            rule, result = item.rule, item.result
            if rule is None or result is None or result.failure != "local" or item.cost == 0:
                continue
            [decision] = self.limiter.local_all(
                [(item.key, rule.rates, item.cost)], algorithm=rule.algorithm
            )
            item.result = settled(decision, item.cost)


def is_short(item: Item, demand: int) -> bool:
    """Whether a checked (cost 0) counter lacks room for ``demand`` hits."""
    result = item.result
    assert result is not None
    if result.decision is None or (item.rule is not None and item.rule.budget):
        return not result.allowed  # a budget charge records tokens already spent: never short
    return not result.allowed or result.decision.remaining < demand


def shortfalls(stored: list[Item]) -> set[int]:
    """The ids of the checked (cost 0) items that lack room on their counter: a charging
    one for all the counter's hits (descriptors may share a counter: a window's holds no
    limit, so an override shares its rule's), a check for the hits that fit (a check at a
    lower limit than a hit that will be charged is over; beside a hit denied anyway, it
    sees the count that stays)."""
    demand: dict[tuple[str, tuple[str, ...]], int] = {}
    for item in stored:
        demand[counter_id(item)] = demand.get(counter_id(item), 0) + item.cost
    short = {id(i) for i in stored if i.cost > 0 and is_short(i, demand[counter_id(i)])}
    fitting = {ident: 0 for ident in demand}
    for item in stored:
        if id(item) not in short:
            fitting[counter_id(item)] += item.cost
    checks = [(item, fitting[counter_id(item)]) for item in stored if item.cost == 0]
    return short | {id(item) for item, hits in checks if hits > 0 and is_short(item, hits)}


def _failed(result: Result | None) -> bool:
    """Whether the store failed a check (not the breaker: see ``Result.refused``)."""
    return result is not None and result.failure is not None and not result.refused
