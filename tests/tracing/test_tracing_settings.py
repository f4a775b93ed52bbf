"""Tracing as settings: ratewarden's flags and variables, and envoyproxy/ratelimit's TRACING_*;
and ``ratewarden serve`` started on upstream's variables alone exporting its spans."""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import signal
import sys
import types
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc
from opentelemetry.proto.common import v1 as common_v1

from ratewarden import cli
from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_env, upstream_settings
from ratewarden.server.settings import Settings, resolve
from ratewarden.server.tracing import SPAN_NAME
from tests._servers import free_port
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import channel, request, rules_file
from tests.tracing._collector import GrpcCollector

CONFIG = {"config_paths": ["rules.yaml"]}


def test_the_flags_and_their_variables() -> None:
    chosen = resolve(
        {**CONFIG, "tracing": "GRPC"},
        {
            "RATEWARDEN_TRACING_SAMPLING_RATE": "0.25",
            "RATEWARDEN_TRACING_RESOURCE": "service.name=edge, service.namespace=rl",
        },
    )
    assert (chosen.tracing, chosen.tracing_sampling_rate, chosen.tracing_resource) == (
        "grpc",
        0.25,
        (("service.name", "edge"), ("service.namespace", "rl")),
    )
    assert resolve(CONFIG, {}).tracing == "off"


@pytest.mark.parametrize(
    ("flags", "environ", "says"),
    [
        ({"tracing": "zipkin"}, {}, "--tracing 'zipkin': must be one of: off, http, grpc"),
        ({"tracing_sampling_rate": "1.5"}, {}, "--tracing-sampling-rate '1.5': must be a number"),
        ({}, {"RATEWARDEN_TRACING_RESOURCE": "service.name"}, "is not KEY=VALUE"),
        (
            {},
            {"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "udp"},
            "TRACING_EXPORTER_PROTOCOL='udp': must be http or grpc",
        ),
        ({}, {"TRACING_ENABLED": "maybe"}, "TRACING_ENABLED='maybe'"),
    ],
)
def test_bad_tracing_settings_are_refused_naming_them(
    flags: dict[str, Any], environ: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        resolve({**CONFIG, **flags}, environ)
    assert says in str(caught.value)


def test_without_opentelemetry_the_start_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name.startswith("opentelemetry") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ConfigurationError, match=r"pip install 'ratewarden\[tracing\]'"):
        Settings(config_paths=("rules.yaml",), tracing="http")
    assert Settings(config_paths=("rules.yaml",)).tracing == "off"


def test_opentelemetry_protos_overwritten_by_xds_protos_are_named_with_the_repair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """xds-protos ships an older copy of opentelemetry-proto's files; installed after it, the
    exporters cannot import theirs. The start says so, with the command that repairs it."""
    older = types.ModuleType("opentelemetry.proto.common.v1.common_pb2")  # no InstrumentationScope
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.common.v1.common_pb2", older)
    monkeypatch.setattr(common_v1, "common_pb2", older)
    version = importlib.metadata.version("opentelemetry-proto")
    with pytest.raises(ConfigurationError) as caught:
        Settings(config_paths=("rules.yaml",), tracing="grpc")
    assert "overwritten by the older copy that xds-protos ships" in str(caught.value)
    assert f"--force-reinstall --no-deps 'opentelemetry-proto=={version}'" in str(caught.value)


def test_upstreams_tracing_settings_map_with_upstreams_defaults() -> None:
    """TRACING_ENABLED=true alone: OTLP over HTTP, service.name RateLimit, every call
    sampled. Each TRACING_* maps; the rate is clamped to 0..1 as upstream's sampler reads
    it; set without TRACING_ENABLED=true they are named without effect."""
    alone = resolve(CONFIG, {"TRACING_ENABLED": "true"})
    assert (alone.tracing, alone.tracing_sampling_rate, alone.tracing_resource) == (
        "http",
        1.0,
        (("service.name", "RateLimit"),),
    )
    environ = {
        "TRACING_ENABLED": "true",
        "TRACING_EXPORTER_PROTOCOL": "grpc",
        "TRACING_SERVICE_NAME": "rl",
        "TRACING_SERVICE_NAMESPACE": "edge",
        "TRACING_SERVICE_INSTANCE_ID": "pod-1",
        "TRACING_SAMPLING_RATE": "7",
    }
    chosen = resolve(CONFIG, environ)
    assert (chosen.tracing, chosen.tracing_sampling_rate) == ("grpc", 1.0)
    assert chosen.tracing_resource == (
        ("service.name", "rl"),
        ("service.namespace", "edge"),
        ("service.instance.id", "pod-1"),
    )
    assert set(upstream_settings.applied(environ)) == set(environ)
    assert resolve(CONFIG, {**environ, "TRACING_SAMPLING_RATE": "-1"}).tracing_sampling_rate == 0
    idle = {"TRACING_SERVICE_NAME": "rl", "TRACING_SAMPLING_RATE": "0.5"}
    assert resolve(CONFIG, idle).tracing == "off"
    assert set(upstream_env.no_effect(idle)) == set(idle)
    mine = resolve({**CONFIG, "tracing": "off"}, {"TRACING_ENABLED": "true"})
    assert mine.tracing == "off"  # a ratewarden setting wins over upstream's


def test_the_flags_are_on_the_serve_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in ("--tracing", "--tracing-sampling-rate", "--tracing-resource"):
        assert flag in out


async def test_serve_on_upstreams_variables_alone_exports_its_spans(tmp_path: Any) -> None:
    """``ratewarden serve`` with TRACING_ENABLED=true, TRACING_EXPORTER_PROTOCOL=grpc and the
    standard OTEL_EXPORTER_OTLP_ENDPOINT: a call in Envoy's trace reaches the collector as
    upstream names the service, by SIGTERM at the latest."""
    collector = GrpcCollector()
    await collector.start()
    grpc_port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RATEWARDEN_", "OTEL_"))}
    environ.update(
        RATEWARDEN_CONFIG=str(rules_file(tmp_path)),
        RATEWARDEN_GRPC_PORT=str(grpc_port),
        RATEWARDEN_HTTP_PORT=str(free_port()),
        TRACING_ENABLED="true",
        TRACING_EXPORTER_PROTOCOL="grpc",
        TRACING_SERVICE_INSTANCE_ID="rl-0",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
    )
    process = await asyncio.create_subprocess_exec(
        *RATEWARDEN,
        "serve",
        env=environ,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        metadata = (("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)
        for _ in range(300):  # the start, imports included, on a busy machine: 30 s at most
            try:
                async with channel(grpc_port) as chan:
                    stub = rls_pb2_grpc.RateLimitServiceStub(chan)
                    await stub.ShouldRateLimit(
                        request("transport", {"api_key": "k"}), metadata=metadata, timeout=1
                    )
                break
            except grpc.aio.AioRpcError:
                assert process.returncode is None
                await asyncio.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, errors = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, errors.decode()
        [span] = await collector.wait_for(1)
        assert (span.name, span.trace_id) == (SPAN_NAME, "0af7651916cd43dd8448eb211c80319c")
        assert span.resource["service.name"] == "RateLimit"
        assert span.resource["service.instance.id"] == "rl-0"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await collector.stop()
