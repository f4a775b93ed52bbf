"""Redis servers that demand a password, an ACL user, or TLS; and certificates made by trustme."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import trustme

from tests._servers import RedisServer, free_port

PASSWORD = "s3cret-Pa55word-for-tests"
ACL_USER = "limiter"
ACL_PASSWORD = "acl-Pa55word-for-tests"
#: The least a store needs: its scripts (and the commands they call), PING, and DEL for reset.
ACL_COMMANDS = (
    "+evalsha +eval +ping +del +get +set +hset +hdel +hgetall +pexpire +lrange +ltrim +rpush +time"
)
ACL_KEYS = "rw*"


class PasswordRedis(RedisServer):
    """A RedisServer whose own clients (the readiness probe too) authenticate."""

    def client(self, **kwargs: object) -> redis.Redis:
        return super().client(password=PASSWORD, **kwargs)


@dataclass(frozen=True)
class SecureRedis:
    """A redis-server with ``requirepass``, an ACL user, and a TLS port beside the plain one."""

    server: RedisServer
    tls_port: int
    ca: Path

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    """A throwaway certificate authority for every TLS test of the session."""
    return trustme.CA()


@pytest.fixture(scope="module")
def secure_redis(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    """``requirepass PASSWORD``, user ``limiter`` limited to the ``rw*`` keys and the commands a
    store needs, and TLS on a second port (server certificate for 127.0.0.1 from ``ca``)."""
    directory = tmp_path_factory.mktemp("secure-redis")
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file, ca_file = (directory / name for name in ("cert.pem", "key.pem", "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    tls_port = free_port()
    server = PasswordRedis(
        [
            f"requirepass {PASSWORD}",
            f"user {ACL_USER} on >{ACL_PASSWORD} ~{ACL_KEYS} {ACL_COMMANDS}",
            f"tls-port {tls_port}",
            f"tls-cert-file {cert_file}",
            f"tls-key-file {key_file}",
            f"tls-ca-cert-file {ca_file}",
            "tls-auth-clients optional",
        ]
    )
    yield SecureRedis(server, tls_port, ca_file)
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)
