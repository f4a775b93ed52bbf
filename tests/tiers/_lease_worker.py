"""One process of the multi-process lease test (``python -m tests.tiers._lease_worker``).

``URL KEY LIMIT K ATTEMPTS``: connect, print "ready", wait for a line on stdin (the
start signal), make ATTEMPTS hits of cost 1 on KEY at LIMIT per day through a
TwoTier with leases of K, print how many were admitted and the units still held.
"""

from __future__ import annotations

import sys

from ratewarden import Rate
from ratewarden.storage.redis import RedisStore
from ratewarden.tiers import TwoTier


def main(url: str, key: str, limit: int, k: int, attempts: int) -> None:
    store = RedisStore.from_url(url, timeout=2.0)
    tiers = TwoTier(store, lease=k)
    rate = Rate(limit, 86_400)  # one unit back every 86,400 / LIMIT s: none during the test
    tiers.peek("warm-up", rate)  # connected and the script loaded before the start signal
    print("ready", flush=True)
    sys.stdin.readline()
    admitted = sum(tiers.hit(key, rate).allowed for _ in range(attempts))
    assert tiers.leases is not None
    held = tiers.leases.outstanding(tiers.clock.now_us())
    print(admitted, held, tiers.leases.wasted, flush=True)
    store.close()


if __name__ == "__main__":
    url, key, limit, k, attempts = sys.argv[1:]
    main(url, key, int(limit), int(k), int(attempts))
