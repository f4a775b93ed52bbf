"""An outage's message reads as one sentence: redis-py's full stop is not left before ours."""

from __future__ import annotations

import pytest

from ratewarden import Rate
from ratewarden.errors import StorageUnavailableError
from ratewarden.storage.redis import RedisStore
from tests._servers import free_port


@pytest.mark.redis
def test_a_refused_connection_reads_without_a_stray_full_stop() -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}", timeout=1.0)
    try:
        with pytest.raises(StorageUnavailableError) as failed:
            store.hit("gcra", "k", Rate.parse("1/second"))
    finally:
        store.close()
    message = str(failed.value)
    assert ".;" not in message
    assert "Connection refused; the failure mode decides what to do" in message
