"""The WSGI Idempotency-Key middleware's plumbing: its request body, its answers, and the
response iterable that settles the key (``Recorded``), beside the middleware in ``idempotency``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any

from ratewarden.idempotency import StoredResponse
from ratewarden.middleware._idempotency import Capture
from ratewarden.middleware._outcome import close_wsgi
from ratewarden.middleware._request import ClientGoneError
from ratewarden.middleware._types import StartResponse

__all__ = ["Recorded", "wsgi_body", "wsgi_send"]


class Recorded:
    """The app's response iterable, captured as it is sent. The key is settled when the
    app has given its last chunk, before the server sends it, or on close() if the
    response was cut short. With nothing to capture (the store failed at ``begin``), the
    lock is given back once the server has taken the last chunk, or on close(): a server
    may skip close() (werkzeug's, when the client resets right after the response)."""

    def __init__(
        self,
        result: Iterable[bytes],
        capture: Capture | None,
        settle: Callable[[Capture | None], None],
    ) -> None:
        self._result, self._capture, self._settle_with = result, capture, settle
        self._settled = False

    def __iter__(self) -> Iterator[bytes]:
        # Each chunk is held back until the next one is in hand, so the key is settled
        # before the server writes the last one: the client cannot have the whole response
        # before it is stored (a retry sent the moment it arrives is replayed).
        if self._capture is None:  # nothing to store: settled at the end, or on close()
            # Not ``yield from``: closing this generator would close the app's iterable too,
            # a second time after ``close()``.
            for chunk in self._result:
                yield chunk
            self._settle(None)
            return
        held: bytes | None = None
        for chunk in self._result:
            self._capture.add(chunk)
            if held is not None:
                yield held
            held = chunk
        self._settle(self._capture)
        if held is not None:
            yield held

    def close(self) -> None:
        """Close the app's iterable (WSGI requires it) and release an unsettled key."""
        try:
            close_wsgi(self._result)
        finally:
            self._settle(None)

    def _settle(self, capture: Capture | None) -> None:
        if not self._settled:
            self._settled = True
            self._settle_with(capture)


def wsgi_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """A WSGI request's body, or None past ``limit`` bytes (413: not read when its
    Content-Length says so). A body without a length is read only when the server
    terminates the input (``wsgi.input_terminated``), else it is ``b""``. Raises
    ``ClientGoneError`` when the input ends before its Content-Length, or fails (a cut
    chunked upload): the client left mid-body, and a truncated body must not pass for
    the whole one (the app would run on it, and its retry be refused as another body)."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        return None
    if length:
        wanted = length
    elif environ.get("wsgi.input_terminated"):
        wanted = limit + 1
    else:
        return b""
    chunks: list[bytes] = []
    size = 0
    try:
        while size < wanted:
            chunk = stream.read(wanted - size)
            if not chunk:
                break
            chunks.append(bytes(chunk))
            size += len(chunk)
    except OSError as exc:
        raise ClientGoneError from exc
    if size > limit:
        return None
    if length and size < length:
        raise ClientGoneError
    return b"".join(chunks)


def wsgi_send(start_response: StartResponse, response: StoredResponse) -> list[bytes]:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in response.headers]
    start_response(f"{response.status} {reason}", headers)
    return [response.body]
