"""What ``ratewarden serve`` exposes: loopback-only listeners by default, and no secrets in output.

A Redis password given in the store URL must not appear in any log record (at
DEBUG, through start, decisions, store failures and stop), in the JSON log
lines, in the repr or str of the settings, store or server, in an error about
a bad URL, or on the CLI's stderr.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.server.app import configure_logging
from ratewarden.server.logs import LOGGERS
from ratewarden.server.settings import Settings, redacted, resolve
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests.fuzz._grpc import HOST, METHOD, background_server
from tests.security.conftest import PASSWORD, SecureRedis

RULES = "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: minute, requests_per_unit: 1}\n"
WRONG = "wr0ng-Pa55word-never-logged"
#: 127.0.0.1 as /proc/net/tcp writes it, and as an IPv4-mapped address in /proc/net/tcp6.
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}


def listening(port: int) -> set[str]:
    """The local addresses a TCP socket listens on ``port`` with (from /proc/net/tcp*)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_both_listeners_bind_loopback_only_by_default(tmp_path: Path) -> None:
    """With no --host, the gRPC and HTTP ports listen on 127.0.0.1 and nowhere else."""
    assert Settings(config_paths=("x",)).host == "127.0.0.1"
    with background_server(tmp_path, RULES, AsyncMemoryStore(clock=ManualClock())) as server:
        for port in (server.server.grpc_port, server.server.http_port):
            found = listening(port)
            assert found, f"nothing listens on {port}"
            assert found <= LOOPBACK, f"port {port} listens beyond loopback: {found}"


class Everything(logging.Handler):
    """Every record of the ratewarden loggers, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter("%(message)s %(args)s").format(record))
        self.lines.append(repr(vars(record)))


@pytest.fixture
def records() -> Iterator[Everything]:
    handler = Everything()
    logger = logging.getLogger("ratewarden")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_no_log_record_of_a_serve_run_holds_the_store_password(
    secure_redis: SecureRedis, tmp_path: Path, records: Everything
) -> None:
    """Start, answer and stop: the password is in no record's message, arguments or extra
    fields."""
    url = f"redis://default:{PASSWORD}@{HOST}:{secure_redis.port}/0"
    store = AsyncRedisStore.from_url(url, timeout=1.0)
    request = rls_pb2.RateLimitRequest(
        domain="d",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="k", value="v")]
            )
        ],
    )
    with background_server(tmp_path, RULES, store, store_url=url) as server:
        with grpc.insecure_channel(f"{HOST}:{server.port}") as channel:
            call = channel.unary_unary(
                METHOD,
                request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                response_deserializer=rls_pb2.RateLimitResponse.FromString,
            )
            for _ in range(3):
                call(request, timeout=5)
        texts = [repr(server.server.settings), str(server.server.settings), repr(store)]
        texts.append(repr(server.server.service))
    assert any("serving" in line for line in records.lines), "the run was logged"
    leaked = [text for text in records.lines + texts if PASSWORD in text]
    assert not leaked, leaked[:3]


def test_serve_refusing_a_wrong_password_does_not_say_it(
    secure_redis: SecureRedis, tmp_path: Path, records: Everything
) -> None:
    """With the wrong password the server refuses the store and serve does not start: the
    error and every record of the attempt leave the password out."""
    url = f"redis://default:{WRONG}@{HOST}:{secure_redis.port}/0"
    store = AsyncRedisStore.from_url(url, timeout=1.0)
    with (
        pytest.raises(ConfigurationError) as refused,
        background_server(tmp_path, RULES, store, store_url=url),
    ):
        pass
    assert "refused the store's credentials" in str(refused.value)
    texts = [str(refused.value), repr(refused.value), repr(store)]
    leaked = [text for text in records.lines + texts if WRONG in text]
    assert not leaked, leaked[:3]


def test_the_json_log_lines_hide_the_password(
    secure_redis: SecureRedis, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The 'serving' line of --log-format json names the store with its password as ***."""
    url = f"redis://:{PASSWORD}@{HOST}:{secure_redis.port}/0"
    configure_logging("debug", "json")
    try:
        store = AsyncRedisStore.from_url(url, timeout=1.0)
        with background_server(tmp_path, RULES, store, store_url=url):
            pass
    finally:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
        logging.getLogger("ratewarden").setLevel(logging.NOTSET)
    err = capfd.readouterr().err
    assert f":***@{HOST}" in err
    assert PASSWORD not in err


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{PASSWORD}@{HOST}:notaport/0",
        f"redis://user:{PASSWORD}@{HOST}:6379/zero",
        f"redis+sentinel://{HOST}:1/svc?sentinel_password={PASSWORD}&bogus=1",
        f"nosuchscheme://:{PASSWORD}@{HOST}",
    ],
)
def test_errors_about_a_bad_store_url_hide_its_password(url: str) -> None:
    """A bad port, db, option or scheme: the error names the URL, with *** for the password."""
    with pytest.raises(ConfigurationError) as caught:
        RedisStore.from_url(url).close()
    assert PASSWORD not in str(caught.value)


def test_settings_repr_and_errors_hide_the_password() -> None:
    """repr(Settings) and a settings error about the store URL show *** instead."""
    url = f"redis://alice:{PASSWORD}@{HOST}:6379/0?sentinel_password={PASSWORD}"
    assert PASSWORD not in repr(Settings(config_paths=("x",), store_url=url))
    assert redacted(url) == f"redis://alice:***@{HOST}:6379/0?sentinel_password=***"
    with pytest.raises(ConfigurationError) as caught:
        resolve({"store_url": "   "}, {"RATEWARDEN_CONFIG": "x"})
    assert "--store" in str(caught.value)
    assert PASSWORD not in redacted(f"user:{PASSWORD}@host")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:top/secret@127.0.0.1:1/0", "redis://u:***@127.0.0.1:1/0"),
        ("redis://:p@ss/w#rd?@h/0", "redis://:***@h/0"),
        ("redis://h/0?password=se#cret", "redis://h/0?password=***"),
        ("redis+sentinel://:se/cret@h/svc", "redis+sentinel://:***@h/svc"),
    ],
)
def test_the_servers_redaction_hides_passwords_with_separators_in_them(
    url: str, shown: str
) -> None:
    """serve's logs and messages (``redacted``) hide a password holding an unencoded / @ # ?
    as the store URL parser does: it showed 'redis://u:top/secret@...' whole."""
    assert redacted(url) == shown


def test_the_cli_never_prints_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ratewarden serve with an unusable store URL exits 2 naming it, password hidden."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    code = main(
        [
            "serve",
            "--config",
            str(rules),
            "--store",
            f"redis://:{PASSWORD}@{HOST}:notaport/0",
            "--grpc-port",
            "0",
            "--http-port",
            "0",
        ]
    )
    logging.getLogger("ratewarden").handlers.clear()
    logging.getLogger("ratewarden").propagate = True
    captured = capsys.readouterr()
    assert code == 2
    assert "notaport" in captured.err
    assert PASSWORD not in captured.out + captured.err
