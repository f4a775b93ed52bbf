"""`ratewarden serve --workers` exits 0 on a requested stop, however early it comes, and 1 with
a ``worker_exited`` line when a worker ends any other way, while stopping as well.

A stop sent as soon as the parent has started its workers reaches them while they are still
importing: they start with the stop signals blocked, so it waits for their handlers and they
stop before serving, instead of dying by the signal's default action.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests._servers import RedisServer
from tests.server_transport._process import ServeProcess


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def events(server: ServeProcess, name: str) -> list[dict[str, object]]:
    return [entry for entry in server.logs() if entry.get("event") == name]


@pytest.mark.redis
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_while_the_workers_start_exits_0(
    rules: Path, redis_server: RedisServer, signum: signal.Signals
) -> None:
    """The stop signal as soon as the ``workers`` line is written (the workers are still
    importing, which takes far longer than the poll): exit 0, each worker says ``stopped``,
    and no ``worker_exited`` line, as for a stop once they serve."""
    server = ServeProcess(rules, "--workers", "2", "--store", redis_server.url)
    try:
        wait_for(lambda: bool(events(server, "workers")))
        assert server.signal(signum) == 0, server.text()
        assert {entry.get("worker") for entry in events(server, "stopped")} == {0, 1}
        assert events(server, "worker_exited") == []
    finally:
        server.stop()


@pytest.mark.redis
def test_a_worker_killed_while_the_set_drains_is_said_and_the_exit_is_1(
    rules: Path, redis_server: RedisServer
) -> None:
    """SIGTERM, both workers drain, then one is killed (as the OOM killer would): its
    ``worker_exited`` line names it and its exit code, and the set exits 1. A second SIGTERM
    cuts the other's drain short, so the test does not wait the drain out."""
    server = ServeProcess(
        rules, "--workers", "2", "--store", redis_server.url, env={"RATEWARDEN_DRAIN": "60"}
    )
    try:
        server.wait_serving()
        wait_for(lambda: len(events(server, "serving")) == 2)
        [started] = events(server, "workers")
        pids = list(started["pids"])  # type: ignore[call-overload]
        server.process.send_signal(signal.SIGTERM)
        wait_for(lambda: len(events(server, "draining")) == 2)
        os.kill(pids[0], signal.SIGKILL)
        wait_for(lambda: bool(events(server, "worker_exited")))
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 1
        [exited] = events(server, "worker_exited")
        assert (exited["pid"], exited["exitcode"]) == (pids[0], -signal.SIGKILL)
        assert [entry.get("worker") for entry in events(server, "stopped")] == [1]
    finally:
        server.stop()
