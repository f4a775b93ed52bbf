"""Long request values keep /metrics and /dashboard.json within the sizes docs/operations.md states.

A real ``ratewarden serve`` on loopback ports, called over gRPC as Envoy would:
each call carries a per-descriptor limit override (whose rule is named after the values)
and a distinct 60 KiB value, the most Envoy forwards in a header. The byte
figures below are the ones docs/operations.md ("How large /metrics and
/dashboard.json can get") derives the largest answers from.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.labels import MAX_LABEL_CHARS
from ratewarden.server.dashboard.live import MAX_KEY_CHARS
from tests._servers import HOST
from tests.server_transport._process import ServeProcess

#: A configured value longer than a label: its rule's path is cut too, and still finds its row.
TENANT = "t" * 300
RULES = f"""\
domain: transport
descriptors:
  - key: api_key
    rate_limit: {{unit: minute, requests_per_unit: 100}}
  - key: user
    detailed_metric: true
    rate_limit: {{unit: minute, requests_per_unit: 100}}
  - key: tenant
    value: {TENANT}
    rate_limit: {{unit: minute, requests_per_unit: 100}}
"""

#: Envoy forwards header values up to 60 KiB.
VALUE_CHARS = 60 * 1024
VALUES = 40
#: docs/operations.md: a /metrics line with plain ASCII labels, newline included (a per-key
#: counter's, with domain, key, key1 and key2).
LINE_BYTES = 506
#: Lines per (domain, key) pair (24), per value_overflow pair (2), per rule label
#: (6 algorithms x 3 outcomes x 2 on ratewarden_decisions), and the rest, in bytes.
PAIR_BYTES = 24 * LINE_BYTES
OVERFLOW_BYTES = 2 * LINE_BYTES
RULE_BYTES = 36 * 235
FIXED_BYTES = 16 * 1024
#: docs/operations.md: one /dashboard.json rule row, top-key tables, and the rest.
ROW_BYTES = 3600
TOP_BYTES = 3 * 10 * 405
REST_BYTES = 1500


def descriptor(key: str, value: str, *, override: bool) -> Any:
    out = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=key, value=value)]
    )
    if override:
        out.limit.requests_per_unit = 1
        out.limit.unit = rls_pb2.RateLimitResponse.RateLimit.MINUTE
    return out


def get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=60) as reply:
        assert reply.status == 200
        body: bytes = reply.read()
        return body


def strings(data: Any) -> list[str]:
    """Every string in a JSON document, object keys included."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in (k, *strings(v))]
    if isinstance(data, list):
        return [s for item in data for s in strings(item)]
    return []


def test_long_override_values_keep_metrics_and_dashboard_bounded(tmp_path: Path) -> None:
    """40 distinct 60 KiB values that differ only in their last characters, each sent twice with
    a 1/minute override (once allowed, once over) and once under a detailed_metric rule: every
    metric label is at most MAX_LABEL_CHARS, every line and every dashboard row within its
    stated size, both answers within the stated total; the values stay distinct series and
    distinct top keys, and a configured rule with a 300-character value keeps its figures."""
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(RULES)
    server = ServeProcess(rules_path)
    try:
        server.wait_serving()
        values = ["v" * (VALUE_CHARS - 3) + f"{i:03d}" for i in range(VALUES)]
        with grpc.insecure_channel(server.grpc_target) as chan:
            stub = rls_pb2_grpc.RateLimitServiceStub(chan)
            for value in values:
                for _ in range(2):
                    override = descriptor("api_key", value, override=True)
                    stub.ShouldRateLimit(
                        rls_pb2.RateLimitRequest(domain="transport", descriptors=[override]),
                        timeout=10,
                    )
                detailed = descriptor("user", value, override=False)
                stub.ShouldRateLimit(
                    rls_pb2.RateLimitRequest(domain="transport", descriptors=[detailed]),
                    timeout=10,
                )
            tenant = descriptor("tenant", TENANT, override=False)
            stub.ShouldRateLimit(
                rls_pb2.RateLimitRequest(domain="transport", descriptors=[tenant]), timeout=10
            )
        metrics = get(server.http_port, "/metrics")
        dashboard = get(server.http_port, "/dashboard.json")
    finally:
        server.stop()

    text = metrics.decode()
    labels = [
        label
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        for label in sample.labels.values()
    ]
    # Lengths first, then plain integers compared: a failure reports numbers, not megabytes.
    longest_label = max(map(len, labels))
    longest_line = max(len(line) + 1 for line in metrics.split(b"\n"))
    size = len(metrics)
    pairs = 2 * VALUES + 1  # an override and a detailed_metric pair per value, and the tenant
    rules = VALUES + 3  # an override rule per value, and the three configured rules
    assert longest_label <= MAX_LABEL_CHARS
    assert longest_line <= LINE_BYTES
    assert size <= FIXED_BYTES + pairs * (PAIR_BYTES + OVERFLOW_BYTES) + rules * RULE_BYTES
    keys = {
        sample.labels["key"]
        for family in text_string_to_metric_families(text)
        if family.name == "ratelimit_service_rate_limit_total_hits"
        for sample in family.samples
    }
    assert len(keys) == pairs  # cut, but still one series per value

    view = json.loads(dashboard)
    longest_string = max(map(len, strings(view)))
    longest_in_rows = max(len(s) for row in view["rules"] for s in strings(row))
    largest_row = max(len(json.dumps(row, separators=(",", ":"))) for row in view["rules"])
    size = len(dashboard)
    assert longest_string <= MAX_KEY_CHARS
    assert longest_in_rows <= MAX_LABEL_CHARS
    assert largest_row <= ROW_BYTES
    assert len(view["rules"]) == rules
    assert size <= REST_BYTES + TOP_BYTES + rules * ROW_BYTES
    over = view["top"]["over"]
    assert len(over) == 10 and len({entry["key"] for entry in over}) == 10
    [tenant_row] = [row for row in view["rules"] if row["path"].startswith("transport.tenant_t")]
    assert tenant_row["loaded"] and tenant_row["totals"]["decisions"] == 1
