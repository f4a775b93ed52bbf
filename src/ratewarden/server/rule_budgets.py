"""The ``budget`` rules of ``ratewarden serve``: ``RuleBudgets`` / ``AsyncRuleBudgets``.

The service decides a descriptor whose rule has a ``budget`` through its limiter
with ``RuleBudgets.check`` / ``account`` in place of the store's ``hit``: a check
on hits 0 (over when no token is left), a charge of tokens already spent (never
refused) otherwise, turned into the ``Decision`` the rest of the service reports.
One single-axis ``TokenBudget`` per rate, each with a ``Backlog``: tokens whose
charge the store could not take, or that were spent while its circuit was open
(``owe``), are paid before the key's next check or charge, and by ``replay``
(``ratewarden serve`` replays when its health check finds the store back).
With ``denials`` (the service's over-limit cache, shared with its limiter under
keys of their own), a check the store found spent is remembered until a token is
back, and ``cached`` answers the key's checks until then without a store call:
charges only ever take tokens, so the store could answer nothing else.
Everything here uses ``TokenBudget``'s public API only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ratewarden.budgets import (
    AsyncTokenBudget,
    AxisState,
    Backlog,
    BudgetDecision,
    BudgetStep,
    Charge,
    TokenBudget,
    Usage,
    steps_flow,
)
from ratewarden.decision import Decision
from ratewarden.errors import StorageError
from ratewarden.limiter import AsyncLimiter, Limiter, NegativeCache, aged
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage import AsyncStore, Store

__all__ = ["BACKLOG_KEYS", "AsyncRuleBudgets", "Reached", "RuleBudgets", "wait_for_one"]

log = logging.getLogger("ratewarden.server")

#: Distinct rates whose budget objects are kept (a config has few; Envoy's limit overrides
#: can name any rate, so the table is emptied rather than grown past this).
_MAX_RATES = 1024
#: Keys whose tokens one rule budget owes its store at most (``Backlog``), and the most
#: a ``replay`` pays in one round.
BACKLOG_KEYS = 10_000
REPLAY_KEYS = 1_000


def wait_for_one(state: AxisState) -> float:
    """Seconds until one token is back on an empty axis (GCRA: the state moves one
    emission interval into the burst), never earlier than exact."""
    if not math.isfinite(state.reset_after):
        return math.inf
    n, d = state.rate.reduced  # the emission interval is d / n microseconds
    reset_us = round(state.reset_after * 1_000_000)
    wait_us = -(-(reset_us * n - (state.rate.capacity - 1) * d) // n)
    return max(wait_us, 1) / 1_000_000


def _checked(decision: BudgetDecision, *, charge_follows: bool) -> Decision:
    """A cost-0 look at the budget as a Decision.

    A check (the descriptor's hits are 0) is over when no token is left. The
    look before a charge (hits > 0) is never over: a charge records tokens
    already spent and cannot be refused.
    """
    state = decision.axes[0]
    allowed = charge_follows or state.remaining >= 1
    return Decision(
        allowed=allowed,
        limit=state.limit,
        remaining=state.remaining,
        reset_after=state.reset_after,
        retry_after=0.0 if allowed else wait_for_one(state),
        rate=state.rate,
        cost=0,
        refill_after=state.refill_after,
    )


def _charged(charge: Charge, cost: int) -> Decision:
    """A charge as a Decision: always allowed, with what is left after it."""
    state = charge.decision.axes[0]
    return Decision(
        allowed=True,
        limit=state.limit,
        remaining=state.remaining,
        reset_after=state.reset_after,
        retry_after=0.0,
        rate=state.rate,
        cost=cost,
        refill_after=state.refill_after,
    )


def _denied(rate: Rate, key: str) -> tuple[str, str, Rate]:
    """A spent budget's key in the over-limit cache: no limiter key starts with "budget"
    (theirs start with an algorithm's name)."""
    return ("budget", key, rate)


def _keys(count: int) -> str:
    """``1 key``, ``2 keys``: a count of keys for a log line."""
    return f"{count} key" if count == 1 else f"{count} keys"


_B = TypeVar("_B", TokenBudget, AsyncTokenBudget)
#: A ``hit`` call: ``(rate, key, hits, cost)``.
Call = tuple[Rate, str, int, int]


class Reached:
    """``RuleBudgets.account`` (or ``check``) that remembers whether the limiter called it:
    a charge the limiter answered with its failure mode without reaching the store (its
    circuit open) is owed by the service; one that reached it owes itself."""

    __slots__ = ("call", "reached")

    def __init__(self, call: Any) -> None:
        self.call = call
        self.reached = False

    def __call__(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Any:
        self.reached = True
        return self.call(algorithm, key, rates, cost)


class _RuleBudgetsBase(Generic[_B]):
    """One single-axis budget (``tokens``) per rate, on one store; no I/O here."""

    #: ``check`` and ``account`` (each subclass's, blocking or awaited).
    check: Any
    account: Any

    def __init__(self, store: Any, denials: NegativeCache | None) -> None:
        self.store = store
        self._budgets: dict[Rate, _B] = {}
        #: Spent budgets' checks until a token is back (None: off), by ``_denied(rate, key)``.
        self.denials = denials

    def cached(self, rate: Rate, key: str) -> Decision | None:
        """A check (hits 0) of ``key``'s budget at ``rate`` that a remembered denial answers
        now (aged to now), or None: ask the store. No store call."""
        denials = self.denials
        if denials is None or len(denials) == 0 or _denied(rate, key) not in denials:
            return None  # the usual case
        now = self.store.clock.now_us()
        found = denials.lookup(_denied(rate, key), 0, now)
        return None if found is None else aged(found.decision, now - found.at_us, 0)

    def _checked(self, rate: Rate, key: str, decision: BudgetDecision, hits: int) -> Decision:
        """A look as a Decision (see ``_checked``); a check found spent is remembered."""
        checked = _checked(decision, charge_follows=hits > 0)
        if not checked.allowed and self.denials is not None:
            self.denials.remember(_denied(rate, key), checked, self.store.clock.now_us())
        return checked

    def via(self, hits: int, cost: int) -> Any:
        """What a limiter asks in place of the store's ``hit`` for a budget descriptor of
        ``hits`` in a call at ``cost``: ``check`` (hits 0) or ``account``, in a ``Reached``
        for a charge (``cost`` > 0)."""
        call = self.check if hits == 0 else self.account
        return Reached(call) if cost > 0 else call

    def _budget(self, rate: Rate) -> _B:
        budget = self._budgets.get(rate)
        if budget is None:
            if len(self._budgets) >= _MAX_RATES:  # forget them, but not what they are owed
                self._budgets = {r: b for r, b in self._budgets.items() if b.backlog}
            budget = self._budgets[rate] = self._make(rate)
        return budget

    def _make(self, rate: Rate) -> _B:
        raise NotImplementedError

    def _steps(self, calls: Sequence[Call]) -> list[BudgetStep]:
        """``hit_all``'s calls as budget steps: a charge, or a peek at cost 0."""
        return [
            BudgetStep(self._budget(rate), key, Usage(0, cost, 0) if cost > 0 else None)
            for rate, key, _, cost in calls
        ]

    def _answers(self, calls: Sequence[Call], found: list[Any]) -> list[Decision | Exception]:
        """The steps' answers as ``hit`` gives them (a check found spent is remembered)."""
        answers: list[Decision | Exception] = []
        for (rate, key, hits, cost), answer in zip(calls, found, strict=True):
            if isinstance(answer, Exception):
                answers.append(answer)
            elif cost > 0:
                answers.append(_charged(answer, cost))
            else:
                answers.append(self._checked(rate, key, answer, hits))
        return answers

    def owe(self, rate: Rate, key: str, tokens: int) -> bool:
        """Tokens of ``key``'s budget at ``rate`` that were spent while the store could not
        be asked (its circuit open, say): charged before the key's next check or charge, or
        by ``replay``. False when the budget's backlog is full (the tokens are dropped)."""
        return self._budget(rate).owe(key, Usage(0, tokens, 0))

    def owed(self) -> tuple[int, int]:
        """``(keys, tokens)`` owed now, over every rate."""
        keys = tokens = 0
        for budget in list(self._budgets.values()):
            backlog = budget.backlog
            if backlog:
                assert backlog is not None
                for key in backlog.owing():
                    owed = backlog.owed(key)
                    if owed is not None:
                        keys += 1
                        tokens += owed[0]
        return keys, tokens

    def owes(self) -> bool:
        """Whether any budget owes its store tokens now."""
        return any(budget.backlog for budget in list(self._budgets.values()))

    def warn_owed(self) -> None:
        """Log a warning naming the tokens still owed (a server stopping with them)."""
        keys, tokens = self.owed()
        if keys:
            log.warning(
                "stopping with %d budget tokens of %d %s never charged",
                tokens,
                keys,
                "key" if keys == 1 else "keys",
                extra={"event": "budget_owed_at_stop", "keys": keys, "tokens": tokens},
            )

    def _paid(self, paid: int) -> None:
        keys, tokens = self.owed()
        log.info(
            "paid the budget tokens owed by %s (%s, %d tokens still owed)",
            _keys(paid),
            _keys(keys),
            tokens,
            extra={"event": "budget_paid", "keys": paid, "owed_keys": keys},
        )

    def _owing(self) -> list[_B]:
        return [budget for budget in list(self._budgets.values()) if budget.backlog]


class RuleBudgets(_RuleBudgetsBase[TokenBudget]):
    """The budget rules of ``RateLimitService`` on a synchronous store.

    ``hit(rate, key, hits, cost)``: ``hits`` is the descriptor's own hits (0: a
    check), ``cost`` what this store call consumes (0 while the service looks
    before charging). A check is over when ``key`` has no token left; a charge
    records ``cost`` tokens up to an empty budget and is always allowed.

    ``check`` and ``account`` are ``hit`` with a store's ``hit`` arguments
    ``(algorithm, key, rates, cost)`` (the first rate is the budget's), for a
    limiter to ask in place of the store: ``check`` for a descriptor of hits 0,
    ``account`` for one with hits.
    """

    def __init__(self, store: Store, denials: NegativeCache | None = None) -> None:
        super().__init__(store, denials)
        self.store: Store = store
        self._limiter = Limiter(store)  # runs several budgets' steps together (hit_all)

    def _make(self, rate: Rate) -> TokenBudget:
        backlog = Backlog(BACKLOG_KEYS)
        return TokenBudget(self.store, {"tokens": rate}, max_output_tokens=0, backlog=backlog)

    def replay(self, max_keys: int = REPLAY_KEYS) -> int:
        """Pay what the store is owed (at most ``max_keys`` keys); the keys paid. Raises
        ``StorageUnavailableError`` at the first that fails (the rest stay owed)."""
        paid = 0
        for budget in self._owing():
            if paid >= max_keys:
                break
            paid += budget.replay(max_keys - paid)
        return paid

    def hit(self, rate: Rate, key: str, hits: int, cost: int) -> Decision:
        """Check (``cost`` 0) or charge (``cost`` tokens) the budget of ``key`` at ``rate``."""
        budget = self._budget(rate)
        if cost > 0:
            return _charged(budget.charge(key, Usage(0, cost, 0)), cost)
        return self._checked(rate, key, budget.peek(key), hits)

    def hit_all(self, calls: Sequence[Call]) -> list[Decision | Exception]:
        """``hit`` of each ``(rate, key, hits, cost)``, in order, their store steps made
        together (``steps_flow``): each call's Decision, or the exception its ``hit`` would
        raise."""
        steps = self._steps(calls)
        return self._answers(calls, self._limiter.run(steps_flow(self._limiter, steps)))

    def check(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """A descriptor of hits 0: over when ``key`` has no token left."""
        return self.hit(rates[0], key, 0, cost)

    def account(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """A descriptor with hits: a look (``cost`` 0, never over) or the charge."""
        return self.hit(rates[0], key, 1, cost)

    def __repr__(self) -> str:
        return f"RuleBudgets({self.store!r})"


class AsyncRuleBudgets(_RuleBudgetsBase[AsyncTokenBudget]):
    """The asyncio twin of ``RuleBudgets``, for ``AsyncRateLimitService``."""

    def __init__(self, store: AsyncStore, denials: NegativeCache | None = None) -> None:
        super().__init__(store, denials)
        self.store: AsyncStore = store
        self._limiter = AsyncLimiter(store)

    def _make(self, rate: Rate) -> AsyncTokenBudget:
        backlog = Backlog(BACKLOG_KEYS)
        return AsyncTokenBudget(self.store, {"tokens": rate}, max_output_tokens=0, backlog=backlog)

    async def replay(self, max_keys: int = REPLAY_KEYS) -> int:
        """See ``RuleBudgets.replay``."""
        paid = 0
        for budget in self._owing():
            if paid >= max_keys:
                break
            paid += await budget.replay(max_keys - paid)
        return paid

    async def pay_owed(self) -> None:
        """``replay``, logged: what was paid and what is still owed, or why nothing was."""
        try:
            paid = await self.replay()
        except StorageError as error:
            log.warning("budget tokens still owed: %s", error, extra={"event": "budget_owed"})
            return
        except Exception:  # a bug must not stop the health loop that calls this
            log.exception("paying budget tokens owed failed", extra={"event": "budget_owed"})
            return
        self._paid(paid)

    async def hit(self, rate: Rate, key: str, hits: int, cost: int) -> Decision:
        """See ``RuleBudgets.hit``."""
        budget = self._budget(rate)
        if cost > 0:
            return _charged(await budget.charge(key, Usage(0, cost, 0)), cost)
        return self._checked(rate, key, await budget.peek(key), hits)

    async def hit_all(self, calls: Sequence[Call]) -> list[Decision | Exception]:
        """See ``RuleBudgets.hit_all``."""
        steps = self._steps(calls)
        found = await self._limiter.run(steps_flow(self._limiter, steps))
        return self._answers(calls, found)

    async def check(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """See ``RuleBudgets.check``."""
        return await self.hit(rates[0], key, 0, cost)

    async def account(self, algorithm: str, key: str, rates: Sequence[Rate], cost: int) -> Decision:
        """See ``RuleBudgets.account``."""
        return await self.hit(rates[0], key, 1, cost)

    def __repr__(self) -> str:
        return f"AsyncRuleBudgets({self.store!r})"
