"""``ratewarden serve`` through a Sentinel failover and a Cluster primary failure, under gRPC load.

The server is a real ``RateLimitServer`` on loopback gRPC whose store comes from
``Settings.store_url`` (a ``redis+sentinel://`` or ``redis+cluster://`` URL), so
the URL path, the default store timeout (20 ms), the circuit breaker
(``--breaker-failures 5``, ``--breaker-cooldown 1``) and the health loop are the
ones an operator runs. Three rules differ only in ``failure_mode``. Rounds of
one call per rule (per rule and side, on a Cluster), all in flight at once and
50 ms apart, run before the kill, through the gap until every rule is decided on
Redis again, and after. Each call must answer within the bound and never as a
gRPC error; while no primary serves a counter, the rule's failure mode answers
(open: OK, closed: OVER_LIMIT, local: the in-process bucket), every such answer
appears in ``ratelimit_service_rate_limit_failure_mode_{allowed,denied}_total``,
and once the new primary is promoted the service decides on Redis again by
itself within ``RECOVERY_LIMIT_S``. Limits are 1000/hour, far away: the
over-limit cache never answers, so every answer is either Redis's or a failure
mode's.

On a Cluster the breaker keeps a circuit per primary: five failures in a row
open the victim's, and the surviving primaries' counters are still decided on
Redis through the gap (bar ``STRAY`` timeouts each, as in the steady phases).
With one circuit for the whole store, the victim's failures opened it for every
counter until the promotion.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server.app import RateLimitServer
from ratewarden.server.config import DescriptorRule
from ratewarden.server.service import DescriptorOutcome, ServiceHooks, counter_key
from ratewarden.storage._keys import escape
from ratewarden.storage.redis import DEFAULT_TIMEOUT, AsyncRedisStore
from tests._servers import HOST, RedisCluster, RedisSentinel, RedisServer
from tests.faults._load import REPORT, Phase
from tests.faults.test_cluster_faults import node_of, replicated, wait_for_replicas
from tests.faults.test_sentinel_faults import wait_until_the_sentinel_trusts_the_replica
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, request

pytestmark = [pytest.mark.faults, pytest.mark.redis]

DOMAIN = "failover"
RULES = f"""\
domain: {DOMAIN}
descriptors:
  - key: open
    rate_limit: {{unit: hour, requests_per_unit: 1000, failure_mode: open}}
  - key: closed
    rate_limit: {{unit: hour, requests_per_unit: 1000, failure_mode: closed}}
  - key: local
    rate_limit: {{unit: hour, requests_per_unit: 1000, failure_mode: local}}
"""
MODES = ("open", "closed", "local")
#: What each failure mode answers while its counter has no primary.
DEGRADED_CODE = {"open": OK, "closed": OVER_LIMIT, "local": OK}
#: The longest one gRPC call may take: a hang check, not a speed check (the gRPC
#: deadline is 5 s). A decision needs a few round trips at most, each bounded by the
#: store's 20 ms timeout (a reconnect, a Sentinel lookup or a MOVED redirect, a SCRIPT
#: LOAD); the rest is slack for a shared 2-core machine, where one run at load
#: average 10 saw whole rounds take 2.35 s while a 10 ms sleeper on the same event
#: loop overslept by 2.25 s.
CALL_BOUND_S = 3.0
#: Steady phases (before the kill, after recovery) may see this many failure-mode
#: answers per rule: the store's 20 ms timeout (serve has no option to raise it) now
#: and then expires on a busy shared machine, and that answer is a correct, counted
#: degraded one. Seen: 1 of 20 after a Cluster failover.
STRAY = 2
#: Rounds 50 ms apart; at most this many in the gap (30 s), so the load is bounded.
PAUSE_S = 0.05
MOST_ROUNDS = 600
#: Before the kill, and after recovery.
STEADY_ROUNDS = 20
#: How long a promotion may take (Sentinel: down after 1 s; Cluster: node timeout 2 s).
PROMOTION_LIMIT_S = 30.0
#: How long after the promotion every rule must be decided on Redis again.
RECOVERY_LIMIT_S = 15.0


@dataclass(frozen=True, slots=True)
class Target:
    """One descriptor the load asks for: a rule (its failure mode) and a value."""

    mode: str
    value: str
    side: str = ""  # on a Cluster: "victim" (killed primary's slots) or "survivor"

    @property
    def name(self) -> str:
        return f"{self.mode}/{self.side[0]}" if self.side else self.mode

    @property
    def tag(self) -> str:
        """The counter's hash tag: the store key of every layer is ``rw:{tag}:...``."""
        return escape(counter_key(DOMAIN, [(self.mode, "=" + self.value)]))


class Observed(ServiceHooks):
    """The server's own ``ServiceStats`` hooks, plus every descriptor outcome kept in order."""

    def __init__(self, stats: ServiceHooks) -> None:
        self.stats = stats
        self.seen: list[DescriptorOutcome] = []
        #: Why the store failed, by the start of the error's message (for the report).
        self.reasons: Counter[str] = Counter()

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        self.stats.on_decision(domain, rule, outcome)
        self.seen.append(outcome)

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        self.stats.on_store_error(domain, rule, error)
        reason = re.sub(r"[\d.]+", "N", str(error).partition(";")[0])
        self.reasons[f"{type(error).__name__}: {reason}"] += 1

    def on_store_call(self, seconds: float) -> None:
        self.stats.on_store_call(seconds)

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        self.stats.on_value_overflow(domain, rule)


@dataclass
class Load:
    """Rounds of one call per target against one server; per-phase figures per target."""

    test: str
    stub: Any
    server: RateLimitServer
    hooks: Observed
    targets: tuple[Target, ...]
    degraded: dict[str, int] = field(default_factory=dict)
    #: Per target: the phase-ordered outcomes, "redis" or "degraded".
    history: dict[str, list[str]] = field(default_factory=dict)
    #: Whether the health loop turned NOT_SERVING after the kill, and when it was back.
    went_unhealthy: bool = False
    healthy_at: float | None = None
    promoted_at: float = 0.0

    def phases(self, name: str) -> dict[str, Phase]:
        found = {t.name: Phase(f"{self.test} {t.name}", name) for t in self.targets}
        REPORT.extend(found.values())
        return found

    async def round(self, phases: dict[str, Phase]) -> None:
        """One call per target, all in flight at once; outcomes checked against each rule."""
        first = len(self.hooks.seen)
        codes = await asyncio.gather(*(self._ask(t, phases[t.name]) for t in self.targets))
        outcomes = self.hooks.seen[first:]
        assert len(outcomes) == len(self.targets), "an answer without its decision hook"
        by_key = {o.entries[0]: o for o in outcomes}
        self._watch_health()
        for target, code in zip(self.targets, codes, strict=True):
            outcome = by_key[(target.mode, target.value)]
            phase = phases[target.name]
            if outcome.failure is None:
                phase.decided += 1
                assert code == OK, f"{target.name}: Redis denied at 1000/hour"
                self.history.setdefault(target.name, []).append("redis")
            else:
                assert outcome.failure == target.mode, f"{target.name}: {outcome.failure}"
                assert code == DEGRADED_CODE[target.mode], f"{target.name} answered {code}"
                phase.unavailable += 1
                self.degraded[target.mode] = self.degraded.get(target.mode, 0) + 1
                self.history.setdefault(target.name, []).append("degraded")

    def _watch_health(self) -> None:
        if not self.server.serving():
            self.went_unhealthy, self.healthy_at = True, None
        elif self.went_unhealthy and self.healthy_at is None:
            self.healthy_at = time.monotonic()

    async def _ask(self, target: Target, phase: Phase) -> int:
        started = time.monotonic()
        reply = await self.stub.ShouldRateLimit(
            request(DOMAIN, {target.mode: target.value}), timeout=5
        )
        elapsed = time.monotonic() - started
        assert elapsed < CALL_BOUND_S, f"{self.test}/{target.name}: a call took {elapsed:.3f} s"
        phase.calls += 1
        phase.worst_s = max(phase.worst_s, elapsed)
        phase.allowed += reply.overall_code == OK
        return int(reply.overall_code)

    async def steady(self, name: str) -> dict[str, Phase]:
        phases = self.phases(name)
        for _ in range(STEADY_ROUNDS):
            await self.round(phases)
            await asyncio.sleep(PAUSE_S)
        return phases

    async def through_the_gap(
        self, promoted: Callable[[], bool]
    ) -> tuple[dict[str, Phase], float, float]:
        """Rounds from the kill until every target was decided on Redis after the promotion.

        Returns the phases, the seconds from the kill to the promotion (as seen by
        ``promoted``), and from the promotion to the last target's first Redis decision.
        """
        phases = self.phases("gap")
        killed = time.monotonic()
        promoted_at: float | None = None
        for _ in range(MOST_ROUNDS):
            await self.round(phases)
            now = time.monotonic()
            if promoted_at is None and await asyncio.to_thread(promoted):
                promoted_at = self.promoted_at = now
            if promoted_at is not None:
                back = {t.name for t in self.targets if self.history[t.name][-1] == "redis"}
                if len(back) == len(self.targets):
                    return phases, promoted_at - killed, now - promoted_at
                assert now - promoted_at < RECOVERY_LIMIT_S, (
                    f"{self.test}: not every rule decided on Redis {RECOVERY_LIMIT_S} s after "
                    f"the promotion, only {sorted(back)}"
                )
            assert now - killed < PROMOTION_LIMIT_S, f"{self.test}: no promotion happened"
            await asyncio.sleep(PAUSE_S)
        raise AssertionError(f"{self.test}: still in the gap after {MOST_ROUNDS} rounds")


def failure_mode_counts(server: RateLimitServer) -> dict[tuple[str, str, str], float]:
    """``(allowed|denied, key, mode) -> value`` of the failure-mode counters in /metrics."""
    body, _ = server.stats.exposition()
    found: dict[tuple[str, str, str], float] = {}
    pattern = re.compile(
        r"^ratelimit_service_rate_limit_failure_mode_(allowed|denied)_total\{(.*)\} (\S+)$"
    )
    for line in body.decode().splitlines():
        match = pattern.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if labels.get("domain") == DOMAIN:
            key = (match.group(1), labels["key"], labels["failure_mode"])
            found[key] = found.get(key, 0.0) + float(match.group(3))
    return found


def assert_counted(server: RateLimitServer, load: Load) -> None:
    """Every degraded answer is in the failure-mode counters, under its rule and mode."""
    counts = failure_mode_counts(server)
    for mode in MODES:
        verdict = "denied" if DEGRADED_CODE[mode] == OVER_LIMIT else "allowed"
        other = "allowed" if verdict == "denied" else "denied"
        key = mode  # the stats key: the config path without the domain
        assert counts.get((verdict, key, mode), 0.0) == load.degraded.get(mode, 0), (mode, counts)
        assert counts.get((other, key, mode), 0.0) == 0.0, (mode, counts)


def assert_steady(phases: dict[str, Phase]) -> None:
    """Every rule decided on Redis, bar ``STRAY`` timeouts answered by its failure mode."""
    for name, phase in phases.items():
        assert phase.calls == STEADY_ROUNDS
        assert phase.decided >= STEADY_ROUNDS - STRAY, f"{name} {phase.name}: {phase}"


Start = Callable[[str], Awaitable[RateLimitServer]]


@pytest.fixture
def serve_url(start_server: StartServer) -> Start:
    """``await serve_url(store_url)``: a started server whose store the URL names (no store
    passed in: ``open_store`` builds it, as ``ratewarden serve --store URL`` does)."""

    async def start(store_url: str) -> RateLimitServer:
        server = await start_server(RULES, store_url=store_url)
        # The store serve itself built from the URL, with its default timeout.
        assert isinstance(server.store, AsyncRedisStore)
        assert server.store.timeout == DEFAULT_TIMEOUT
        return server

    return start


async def until_serving(load: Load) -> float:
    """Seconds from the promotion until health was SERVING again (waits, bounded, if not yet)."""
    limit = time.monotonic() + load.server.settings.health_interval + 3
    while not load.server.serving():
        assert time.monotonic() < limit, "health never turned SERVING again"
        await asyncio.sleep(0.05)
    load._watch_health()
    back = load.healthy_at if load.healthy_at is not None else time.monotonic()
    return back - load.promoted_at


@dataclass
class Failover:
    """What the load saw from the kill on: the gap, the seconds from the kill to the
    promotion and from it to every rule on Redis, the steady rounds after, and the seconds
    from the promotion until health was SERVING again."""

    gap: dict[str, Phase]
    to_promotion: float
    to_redis: float
    after: dict[str, Phase]
    healthy: float


async def through_the_failover(load: Load, promoted: Callable[[], bool]) -> Failover:
    """Load from the kill through the promotion, then steady rounds, then health back."""
    gap, to_promotion, to_redis = await load.through_the_gap(promoted)
    after = await load.steady("after")
    return Failover(gap, to_promotion, to_redis, after, await until_serving(load))


def assert_recovered(
    server: RateLimitServer, load: Load, before: dict[str, Phase], failover: Failover
) -> None:
    """Steady before and after, every degraded answer counted, no call failed otherwise."""
    assert_steady(before)
    assert_steady(failover.after)
    assert_counted(server, load)
    assert server.errors == 0, "a call failed outside the failure mode"


def report(test: str, load: Load, failover: Failover) -> None:
    health = (
        f"health SERVING again {failover.healthy:.2f} s after the promotion"
        if load.went_unhealthy
        else "health never turned NOT_SERVING"
    )
    print(
        f"\n{test}: promoted {failover.to_promotion:.2f} s after the kill; every rule decided on "
        f"Redis {failover.to_redis:.2f} s after that; {health}; degraded answers counted "
        f"{dict(sorted(load.degraded.items()))}; store errors {dict(load.hooks.reasons)}"
    )


@pytest.mark.timeout(180)
async def test_serve_on_a_sentinel_url_answers_by_failure_mode_through_a_failover(
    serve_url: Start,
) -> None:
    """Kill -9 the primary under load: per-mode answers, counted, then Redis again by itself."""
    test = "serve Sentinel kill -9"
    setup = RedisSentinel(sentinels=1)
    try:
        await asyncio.to_thread(wait_until_the_sentinel_trusts_the_replica, setup)
        server = await serve_url(setup.url)
        hooks = Observed(server.stats)
        server.service.hooks = hooks
        targets = tuple(Target(mode, "tenant") for mode in MODES)
        async with channel(server.grpc_port) as chan:
            load = Load(test, rls_pb2_grpc.RateLimitServiceStub(chan), server, hooks, targets)
            before = await load.steady("before")
            with setup.primary.client() as primary:
                assert primary.execute_command("WAIT", 1, 5000) == 1
            setup.primary.process.kill()
            setup.primary.process.wait(5)
            old_port = setup.primary.port

            def promoted() -> bool:
                with setup.sentinels[0].client(socket_timeout=0.5) as sentinel:
                    address = sentinel.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", setup.service
                    )
                return address is not None and int(address[1]) != old_port

            failover = await through_the_failover(load, promoted)
    finally:
        setup.stop()
    report(test, load, failover)
    for mode in MODES:
        assert failover.gap[mode].unavailable >= 1, f"{mode}: the kill was never seen"
    assert_recovered(server, load, before, failover)


def targets_on(cluster: RedisCluster) -> tuple[tuple[Target, ...], RedisServer]:
    """Per mode, one value whose counter is on the victim primary and one elsewhere."""
    victim = node_of(cluster, "{" + Target("open", "tenant-0").tag + "}")
    found: list[Target] = []
    for side in ("victim", "survivor"):
        for mode in MODES:
            value = next(
                f"tenant-{n}"
                for n in range(10_000)
                if (node_of(cluster, "{" + Target(mode, f"tenant-{n}").tag + "}") is victim)
                == (side == "victim")
            )
            found.append(Target(mode, value, side))
    return tuple(found), victim


def replica_of(cluster: RedisCluster, primary: RedisServer) -> RedisServer:
    """The replica that follows ``primary``."""
    for node in cluster.nodes:
        with node.client() as client:
            info = client.info("replication")
        if info["role"] == "slave" and int(info["master_port"]) == primary.port:
            return node
    raise AssertionError(f"no replica follows {primary.port}")


@pytest.mark.timeout(240)
async def test_serve_on_a_cluster_url_answers_by_failure_mode_when_a_primary_dies(
    serve_url: Start,
) -> None:
    """Kill -9 one of three primaries under load: its counters answer per failure mode,
    every degraded answer is counted, and its replica takes over with no restart of serve."""
    test = "serve Cluster kill -9"
    cluster = RedisCluster(primaries=3, replicas=1)
    try:
        await asyncio.to_thread(wait_for_replicas, cluster)
        targets, victim = await asyncio.to_thread(targets_on, cluster)
        heir = await asyncio.to_thread(replica_of, cluster, victim)
        server = await serve_url(cluster.url)
        hooks = Observed(server.stats)
        server.service.hooks = hooks
        async with channel(server.grpc_port) as chan:
            load = Load(test, rls_pb2_grpc.RateLimitServiceStub(chan), server, hooks, targets)
            before = await load.steady("before")
            await asyncio.to_thread(replicated, victim)
            victim.process.kill()
            victim.process.wait(5)

            def promoted() -> bool:
                with redis.Redis(host=HOST, port=heir.port, socket_timeout=0.5) as client:
                    return client.info("replication")["role"] == "master"

            failover = await through_the_failover(load, promoted)
    finally:
        cluster.stop()
    report(test, load, failover)
    survivors_degraded = sum(
        failover.gap[t.name].unavailable for t in targets if t.side == "survivor"
    )
    print(f"{test}: survivor answers degraded during the gap: {survivors_degraded}")
    for target in targets:
        gap = failover.gap[target.name]
        if target.side == "victim":
            assert gap.unavailable >= 1, f"{target.name}: the kill was never seen"
        else:  # the victim's circuit opened, not the survivors'
            assert gap.unavailable <= STRAY, f"{target.name} degraded in the gap: {gap}"
    assert_recovered(server, load, before, failover)
