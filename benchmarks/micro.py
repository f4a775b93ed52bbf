"""Hot-path figures for one source tree, for comparing two commits of ratewarden.

``scripts/bench`` compares ratewarden with its peers; this script compares
ratewarden with itself. Run it once per tree, alternately, and compare::

    git archive <old-commit> src | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old/src .venv/bin/python -m benchmarks.micro --redis-url redis://127.0.0.1:6379/0
    .venv/bin/python -m benchmarks.micro --redis-url redis://127.0.0.1:6379/0

It prints one line per figure:

- ``memory_1key_us`` / ``memory_10k_us``: ``Limiter(MemoryStore()).hit(key, rate)``
  (GCRA), best of 7 loops of 20,000 calls, microseconds per call;
- ``memory_10k_live_us`` / ``memory_10k_evicting_us``: 10,000 keys at 100/minute, whose
  state stays in the store (and, with ``max_keys=5,000``, is evicted on every write);
- ``limits_fixed_window_us``: the same loop over ``limits``' fixed window, for scale
  (when ``limits`` is installed);
- ``sync_cpu_us`` / ``script_loop_cpu_us`` and their decisions/s: a sync
  ``RedisStore`` and a redis-py ``register_script`` loop, 6 interleaved rounds of
  0.4 s, medians of client CPU (user + system) per decision and of the rates;
- ``async_cpu_us`` / ``async_per_s``: ``AsyncRedisStore`` with 64 decisions in
  flight, the best of 5 rounds of 19,200 decisions.

The Redis database given is written to (keys under ``rw:`` and ``micro:``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

RATE_LIMIT = 1_000_000_000
PERIOD_S = 3_600
KEYS = [f"user:{i}" for i in range(10_000)]


def _best_us(loop: Callable[[], None], calls: int, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        loop()
        best = min(best, time.perf_counter() - started)
    return best / calls * 1e6


def memory() -> dict[str, float]:
    from ratewarden import Limiter, MemoryStore, Rate

    rate = Rate(RATE_LIMIT, PERIOD_S)
    hit = Limiter(MemoryStore()).hit
    for key in KEYS:
        hit(key, rate)

    def one_key() -> None:
        for _ in range(20_000):
            hit("user:0", rate)

    def many_keys() -> None:
        for _ in range(2):
            for key in KEYS:
                hit(key, rate)

    found = {
        "memory_1key_us": _best_us(one_key, 20_000),
        "memory_10k_us": _best_us(many_keys, 20_000),
        **_live_keys(),
    }
    try:
        import limits
    except ImportError:
        return found
    item = limits.RateLimitItemPerSecond(RATE_LIMIT, PERIOD_S)
    peer = limits.strategies.FixedWindowRateLimiter(limits.storage.MemoryStorage()).hit

    def peer_loop() -> None:
        for _ in range(20_000):
            peer(item, "user:0")

    found["limits_fixed_window_us"] = _best_us(peer_loop, 20_000)
    return found


def _live_keys() -> dict[str, float]:
    """10,000 keys whose state stays (100/minute: each hit keeps its key 0.6 s longer).

    The suite's workload (10**9 per hour) leaves a key's state expired 3.6 us after
    its hit, so its memory store holds almost nothing; here it holds every key, and
    with ``max_keys=5,000`` every write also evicts one.
    """
    from ratewarden import Limiter, MemoryStore, Rate

    rate = Rate(100, 60)
    found = {}
    for name, store in (
        ("memory_10k_live_us", MemoryStore()),
        ("memory_10k_evicting_us", MemoryStore(max_keys=5_000)),
    ):
        hit = Limiter(store).hit
        for key in KEYS:
            hit(key, rate)

        def loop(hit: Callable[..., object] = hit) -> None:
            for key in KEYS:
                hit(key, rate)

        # Three passes: 30,000 hits, at most 4 per key, all within the 100 of capacity.
        found[name] = _best_us(loop, len(KEYS), repeat=3)
    return found


def _timed(decide: Callable[[], object], seconds: float) -> tuple[float, float]:
    """(decisions per second, client CPU us per decision) of ``decide`` for ``seconds``."""
    done = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds
    now = started
    while now < deadline:
        for _ in range(64):
            decide()
        done += 64
        now = time.perf_counter()
    return done / (now - started), (time.process_time() - cpu) / done * 1e6


def sync_redis(url: str) -> dict[str, float]:
    import redis

    from ratewarden import Limiter, Rate
    from ratewarden.storage import _plan, _scripts
    from ratewarden.storage.redis import RedisStore

    rate = Rate(RATE_LIMIT, PERIOD_S)
    store = RedisStore.from_url(url, timeout=1.0)
    hit = Limiter(store).hit
    client = redis.Redis.from_url(url, socket_timeout=1.0)
    script = client.register_script(_scripts.script("gcra").source)
    plan = _plan.build("gcra", "micro", "user:0", rate, 1)
    keys, args = list(plan.keys), _plan.argv(plan, None)
    sides: dict[str, Callable[[], object]] = {
        "sync": lambda: hit("user:0", rate),
        "script_loop": lambda: script(keys=keys, args=args),
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for decide in sides.values():
        _timed(decide, 0.2)
    for round_ in range(6):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            samples[name].append(_timed(sides[name], 0.4))
    store.close()
    client.close()
    found = {}
    for name, values in samples.items():
        found[f"{name}_per_s"] = statistics.median(rate for rate, _ in values)
        found[f"{name}_cpu_us"] = statistics.median(cpu for _, cpu in values)
    return found


async def _async_redis(url: str) -> dict[str, float]:
    from ratewarden import AsyncLimiter, Rate
    from ratewarden.storage.redis import AsyncRedisStore

    rate = Rate(RATE_LIMIT, PERIOD_S)
    store = AsyncRedisStore.from_url(url, timeout=1.0)
    hit = AsyncLimiter(store).hit

    async def worker(calls: int, offset: int) -> None:
        for i in range(calls):
            await hit(KEYS[(offset + i * 64) % len(KEYS)], rate)

    await asyncio.gather(*(worker(100, j) for j in range(64)))
    best: tuple[float, float] | None = None
    for _ in range(5):
        cpu = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(worker(300, j) for j in range(64)))
        done = 64 * 300
        result = (done / (time.perf_counter() - started), (time.process_time() - cpu) / done * 1e6)
        if best is None or result[0] > best[0]:
            best = result
    await store.aclose()
    assert best is not None
    return {"async_per_s": best[0], "async_cpu_us": best[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.micro",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--redis-url", help="a redis-server to use; without it, memory only")
    args = parser.parse_args(argv)
    import ratewarden

    print(f"tree: {ratewarden.__file__}")
    found: dict[str, Any] = memory()
    if args.redis_url:
        found |= sync_redis(args.redis_url)
        found |= asyncio.run(_async_redis(args.redis_url))
    for name, value in found.items():
        print(f"{name} {value:,.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
