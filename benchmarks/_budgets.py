"""Token budget cases: one reserve + settle pair per call, beside the plain GCRA hits.

- ``TokenBudget(MemoryStore())`` and ``TokenBudget(RedisStore.from_url(url))``:
  ``reserve(key, input_tokens=100)`` with ``max_output_tokens=100`` (200 tokens
  reserved on one axis), then ``settle(..., output_tokens=50)`` (50 refunded);
- ``AsyncTokenBudget(AsyncRedisStore.from_url(url))`` with ``IN_FLIGHT`` pairs
  in flight.

A row's decisions per second are pairs per second: two store steps each. The
budget is ``LIMIT`` tokens per ``PERIOD_S``, so nothing is denied and every
pair takes the write path of both scripts.
"""

from __future__ import annotations

from typing import Any

from benchmarks._case import (
    LIMIT,
    PERIOD_S,
    TIMEOUT_S,
    AsyncSubject,
    Case,
    Env,
    NotAvailableError,
    Subject,
    need_redis,
)
from benchmarks._ratewarden import IN_FLIGHT

__all__ = ["cases"]

_NAME = "reserve+settle"


def _limits() -> dict[str, Any]:
    from ratewarden import Rate

    return {"tokens": Rate(LIMIT, PERIOD_S)}


def _budgets() -> Any:
    try:
        from ratewarden import budgets
    except Exception as exc:
        raise NotAvailableError(f"ratewarden.budgets: {type(exc).__name__}: {exc}") from exc
    return budgets


def _pair(budget: Any) -> Any:
    def decide(key: str) -> object:
        reservation = budget.reserve(key, input_tokens=100)
        return reservation.allowed and budget.settle(reservation, output_tokens=50).applied

    return decide


def _memory(env: Env) -> Subject:
    from ratewarden import MemoryStore

    budget = _budgets().TokenBudget(MemoryStore(), _limits(), max_output_tokens=100)
    return Subject(_pair(budget), budget.store.close)


def _redis(env: Env) -> Subject:
    from ratewarden.storage.redis import RedisStore

    store = RedisStore.from_url(need_redis(env), timeout=TIMEOUT_S)
    budget = _budgets().TokenBudget(store, _limits(), max_output_tokens=100)
    return Subject(_pair(budget), store.close)


async def _redis_async(env: Env) -> AsyncSubject:
    from ratewarden.storage.redis import AsyncRedisStore

    store = AsyncRedisStore.from_url(need_redis(env), timeout=TIMEOUT_S)
    budget = _budgets().AsyncTokenBudget(store, _limits(), max_output_tokens=100)

    async def decide(key: str) -> object:
        reservation = await budget.reserve(key, input_tokens=100)
        if not reservation.allowed:
            return False
        return (await budget.settle(reservation, output_tokens=50)).applied

    return AsyncSubject(decide, store.aclose)


def cases() -> list[Case]:
    return [
        Case("ratewarden budgets", _NAME, "memory", "subject", setup=_memory),
        Case("ratewarden budgets", _NAME, "redis", "subject", setup=_redis),
        Case(
            "ratewarden budgets",
            _NAME,
            "redis-async",
            "subject",
            setup_async=_redis_async,
            in_flight=IN_FLIGHT,
        ),
    ]
