"""`ratewarden serve --workers` as real processes: the set lives and dies together.

The workers watch their parent; whatever ends the parent (SIGKILL included), the workers stop
and free the ports. SIGHUP stops gracefully, as SIGTERM does, with or without workers.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ratewarden.server.port_claim import lock_name
from tests._servers import HOST, RedisServer, free_port
from tests.server_transport._process import ServeProcess


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """The process ``pid`` has exited (a zombie nobody reaped counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    if sys.platform == "linux":
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


def port_free(port: int) -> bool:
    """Nothing listens on ``port``: a socket without SO_REUSEPORT can bind it."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def started_workers(server: ServeProcess) -> list[int]:
    """The workers' pids, once both log that they serve."""
    wait_for(
        lambda: {e.get("worker") for e in server.logs() if e.get("event") == "serving"} >= {0, 1},
        timeout=30,
    )
    [started] = [e for e in server.logs() if e.get("event") == "workers"]
    return list(started["pids"])


@pytest.mark.redis
def test_workers_stop_and_free_the_ports_when_their_parent_is_killed(
    rules: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL to the parent (no handler can run): both workers notice, stop, and the ports
    can be bound again, within a bounded time. (The metrics directory is the test's: a parent
    killed so cannot remove one it made.)"""
    metrics = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url, env=metrics)
    try:
        server.wait_serving()
        pids = started_workers(server)
        server.process.kill()
        assert server.process.wait(10) == -signal.SIGKILL
        wait_for(lambda: all(gone(pid) for pid in pids), timeout=20)
        assert port_free(server.grpc_port) and port_free(server.http_port)
        events = [(e.get("worker"), e.get("event")) for e in server.logs()]
        for worker in (0, 1):
            assert (worker, "parent_gone") in events
            assert (worker, "stopped") in events
    finally:
        for pid in started_pids_or_none(server):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        server.stop()


@pytest.mark.redis
def test_the_next_set_removes_the_metrics_directory_a_killed_set_left(
    rules: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A parent killed by SIGKILL leaves the metrics directory it made; the next set started
    in the same temporary directory removes it (its process is gone) and makes its own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    environ = {"TMPDIR": str(temp)}
    first = ServeProcess(rules, "--workers", "2", "--store", redis_server.url, env=environ)
    try:
        first.wait_serving()
        pids = started_workers(first)
        first.process.kill()
        first.process.wait(10)
        wait_for(lambda: all(gone(pid) for pid in pids), timeout=20)
        [left] = list(temp.glob("ratewarden-metrics-*"))
        assert left.name.startswith(f"ratewarden-metrics-{first.process.pid}-")
    finally:
        for pid in started_pids_or_none(first):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        first.stop()
    second = ServeProcess(rules, "--workers", "2", "--store", redis_server.url, env=environ)
    try:
        second.wait_serving()
        started_workers(second)
        [made] = list(temp.glob("ratewarden-metrics-*"))
        assert made.name.startswith(f"ratewarden-metrics-{second.process.pid}-")
        assert not left.exists()
    finally:
        second.stop()
    assert list(temp.glob("ratewarden-metrics-*")) == []


def started_pids_or_none(server: ServeProcess) -> list[int]:
    return [pid for e in server.logs() if e.get("event") == "workers" for pid in e["pids"]]


@pytest.mark.redis
def test_sighup_to_the_parent_stops_the_workers_gracefully(
    rules: Path, redis_server: RedisServer, tmp_path: Path
) -> None:
    """SIGHUP to the parent is SIGTERM's twin: both workers stop gracefully, the metrics
    directory the parent made is removed, and the exit code is 0."""
    metrics_before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ratewarden-metrics-*"))
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url)
    try:
        server.wait_serving()
        pids = started_workers(server)
        [started] = [e for e in server.logs() if e.get("event") == "workers"]
        assert server.signal(signal.SIGHUP) == 0
        assert all(gone(pid) for pid in pids)
        stopped = {e.get("worker") for e in server.logs() if e.get("event") == "stopped"}
        assert stopped == {0, 1}
        assert not Path(started["metrics_dir"]).exists()
        assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("ratewarden-metrics-*")) <= (
            metrics_before
        )
    finally:
        server.stop()


def test_sighup_stops_a_single_process_gracefully(served: ServeProcess) -> None:
    """Without workers, SIGHUP stops as SIGTERM does: shutting_down and stopped logged
    (naming the signal), exit 0, not the 129 of a process killed by it."""
    assert served.signal(signal.SIGHUP) == 0
    shutting = [e for e in served.logs() if e.get("event") == "shutting_down"]
    assert [e.get("reason") for e in shutting] == ["SIGHUP"]
    assert "stopped" in [e.get("event") for e in served.logs()]


@pytest.mark.redis
def test_a_second_worker_set_on_the_same_ports_exits_1(
    rules: Path, redis_server: RedisServer
) -> None:
    """Two `--workers 2` runs on the same ports: the second is refused as a single process is
    (exit 1, one line naming the port), instead of sharing the ports through SO_REUSEPORT;
    the first keeps serving."""
    first = ServeProcess(rules, "--workers", "2", "--store", redis_server.url)
    try:
        first.wait_serving()
        started_workers(first)
        ports = {
            "RATEWARDEN_GRPC_PORT": str(first.grpc_port),
            "RATEWARDEN_HTTP_PORT": str(first.http_port),
        }
        second = ServeProcess(
            rules, "--workers", "2", "--store", redis_server.url, "--log-format", "text", env=ports
        )
        try:
            assert second.process.wait(30) == 1
            assert f"cannot listen for gRPC on {HOST}:{first.grpc_port}: the port is in use" in (
                second.text()
            )
            assert "workers started" not in second.text()
        finally:
            second.stop()
        assert first.process.poll() is None and first.healthcheck() == 200
    finally:
        first.stop()


@pytest.mark.redis
@pytest.mark.skipif(sys.platform != "linux", reason="the lock is an abstract Unix socket")
def test_a_worker_set_refuses_ports_another_set_is_claiming(
    rules: Path, redis_server: RedisServer
) -> None:
    """A set that is still starting (its lock held, its workers not yet listening) keeps a
    second set off its ports: the window between the trial bind and the workers' own binds
    is closed. The lock is held here, by the test, as a starting set would hold it."""
    grpc_port, http_port = free_port(), free_port()
    with socket.socket(socket.AF_UNIX) as lock:
        lock.bind(lock_name(HOST, grpc_port))
        ports = {"RATEWARDEN_GRPC_PORT": str(grpc_port), "RATEWARDEN_HTTP_PORT": str(http_port)}
        second = ServeProcess(
            rules, "--workers", "2", "--store", redis_server.url, "--log-format", "text", env=ports
        )
        try:
            assert second.process.wait(30) == 1
            assert f"cannot listen for gRPC on {HOST}:{grpc_port}: the port is claimed by " in (
                second.text()
            )
        finally:
            second.stop()
