"""An xDS server given as a URL with a scheme is refused at start, as a bad HOST:PORT is.

``--config-xds http://127.0.0.1:29999`` used to be taken, ``http`` read as a host, and the
client retried a resolver error for ever with the ports closed. The flag, RATEWARDEN's
variable and upstream's ``CONFIG_GRPC_XDS_SERVER_URL`` go through the same check.
"""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.settings import resolve

UPSTREAM = {"CONFIG_TYPE": "GRPC_XDS_SOTW"}


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:29999", "https://cp:18000", "grpc://cp:18000", "cp/x:18000"]
)
def test_a_url_with_a_scheme_or_a_path_is_refused_by_the_flag(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"--config-xds.*HOST:PORT"):
        resolve({"config_xds": url}, {})


def test_the_message_says_what_to_give_instead() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"http:// is not a gRPC target: give HOST:PORT \(127.0.0.1:29999\)",
    ):
        resolve({"config_xds": "http://127.0.0.1:29999"}, {})


def test_upstreams_variable_is_checked_the_same_way() -> None:
    with pytest.raises(ConfigurationError, match=r"CONFIG_GRPC_XDS_SERVER_URL.*HOST:PORT"):
        resolve({}, {**UPSTREAM, "CONFIG_GRPC_XDS_SERVER_URL": "http://127.0.0.1:29999"})


@pytest.mark.parametrize(
    "target", ["127.0.0.1:29999", "[::1]:18000", "dns:///cp:18000", "unix:/tmp/x"]
)
def test_host_port_and_grpc_target_uris_are_still_taken(target: str) -> None:
    assert resolve({"config_xds": target}, {}).config_xds == target
