"""``ratewarden serve`` refuses to start on a store that answers but cannot be used.

The start-up check used to ask only PING (and the connection's AUTH): an ACL user whose key
pattern leaves out ``--key-prefix``, or who may not run the scripts or TIME, passed it, and
the default failure mode ``open`` then allowed every request (walk storage_ha2, D1). The
check is the store's ``ping()``, which now also runs TIME and a peek of cost 0 on a key
under the prefix (tests/storage/test_walk_storage_ha2.py). A memcached's port given as a
Redis (N4) used to start too, never serving: it is refused as well.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests._memcached import MemcachedServer
from tests._servers import HOST, RedisServer

pytestmark = pytest.mark.redis

#: A user short of one thing the store needs, the prefix served, and words of the refusal.
CASES = [
    ("~rw* +@all", "app", "no permissions to access one of the keys"),
    ("~* +@all -evalsha -eval", "rw", "'evalsha'"),
    ("~* +@all -time", "rw", "'time'"),
]
IDS = ["keys-outside-the-prefix", "no-scripts", "no-time"]


def _serve(tmp_path: Path, store: str, *options: str) -> int:
    from ratewarden.cli import main

    config = tmp_path / "rules.yaml"
    config.write_text(
        "domain: acl\ndescriptors:\n"
        "  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
    )
    argv = ["serve", "--config", str(config), "--store", store, *options]
    return main([*argv, "--grpc-port", "0", "--http-port", "0"])


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ratewarden serve: error: the store cannot be used: ")
    return err[0]


@pytest.mark.parametrize(("rules", "prefix", "words"), CASES, ids=IDS)
def test_serve_exits_2_naming_the_missing_permission(
    make_redis: Callable[..., RedisServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rules: str,
    prefix: str,
    words: str,
) -> None:
    """Exit 2 with one line, not a service that answers OK to every request."""
    server = make_redis()
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "limiter", "on", ">pw", *rules.split())
    store = f"redis://limiter:pw@{HOST}:{server.port}/0"
    assert _serve(tmp_path, store, "--key-prefix", prefix) == 2
    line = _one_line(capsys)
    assert words in line
    assert "the ACL of the store's user" in line
    assert ":pw@" not in line


def test_serve_exits_2_on_a_memcached_port_given_as_redis(
    memcached: MemcachedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its reply to HELLO is not Redis's protocol: a settings mistake, not an outage."""
    assert _serve(tmp_path, f"redis://{HOST}:{memcached.port}/0") == 2
    line = _one_line(capsys)
    assert "does not speak the Redis protocol" in line
    assert "waiting will not help" in line
