"""`ratewarden serve` as a real process: starts with only a config, stops gracefully on signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from tests._servers import HOST, RedisServer
from tests.server_transport._process import RATEWARDEN, ServeProcess
from tests.server_transport.conftest import OK, OVER_LIMIT, RULES, request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ratelimit.yaml"


def post_json(port: int, body: Mapping[str, object]) -> int:
    req = urllib.request.Request(
        f"http://{HOST}:{port}/json", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_with_only_a_config_answers_grpc_and_http(served: ServeProcess) -> None:
    """No store flag, no Redis: the memory store serves gRPC and /json, sharing counters."""
    with grpc.insecure_channel(served.grpc_target) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        codes = [
            stub.ShouldRateLimit(request("transport", {"api_key": "k"})).overall_code
            for _ in range(2)
        ]
    body = {"domain": "transport", "descriptors": [{"entries": [{"key": "api_key", "value": "k"}]}]}
    assert codes == [OK, OK]
    assert [post_json(served.http_port, body) for _ in range(2)] == [200, 429]


def test_sigterm_stops_gracefully_with_exit_code_0(served: ServeProcess) -> None:
    """SIGTERM: shutting_down then stopped in the logs, exit 0, and the ports are released."""
    assert served.signal(signal.SIGTERM) == 0
    events = [entry.get("event") for entry in served.logs()]
    assert events.index("serving") < events.index("shutting_down") < events.index("stopped")
    for port in (served.grpc_port, served.http_port):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            probe.bind((HOST, port))  # fails while anything still listens


def test_sigint_stops_gracefully_too(served: ServeProcess) -> None:
    """Ctrl-C (SIGINT) takes the same graceful path as SIGTERM, with no traceback."""
    assert served.signal(signal.SIGINT) == 0
    assert "Traceback" not in served.text()
    assert [e["event"] for e in served.logs() if e.get("event") == "stopped"] == ["stopped"]


def test_the_serving_log_line_is_structured(served: ServeProcess) -> None:
    """The JSON 'serving' line names both addresses, the store and the config paths."""
    [line] = [entry for entry in served.logs() if entry.get("event") == "serving"]
    assert line["grpc"] == served.grpc_target
    assert line["http"] == f"{HOST}:{served.http_port}"
    assert line["store"] == "memory"
    assert line["level"] == "info" and line["logger"] == "ratewarden.server"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_both_event_loops_serve(rules: Path, loop: str) -> None:
    """--loop asyncio and --loop uvloop each answer calls and say which loop runs."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    server = ServeProcess(rules, "--loop", loop)
    try:
        server.wait_serving()
        with grpc.insecure_channel(server.grpc_target) as chan:
            stub = rls_pb2_grpc.RateLimitServiceStub(chan)
            codes = [
                stub.ShouldRateLimit(request("transport", {"api_key": "loop"})).overall_code
                for _ in range(4)
            ]
        assert codes == [OK, OK, OK, OVER_LIMIT]  # 3 an hour
        [line] = [entry for entry in server.logs() if entry.get("event") == "serving"]
        assert line["loop"] == loop
    finally:
        server.stop()


def test_the_example_config_serves(tmp_path: Path) -> None:
    """examples/ratelimit.yaml, the README's command, loads and serves on the memory store."""
    server = ServeProcess(EXAMPLE)
    try:
        server.wait_serving()
        body = {
            "domain": "public_api",
            "descriptors": [{"entries": [{"key": "api_key", "value": "partner-acme"}]}],
        }
        assert post_json(server.http_port, body) == 200
        assert server.signal() == 0
    finally:
        server.stop()


def refused(config: Path, *args: str, code: int = 1) -> str:
    """``ratewarden serve --config config --http-port 0 [args]``, which must exit ``code``
    without a traceback: what it wrote to stderr."""
    done = subprocess.run(
        [*RATEWARDEN, "serve", "--config", str(config), "--http-port", "0", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_busy_port_exits_1_with_the_reason(rules: Path) -> None:
    """When the gRPC port is taken the process says so in one line and exits 1, no traceback."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        stderr = refused(rules, "--grpc-port", str(port), "--log-format", "text")
    assert f"cannot listen for gRPC on {HOST}:{port}" in stderr


def test_an_invalid_config_exits_2_listing_every_error(tmp_path: Path) -> None:
    """serve refuses to start on a bad config, as on a bad flag (exit 2), and prints each
    error as file:line: key: reason."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
    stderr = refused(bad, "--grpc-port", "0", code=2)
    assert f"{bad}:4: unit: invalid rate limit unit 'fortnight'" in stderr
    assert f"{bad}:4: requests_per_unit: is missing" in stderr


@pytest.mark.redis
def test_two_workers_share_the_ports_and_the_counters(
    rules: Path, redis_server: RedisServer
) -> None:
    """--workers 2 on Redis: both processes serve on the same ports, counting together; SIGTERM
    to the parent stops both gracefully (exit 0). (A 1 s store timeout: a worker's first call
    also connects and loads the script, and a busy machine must not fail a call open.)"""
    redis_server.client().flushall()
    args = ("--workers", "2", "--store", redis_server.url, "--store-timeout", "1")
    server = ServeProcess(rules, *args)
    try:
        server.wait_serving()
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        codes = []
        for _ in range(4):  # a new connection each time: the kernel spreads them over workers
            with grpc.insecure_channel(server.grpc_target) as chan:
                stub = rls_pb2_grpc.RateLimitServiceStub(chan)
                reply = stub.ShouldRateLimit(request("transport", {"api_key": "w"}))
                codes.append(reply.overall_code)
        assert codes == [OK, OK, OK, OVER_LIMIT]
        assert server.signal(signal.SIGTERM) == 0
        stopped = {e.get("worker") for e in server.logs() if e.get("event") == "stopped"}
        assert stopped == {0, 1}
    finally:
        server.stop()


def serving_workers(server: ServeProcess) -> set[int]:
    return {e["worker"] for e in server.logs() if e.get("event") == "serving" and "worker" in e}


@pytest.mark.redis
def test_a_worker_that_dies_stops_the_others_and_exits_1(
    rules: Path, redis_server: RedisServer
) -> None:
    """If one worker is killed, the parent stops the other one and exits 1 for its supervisor."""
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url)
    try:
        server.wait_serving()
        wait_for(lambda: serving_workers(server) == {0, 1}, timeout=20)
        [started] = [e for e in server.logs() if e.get("event") == "workers"]
        os.kill(started["pids"][0], signal.SIGKILL)
        assert server.process.wait(20) == 1
        events = [e.get("event") for e in server.logs()]
        assert "worker_exited" in events
        assert [e.get("worker") for e in server.logs() if e.get("event") == "stopped"] == [1]
    finally:
        server.stop()


def test_a_running_server_reloads_an_edited_config(rules: Path) -> None:
    """With --reload-interval 0.1 an edit shows in /rlconfig within a few polls; a broken edit
    then logs config_reload_failed and the last good rules keep serving."""
    server = ServeProcess(rules, "--reload-interval", "0.1")
    try:
        server.wait_serving()
        rules.write_text(RULES.replace("requests_per_unit: 3", "requests_per_unit: 7"))
        wait_for(lambda: "7/hour" in rlconfig(server))
        rules.write_text(RULES.replace("requests_per_unit: 3", "requests_per_unit: lots"))
        wait_for(lambda: any(e.get("event") == "config_reload_failed" for e in server.logs()))
        assert "7/hour" in rlconfig(server)
        assert server.healthcheck() == 200
    finally:
        server.stop()


def rlconfig(server: ServeProcess) -> str:
    with urllib.request.urlopen(f"http://{HOST}:{server.http_port}/rlconfig", timeout=5) as reply:
        return str(reply.read().decode())


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)
