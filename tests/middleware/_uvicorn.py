"""A real uvicorn server on 127.0.0.1 in a thread, started and stopped within a bounded time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests._servers import HOST, free_port

START_TIMEOUT_S = 10.0


@contextmanager
def serving(app: Any, *, root_path: str = "") -> Iterator[str]:
    """Serve ``app`` with uvicorn; yield its base URL; stop it on exit. ``root_path`` is
    uvicorn's ``--root-path`` (the prefix a proxy removed before passing the request on).

    ``proxy_headers=False``: uvicorn would otherwise rewrite the client address
    from X-Forwarded-For itself (it trusts 127.0.0.1 by default), and the tests
    are about what ratewarden trusts.
    """
    config = uvicorn.Config(
        app,
        host=HOST,
        port=free_port(),
        proxy_headers=False,
        lifespan="off",
        log_level="warning",
        access_log=False,
        root_path=root_path,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"uvicorn did not start on {HOST}:{config.port}")
        time.sleep(0.01)
    try:
        yield f"http://{HOST}:{config.port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
