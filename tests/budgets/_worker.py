"""A worker process for the multi-process budget tests (``python -m tests.budgets._worker``).

``reserve URL KEY ATTEMPTS SEED``: print "ready", wait for a line on stdin (the start
signal), make ATTEMPTS reservations of 50-400 tokens, print the admitted total.
``hold URL KEY SLOTS TTL``: take SLOTS concurrency slots with lease TTL seconds, print
"held", then sleep until killed.
"""

from __future__ import annotations

import random
import sys
import time

from ratewarden import Limiter
from ratewarden.budgets import TokenBudget
from ratewarden.storage.redis import RedisStore

BUDGET = {"tokens": "10000/hour"}


def reserve(url: str, key: str, attempts: int, seed: int) -> None:
    store = RedisStore.from_url(url, timeout=2.0)
    budget = TokenBudget(store, BUDGET, max_output_tokens=0)
    rng = random.Random(seed)
    budget.peek(key)  # connected and the script loaded before the start signal
    print("ready", flush=True)
    sys.stdin.readline()
    admitted = 0
    for _ in range(attempts):
        tokens = rng.randint(50, 400)
        if budget.reserve(key, input_tokens=tokens):
            admitted += tokens
    print(admitted, flush=True)
    store.close()


def hold(url: str, key: str, slots: int, ttl: float) -> None:
    store = RedisStore.from_url(url, timeout=2.0)
    limiter = Limiter(store)
    leases = [limiter.acquire_slot(key, 10, ttl=ttl) for _ in range(slots)]
    print("held" if all(leases) else "denied", flush=True)
    time.sleep(60)


if __name__ == "__main__":
    mode, url, key, *rest = sys.argv[1:]
    if mode == "reserve":
        reserve(url, key, int(rest[0]), int(rest[1]))
    else:
        hold(url, key, int(rest[0]), float(rest[1]))
