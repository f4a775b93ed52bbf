"""MemcacheStore on a real memcached: every operation decides as MemoryStore does, exactly and
atomically across threads and processes, and every process re-reads what another changed."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.queues import Queue
from typing import Any

import pytest

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.budgets import TokenBudget, Usage
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.storage import Op
from ratewarden.storage._keys import escape
from ratewarden.storage._memcache_items import item_of
from ratewarden.storage.memcache import MemcacheStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer
from tests._servers import HOST, STORE_TIMEOUT, free_port

COUNTING = ("fixed_window", "sliding_log", "sliding_window")
PER_SECOND, PER_MINUTE = Rate.parse("5/s"), Rate.parse("20/m")
RATE_SETS: list[list[Rate]] = [[PER_SECOND], [PER_SECOND, PER_MINUTE], [Rate.parse("5/s", burst=8)]]
# Any key a caller may pass: non-ASCII, spaces, braces and % (escaped in the hash tag), the
# longest readable item name (250 bytes) and one byte over it, and a long one (hashed).
KEYS = ["a", "ключ-ü", "with space", "{braces}", "100%", "a}b{c", "k" * 245, "k" * 246, "x" * 300]
LEASES = ["lease-1", "lease-2", "lease-é"]
ADVANCES = [0, 0.001, 0.01, 0.05, 0.2, 0.5, 1, 3, 61]

#: A step of a script: a store method and its arguments, or ("advance", seconds).
Step = tuple[Any, ...]


def script(seed: int, algorithm: str, steps: int) -> list[Step]:
    """Seeded random calls of every kind on a few keys (hits of ``algorithm`` and of the
    others, resets, slots, all on the same items), with the clock moved in between."""
    rng = random.Random(seed)
    found: list[Step] = []
    for _ in range(steps):
        roll = rng.random()
        key = rng.choice(KEYS[:2]) if rng.random() < 0.7 else rng.choice(KEYS)
        rates = rng.choice(RATE_SETS)
        if roll < 0.15:
            found.append(("advance", rng.choice(ADVANCES)))
        elif roll < 0.7:
            found.append(("hit", algorithm, key, rates, rng.randint(0, 3)))
        elif roll < 0.75:
            found.append(("hit", rng.choice(sorted(ALGORITHMS)), key, rates, rng.randint(0, 3)))
        elif roll < 0.8:
            found.append(("reset", algorithm, key, rates))
        elif roll < 0.9:
            ttl = rng.choice([300_000, 5_000_000, 30_000_000])
            found.append(("acquire_slot", key, 3, rng.choice(LEASES), rng.randint(1, 2), ttl))
        elif roll < 0.96:
            found.append(("release_slot", key, rng.choice(LEASES)))
        else:
            found.append(("renew_slot", key, rng.choice(LEASES), rng.choice([100_000, 2_000_000])))
    return found


def outcome(store: Any, step: Step) -> Any:
    """What a step's call returns, or its error's type and message (a counting algorithm
    refuses a burst on every store)."""
    try:
        return getattr(store, step[0])(*step[1:])
    except ConfigurationError as exc:
        return type(exc), str(exc)


def test_every_operation_decides_as_memory_does_on_one_store(memcached: MemcachedServer) -> None:
    """One MemcacheStore against MemoryStore, each on its own clock moved alike: 2,400 seeded
    random steps of hits (every algorithm, one rate and layered, costs 0-3), resets and slot
    calls on keys of every kind, and clock moves, with results equal call for call."""
    check_script(memcached, stores=1, cache_items=10_000)


@pytest.mark.parametrize("cache_items", [0, 10_000])
def test_two_stores_taking_turns_decide_as_one_memory_store(
    memcached: MemcachedServer, cache_items: int
) -> None:
    """Two stores on one server (as two processes would be), each call made by one of them at
    random: every decision is still MemoryStore's, so each re-reads what the other wrote,
    whether it caches values or not."""
    check_script(memcached, stores=2, cache_items=cache_items)


def check_script(memcached: MemcachedServer, stores: int, cache_items: int) -> None:
    memory_clock, memcache_clock = ManualClock(), ManualClock()
    memory = MemoryStore(clock=memory_clock)
    remote = [
        MemcacheStore(
            memcached.url, clock=memcache_clock, timeout=STORE_TIMEOUT, cache_items=cache_items
        )
        for _ in range(stores)
    ]
    rng = random.Random(stores * 1000 + cache_items)
    for index, algorithm in enumerate(sorted(ALGORITHMS)):
        for number, step in enumerate(script(index, algorithm, 400)):
            if step[0] == "advance":
                memory_clock.advance(step[1])
                memcache_clock.advance(step[1])
                continue
            mine = outcome(memory, step)
            assert outcome(rng.choice(remote), step) == mine, (algorithm, number, step)
    for store in remote:
        store.close()


@pytest.mark.parametrize("algorithm", COUNTING)
def test_counting_algorithms_refuse_a_burst_before_sending_anything(algorithm: str) -> None:
    """The burst is refused as MemoryStore refuses it, by the store's hit itself: a store on a
    closed port says ConfigurationError, not that the server is unreachable."""
    store = MemcacheStore([(HOST, free_port())], clock=ManualClock())
    with pytest.raises(ConfigurationError, match="no separate burst"):
        store.hit(algorithm, "k", Rate.parse("5/s", burst=8))


def test_reset_forgets_every_layer_and_deletes_an_emptied_item(memcached: MemcachedServer) -> None:
    """reset drops the layers' entries; with nothing else in the item, the item is deleted.
    A key's slots share its item and outlive a reset of its rates."""
    store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rates = [PER_SECOND, PER_MINUTE]
    assert store.hit("gcra", "k", rates, cost=5).remaining == 0
    assert not store.hit("gcra", "k", rates).allowed
    store.reset("gcra", "k", rates)
    assert raw_get(memcached, b"rw:{k}") is None
    assert store.hit("gcra", "k", rates).remaining == 4
    assert store.acquire_slot("k", 2, "l1", 1, 10_000_000).allowed
    store.reset("gcra", "k", rates)
    assert store.hit("gcra", "k", rates, cost=0).remaining == 5
    assert store.acquire_slot("k", 2, "l2", 2, 10_000_000).retry_after == 10.0  # l1 still held
    assert store.release_slot("k", "l1") and not store.release_slot("k", "l1")
    assert raw_get(memcached, b"rw:{k}") is None
    store.reset("gcra", "never-seen", rates)  # nothing there, nothing sent but a read


def test_an_item_lives_its_longest_entry_and_a_second_more(memcached: MemcachedServer) -> None:
    """The memcached TTL: a 5/s state lives at most 2 s; one past 30 days is sent as a Unix time
    (memcached's rule) and still lives as long (not expired at once, as a 1970 date would be)."""
    store = MemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    store.hit("gcra", "short", PER_SECOND)
    assert 1 <= ttl_of(memcached, b"rw:{short}") <= 2
    forty_days = 40 * 86_400
    store.hit("sliding_log", "long", Rate(5, forty_days))
    # A Unix time TTL is read back against memcached's own clock, which it moves on once a
    # second: up to a second behind the Unix time the TTL was counted from (a clean clone's
    # CI once read 40 days + 3 s).
    assert forty_days - 10 <= ttl_of(memcached, b"rw:{long}") <= forty_days + 3
    assert store.hit("sliding_log", "long", Rate(5, forty_days)).remaining == 3


def test_with_an_injected_clock_an_item_lives_at_least_a_day(memcached: MemcachedServer) -> None:
    """memcached counts TTLs in real time, which may run ahead of a test clock (one that is
    not moved while the test runs): a day at least, as on Redis."""
    clock = ManualClock()
    store = MemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT)
    store.hit("gcra", "k", PER_SECOND)
    assert 86_400 - 10 <= ttl_of(memcached, b"rw:{k}") <= 86_402
    assert store.hit("gcra", "k", PER_SECOND).remaining == 3


# -- exact across threads and processes (the system clock, long windows)


def long_window(limit: int, not_before: int = 0) -> Rate:
    """``limit`` per a window of about an hour that does not end in the next ten minutes:
    fixed windows are epoch-aligned, so a test on the system clock picks one it cannot cross."""
    now = time.time()
    period = next(p for p in range(max(3600, not_before), 7200) if p - now % p > 600)
    return Rate(limit, period)


def hammer(
    url: str, rates: list[Rate], hits: int, threads: int, go: Any, out: Queue[tuple[int, int]]
) -> None:
    """In a process of its own: ``threads`` threads share one store and hit one key ``hits``
    times each, costs 1-3 when layered; puts the cost admitted and the errors."""
    store = MemcacheStore(url, timeout=2.0)
    admitted, errors = [0] * threads, [0] * threads

    def run(index: int) -> None:
        rng = random.Random(index)
        go.wait(30)
        for _ in range(hits):
            cost = rng.randint(1, 3) if len(rates) > 1 else 1
            try:
                admitted[index] += cost * store.hit("fixed_window", "hot", rates, cost).allowed
            except StorageError:
                errors[index] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.put((sum(admitted), sum(errors)))


def run_processes(url: str, rates: list[Rate], processes: int, threads: int, hits: int) -> int:
    context = multiprocessing.get_context("fork")
    go = context.Event()
    out: Queue[tuple[int, int]] = context.Queue()
    started = [
        context.Process(target=hammer, args=(url, rates, hits, threads, go, out))
        for _ in range(processes)
    ]
    for process in started:
        process.start()
    go.set()
    results = [out.get(timeout=60) for _ in started]
    for process in started:
        process.join(10)
    assert [errors for _, errors in results] == [0] * processes
    return sum(admitted for admitted, _ in results)


def test_threads_sharing_one_store_admit_exactly_the_limit(memcached: MemcachedServer) -> None:
    """8 threads x 30 hits on 100 per window: exactly 100 admitted, no errors."""
    store = MemcacheStore(memcached.url, timeout=2.0)
    rate = long_window(100)
    admitted: list[bool] = []

    def run() -> None:
        admitted.extend(store.hit("fixed_window", "hot", rate).allowed for _ in range(30))

    workers = [threading.Thread(target=run) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert (len(admitted), sum(admitted)) == (240, 100)


def test_processes_admit_exactly_the_limit(memcached: MemcachedServer) -> None:
    """4 processes x 4 threads x 20 hits, each process its own store and cache: exactly 100 of
    320 admitted (compare-and-set: a write against a changed item is decided again)."""
    assert run_processes(memcached.url, [long_window(100)], 4, 4, 20) == 100


def test_layered_limits_are_all_or_nothing_across_processes(memcached: MemcachedServer) -> None:
    """Layers of 60 and 100 hit at costs 1-3 by 4 processes: the cost admitted never passes 60,
    and each layer holds exactly what was admitted (no layer charged for a denied hit)."""
    small = long_window(60)
    large = long_window(100, not_before=small.period_us // 1_000_000 + 1)
    admitted = run_processes(memcached.url, [small, large], 4, 3, 15)
    assert 58 <= admitted <= 60
    store = MemcacheStore(memcached.url, timeout=STORE_TIMEOUT)
    assert store.hit("fixed_window", "hot", small, 0).remaining == 60 - admitted
    assert store.hit("fixed_window", "hot", large, 0).remaining == 100 - admitted


# -- another process's writes: the cache is never trusted alone


def in_another_process(url: str, steps: Sequence[Step]) -> None:
    """Run ``steps`` on a store of a forked process (its own connections and cache), on a
    clock at the same instant as the tests'."""

    def run() -> None:
        store = MemcacheStore(url, clock=ManualClock(), timeout=STORE_TIMEOUT)
        for step in steps:
            getattr(store, step[0])(*step[1:])

    process = multiprocessing.get_context("fork").Process(target=run)
    process.start()
    process.join(30)
    assert process.exitcode == 0


def test_a_stale_cached_value_is_read_again_before_a_write(memcached: MemcachedServer) -> None:
    """A caches the item; another process charges 3; A's next hits see those 3."""
    rate = Rate.parse("5/hour")
    store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.hit("fixed_window", "k", rate).remaining == 4
    in_another_process(memcached.url, [("hit", "fixed_window", "k", rate, 3)])
    assert store.hit("fixed_window", "k", rate).remaining == 0
    assert not store.hit("fixed_window", "k", rate).allowed


def test_a_check_is_answered_from_the_server_not_the_cache(memcached: MemcachedServer) -> None:
    """A cost-0 check writes nothing, so it reads: it shows another process's charge."""
    rate = Rate.parse("5/hour")
    store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.hit("fixed_window", "k", rate).remaining == 4
    in_another_process(memcached.url, [("hit", "fixed_window", "k", rate, 2)])
    assert store.hit("fixed_window", "k", rate, 0).remaining == 2


def test_a_denial_from_the_cache_is_checked_against_the_server(memcached: MemcachedServer) -> None:
    """A fills the window; another process resets the key; A's next hit is allowed (a denial
    decided on the cached value writes nothing, so it is decided again on a fresh read)."""
    rate = Rate.parse("5/hour")
    store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.hit("fixed_window", "k", rate, 5).remaining == 0
    assert not store.hit("fixed_window", "k", rate).allowed
    in_another_process(memcached.url, [("reset", "fixed_window", "k", rate)])
    assert store.hit("fixed_window", "k", rate).remaining == 4


def test_a_slot_released_elsewhere_is_seen(memcached: MemcachedServer) -> None:
    """Slots are decided the same way: a full key whose lease another process released admits."""
    store = MemcacheStore(memcached.url, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.acquire_slot("k", 1, "mine", 1, 60_000_000).allowed
    assert not store.acquire_slot("k", 1, "yours", 1, 60_000_000).allowed
    in_another_process(memcached.url, [("release_slot", "k", "mine")])
    assert store.acquire_slot("k", 1, "yours", 1, 60_000_000).allowed


# -- token budgets


def test_token_budgets_answer_as_on_the_memory_store(memcached: MemcachedServer) -> None:
    """300 seeded reserves, settles (under, over, twice), charges, peeks and clock steps of a
    TokenBudget over MemcacheStore and over MemoryStore: equal answers."""
    limits = {
        "requests": Rate(7, 1),
        "tokens": Rate(10_000, 60, burst=12_000),
        "output_tokens": Rate(3, 1, burst=2000),
    }
    clock = ManualClock(1_700_000_000.123457)
    memory = TokenBudget(MemoryStore(clock=clock), limits, max_output_tokens=900)
    store = MemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT)
    remote = TokenBudget(store, limits, max_output_tokens=900)
    rng = random.Random(11)
    held = []
    for step in range(300):
        action, key = rng.random(), rng.choice(["a", "b{x}", "é"])
        if action < 0.45:
            tokens, out = rng.randint(0, 3000), rng.choice([None, rng.randint(0, 2000)])
            mine = memory.reserve(key, tokens, out, reservation_id=f"r{step}")
            assert remote.reserve(key, tokens, out, reservation_id=f"r{step}") == mine, step
            held.append(mine)
        elif action < 0.75 and held:
            reservation, used = rng.choice(held), rng.randint(0, 1500)
            assert memory.settle(reservation, output_tokens=used) == remote.settle(
                reservation, output_tokens=used
            ), step
        elif action < 0.8:
            assert memory.peek(key) == remote.peek(key), step
        elif action < 0.85:
            usage = Usage.of(rng.randint(0, 500), rng.randint(0, 500), rng.randint(0, 2))
            assert memory.charge(key, usage) == remote.charge(key, usage), step
        else:
            # Past 600 s a reservation's record has expired: settling it finds none.
            clock.advance_us(rng.choice([1, 999, 142_857, 2_000_000, 30_000_000, 700_000_000]))


def test_a_budget_and_a_limiter_on_one_key_share_its_item(memcached: MemcachedServer) -> None:
    """The worked example: reserve 4,000, settle at 1,500 -> 8,500; the key's rate limit (a
    Limiter on the same store) and its budget live side by side in one item."""
    clock = ManualClock()
    store = MemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT)
    budget = TokenBudget(store, {"tokens": "10000/minute"}, max_output_tokens=3000)
    limiter = Limiter(store)
    reservation = budget.reserve("tenant:a", input_tokens=1000)
    assert reservation.allowed and reservation.costs == (4000,)
    assert limiter.hit("tenant:a", PER_SECOND).remaining == 4
    clock.advance_us(1)
    done = budget.settle(reservation, output_tokens=500)
    assert done.status == "settled" and done.refunded == {"tokens": 2500}
    assert budget.peek("tenant:a").axis("tokens").remaining == 8500
    assert limiter.hit("tenant:a", PER_SECOND).remaining == 3
    again = budget.settle(reservation, output_tokens=500)
    assert again.status == "already-settled" and again.refunded == {"tokens": 0}


# -- bad input: refused before anything is sent


@pytest.fixture
def unreachable() -> MemcacheStore:
    """A store on a port nothing listens on: a call that sent anything would be
    StorageUnavailableError, so a ConfigurationError shows nothing was sent."""
    return MemcacheStore([(HOST, free_port())], clock=ManualClock())


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda s: s.hit("gcra", "", PER_SECOND), "key"),
        (lambda s: s.hit("gcra", 5, PER_SECOND), "key"),
        (lambda s: s.hit("gcra", "a\ud800", PER_SECOND), "not valid text"),
        (lambda s: s.hit("gcra", "k", []), "no rate"),
        (lambda s: s.hit("gcra", "k", "5/s"), "must be a Rate"),
        (lambda s: s.hit("gcra", "k", [PER_SECOND, PER_SECOND]), "same rate twice"),
        (lambda s: s.hit("gcra", "k", PER_SECOND, -1), "cost"),
        (lambda s: s.hit("gcra", "k", PER_SECOND, 1.5), "cost"),
        (lambda s: s.hit("gcra", "k", PER_SECOND, True), "cost"),
        (lambda s: s.hit("nope", "k", PER_SECOND), "nope"),
        (lambda s: s.reset("gcra", "", PER_SECOND), "key"),
        (lambda s: s.acquire_slot("k", 0, "l", 1, 1_000), "limit"),
        (lambda s: s.acquire_slot("k", 1, "", 1, 1_000), "lease"),
        (lambda s: s.acquire_slot("", 1, "l", 1, 1_000), "key"),
        (lambda s: s.release_slot("k", ""), "lease"),
        (lambda s: s.renew_slot("k", "l", 0), "ttl"),
        (lambda s: s.apply("op"), "not a ratewarden.storage.Op"),
    ],
)
def test_bad_calls_are_configuration_errors(
    unreachable: MemcacheStore, call: Callable[[MemcacheStore], object], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        call(unreachable)


def test_an_op_over_two_hash_tags_is_refused_before_anything_is_sent(
    unreachable: MemcacheStore,
) -> None:
    """memcached cannot update two items in one step: an Op whose keys span two hash tags (or
    name none) is a StorageError, and no request goes out."""
    for keys in (("rw:{a}:x", "rw:{b}:x"), ("rw:a:x",)):
        op = Op("gcra_multi", keys, (), lambda args, states, now: ([], []))
        with pytest.raises(StorageError, match="hash tag") as caught:
            unreachable.apply(op)
        assert not isinstance(caught.value, StorageUnavailableError)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": None}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": "1"}, "timeout"),
        ({"cache_items": -1}, "cache_items"),
        ({"cache_items": True}, "cache_items"),
        ({"cache_items": 1.5}, "cache_items"),
        ({"cache_items": None}, "cache_items"),
        ({"prefix": "a{b"}, "prefix"),
        ({"prefix": ""}, "prefix"),
    ],
)
def test_bad_settings_are_configuration_errors(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        MemcacheStore("memcache://127.0.0.1:1", **options)


@pytest.mark.parametrize(
    "servers",
    [
        [],
        "127.0.0.1:11211",
        "memcache://h:1/db",
        [("h", 0)],
        [("h", 70_000)],
        [("h", "11211")],
        [("h", True)],
        [("", 1)],
        [(None, 1)],
        [("h", 1), ("h", 1)],
        [("h",)],
        ["h:1"],
    ],
)
def test_bad_servers_are_configuration_errors(servers: Any) -> None:
    """A URL is parsed (test_memcache_wire has every case); addresses given as pairs are held
    to the same rules."""
    with pytest.raises(ConfigurationError):
        MemcacheStore(servers)


def test_node_of_names_a_server_only_for_a_key_the_store_takes() -> None:
    """With several servers node_of names one, the same for a key and its store keys; a key
    every call refuses is refused here too (a per-node breaker asks node_of first)."""
    ports = [free_port(), free_port()]
    store = MemcacheStore([(HOST, port) for port in ports], clock=ManualClock())
    assert store.node_of("k") in {f"{HOST}:{port}" for port in ports}
    assert store.node_of("rw:{k}:gcra:5:1000000:5", stored=True) == store.node_of("k")
    assert store.node_of("ключ {}") == store.node_of("rw:{ключ %7B%7D}:concurrency", stored=True)
    for key in ("", "a\ud800", 5):
        with pytest.raises(ConfigurationError):
            store.node_of(key)  # type: ignore[arg-type]


def test_a_store_from_a_url_names_its_servers(memcached: MemcachedServer) -> None:
    store = MemcacheStore.from_url(memcached.url, clock=ManualClock(), timeout=0.5)
    assert repr(store) == f"MemcacheStore('{memcached.url}', timeout=0.5)"
    assert store.ping() is True
    assert store.node_of("k") == ""  # one server: one circuit
    store.close()


# -- helpers: what the server holds, read with a connection of the test's own


def raw(memcached: MemcachedServer, request: bytes) -> bytes:
    with memcached.connect() as sock:
        sock.sendall(request + b"mn\r\n")
        data = b""
        while not data.endswith(b"MN\r\n"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    return data[: -len(b"MN\r\n")]


def raw_get(memcached: MemcachedServer, name: bytes) -> bytes | None:
    """An item's value, or None when there is none."""
    reply = raw(memcached, b"mg " + name + b" v\r\n")
    if reply == b"EN\r\n":
        return None
    head, _, rest = reply.partition(b"\r\n")
    assert head.startswith(b"VA "), reply
    return rest[: int(head.split()[1])]


def ttl_of(memcached: MemcachedServer, name: bytes) -> int:
    """An item's remaining TTL in seconds."""
    reply = raw(memcached, b"mg " + name + b" t\r\n")
    assert reply.startswith(b"HD t"), reply
    return int(reply.split()[1][1:])


def item_name(key: str) -> bytes:
    """The memcached name of the item that holds ``key``'s states (default prefix)."""
    return item_of([f"rw:{{{escape(key)}}}:x"]).wire
