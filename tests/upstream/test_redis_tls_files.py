"""serve with a Redis TLS file that cannot be read: refused at start, as for memcache."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests._servers import HOST, free_port
from tests.server_transport._process import RATEWARDEN
from tests.upstream._serve import without_ratewarden

RULES = """\
domain: tls
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
"""


def serve(environ: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RATEWARDEN, "serve", "--grpc-port", "0", "--http-port", "0", *argv],
        check=False,
        env=without_ratewarden(environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_redis_ca_file_stops_the_start(tmp_path: Path) -> None:
    """REDIS_TLS=true with REDIS_TLS_CACERT naming no file (upstream's variables), or the
    same in a --store URL: exit 2 and one line naming ssl_ca_certs and the path, not a
    server that starts and then finds its store "unavailable" (under failure_mode open,
    allowing every call)."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "rules.yaml").write_text(RULES)
    missing = str(tmp_path / "no-ca.pem")
    address = f"{HOST}:{free_port()}"
    environ = {
        "RUNTIME_ROOT": str(tmp_path),
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": address,
        "REDIS_TLS": "true",
        "REDIS_TLS_CACERT": missing,
    }
    by_env = serve(environ)
    by_url = serve(
        {"RUNTIME_ROOT": str(tmp_path)}, "--store", f"rediss://{address}/0?ssl_ca_certs={missing}"
    )
    for done in (by_env, by_url):
        assert done.returncode == 2, done.stderr
        [line] = [line for line in done.stderr.splitlines() if "error" in line]
        assert line.startswith("ratewarden serve: error: store URL ")
        assert f"ssl_ca_certs={missing!r} cannot be read as PEM certificates" in line
