"""Store URL mistakes a new user makes: a setting written as a URL option, a host twice.

The messages name where the setting goes both for the library (a keyword of
``from_url``) and for ``ratewarden serve`` (a command-line option: its user has no
keyword arguments). A Sentinel or Cluster URL naming one host twice is refused, as a
memcache URL naming a server twice already was. Pure parsing: nothing connects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.storage.memcache import MemcacheStore
from ratewarden.storage.redis import RedisStore


def test_a_memcache_timeout_in_the_url_points_to_the_keyword_and_the_serve_option() -> None:
    with pytest.raises(ConfigurationError) as refused:
        MemcacheStore.from_url("memcache://127.0.0.1:11211?timeout=1")
    message = str(refused.value)
    assert "unknown option 'timeout'" in message
    assert "keyword arguments of from_url (timeout=" in message
    assert "--store-timeout" in message


def test_a_sentinel_url_option_names_what_serve_offers_too() -> None:
    with pytest.raises(ConfigurationError) as refused:
        RedisStore.from_url("redis+sentinel://10.0.0.1:26379/rl?timeout=1")
    message = str(refused.value)
    assert "allowed: sentinel_password, sentinel_username" in message
    assert "under ratewarden serve, --store-timeout" in message
    assert "pass other client options" not in message


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://10.0.0.1:26379,10.0.0.1:26379/rl",
        "redis+sentinel://10.0.0.1,10.0.0.1:26379/rl",  # the default port written out
        "redis+sentinel://Sentinel-A:26379,sentinel-a:26379/rl",  # names are case-blind
        "redis+sentinel://[::1]:26379,[::1]:26379/rl",
        "redis+cluster://10.0.0.5:6379,10.0.0.5:6379",
    ],
)
def test_a_host_named_twice_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="is named twice; list each host once"):
        RedisStore.from_url(url)


def test_hosts_that_differ_by_port_are_distinct() -> None:
    RedisStore.from_url("redis+sentinel://10.0.0.1:26379,10.0.0.1:26380/rl").close()


def test_serve_exits_2_naming_its_own_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ratewarden.cli import main

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "domain: d\ndescriptors:\n  - key: k\n"
        "    rate_limit: {unit: second, requests_per_unit: 5}\n"
    )
    url = "memcache://127.0.0.1:11211?timeout=1"
    argv = ["serve", "--config", str(rules), "--store", url, "--grpc-port", "0"]
    assert main([*argv, "--http-port", "0"]) == 2
    assert "--store-timeout" in capsys.readouterr().err
