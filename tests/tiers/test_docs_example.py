"""The example at the top of docs/two-tiers.md runs, against a real redis-server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._servers import RedisServer

DOC = Path(__file__).parents[2] / "docs" / "two-tiers.md"

pytestmark = pytest.mark.redis


def test_the_use_example_runs(redis_server: RedisServer) -> None:
    """The "Use" block, with the fixture's URL and a private Prometheus registry, decides."""
    found = re.search(r"## Use\n\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, "docs/two-tiers.md lost its Use example"
    code = (
        found.group(1)
        .replace("redis://10.0.0.5:6379/0", redis_server.url)
        .replace("PrometheusMetrics()", "PrometheusMetrics(CollectorRegistry())")
    )
    namespace: dict[str, object] = {}
    exec("from prometheus_client import CollectorRegistry\n" + code, namespace)
    decision = namespace["decision"]
    assert getattr(decision, "allowed", None) is True
    assert getattr(decision, "degraded", None) == ""
