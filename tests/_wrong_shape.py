"""A real TCP server on loopback that speaks Redis's protocol but answers with the wrong shape.

A Redis-protocol proxy, a "Redis-compatible" server without Lua, or a wrong port on another
RESP service answers every command with a valid RESP value that is not what ratewarden sends
for. ``WrongShapeServer`` answers each command it reads (parsed with hiredis) with one fixed
RESP value, ``REPLIES`` holds the values the tests use; with ``hello`` it answers redis-py's
``HELLO`` handshake with that value instead, so that a client gets past the handshake to the
store's own commands. Used by tests/storage/test_redis_wrong_reply_shape.py (the Redis store)
and tests/storage/test_region_store_wrong_replies*.py (the region stores).
"""

from __future__ import annotations

import socket
import threading

import hiredis

from tests._servers import HOST

__all__ = ["HELLO_MAP", "HELLO_REFUSED", "REPLIES", "WrongShapeServer"]

#: What each command is answered: a RESP value of a shape no script sends.
REPLIES = {
    "integer": b":1\r\n",
    "status": b"+OK\r\n",
    "short array": b"*2\r\n:1\r\n$3\r\nabc\r\n",
    # Its 8 bytes indexed as 8 numbers made a one-rate decision out of it.
    "8-byte string": b"$8\r\nabcdefgh\r\n",
    "nil": b"$-1\r\n",
    "8 strings": b"*8\r\n" + b"$1\r\nx\r\n" * 8,
}

#: ``HELLO`` refused as a server before Redis 6 refuses it: redis-py falls back to RESP2.
HELLO_REFUSED = b"-ERR unknown command 'HELLO'\r\n"
#: ``HELLO 3`` answered as Redis answers it (the one field redis-py checks): RESP3.
HELLO_MAP = b"%1\r\n$5\r\nproto\r\n:3\r\n"


class WrongShapeServer:
    """Answers every command it reads with ``reply`` (``HELLO`` with ``hello``, if given), on
    a loopback port."""

    def __init__(self, reply: bytes, hello: bytes | None = None) -> None:
        self.reply = reply
        self.hello = reply if hello is None else hello
        self.sock = socket.create_server((HOST, 0))
        self.port = int(self.sock.getsockname()[1])
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """The server as a store's ``redis://`` URL."""
        return f"redis://{HOST}:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = hiredis.Reader()
        try:
            while data := conn.recv(65536):
                reader.feed(data)
                while (command := reader.gets()) is not False:
                    hello = isinstance(command, list) and command[:1] == [b"HELLO"]
                    conn.sendall(self.hello if hello else self.reply)
        except OSError:
            return

    def close(self) -> None:
        self.sock.close()
        for conn in self._conns:
            conn.close()
