"""Soak: ``ratewarden serve`` on a real redis-server under mixed load and config reloads.

For ``RATEWARDEN_SOAK_SECONDS`` (30 by default; set 600 for ten minutes) two
gRPC clients and one HTTP ``/json`` client call the service as fast as they
can, mixing hot keys on a per-minute rule, a new value on every call on a
per-second rule (key churn), multi-descriptor requests and unknown domains,
while the rules file is swapped every half second (every fifth swap broken,
which must keep the last good rules). After a warm-up (the first quarter):

- resident memory (VmRSS of this process, which holds the server) grows by
  less than ``RSS_GROWTH_MB``;
- the open file descriptors stay within ``FD_SLACK`` of the warm-up count;
- the store's keys stay bounded, and once the load stops the per-second keys
  expire by their TTLs, leaving only the hot keys;
- every call is answered (no gRPC error, no HTTP error, no fallback answer,
  no store error), and every reload outcome is the expected one.

Run it with ``-s`` to see the per-phase figures.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server.config import DescriptorRule
from ratewarden.server.reload import ReloadOutcome
from ratewarden.server.service import ServiceHooks
from ratewarden.storage.redis import AsyncRedisStore
from tests._servers import RedisServer
from tests.fuzz._grpc import HOST, METHOD, BackgroundServer, background_server

SECONDS = float(os.environ.get("RATEWARDEN_SOAK_SECONDS", "30"))
RSS_GROWTH_MB = 16.0
FD_SLACK = 8
HOT_VALUES = 20
#: Keys that may outlive the load: one per-minute GCRA counter per hot user.
KEYS_AFTER = HOT_VALUES
RULES = """\
domain: soak
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: {hot}, algorithm: gcra}}
  - key: spray
    rate_limit: {{unit: second, requests_per_unit: {spray}, algorithm: {algorithm}}}
  - key: tenant
    rate_limit: {{unit: minute, requests_per_unit: 1000}}
    descriptors:
      - key: path
        rate_limit: {{unit: second, requests_per_unit: 5}}
"""
CONFIGS = [
    RULES.format(hot=50, spray=3, algorithm="fixed_window"),
    RULES.format(hot=50, spray=4, algorithm="sliding_window"),
]
BROKEN = "domain: soak\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def descriptor(*entries: tuple[str, str]) -> Any:
    return ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )


class CountingHooks(ServiceHooks):
    """Counts store errors and value overflows, passing every call on to the server's hooks."""

    def __init__(self, inner: ServiceHooks) -> None:
        self.inner = inner
        self.store_errors = 0

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: Any) -> None:
        self.inner.on_decision(domain, rule, outcome)

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        self.store_errors += 1
        self.inner.on_store_error(domain, rule, error)

    def on_store_call(self, seconds: float) -> None:
        self.inner.on_store_call(seconds)

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        self.inner.on_value_overflow(domain, rule)


@dataclass
class Tally:
    """What the load threads saw, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    codes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, code: str) -> None:
        with self.lock:
            self.codes[code] += 1

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)


def grpc_load(port: int, seed: int, stop: threading.Event, tally: Tally) -> None:
    """Mixed gRPC calls until ``stop``: hot users, a new spray value each call, nested
    descriptors, several descriptors at once, an unknown domain."""
    rng = random.Random(seed)
    fresh = itertools.count()
    with grpc.insecure_channel(f"{HOST}:{port}") as channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString,
        )
        while not stop.is_set():
            user = descriptor(("user", f"u{rng.randrange(HOT_VALUES)}"))
            spray = descriptor(("spray", f"s{seed}-{next(fresh)}"))
            nested = descriptor(("tenant", f"t{rng.randrange(3)}"), ("path", "/api"))
            shape = rng.randrange(4)
            found = [[user], [spray], [user, spray, nested], [nested]][shape]
            domain = "elsewhere" if rng.random() < 0.05 else "soak"
            try:
                reply = call(rls_pb2.RateLimitRequest(domain=domain, descriptors=found), timeout=5)
                tally.add(rls_pb2.RateLimitResponse.Code.Name(reply.overall_code))
            except grpc.RpcError as error:
                tally.fail(f"grpc {error.code()}: {error.details()}")


def http_load(port: int, stop: threading.Event, tally: Tally) -> None:
    """POST /json on a new connection each time (connection churn exercises fd cleanup)."""
    body = json.dumps(
        {"domain": "soak", "descriptors": [{"entries": [{"key": "user", "value": "u0"}]}]}
    )
    while not stop.is_set():
        connection = http.client.HTTPConnection(HOST, port, timeout=5)
        try:
            connection.request("POST", "/json", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            payload = reply.read()
            if reply.status in (200, 429):  # /json answers OVER_LIMIT with 429
                tally.add("http " + json.loads(payload)["overallCode"])
            else:
                tally.fail(f"http {reply.status}: {payload[:200]!r}")
        except OSError as error:
            tally.fail(f"http {error!r}")
        finally:
            connection.close()


def reloads(server: BackgroundServer, rules: Path, stop: threading.Event, tally: Tally) -> None:
    """Swap the rules file every 0.5 s (by rename, as a ConfigMap update does); every fifth
    version is broken and must leave the last good rules in place."""
    for version in itertools.count(1):
        if stop.wait(0.5):
            return
        broken = version % 5 == 0
        text = BROKEN if broken else CONFIGS[version % 2]
        staged = rules.with_suffix(".staged")
        staged.write_text(text)
        os.replace(staged, rules)
        outcome = server.run(server.server.watcher.acheck_once())
        want = ReloadOutcome.FAILED if broken else ReloadOutcome.RELOADED
        tally.add(f"reload {outcome.value}")
        if outcome is not want:
            tally.fail(f"reload {version}: {outcome} instead of {want}")


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """A redis-server of the soak's own, so its key count is the service's alone."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.mark.timeout(SECONDS + 120)
def test_the_service_holds_steady_under_mixed_load_and_reloads(
    redis: RedisServer, tmp_path: Path
) -> None:
    """Memory, descriptors and store keys stay bounded; every call is answered."""
    store = AsyncRedisStore.from_url(redis.url, prefix="soak", timeout=0.5)
    client = redis.client()
    samples: list[tuple[float, float, int, int]] = []  # (t, rss MB, fds, keys)
    tally, stop = Tally(), threading.Event()
    with background_server(tmp_path, CONFIGS[0], store) as server:
        hooks = CountingHooks(server.server.service.hooks)
        server.server.service.hooks = hooks
        rules = Path(server.server.settings.config_paths[0])
        threads = [
            threading.Thread(target=grpc_load, args=(server.port, seed, stop, tally))
            for seed in range(2)
        ]
        threads.append(
            threading.Thread(target=http_load, args=(server.server.http_port, stop, tally))
        )
        threads.append(threading.Thread(target=reloads, args=(server, rules, stop, tally)))
        started = time.monotonic()
        for thread in threads:
            thread.start()
        try:
            while (elapsed := time.monotonic() - started) < SECONDS:
                samples.append((elapsed, rss_mb(), open_fds(), int(client.dbsize())))
                time.sleep(1.0)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        calls = sum(n for code, n in tally.codes.items() if not code.startswith("reload"))
        fallback = server.server.errors
        load_seconds = time.monotonic() - started
        # The per-second keys expire by their TTLs once the load stops.
        drained = time.monotonic()
        while client.dbsize() > KEYS_AFTER and time.monotonic() - drained < 10:
            time.sleep(0.1)
        drain_seconds = time.monotonic() - drained
        keys_after = int(client.dbsize())
    client.close()

    warm = [s for s in samples if s[0] >= SECONDS / 4]
    assert warm, "the run was too short to have a steady phase"
    rss_growth = max(s[1] for s in warm) - warm[0][1]
    fd_spread = max(s[2] for s in warm) - warm[0][2]
    print(
        f"\nsoak {load_seconds:.0f} s: {calls} calls ({calls / load_seconds:.0f}/s), "
        f"{dict(tally.codes)}\n"
        f"  rss MB at warm-up {warm[0][1]:.1f}, max after {max(s[1] for s in warm):.1f} "
        f"(growth {rss_growth:+.1f}); fds {warm[0][2]} -> max {max(s[2] for s in warm)}; "
        f"redis keys max {max(s[3] for s in samples)}, {keys_after} left "
        f"{drain_seconds:.1f} s after the load\n"
        f"  failures {len(tally.failures)}, fallback answers {fallback}, "
        f"store errors {hooks.store_errors}"
    )
    assert not tally.failures, tally.failures[:5]
    assert fallback == 0
    assert hooks.store_errors == 0, "a store error hides behind failure_mode open"
    assert tally.codes["reload reloaded"] >= SECONDS / 2 * 0.6
    assert rss_growth < RSS_GROWTH_MB, samples
    assert fd_spread <= FD_SLACK, samples
    assert keys_after <= KEYS_AFTER, "per-second keys outlived their TTL"
