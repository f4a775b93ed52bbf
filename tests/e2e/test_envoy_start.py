"""``start_envoy``: Envoy started again on fresh ports when a port it was given is taken."""

from __future__ import annotations

import socket

import pytest

from tests._servers import HOST
from tests.e2e._envoy import start_envoy

HCM = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
    ".HttpConnectionManager"
)

#: The smallest bootstrap that serves: an admin port and a listener answering 200 itself.
MINIMAL = """\
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: only
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listener}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {hcm}
          stat_prefix: only
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                direct_response: {{status: 200}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"""


def test_envoy_starts_again_when_a_port_it_was_given_is_taken() -> None:
    """The first bootstrap names a port another socket listens on: Envoy exits, and the
    second start, on fresh ports, serves."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        tried: list[int] = []

        def fill(listener: int, admin: int) -> str:
            chosen = busy if not tried else listener
            tried.append(chosen)
            return MINIMAL.format(listener=chosen, admin=admin, hcm=HCM)

        envoy = start_envoy(fill)
        try:
            assert tried[0] == busy
            assert len(tried) == 2
            assert envoy.get("/")[0] == 200
        finally:
            envoy.stop()


def test_envoy_failing_for_another_reason_is_not_started_again() -> None:
    """A bootstrap Envoy refuses for what it says, not for a port, fails at the first try."""
    tried: list[int] = []

    def fill(listener: int, admin: int) -> str:
        tried.append(listener)
        filled = MINIMAL.format(listener=listener, admin=admin, hcm=HCM)
        return filled.replace("stat_prefix", "stat_prefx")  # a field Envoy does not know

    with pytest.raises(RuntimeError, match="envoy exited"):
        start_envoy(fill)
    assert len(tried) == 1
