"""RedisStore.apply_all: every op's script in one pipeline (one per Cluster primary).

Each op stays its own atomic script, in order, so the answers and the stored state must be
those of ``apply`` called once per op. Seeded random sequences of token-budget ops (charges,
peeks, reservations; some on one key twice) go both ways, each under its own prefix on the
same server, standalone and on the 3-primary Cluster. Round trips are counted by the servers
themselves (``INFO stats`` read events, ``INFO commandstats``), not by mocks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import redis

from ratewarden import Limiter
from ratewarden.budgets import TokenBudget, Usage
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.limiter import CircuitBreaker
from ratewarden.storage import Op
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisCluster, RedisServer, SilentServer, free_port
from tests.storage.conftest import all_keys, flush_scripts

pytestmark = pytest.mark.redis

TOPOLOGIES = ["standalone", pytest.param("cluster", marks=pytest.mark.cluster)]
FIXTURES = {
    "standalone": ("redis_server", "redis_client"),
    "cluster": ("redis_cluster", "cluster_client"),
}
LIMITS = {"requests": "20/minute", "tokens": "3000/minute"}
KEYS = ["acme", "globex", "initech", "umbrella", "hooli", "stark"]


@pytest.fixture(params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """(the server or Cluster, an emptied blocking client on it)."""
    setup, client = FIXTURES[request.param]
    return request.getfixturevalue(setup), request.getfixturevalue(client)


def _store(setup: RedisServer | RedisCluster, clock: ManualClock, prefix: str) -> RedisStore:
    return RedisStore.from_url(setup.url, clock=clock, prefix=prefix, timeout=1.0)


def _budget(store: RedisStore) -> TokenBudget:
    return TokenBudget(store, LIMITS, max_output_tokens=500)


def _plan(budget: TokenBudget, step: tuple[str, str, int]) -> Op:
    """One op: a charge of ``n`` tokens, a peek (reserve at cost 0), or a reservation."""
    kind, key, n = step
    if kind == "peek":
        return budget._op("reserve", budget._keys(key, None), (0, 0))
    costs = budget._costs(Usage(0, n, 1))
    if kind == "charge":
        return budget._op("charge", budget._keys(key, None), costs)
    return budget._op("reserve", budget._keys(key, f"r{n}"), costs)


def _steps(rng: random.Random) -> list[tuple[str, str, int]]:
    return [
        (
            rng.choice(["charge", "charge", "peek", "reserve"]),
            rng.choice(KEYS[:4]),
            rng.randint(1, 900),
        )
        for _ in range(rng.randint(1, 6))
    ]


def _one_by_one(store: RedisStore, ops: list[Op]) -> list[list[int] | Exception]:
    found: list[list[int] | Exception] = []
    for op in ops:
        try:
            found.append(store.apply(op))
        except StorageError as error:
            found.append(error)
    return found


def _state(client: Any, prefix: str) -> dict[bytes, Any]:
    found = {}
    for key in all_keys(client):
        if key.startswith(prefix.encode() + b":"):
            kind = client.type(key)
            value = {b"hash": client.hgetall, b"list": lambda k: client.lrange(k, 0, -1)}.get(
                kind, client.get
            )(key)
            found[key[len(prefix) :]] = (kind, value, client.pttl(key) > 0)
    return found


def _servers(setup: RedisServer | RedisCluster) -> list[RedisServer]:
    return setup.nodes if isinstance(setup, RedisCluster) else [setup]


def _counted(
    setup: RedisServer | RedisCluster, call: Callable[[], Any]
) -> tuple[Any, dict[int, tuple[int, int, int]]]:
    """``call()``, and per server port: (read events, EVALSHA calls, EVAL calls) it took.

    A server counts one read event per request it reads (a pipeline written at once is read
    at once); the INFO that reads the counters counts one, taken off."""
    admins = {server.port: server.client() for server in _servers(setup)}

    def counters() -> dict[int, tuple[int, int, int]]:
        found = {}
        for port, admin in admins.items():
            reads = admin.info("stats")["total_reads_processed"]
            commands = admin.info("commandstats")
            found[port] = (
                reads,
                commands.get("cmdstat_evalsha", {}).get("calls", 0),
                commands.get("cmdstat_eval", {}).get("calls", 0),
            )
        return found

    before = counters()
    result = call()
    after = counters()
    for admin in admins.values():
        admin.close()
    # Two INFO requests per server between the two readings (stats, then commandstats).
    spent = {
        port: (a[0] - b[0] - 2, a[1] - b[1], a[2] - b[2])
        for (port, a), b in zip(after.items(), before.values(), strict=True)
    }
    return result, spent


def _primaries(client: Any, keys: list[str]) -> set[int]:
    """The ports of the servers holding ``keys``' budget state."""
    if not isinstance(client, redis.RedisCluster):
        return {int(client.connection_pool.connection_kwargs["port"])}
    return {int(client.get_node_from_key(f"{{{key}}}").port) for key in keys}


@pytest.mark.parametrize("seed", range(3))
def test_apply_all_answers_as_apply_one_op_after_another(
    topology: tuple[Any, Any], seed: int
) -> None:
    """60 random sequences of 1-6 ops: the same replies and the same stored state (values
    and expiries) after each as ``apply`` once per op, in order."""
    setup, client = topology
    clock = ManualClock(1_700_000_000.0)
    new, old = _store(setup, clock, "new"), _store(setup, clock, "old")
    new_budget, old_budget = _budget(new), _budget(old)
    rng = random.Random(seed)
    for _ in range(60):
        clock.advance(rng.choice([0.0, 0.0, 0.2, 2.0, 20.0]))
        steps = _steps(rng)
        assert new.apply_all([_plan(new_budget, s) for s in steps]) == _one_by_one(
            old, [_plan(old_budget, s) for s in steps]
        )
        assert _state(client, "new") == _state(client, "old")
    new.close()
    old.close()


def test_apply_all_is_one_round_trip_per_primary(topology: tuple[Any, Any]) -> None:
    """Six ops on six keys: one read event on each server that holds some of them (one
    on a standalone server), six EVALSHAs in all; ``apply`` once per op takes six."""
    setup, client = topology
    store = _store(setup, ManualClock(1_700_000_000.0), "rt")
    budget = _budget(store)
    ops = [_plan(budget, ("charge", key, 10)) for key in KEYS]
    store.apply_all(ops)  # connected, scripts loaded
    replies, spent = _counted(setup, lambda: store.apply_all(ops))
    assert all(isinstance(reply, list) for reply in replies)
    held = _primaries(client, KEYS)
    assert {port: (reads, evalsha) for port, (reads, evalsha, _) in spent.items() if reads} == {
        port: (1, sum(1 for key in KEYS if _primaries(client, [key]) == {port})) for port in held
    }
    _, spent = _counted(setup, lambda: [store.apply(op) for op in ops])
    assert sum(reads for reads, _, _ in spent.values()) == len(ops)
    store.close()


def test_a_script_error_answers_only_its_op(topology: tuple[Any, Any]) -> None:
    """A key of the wrong type makes one op's script fail: that op is answered by the
    StorageError ``apply`` raises for it (not an outage), the ops before and after it by
    their replies, the same as one by one."""
    setup, client = topology
    clock = ManualClock(1_700_000_000.0)
    new, old = _store(setup, clock, "new"), _store(setup, clock, "old")
    steps = [
        ("charge", "acme", 5),
        ("charge", "globex", 7),
        ("peek", "globex", 0),
        ("charge", "acme", 9),
    ]
    new_ops = [_plan(_budget(new), s) for s in steps]
    old_ops = [_plan(_budget(old), s) for s in steps]
    for ops in (new_ops, old_ops):
        client.lpush(ops[1].keys[0], "not a budget")
    found = new.apply_all(new_ops)
    expected = _one_by_one(old, old_ops)
    assert [type(each) for each in found] == [list, StorageError, StorageError, list]
    assert found[0] == expected[0] and found[3] == expected[3]
    for got, want in zip(found[1:3], expected[1:3], strict=True):
        assert isinstance(got, StorageError) and not isinstance(got, StorageUnavailableError)
        assert str(got) == str(want)
        assert isinstance(got.__cause__, Exception)
    assert _state(client, "new") == _state(client, "old")
    new.close()
    old.close()


def test_a_flushed_script_cache_is_loaded_once_per_primary(topology: tuple[Any, Any]) -> None:
    """After SCRIPT FLUSH every EVALSHA answers NOSCRIPT (nothing ran): the ops are sent
    again in one more round trip per primary, the script's source once on each (its EVAL
    first, the others' EVALSHAs after it), and the answers are those of one by one."""
    setup, client = topology
    clock = ManualClock(1_700_000_000.0)
    new, old = _store(setup, clock, "new"), _store(setup, clock, "old")
    steps = [("charge", key, 30) for key in KEYS] + [("peek", key, 0) for key in KEYS]
    new_ops = [_plan(_budget(new), s) for s in steps]
    # Connected to every primary, on keys of another budget (the same slots).
    other = TokenBudget(new, {"other": "5/minute"}, max_output_tokens=5)
    new.apply_all([other._op("charge", other._keys(key, None), (1,)) for key in KEYS])
    flush_scripts(client)
    found, spent = _counted(setup, lambda: new.apply_all(new_ops))
    assert found == _one_by_one(old, [_plan(_budget(old), s) for s in steps])
    held = _primaries(client, KEYS)
    # Each primary's ops are sent twice: every EVALSHA answered NOSCRIPT, then one EVAL (the
    # source, once) and the others' EVALSHAs after it, written together. The second request
    # carries the script's source (about 19 KB with its prelude), which redis-server may
    # read in more than one read event, so those are bounded, not counted exactly.
    per_port = {port: 2 * sum(_primaries(client, [key]) == {port} for key in KEYS) for port in held}
    assert {port: (evalsha, evals) for port, (reads, evalsha, evals) in spent.items() if reads} == {
        port: (2 * ops - 1, 1) for port, ops in per_port.items()
    }
    assert all(2 <= spent[port][0] <= 4 for port in held), spent
    new.close()
    old.close()


def test_a_server_that_does_not_answer_fails_the_whole_call(silent_server: SilentServer) -> None:
    """No reply within the timeout, or nothing listening: StorageUnavailableError for the
    call (whether the ops ran is unknown), as ``apply`` raises it."""
    clock = ManualClock(1_700_000_000.0)
    for port in (silent_server.port, free_port()):
        store = RedisStore.from_url(f"redis://{HOST}:{port}/0", clock=clock, timeout=0.05)
        ops = [_plan(_budget(store), ("charge", key, 1)) for key in KEYS[:3]]
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError, match=f"{HOST}:{port}"):
            store.apply_all(ops)
        assert time.monotonic() - started < 1.0
        store.close()


@pytest.mark.cluster
def test_a_paused_primary_answers_only_its_own_ops(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """One primary holds its clients (CLIENT PAUSE) past the timeout: the ops on it are
    answered by StorageUnavailableError, the ops on the other primaries by their replies."""
    clock = ManualClock(1_700_000_000.0)
    store = RedisStore.from_url(redis_cluster.url, clock=clock, prefix="paused", timeout=0.1)
    ops = [_plan(_budget(store), ("charge", key, 1)) for key in KEYS]
    store.apply_all(ops)  # connected, scripts loaded
    ports = [_primaries(cluster_client, [key]).pop() for key in KEYS]
    paused = ports[0]
    assert len(set(ports)) > 1, "the keys should span several primaries"
    admin = redis.Redis(host=HOST, port=paused)
    admin.execute_command("CLIENT", "PAUSE", 2000, "ALL")
    try:
        found = store.apply_all(ops)
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    for port, answer in zip(ports, found, strict=True):
        if port == paused:
            assert isinstance(answer, StorageUnavailableError), answer
        else:
            assert isinstance(answer, list), answer
    store.close()


def test_what_is_not_a_sequence_of_ops_is_refused_before_anything_is_sent(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """A lone Op, or a list with something else in it, is a TypeError naming the place;
    nothing is sent, so no key is written. No ops: no answers."""
    store = _store(redis_server, ManualClock(1_700_000_000.0), "bad")
    op = _plan(_budget(store), ("charge", "acme", 1))
    with pytest.raises(
        TypeError, match=r"apply_all takes a sequence of Ops, not Op\(.*apply\(op\) runs one"
    ):
        store.apply_all(op)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"apply_all: ops\[1\] is 'x', not an Op"):
        store.apply_all([op, "x"])  # type: ignore[list-item]
    assert all_keys(redis_client) == []
    assert store.apply_all([]) == []
    store.close()


def test_apply_all_on_a_sentinel_primary_answers_as_one_by_one(redis_sentinel: Any) -> None:
    """Through redis+sentinel:// the pipeline goes to the primary the Sentinels name."""
    clock = ManualClock(1_700_000_000.0)
    new = RedisStore.from_url(redis_sentinel.url, clock=clock, prefix="snew", timeout=1.0)
    old = RedisStore.from_url(redis_sentinel.url, clock=clock, prefix="sold", timeout=1.0)
    rng = random.Random(5)
    for _ in range(10):
        clock.advance(1.0)
        steps = _steps(rng)
        assert new.apply_all([_plan(_budget(new), s) for s in steps]) == _one_by_one(
            old, [_plan(_budget(old), s) for s in steps]
        )
    new.close()
    old.close()


def _run_all(limiter: Limiter, ops: list[Op]) -> list[list[int] | Exception]:
    return limiter.run(limiter.apply_all_flow(ops))


def test_a_limiter_runs_several_ops_in_one_round_trip(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """``Limiter.apply_all_flow`` hands a RedisStore's ops to ``apply_all`` (one round
    trip); with a breaker, which is asked per op, one ``apply`` each."""
    store = _store(redis_server, ManualClock(1_700_000_000.0), "flow")
    ops = [_plan(_budget(store), ("charge", key, 2)) for key in KEYS[:3]]
    for breaker, trips in ((None, 1), (CircuitBreaker(), 3)):
        limiter = Limiter(store, breaker=breaker)
        limiter.run(limiter.apply_all_flow(ops))  # connected, scripts loaded
        replies, spent = _counted(redis_server, partial(_run_all, limiter, ops))
        assert all(isinstance(reply, list) for reply in replies)
        assert spent[redis_server.port][:2] == (trips, 3)
    store.close()


def test_on_a_demoted_primary_each_op_is_answered_as_apply_answers_it(
    make_redis: Callable[..., RedisServer],
) -> None:
    """The store's server became a replica: a write gets READONLY (nothing ran), the store
    reconnects and sends again, as ``apply`` does, up to its attempts; each op is then
    answered as ``apply`` answers it, the same error for a write, the reply for a read."""
    primary, replica = make_redis(), make_redis()
    clock = ManualClock(1_700_000_000.0)
    store = RedisStore.from_url(replica.url, clock=clock, timeout=1.0)
    budget = _budget(store)
    steps = [("charge", "acme", 5), ("peek", "globex", 0), ("reserve", "acme", 9)]
    store.apply_all([_plan(budget, s) for s in steps])  # connected while still a primary
    with replica.client() as admin:
        admin.replicaof(HOST, primary.port)
        deadline = time.monotonic() + 10.0
        while admin.info("replication")["master_link_status"] != "up":
            assert time.monotonic() < deadline, "the replica never linked to its primary"
            time.sleep(0.02)
    ops = [_plan(budget, s) for s in steps]
    with replica.client() as admin:
        connections = admin.info("stats")["total_connections_received"]
        found = store.apply_all(ops)
        # Two reconnects for the whole pipeline (the second and third attempts): the
        # writes were sent again together; and the admin's INFO is on its own connection.
        assert admin.info("stats")["total_connections_received"] - connections == 2
    expected = _one_by_one(store, ops)
    assert [type(each) for each in found] == [type(each) for each in expected]
    assert isinstance(found[0], StorageUnavailableError)
    assert "READONLY" in str(found[0])
    assert [str(each) for each in found] == [str(each) for each in expected]
    store.close()
