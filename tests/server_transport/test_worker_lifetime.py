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

from tests._servers import HOST, RedisServer
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
    rules: Path, redis_server: RedisServer
) -> None:
    """SIGKILL to the parent (no handler can run): both workers notice, stop, and the ports
    can be bound again, within a bounded time."""
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url)
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
