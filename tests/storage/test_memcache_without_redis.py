"""The memcache stores need no redis-py: ``memcache://`` and ``memcaches://`` build in an
interpreter where ``redis`` cannot be imported (the TLS helpers they share with the Redis
stores import redis-py only where a Redis store needs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

RUN = f"""
import sys
sys.path.insert(0, {str(SRC)!r})

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "hiredis"):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from ratewarden import MemcacheStore
from ratewarden.storage.memcache import AsyncMemcacheStore
for url in ("memcache://127.0.0.1:1", "memcaches://127.0.0.1:1?ssl_check_hostname=false"):
    stores = MemcacheStore.from_url(url), AsyncMemcacheStore.from_url(url)
    print(*(type(store).__name__ for store in stores))
"""


def test_the_memcache_stores_build_without_redis_py() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["MemcacheStore AsyncMemcacheStore"] * 2
