"""``ratewarden serve --store memcache:///PATH``: the service on a real memcached listening on
a Unix socket only (``memcached -s``), as a process and in-process; the socket gone is an
outage the rules' failure modes answer; a socket URL the store refuses stops the start."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.storage.memcache import AsyncMemcacheStore
from tests._memcached import MemcachedServer, short_dir
from tests.server.test_memcache_serve import (
    NOT_SERVING,
    RULES,
    SERVING,
    ask,
    count,
    health_of,
    items,
    served,
)
from tests.server.test_memcache_tls_srv_serve import run_serve
from tests.server_transport._process import ServeProcess
from tests.server_transport.conftest import OK, OVER_LIMIT, request

Make = Callable[..., MemcachedServer]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with short_dir() as directory:
        yield directory


def test_serve_process_counts_in_a_memcached_on_a_unix_socket(
    tmp_path: Path, make_memcached: Make, sock_dir: Path
) -> None:
    """ratewarden serve --store memcache:///PATH as a process: 3 an hour, then OVER_LIMIT;
    the serving line names the store; the socket server holds the item, counting 3."""
    server = make_memcached(unix_socket=sock_dir / "mc.sock")
    assert server.url == f"memcache://{sock_dir}/mc.sock"
    (tmp_path / "rules.yaml").write_text(RULES)
    serve = ServeProcess(tmp_path / "rules.yaml", "--store", server.url, "--store-timeout", "1")
    try:
        serve.wait_serving()
        with grpc.insecure_channel(serve.grpc_target) as chan:
            stub = rls_pb2_grpc.RateLimitServiceStub(chan)
            codes = [
                stub.ShouldRateLimit(request("mc", {"api_key": "u"}), timeout=5).overall_code
                for _ in range(4)
            ]
        assert codes == [OK, OK, OK, OVER_LIMIT]
        stores = {e["store"] for e in serve.logs() if e.get("event") == "serving"}
        assert stores == {server.url}
    finally:
        serve.stop()
    [(name, entries)] = items(server).items()
    assert "api_key" in name and count(entries) == 3


async def test_the_socket_gone_is_an_outage_the_failure_modes_answer(
    tmp_path: Path, make_memcached: Make, sock_dir: Path
) -> None:
    """SERVING while the socket server answers; stopped (its socket file left, nobody
    listening): NOT_SERVING, and each rule's failure_mode answers (open: OK, closed:
    OVER_LIMIT) without a gRPC error; started again on the path: SERVING, decisions again."""
    path = sock_dir / "mc.sock"
    first = make_memcached(unix_socket=path)
    async with served(tmp_path, first.url, store_timeout=0.2) as server:
        assert isinstance(server.store, AsyncMemcacheStore)
        assert server.store.servers.names == (str(path),)
        assert await health_of(server.grpc_port) == SERVING
        assert await ask(server, {"open": "x"}, {"closed": "x"}) == [OK, OK, OK]
        first.stop()
        assert not await server.refresh_health()
        assert await health_of(server.grpc_port) == NOT_SERVING
        for _ in range(7):  # past the breaker's 5 failures: it answers at once then
            assert await ask(server, {"open": "x"}) == [OK, OK]
            assert await ask(server, {"closed": "x"}) == [OVER_LIMIT, OVER_LIMIT]
        again = make_memcached(unix_socket=path)
        assert await server.refresh_health()
        assert await health_of(server.grpc_port) == SERVING
        assert await ask(server, {"api_key": "back"}) == [OK, OK]
    assert [count(entries) for entries in items(again).values()] == [1]


async def test_serve_on_a_socket_that_is_not_there_starts_and_answers_by_failure_mode(
    tmp_path: Path, sock_dir: Path
) -> None:
    """No file at the path when the service starts: it starts (an outage, not a bad
    setting), NOT_SERVING, and the rules' failure modes answer."""
    async with served(tmp_path, f"memcache://{sock_dir}/absent.sock", store_timeout=0.2) as rls:
        assert not await rls.refresh_health()
        assert await health_of(rls.grpc_port) == NOT_SERVING
        assert await ask(rls, {"open": "x"}) == [OK, OK]
        assert await ask(rls, {"closed": "x"}) == [OVER_LIMIT, OVER_LIMIT]


def test_a_socket_url_the_store_refuses_exits_2_and_connects_to_nothing(
    tmp_path: Path, make_memcached: Make, sock_dir: Path
) -> None:
    """TLS asked for the socket, or the socket listed twice: exit 2 with one line naming the
    URL, and the socket server saw no connection from it."""
    server = make_memcached(unix_socket=sock_dir / "mc.sock")
    path = str(server.unix_socket)
    before = int(server.stats().split("STAT total_connections ")[1].split()[0])
    for url, says in (
        (f"memcaches://{path}", "TLS to a Unix socket is not offered"),
        (f"memcache://{path},{path}", "names a server twice"),
    ):
        done = run_serve(tmp_path, "--store", url)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("ratewarden serve: error: ")
        assert repr(url) in done.stderr and says in done.stderr
    after = int(server.stats().split("STAT total_connections ")[1].split()[0])
    assert after == before + 1  # the second stats look's own connection
