"""plan --measure sizes a sliding log larger than it fills, and says it extrapolated."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from ratewarden.cli import main
from ratewarden.rate import Rate
from ratewarden.storage.measure import measure
from ratewarden.storage.redis import RedisStore
from tests._servers import RedisServer


@contextmanager
def _opened(client: redis.Redis) -> Iterator[RedisStore]:
    port = client.connection_pool.connection_kwargs["port"]
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}/0", timeout=5.0)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.redis
def test_a_log_larger_than_the_calls_is_extrapolated_close_to_a_real_fill(
    redis_client: redis.Redis,
) -> None:
    """2,000 entries measured from 200 and 400 lands within 5% of 2,000 really filled (it
    was the size of a 400-entry log, five times too small); a full fill is not extrapolated."""
    rate = Rate.parse("2000/hour")
    with _opened(redis_client) as store:
        guessed = measure(store, "sliding_log", rate, calls=400)
        filled = measure(store, "sliding_log", rate, calls=2000)
    assert guessed.extrapolated_from is not None
    assert [point[0] for point in guessed.extrapolated_from] == [200, 400]
    assert filled.extrapolated_from is None and filled.filled == 2000
    assert abs(guessed.key_bytes - filled.key_bytes) < 0.05 * filled.key_bytes
    assert redis_client.keys("*") == []


@pytest.mark.redis
def test_the_command_says_the_figure_is_extrapolated(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """100,000/hour: about 20 B an entry times 100,000, not a 2,000-entry log's 41 kB; the
    output says from what, and that the script time is a 2,000-entry log's."""
    argv = ["plan", "--rps", "1", "--measure", redis_server.url, "--algorithm", "sliding_log",
            "--limit", "100000/hour", "--keys", "1000"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "MEMORY USAGE" in line)
    size = int(line.split()[5].replace(",", ""))
    assert 1_500_000 < size < 3_000_000
    assert "extrapolated to 100,000 entries: measured" in line
    assert "at 1,000 and" in line and "at 2,000, taken as linear" in line
    assert "(timed on a state of 2,000 entries, not 100,000" in out
