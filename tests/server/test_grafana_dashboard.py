"""docs/grafana-dashboard.json: valid JSON, a sound Grafana layout, and only real metric names.

Every metric a panel queries must be a sample name that ``ServiceStats`` really
exposes once the service has seen traffic of every kind (within, near and over
the limit, shadow mode, open and closed failure modes, a call, a config load).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ratewarden.server.stats import ServiceStats
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, desc
from tests.server.test_stats import FailingStore, ask, service

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b((?:ratelimit_service|ratewarden)_[a-z_]+)\b")


def exposed_sample_names() -> set[str]:
    """Sample names of a registry after traffic of every kind."""
    stats = ServiceStats(clock=ManualClock(ALIGNED))
    store = FailingStore(clock=ManualClock(ALIGNED))
    svc = service(stats, store)
    for _ in range(7):
        ask(svc, desc(("api_key", "a")))
    for _ in range(3):
        ask(svc, desc(("dark", "d")))
    store.down = True
    ask(svc, desc(("fragile", "f")))
    ask(svc, desc(("lenient", "l")))
    stats.request(0.001)
    stats.request(0.001, failed=True)
    stats.config_load(True)
    stats.config_load(False)
    body, _ = stats.exposition()
    return {
        sample.name
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def test_every_metric_the_dashboard_queries_is_exposed() -> None:
    """No panel graphs a name the service does not export (a typo shows as an empty panel)."""
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for expr in expressions(dashboard) for name in METRIC.findall(expr)}
    assert len(queried) >= 10
    missing = queried - exposed_sample_names()
    assert missing == set()


def test_the_headline_metrics_are_all_graphed() -> None:
    """The issue's metric list (total, over, near, within... store latency, config loads) and
    ratewarden's own decisions and degraded counts each appear in some panel."""
    dashboard = json.loads(DASHBOARD.read_text())
    queried = " ".join(expressions(dashboard))
    for name in (
        "ratelimit_service_rate_limit_total_hits_total",
        "ratelimit_service_rate_limit_over_limit_total",
        "ratelimit_service_rate_limit_near_limit_total",
        "ratelimit_service_rate_limit_within_limit_total",
        "ratelimit_service_rate_limit_shadow_mode_total",
        "ratelimit_service_rate_limit_failure_mode_allowed_total",
        "ratelimit_service_rate_limit_failure_mode_denied_total",
        "ratewarden_store_latency_seconds_bucket",
        "ratelimit_service_config_load_success_total",
        "ratelimit_service_config_load_error_total",
        "ratewarden_decisions_total",
        "ratewarden_degraded_total",
    ):
        assert name in queried, name


def test_the_layout_is_a_loadable_grafana_dashboard() -> None:
    """Unique panel ids, panels inside the 24-column grid, a data source variable on every
    query, balanced brackets in every expression."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    all_panels = panels(dashboard)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
            expr = target["expr"]
            for opening, closing in ("()", "[]", "{}"):
                assert expr.count(opening) == expr.count(closing), expr
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names[0] == "datasource" and "domain" in names
