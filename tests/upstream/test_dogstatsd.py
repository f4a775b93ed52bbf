"""envoyproxy/ratelimit's stats over DogStatsD (``USE_DOG_STATSD``, ``--dogstatsd``).

The counts come from a real service (memory store, ManualClock) through ``ServiceStats``,
as in ``test_statsd``; the lines are read off real UDP and Unix datagram sockets. The
mogrifiers are upstream README's two examples, given as upstream's variables. The last
test starts ``ratewarden serve`` on upstream's variables alone and reads its datagrams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.dogstatsd import (
    DogStatsdSink,
    Mogrifier,
    datadog_tags,
    load_mogrifiers,
    mogrifiers_from_env,
    parse_dogstatsd_address,
)
from ratewarden.server.settings import resolve
from ratewarden.server.stats import ServiceStats
from ratewarden.testing import ManualClock
from tests._servers import HOST, free_port
from tests.server.conftest import ALIGNED
from tests.server_transport.test_serve_process import post_json
from tests.upstream._serve import upstream_serve
from tests.upstream.test_statsd import RULES, decided_and_sent

#: Upstream README's mogrifiers: DOMAIN, then HITS.
README = {
    "USE_DOG_STATSD_MOGRIFIERS": "DOMAIN,HITS",
    "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN": r"^some\.original\.metric\.(.*)$",
    "DOG_STATSD_MOGRIFIER_DOMAIN_NAME": "some.original.metric",
    "DOG_STATSD_MOGRIFIER_DOMAIN_TAGS": "domain:$1",
    "DOG_STATSD_MOGRIFIER_HITS_PATTERN": (
        r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$"
    ),
    "DOG_STATSD_MOGRIFIER_HITS_NAME": "ratelimit.service.rate_limit.$3",
    "DOG_STATSD_MOGRIFIER_HITS_TAGS": "domain:$1,descriptor:$2",
}
CONFIG = {"config_paths": ["rules.yaml"]}


def parsed(payload: bytes) -> dict[tuple[str, str, str], list[str]]:
    """DogStatsD lines, ``name:value|type|#tags``, as (name, type, tags) -> [value, ...]."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for line in payload.decode().splitlines():
        head, _, tags = line.partition("|#")
        name_value, _, kind = head.partition("|")
        name, _, value = name_value.rpartition(":")
        out.setdefault((name, kind, tags), []).append(value)
    return out


def test_upstreams_readme_mogrifiers_rename_and_tag_stats() -> None:
    """The README's DOMAIN and HITS mogrifiers: the first that matches wins, $N is a group,
    $0 the whole match; an unmatched group is empty, a $N past the groups stays as written,
    and a name no pattern matches is sent as it is."""
    domain, hits = mogrifiers_from_env(README["USE_DOG_STATSD_MOGRIFIERS"], README)
    sink = DogStatsdSink("udp://127.0.0.1:8125", mogrifiers=(domain, hits))
    assert sink.head("ratelimit.service.rate_limit.web.plan_free.path.over_limit") == (
        "ratelimit.service.rate_limit.over_limit",
        "|#domain:web,descriptor:plan_free.path",
    )
    assert sink.head("some.original.metric.TAG") == ("some.original.metric", "|#domain:TAG")
    assert sink.head("ratelimit.service.config_load_success") == (
        "ratelimit.service.config_load_success",
        "",
    )
    odd = Mogrifier(r"(a)|(b)", "n.$2.$9", (("whole", "$0"), ("first", "x$1")))
    assert odd.mogrify("b") == ("n.b.$9", ["whole:b", "first:x"])
    assert odd.mogrify("zzz") is None


def test_lines_over_udp_carry_datadogs_tags_then_the_extra_tags_then_the_mogrifiers() -> None:
    """Every counter and one timer line per call, upstream's names mogrified; the tags in
    datadog-go's order (DD_* first), EXTRA_TAGS cleaned as upstream's stats library leaves
    them; datagrams of at most 1,432 bytes, lines never split; sent once."""
    _, hits = mogrifiers_from_env(README["USE_DOG_STATSD_MOGRIFIERS"], README)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind((HOST, 0))
        listener.settimeout(5)
        port = listener.getsockname()[1]
        stats = ServiceStats(clock=ManualClock(ALIGNED))
        sink = DogStatsdSink(
            f"udp://{HOST}:{port}",
            tags=(("zone", "eu.west-1"), ("cell", "a")),
            mogrifiers=(hits,),
            global_tags=datadog_tags({"DD_SERVICE": "rl", "DD_ENV": "prod", "DD_OTHER": "x"}),
        )
        decided_and_sent(stats, sink)
        payload = b""
        while payload.count(b"|ms|") < 2:
            datagram = listener.recv(65536)
            assert len(datagram) <= 1432 and datagram.endswith(b"\n")
            payload += datagram
    common = "env:prod,service:rl,cell:a,zone:eu_west-1"
    rate = "ratelimit.service.rate_limit."

    def per_key(domain_key: str) -> str:
        domain, _, key = domain_key.partition(".")
        return f"{common},domain:{domain},descriptor:{key}"

    got = parsed(payload)
    assert got.pop(("ratelimit_server.ShouldRateLimit.response_time", "ms", common)) == ["2", "14"]
    assert got == {
        (f"{rate}total_hits", "c", per_key("web.api_key")): ["7"],
        (f"{rate}within_limit", "c", per_key("web.api_key")): ["5"],
        (f"{rate}over_limit", "c", per_key("web.api_key")): ["2"],
        (f"{rate}near_limit", "c", per_key("web.api_key")): ["1"],
        (f"{rate}total_hits", "c", per_key("web.client_ip_10_1_2_3")): ["1"],
        (f"{rate}within_limit", "c", per_key("web.client_ip_10_1_2_3")): ["1"],
        (f"{rate}total_hits", "c", per_key("web.plan_free.path")): ["2"],
        (f"{rate}within_limit", "c", per_key("web.plan_free.path")): ["1"],
        (f"{rate}over_limit", "c", per_key("web.plan_free.path")): ["1"],
        (f"{rate}near_limit", "c", per_key("web.plan_free.path")): ["1"],
        ("ratelimit.service.config_load_success", "c", common): ["1"],
        ("ratelimit_server.ShouldRateLimit.total_requests", "c", common): ["2"],
    }
    assert sink.lines() == []


def test_a_unix_datagram_socket_gets_the_lines_and_a_missing_one_drops_an_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """unix:///PATH sends to the Datadog Agent's datagram socket, 8,192 bytes a datagram at
    most; with nobody there the interval's lines are dropped with a warning, no exception,
    and the next interval gets through."""
    path = tmp_path / "dsd.socket"
    sink = DogStatsdSink(parse_dogstatsd_address(f"unix://{path}"), tags=(("env", "t"),))
    for index in range(300):
        sink.count(f"ratelimit.service.rate_limit.web.key_{index:03}.total_hits", index + 1)
    with caplog.at_level(logging.WARNING, "ratewarden.server.statsd"):
        asyncio.run(sink.send())
    assert sink.dropped == 300 and sink.sent == 0
    assert "cannot send stats" in caplog.text
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.settimeout(5)
        sink.count("ratelimit.service.config_load_success")
        for index in range(300):
            sink.count(f"ratelimit.service.rate_limit.web.key_{index:03}.total_hits", index + 1)
        asyncio.run(sink.send())
        datagrams: list[bytes] = []
        while b"".join(datagrams).count(b"\n") < 301:
            datagrams.append(listener.recv(65536))
        asyncio.run(sink.close())
    payload = b"".join(datagrams)
    assert all(len(datagram) <= 8192 and datagram.endswith(b"\n") for datagram in datagrams)
    assert len(datagrams[0]) > 1432  # packed to the Unix socket's size, not UDP's
    got = parsed(payload)
    assert got[("ratelimit.service.config_load_success", "c", "env:t")] == ["1"]
    assert got[("ratelimit.service.rate_limit.web.key_299.total_hits", "c", "env:t")] == ["300"]
    assert len(got) == 301 and sink.sent == 301


def test_addresses_are_checked_and_written_in_one_form() -> None:
    """HOST:PORT is UDP (datadog-go's reading); unix:// needs an absolute path; TCP and other
    schemes are refused, naming what is wrong."""
    assert parse_dogstatsd_address("agent:8125") == "udp://agent:8125"
    assert parse_dogstatsd_address(" udp://[::1]:8125 ") == "udp://[::1]:8125"
    assert parse_dogstatsd_address("unix:///var/run/datadog/dsd.socket") == (
        "unix:///var/run/datadog/dsd.socket"
    )
    for bad, message in (
        ("tcp://agent:8125", "not udp or unix"),
        ("unix://run/dsd.socket", "ABSOLUTE"),
        ("http://agent:8125", "not tcp or udp"),
        ("agent", "HOST:PORT"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            parse_dogstatsd_address(bad)


def test_a_mogrifier_file_is_read_in_order_and_its_mistakes_are_named(tmp_path: Path) -> None:
    """--dogstatsd-mogrifiers FILE: a YAML list of pattern, name and tags, in order; a file
    that cannot be read or is not such a list, a missing or unknown field, a pattern that
    is not a regex and a value that is not text are refused naming the file and the entry."""
    good = tmp_path / "good.yaml"
    good.write_text(
        "- pattern: '^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$'\n"
        "  name: ratelimit.service.rate_limit.$3\n"
        "  tags: {domain: $1, descriptor: $2}\n"
        "- pattern: '^ratelimit_server\\.(.*)$'\n"
        "  name: ratelimit.server.$1\n"
    )
    first, second = load_mogrifiers(str(good))
    assert first.tags == (("domain", "$1"), ("descriptor", "$2"))
    assert second == Mogrifier(r"^ratelimit_server\.(.*)$", "ratelimit.server.$1")
    cases = {
        "": "must hold a list",
        "- name: x\n": "mogrifier 1 must be a mapping with a pattern and a name",
        "- {pattern: a, name: b}\n- {pattern: a, name: b, tag: {}}\n": "mogrifier 2 has unknown",
        "- {pattern: '(', name: b}\n": "mogrifier 1 pattern '\\(' is not a regex",
        "- {pattern: a, name: b, tags: {version: 2}}\n": "version's value 2 must be text",
        "- {pattern: a, name: b, tags: [x]}\n": "tags must be a mapping",
        "- {pattern: a, name: ''}\n": "mogrifier 1 has no name",
        "- [a\n": "is not YAML",
    }
    for index, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{index}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigurationError, match=message) as caught:
            load_mogrifiers(str(path))
        assert str(path) in str(caught.value)
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_mogrifiers(str(tmp_path / "missing.yaml"))


def test_flags_and_variables_set_dogstatsd_and_a_mogrifier_file_needs_it(tmp_path: Path) -> None:
    """--dogstatsd and --dogstatsd-mogrifiers, or their RATEWARDEN_ twins; mogrifiers with no
    --dogstatsd are refused; a bad value names the flag or the variable."""
    rules = tmp_path / "mogrifiers.yaml"
    rules.write_text("- {pattern: '^(.*)$', name: x.$1}\n")
    chosen = resolve(
        {**CONFIG, "dogstatsd": "127.0.0.1:8125"},
        {"RATEWARDEN_DOGSTATSD_MOGRIFIERS": str(rules), "RATEWARDEN_STATSD_TAGS": "env:a"},
    )
    assert chosen.dogstatsd == "udp://127.0.0.1:8125" and chosen.statsd is None
    assert chosen.dogstatsd_mogrifiers == (Mogrifier("^(.*)$", "x.$1"),)
    with pytest.raises(ConfigurationError, match="rewrite --dogstatsd's stats: set it"):
        resolve({**CONFIG, "dogstatsd_mogrifiers": str(rules)}, {})
    with pytest.raises(ConfigurationError, match=r"^RATEWARDEN_DOGSTATSD 'tcp://a:1'"):
        resolve(CONFIG, {"RATEWARDEN_DOGSTATSD": "tcp://a:1"})
    with pytest.raises(ConfigurationError, match=r"^--dogstatsd-mogrifiers '/nowhere\.yaml'"):
        resolve({**CONFIG, "dogstatsd_mogrifiers": "/nowhere.yaml"}, {})


def test_upstreams_variables_turn_dogstatsd_on_with_its_mogrifiers() -> None:
    """USE_DOG_STATSD=true sends to STATSD_HOST:STATSD_PORT over UDP with EXTRA_TAGS and the
    mogrifiers USE_DOG_STATSD_MOGRIFIERS names; beside USE_STATSD=true or USE_PROMETHEUS=true
    it stops the start (upstream runs one sink); DISABLE_STATS wins; a mogrifier's missing
    or bad variable is named."""
    environ = {
        **README,
        "USE_DOG_STATSD": "true",
        "USE_STATSD": "false",
        "STATSD_HOST": "agent",
        "STATSD_PORT": "9125",
        "EXTRA_TAGS": "env:prod",
    }
    chosen = resolve(CONFIG, environ)
    assert (chosen.dogstatsd, chosen.statsd) == ("udp://agent:9125", None)
    assert chosen.statsd_tags == (("env", "prod"),)
    assert [m.name for m in chosen.dogstatsd_mogrifiers] == [
        "some.original.metric",
        "ratelimit.service.rate_limit.$3",
    ]
    alone = resolve(CONFIG, {"USE_DOG_STATSD": "true"})
    assert (alone.dogstatsd, alone.dogstatsd_mogrifiers) == ("udp://localhost:8125", ())
    assert resolve(CONFIG, {"USE_DOG_STATSD": "true", "DISABLE_STATS": "true"}).dogstatsd is None
    assert resolve(CONFIG, {"USE_DOG_STATSD_MOGRIFIERS": "A"}).dogstatsd is None
    for other in ({"USE_STATSD": "true"}, {"USE_PROMETHEUS": "true"}):
        with pytest.raises(ConfigurationError, match=r"^USE_DOG_STATSD=true: upstream runs one"):
            resolve(CONFIG, {"USE_DOG_STATSD": "true", **other})
    mistakes = {
        "DOG_STATSD_MOGRIFIER_HITS_PATTERN": ("", "names HITS but DOG_STATSD_MOGRIFIER_HITS_PAT"),
        "DOG_STATSD_MOGRIFIER_HITS_NAME": ("", "DOG_STATSD_MOGRIFIER_HITS_NAME is not set"),
        "DOG_STATSD_MOGRIFIER_HITS_TAGS": ("domain", "_HITS_TAGS: 'domain' is not TAG:VALUE"),
        "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN": ("[", "mogrifier DOMAIN .* is not a regex"),
    }
    for name, (value, message) in mistakes.items():
        with pytest.raises(ConfigurationError, match=message):
            resolve(CONFIG, {**environ, name: value})


def test_serve_with_upstreams_dogstatsd_settings_sends_mogrified_tagged_stats(
    tmp_path: Path,
) -> None:
    """USE_DOG_STATSD, STATSD_HOST, STATSD_PORT, EXTRA_TAGS, STATS_FLUSH_INTERVAL and the
    README's mogrifiers alone (no RATEWARDEN_* setting), DD_ENV beside them: the process
    sends its decisions' counts as DogStatsD lines over UDP."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "web.yaml").write_text(RULES)
    http = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind((HOST, 0))
        listener.settimeout(0.2)
        environ = dict(
            README,
            RUNTIME_ROOT=str(tmp_path),
            PORT=str(http),
            GRPC_PORT=str(free_port()),
            USE_STATSD="false",
            USE_DOG_STATSD="true",
            STATSD_HOST=HOST,
            STATSD_PORT=str(listener.getsockname()[1]),
            EXTRA_TAGS="cell:a",
            STATS_FLUSH_INTERVAL="200ms",
            DD_ENV="test",
        )
        with upstream_serve(environ, http) as log_path:
            body = {
                "domain": "web",
                "descriptors": [{"entries": [{"key": "api_key", "value": "s"}]}],
            }
            statuses = [post_json(http, body) for _ in range(6)]
            assert statuses == [200] * 5 + [429]
            total = (
                "ratelimit.service.rate_limit.total_hits",
                "c",
                "env:test,cell:a,domain:web,descriptor:api_key",
            )
            received = b""
            deadline = time.monotonic() + 10
            while sum(map(int, parsed(received).get(total, []))) < 6:
                assert time.monotonic() < deadline, (received, log_path.read_text())
                with contextlib.suppress(TimeoutError):
                    received += listener.recv(65536)
    got = parsed(received)
    assert sum(map(int, got[total])) == 6
    over = ("ratelimit.service.rate_limit.over_limit", *total[1:])
    assert sum(map(int, got[over])) == 1
    assert got[("ratelimit.service.config_load_success", "c", "env:test,cell:a")] == ["1"]
