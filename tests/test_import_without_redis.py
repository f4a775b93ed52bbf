"""``from ratewarden import RedisStore`` without redis-py installed says which extra brings
it and how to install it from a clone, as an ImportError (a ``ModuleNotFoundError`` naming
the missing module), not a bare "No module named 'redis'"; the rest of the package imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: redis-py made unimportable, then the name imported; prints the error's type, name, text.
RUN = f"""
import sys
sys.path.insert(0, {str(SRC)!r})

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("redis", "hiredis"):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from ratewarden import Limiter, MemoryStore
try:
    exec(f"from ratewarden import {{sys.argv[1]}}")
except ImportError as exc:
    print(type(exc).__name__, exc.name, exc, sep="\\n")
"""


@pytest.mark.parametrize("name", ["RedisStore", "AsyncRedisStore"])
def test_a_redis_store_without_redis_py_says_to_install_the_extra(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN, name], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == [
        "ModuleNotFoundError",
        "redis",
        f"ratewarden.{name} needs redis-py (the redis extra), which is not installed (no module "
        "named 'redis'): pip install 'ratewarden[redis]' (in a clone: pip install -e '.[redis]')",
    ]


@pytest.mark.parametrize("name", ["MemcacheStore", "AsyncMemcacheStore"])
def test_the_memcache_stores_import_without_redis_py(name: str) -> None:
    """They share TLS helpers with the Redis stores, which import redis-py only where a Redis
    store needs it (b65daf0 had imported it at the helpers' top: ac09799)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN, name], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == ""
