"""GET /metrics of a real `ratewarden serve`: counters match the ShouldRateLimit calls exactly.

Calls go over real gRPC (and /json); the scrape is parsed with prometheus_client's
own parser, as Prometheus would read it. With --workers 2 every scrape, whichever
worker answers it, reports the calls of both.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.clock import SystemClock
from ratewarden.server.quantiles import AgedQuantiles, merged
from tests._servers import HOST, RedisServer
from tests.server_transport._process import ServeProcess, serving
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, http, request
from tests.server_transport.test_serve_process import serving_workers, wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
P = "ratelimit_service_"
KEY = {"domain": "transport", "key": "api_key", "key1": "api_key", "key2": ""}
CALLS = {"grpc_method": "ShouldRateLimit"}


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scrape(port: int) -> Samples:
    """One GET /metrics on a new connection."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(reply.read().decode())


def get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def call(target: str, value: str) -> int:
    """One ShouldRateLimit on a new channel and a new connection, so that workers sharing the
    port each get some (the kernel spreads connections over them by a hash of their ports).

    A channel of its own subchannel pool: in grpc's global one, a new channel to the same
    target takes over the last channel's connection while it is still open, and then most or
    all of the calls ride one or two connections, so on one worker."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(target, options=options) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = stub.ShouldRateLimit(request("transport", {"api_key": value}), timeout=10)
        return int(reply.overall_code)


def test_counters_match_the_grpc_calls_exactly(served: ServeProcess) -> None:
    """5 calls on one key of a 3/hour rule, 2 on another, 1 without a rule: every
    envoyproxy/ratelimit counter and ratewarden's own move by exactly those amounts."""
    before = scrape(served.http_port)
    assert get(before, P + "total_requests_total", grpc_method="ShouldRateLimit") == 0
    codes = [call(served.grpc_target, "a") for _ in range(5)]
    codes += [call(served.grpc_target, "b") for _ in range(2)]
    with grpc.insecure_channel(served.grpc_target) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        codes.append(stub.ShouldRateLimit(request("transport", {"open": "x"})).overall_code)
    assert codes == [OK, OK, OK, OVER_LIMIT, OVER_LIMIT, OK, OK, OK]
    after = scrape(served.http_port)
    assert get(after, P + "total_requests_total", grpc_method="ShouldRateLimit") == 8
    assert get(after, P + "response_time_seconds_count", **CALLS) == 8
    assert get(after, P + "rate_limit_total_hits_total", **KEY) == 7
    assert get(after, P + "rate_limit_within_limit_total", **KEY) == 5
    assert get(after, P + "rate_limit_over_limit_total", **KEY) == 2
    assert get(after, P + "rate_limit_near_limit_total", **KEY) == 1  # threshold 2 of 3
    assert get(after, P + "config_load_success_total") == 1
    assert get(after, P + "config_load_error_total") == 0
    assert get(after, P + "config_last_load_success_timestamp_seconds") > 1.7e9
    decided = {"rule": "transport.api_key", "algorithm": "fixed_window"}
    assert get(after, "ratewarden_decisions_total", **decided, outcome="allowed") == 5
    assert get(after, "ratewarden_decisions_total", **decided, outcome="denied") == 2
    # The second denial of "a" came from the over-limit cache: no store call, counted as such.
    assert get(after, P + "rate_limit_over_limit_with_local_cache_total", **KEY) == 1
    assert get(after, "ratewarden_store_latency_seconds_count") == 6
    assert get(after, P + "should_rate_limit_error_total", err_type="store_error") == 0


async def test_json_calls_count_too_and_a_failed_reload_shows(start_server: StartServer) -> None:
    """/json goes through the same counting; a broken config file on reload counts a
    config_load_error while the old rules keep answering."""
    server = await start_server()
    body = json.dumps(
        {"domain": "transport", "descriptors": [{"entries": [{"key": "api_key", "value": "j"}]}]}
    ).encode()
    statuses = [(await http(server.http_port, "POST", "/json", body)).status for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    [path] = server.settings.config_paths
    Path(path).write_text("domain: transport\ndescriptors: [{key: k, bogus: 1}]\n")
    server.watcher.check_once()
    reply = await http(server.http_port, "GET", "/metrics")
    assert reply.status == 200
    samples = parse(reply.body.decode())
    assert get(samples, P + "total_requests_total", grpc_method="ShouldRateLimit") == 4
    assert get(samples, P + "rate_limit_over_limit_total", **KEY) == 1
    assert get(samples, P + "config_load_success_total") == 1
    assert get(samples, P + "config_load_error_total") == 1
    assert (await http(server.http_port, "POST", "/json", body)).status == 429


async def test_head_metrics_has_no_body(start_server: StartServer) -> None:
    """HEAD /metrics: the headers only (probes that only check reachability)."""
    server = await start_server()
    reply = await http(server.http_port, "HEAD", "/metrics")
    assert reply.status == 200 and reply.body == b""
    assert int(reply.headers["content-length"]) > 0


@pytest.mark.redis
@pytest.mark.parametrize("transport", ["grpcio", "native"])
def test_two_workers_report_the_sum_of_both_on_every_scrape(
    rules: Path, redis_server: RedisServer, tmp_path: Path, transport: str
) -> None:
    """--workers 2 on Redis with PROMETHEUS_MULTIPROC_DIR, on each transport: 40 calls on new
    connections reach both workers sharing the port (each publishes its own share); within a
    second (each worker flushes its tally every second) a scrape counts all 40, and from then
    every one of 8 scrapes, whichever worker answers, does; the dashboard JSON adds up the
    same way."""
    redis_server.client().flushall()
    shared = tmp_path / "metrics"
    shared.mkdir()
    with serving(
        rules,
        "--workers",
        "2",
        "--store",
        redis_server.url,
        "--store-timeout",
        "1",
        "--transport",
        transport,
        env={"PROMETHEUS_MULTIPROC_DIR": str(shared)},
    ) as server:
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        codes = [call(server.grpc_target, f"k{i % 20}") for i in range(40)]
        assert codes == [OK] * 40
        total = P + "rate_limit_total_hits_total"
        wait_for(lambda: get(scrape(server.http_port), total, **KEY) == 40, timeout=5)
        for _ in range(8):
            samples = scrape(server.http_port)
            assert get(samples, P + "total_requests_total", grpc_method="ShouldRateLimit") == 40
            assert get(samples, P + "rate_limit_total_hits_total", **KEY) == 40
            assert get(samples, P + "rate_limit_within_limit_total", **KEY) == 40
            assert get(samples, P + "response_time_seconds_count", **CALLS) == 40

        def per_worker() -> list[int]:
            states = [json.loads(p.read_text()) for p in shared.glob("live-*.json")]
            return sorted(s["totals"].get("transport.api_key", [0])[0] for s in states)

        wait_for(lambda: sum(per_worker()) == 40, timeout=10)
        shares = per_worker()
        assert len(shares) == 2 and min(shares) > 0, shares
        with urllib.request.urlopen(f"http://{HOST}:{server.http_port}/dashboard.json") as reply:
            view = json.loads(reply.read())
        assert view["workers"] == 2
        [row] = [r for r in view["rules"] if r["path"] == "transport.api_key"]
        assert row["totals"]["decisions"] == 40


@pytest.mark.redis
def test_two_workers_add_up_the_metrics_a_mapping_file_names(
    rules: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """--metrics-mapping with --workers 2: the mapped counter and histogram live in the
    shared multiprocess files like the others, so every scrape adds up both workers."""
    redis_server.client().flushall()
    shared = tmp_path / "metrics"
    shared.mkdir()
    mapping = tmp_path / "mapper.yaml"
    mapping.write_text(
        "mappings:\n"
        "  - {match: 'ratelimit.service.rate_limit.*.*.total_hits', name: hits,"
        " labels: {domain: $1, key1: $2}}\n"
        "  - {match: 'ratelimit_server.*.response_time', name: took_seconds,"
        " observer_type: histogram, scale: 0.001}\n"
    )
    args = ("--workers", "2", "--store", redis_server.url, "--store-timeout", "1")
    args += ("--metrics-mapping", str(mapping))
    with serving(rules, *args, env={"PROMETHEUS_MULTIPROC_DIR": str(shared)}) as server:
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        assert [call(server.grpc_target, f"k{i % 20}") for i in range(40)] == [OK] * 40
        hits = {"domain": "transport", "key1": "api_key"}
        wait_for(lambda: get(scrape(server.http_port), "hits_total", **hits) == 40, timeout=5)
        for _ in range(4):
            samples = scrape(server.http_port)
            assert get(samples, "hits_total", **hits) == 40
            assert get(samples, "took_seconds_count") == 40
            assert not [name for name, _ in samples if name.startswith(P + "rate_limit_total")]


@pytest.mark.redis
def test_two_workers_apply_a_mapping_files_ttl_and_summary_quantiles_over_both(
    rules: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """--metrics-mapping with --workers 2: every scrape's quantiles of the response time
    summary are those of both workers' windows (read back from the mapped-<pid>.json files
    each worker publishes, with the dashboard off), and the hits series, with a ttl of 3 s,
    leaves every scrape once neither worker has updated it for 3 s; a series without a ttl
    stays."""
    redis_server.client().flushall()
    shared = tmp_path / "metrics"
    shared.mkdir()
    mapping = tmp_path / "mapper.yaml"
    mapping.write_text(
        "mappings:\n"
        "  - {match: 'ratelimit.service.rate_limit.*.*.total_hits', name: hits, ttl: 3s,"
        " labels: {domain: $1, key1: $2}}\n"
        "  - {match: 'ratelimit_server.*.response_time', name: took, observer_type: summary,"
        " summary_options: {quantiles: [{quantile: 0.5}, {quantile: 0.99}]}}\n"
    )
    args = ("--workers", "2", "--store", redis_server.url, "--store-timeout", "1")
    args += ("--metrics-mapping", str(mapping), "--dashboard", "off")
    with serving(rules, *args, env={"PROMETHEUS_MULTIPROC_DIR": str(shared)}) as server:
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        assert [call(server.grpc_target, f"k{i % 20}") for i in range(40)] == [OK] * 40
        hits = {"domain": "transport", "key1": "api_key"}
        wait_for(lambda: get(scrape(server.http_port), "hits_total", **hits) == 40, timeout=5)

        clock = SystemClock()

        def windows() -> list[AgedQuantiles]:
            found = []
            for path in shared.glob("mapped-*.json"):
                for name, _, _, window in json.loads(path.read_text())["summaries"]:
                    assert name == "took"
                    found.append(AgedQuantiles.restore(clock, window))
            return found

        def published() -> list[int]:  # the calls in each worker's published window
            counts = []
            for window in windows():
                positive, negative, zeros = window.state()["streams"][window.state()["head"]]
                counts.append(sum(n for _, n in positive) + sum(n for _, n in negative) + zeros)
            return counts

        wait_for(lambda: sum(published()) == 40, timeout=5)
        assert len(published()) == 2 and min(published()) > 0, published()
        both = merged(windows(), [0.5, 0.99])
        for _ in range(4):
            samples = scrape(server.http_port)
            assert get(samples, "took_count") == 40
            assert get(samples, "took", quantile="0.5") == both[0]
            assert get(samples, "took", quantile="0.99") == both[1]
        assert both[0] > 0
        wait_for(lambda: get(scrape(server.http_port), "hits_total", **hits) == 0, timeout=8)
        for _ in range(4):
            samples = scrape(server.http_port)
            assert ("hits_total", tuple(sorted(hits.items()))) not in samples
            assert get(samples, "took_count") == 40  # no ttl


async def test_openmetrics_is_served_when_the_scraper_asks_for_it(
    start_server: StartServer,
) -> None:
    """Prometheus may ask for OpenMetrics in Accept; the answer is OpenMetrics (ends in # EOF)."""
    server = await start_server()
    accept = "Accept: application/openmetrics-text; version=1.0.0,text/plain;q=0.5\r\n"
    reply = await http(server.http_port, "GET", "/metrics", headers=accept)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/openmetrics-text")
    assert reply.body.endswith(b"# EOF\n")
    plain = await http(server.http_port, "GET", "/metrics")
    assert plain.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"


@pytest.mark.redis
def test_workers_get_a_temporary_metrics_directory_removed_at_exit(
    rules: Path, redis_server: RedisServer
) -> None:
    """Without PROMETHEUS_MULTIPROC_DIR, serve makes one for its workers (named in the
    "workers" log line), sums through it, and removes it when the workers have stopped."""
    redis_server.client().flushall()
    args = ("--workers", "2", "--store", redis_server.url, "--store-timeout", "1")
    with serving(rules, *args) as server:
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        [started] = [e for e in server.logs() if e.get("event") == "workers"]
        directory = Path(started["metrics_dir"])
        assert directory.is_dir()
        assert [call(server.grpc_target, f"t{i}") for i in range(6)] == [OK] * 6
        calls = P + "total_requests_total"
        wait_for(lambda: get(scrape(server.http_port), calls, **CALLS) == 6, timeout=5)
        for _ in range(4):
            samples = scrape(server.http_port)
            assert get(samples, P + "total_requests_total", grpc_method="ShouldRateLimit") == 6
        assert server.signal() == 0
        assert not directory.exists()
