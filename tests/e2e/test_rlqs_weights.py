"""RLQS weights end to end: two real Envoys naming themselves through ``initial_metadata``.

Each Envoy's ``rlqs_server`` grpc_service sends ``x-ratewarden-rlqs-peer`` (docs/rlqs.md,
weights); the rule weighs ``eu`` 3 and ``us`` 1. Both ask far more than 8 a minute, so
once both hold the bucket they hold 6 and 2 of it, and Envoy enforces that. No test
sleeps for a window: each polls with a deadline, and the request counts are bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from string import Template

import pytest

from tests.e2e._envoy import RLQS_BOOTSTRAP, Backend, Envoy, envoy_on
from tests.e2e._rlqs import RLQS_FLAGS, serving
from tests.e2e.test_rlqs import DEADLINE, first_200, held
from tests.server_transport._process import ServeProcess

RULES = """\
domain: edge
descriptors:
  - key: tenant
    rlqs_weights: {eu: 3, us: 1}
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 8}
"""
#: The test bootstrap, its rlqs_server naming the Envoy as examples/envoy-rlqs.yaml shows.
NAMED = Template(
    RLQS_BOOTSTRAP.template.replace(
        "rlqs_server: {envoy_grpc: {cluster_name: ratewarden}}",
        "rlqs_server: {envoy_grpc: {cluster_name: ratewarden}, "
        "initial_metadata: [{key: x-ratewarden-rlqs-peer, value: $peer}]}",
    )
)


@pytest.fixture
def ratewarden(tmp_path: Path) -> Iterator[ServeProcess]:
    with serving(tmp_path, RULES, *RLQS_FLAGS) as (server,):
        yield server


def named_envoy(backend: Backend, server: ServeProcess, peer: str) -> AbstractContextManager[Envoy]:
    return envoy_on(
        NAMED,
        backend=backend.port,
        ratewarden=server.grpc_port,
        domain="edge",
        no_assignment="DENY_ALL",
        peer=peer,
    )


def test_two_envoys_named_by_initial_metadata_hold_and_enforce_shares_by_weight(
    backend: Backend, ratewarden: ServeProcess
) -> None:
    """eu alone holds 8; once us joined, the next round gives 6 and 2 (3 to 1; unweighted it
    would be 4 and 4), and a burst of 10 requests at each admits more through eu than us."""
    assert "initial_metadata" in NAMED.template  # the template's rlqs_server line was found
    with named_envoy(backend, ratewarden, "eu") as eu, named_envoy(backend, ratewarden, "us") as us:
        first_200(eu, "a")
        first_200(us, "a")
        deadline = time.monotonic() + DEADLINE
        while sorted(_tokens(share) for share in held(ratewarden, "a")) != [2, 6]:
            assert time.monotonic() < deadline, held(ratewarden, "a")
            time.sleep(0.05)
        through_eu = sum(eu.get("/", {"x-tenant": "a"})[0] == 200 for _ in range(10))
        through_us = sum(us.get("/", {"x-tenant": "a"})[0] == 200 for _ in range(10))
        assert through_eu > through_us, (through_eu, through_us)
        assert through_us <= 2


def _tokens(share: object) -> int:
    return share["tokens_per_fill"] if isinstance(share, dict) else 0
