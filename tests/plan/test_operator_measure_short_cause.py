"""``plan --measure`` against a server that is no Sentinel for the service says the cause in
a short line, not the 1.2 KB ``<redis.client.Redis(<redis.connection.ConnectionPool(...`` repr
redis-py puts after 'No master found' (finding 8 of the operator3 walk)."""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from tests._servers import RedisServer


def test_no_master_found_is_said_without_object_reprs(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1; one line naming the service and the server's answer, and no repr."""
    url = f"redis+sentinel://127.0.0.1:{redis_server.port}/mymaster"
    assert main(["plan", "--rps", "1", "--measure", url]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(
        "ratewarden plan: --measure failed: measure on Sentinel service 'mymaster': No master "
        f"found for 'mymaster': sentinel 127.0.0.1:{redis_server.port} - ResponseError: "
        "unknown command 'SENTINEL'"
    )
    assert "<redis." not in line and "ConnectionPool" not in line
    assert len(line) < 400
