"""The answers' dynamic_metadata in upstream's shape (``--response-metadata upstream``,
envoyproxy/ratelimit's ``RESPONSE_DYNAMIC_METADATA=true``), and the setting's readings."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import json_format

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.server.settings import resolve
from ratewarden.storage.memory import MemoryStore
from tests._servers import HOST
from tests.server.conftest import OK, OVER, Harness, Response, desc
from tests.upstream._serve import serve_rules

Make = Callable[..., Harness]
MINUTE = Response.RateLimit.MINUTE

RULES = """
domain: d
descriptors:
  - key: plan
    value: gold
    metadata: {tier: gold, shared: {a: 1, n: {x: 1}}, tags: [a, b]}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: silver
    metadata: {tier: silver, shared: {b: 2, a: 9, n: {y: 2}}}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: region
    metadata: {region_seen: true}
  - key: free
    metadata: {free: true}
    rate_limit: {unlimited: true}
  - key: trial
    metadata: {trial: true}
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tight
    metadata: {tight: true}
    rate_limit: {unit: minute, requests_per_unit: 1}
"""
CONFIG = {"config_paths": ["rules.yaml"]}


def metadata(response: object) -> dict[str, object]:
    return json_format.MessageToDict(response.dynamic_metadata)  # type: ignore[attr-defined]


def test_upstreams_shape_names_the_request_and_merges_the_passing_rules_metadata(
    rls: Make,
) -> None:
    """domain, every descriptor's entries (its override and hits if given), the request's
    hits; metadata of the rules that passed (shadow ones too), merged as upstream merges:
    the first value of a key stays, mappings merge. Not merged: a node without a limit,
    an unlimited rule, a denied rule, an override."""
    h = rls(RULES, response_metadata="upstream")
    assert h.codes(desc(("tight", "t"))) == [OK, OK]
    assert h.codes(desc(("trial", "t"))) == [OK, OK]
    response = h.ask(
        desc(("plan", "gold")),
        desc(("plan", "silver"), hits=2),
        desc(("region", "eu")),
        desc(("free", "f")),
        desc(("trial", "t")),
        desc(("plan", "gold"), ("x", "y"), limit=(3, MINUTE)),
        hits=1,
    )
    assert [s.code for s in response.statuses] == [OK] * 6
    assert metadata(response) == {
        "domain": "d",
        "hitsAddend": 1.0,
        "descriptors": [
            {"entries": ["plan=gold"]},
            {"entries": ["plan=silver"], "hitsAddend": 2.0},
            {"entries": ["region=eu"]},
            {"entries": ["free=f"]},
            {"entries": ["trial=t"]},
            {"entries": ["plan=gold", "x=y"], "limit": "requests_per_unit: 3 unit: MINUTE"},
        ],
        "metadata": {
            "tier": "gold",
            "tags": ["a", "b"],
            "shared": {"a": 1.0, "b": 2.0, "n": {"x": 1.0, "y": 2.0}},
            "trial": True,
        },
    }
    denied = h.ask(desc(("tight", "t")), desc(("region", "eu")))
    assert denied.overall_code == OVER
    assert metadata(denied) == {
        "domain": "d",
        "descriptors": [{"entries": ["tight=t"]}, {"entries": ["region=eu"]}],
    }


def test_the_merged_default_is_unchanged_and_a_bad_mode_is_refused(rls: Make) -> None:
    """By default only the passing descriptors' metadata, merged at the top (a later key
    wins); a mode other than merged or upstream stops the service's construction."""
    h = rls(RULES)
    response = h.ask(desc(("plan", "gold")), desc(("plan", "silver")), desc(("region", "eu")))
    assert metadata(response) == {
        "tier": "silver",
        "tags": ["a", "b"],
        "shared": {"b": 2.0, "a": 9.0, "n": {"y": 2.0}},
        "region_seen": True,
    }
    with pytest.raises(ConfigurationError, match="response_metadata 'json' must be one of"):
        RateLimitService(config.loads(RULES, "r.yaml"), MemoryStore(), response_metadata="json")


def test_the_flag_its_variable_and_upstreams_variable_choose_the_shape() -> None:
    """--response-metadata, RATEWARDEN_RESPONSE_METADATA, and RESPONSE_DYNAMIC_METADATA=true
    (false leaves ratewarden's merged shape); the flag wins; a bad value names its source."""
    assert resolve(CONFIG, {}).response_metadata == "merged"
    assert resolve(CONFIG, {"RESPONSE_DYNAMIC_METADATA": "true"}).response_metadata == "upstream"
    assert resolve(CONFIG, {"RESPONSE_DYNAMIC_METADATA": "false"}).response_metadata == "merged"
    environ = {"RATEWARDEN_RESPONSE_METADATA": "Upstream"}
    assert resolve(CONFIG, environ).response_metadata == "upstream"
    flag = {**CONFIG, "response_metadata": "merged"}
    assert resolve(flag, {"RESPONSE_DYNAMIC_METADATA": "true"}).response_metadata == "merged"
    with pytest.raises(ConfigurationError, match=r"^--response-metadata 'flat': must be one of"):
        resolve({**CONFIG, "response_metadata": "flat"}, {})


def test_serve_on_upstreams_variable_answers_grpc_and_json_in_upstreams_shape(
    tmp_path: Path,
) -> None:
    """RESPONSE_DYNAMIC_METADATA=true alone (no RATEWARDEN_* setting): a ShouldRateLimit call
    on the gRPC port and a POST to /json both carry upstream's shape."""
    expected = {
        "domain": "d",
        "descriptors": [{"entries": ["plan=gold"]}],
        "metadata": {"tier": "gold", "shared": {"a": 1.0, "n": {"x": 1.0}}, "tags": ["a", "b"]},
    }
    with serve_rules(tmp_path, RULES, RESPONSE_DYNAMIC_METADATA="true") as (http, grpc_port):
        with grpc.insecure_channel(f"{HOST}:{grpc_port}") as channel:
            stub = rls_pb2_grpc.RateLimitServiceStub(channel)
            request = rls_pb2.RateLimitRequest(domain="d", descriptors=[desc(("plan", "gold"))])
            assert metadata(stub.ShouldRateLimit(request, timeout=5)) == expected
        body = json.dumps(
            {"domain": "d", "descriptors": [{"entries": [{"key": "plan", "value": "gold"}]}]}
        ).encode()
        post = urllib.request.Request(f"http://{HOST}:{http}/json", data=body, method="POST")
        with urllib.request.urlopen(post, timeout=5) as reply:
            assert json.loads(reply.read())["dynamicMetadata"] == expected
