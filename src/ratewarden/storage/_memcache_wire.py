"""Memcached's meta protocol, sans I/O: the requests the memcache store sends, and their replies.

The store needs four commands of the meta protocol (memcached 1.6 and later):

- ``mg <name> v c``: the item's value and its CAS number (``VA <size> c<cas>`` and the
  data, or ``EN`` when there is no such item);
- ``ms <name> <size> T<ttl> C<cas> c``: write only if the item still has CAS number
  ``<cas>`` (``HD c<new cas>``; ``EX`` when another write came first, ``NF`` when the item
  is gone), or with ``ME`` instead of ``C<cas>``: write only if there is no such item yet
  (``HD c<cas>``; ``NS`` when there is);
- ``md <name> C<cas>``: delete only if unchanged (``HD``, ``EX`` or ``NF``);
- ``version``: the health check (``VERSION 1.6.18``).

Replies on one connection come back in the order of the requests. ``Parser`` turns the
bytes read into ``Reply`` values (and ``ReplyError`` for ``ERROR``, ``CLIENT_ERROR`` and
``SERVER_ERROR`` lines). Nothing here does I/O; the links in ``_memcache_link`` do.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["VERSION", "Parser", "Reply", "ReplyError", "delete", "get", "store"]

#: The health check's request.
VERSION = b"version\r\n"

#: The codes a meta command answers with (``VERSION`` is the health check's).
_CODES = frozenset((b"HD", b"NS", b"EX", b"NF", b"EN", b"MN", b"VERSION"))


class Reply(NamedTuple):
    """One reply: its code (``VA``, ``HD``, ``EN``, ``NS``, ``EX``, ``NF``, ``VERSION``),
    the CAS number its ``c`` flag carried (or None), and ``VA``'s data (or the version)."""

    code: bytes
    cas: int | None
    value: bytes | None


class ReplyError(Exception):
    """memcached answered ``ERROR``, ``CLIENT_ERROR <message>`` or ``SERVER_ERROR <message>``.

    ``transient`` when retrying later may work (the server is out of memory); a request
    the server could not parse is not. After one, the link drops the connection: the
    server may have read the request's data line as a command of its own.
    """

    def __init__(self, line: bytes) -> None:
        text = line.decode("ascii", "replace")
        super().__init__(text)
        self.transient = text.startswith("SERVER_ERROR") and "out of memory" in text


def get(name: bytes) -> bytes:
    """Read an item's value and CAS number."""
    return b"mg " + name + b" v c\r\n"


def store(name: bytes, value: bytes, ttl_s: int, cas: int | None) -> bytes:
    """Write ``value`` for ``ttl_s`` seconds if the item still has CAS number ``cas``, or,
    with ``cas`` None, if there is no such item yet; the reply carries the new CAS number."""
    mode = b"ME" if cas is None else b"C%d" % cas
    return b"ms %s %d T%d %s c\r\n%s\r\n" % (name, len(value), ttl_s, mode, value)


def delete(name: bytes, cas: int) -> bytes:
    """Delete the item if it still has CAS number ``cas``."""
    return b"md %s C%d\r\n" % (name, cas)


class Parser:
    """Bytes in (``feed``), whole replies out (``replies``), in order."""

    __slots__ = ("_buffer", "_header")

    def __init__(self) -> None:
        self._buffer = bytearray()
        # A ``VA`` line read whose data has not all arrived: (data size, CAS number).
        self._header: tuple[int, int | None] | None = None

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def replies(self) -> list[Reply | ReplyError]:
        """Every reply complete in what was fed so far (an empty list when none is)."""
        found: list[Reply | ReplyError] = []
        buffer = self._buffer
        start = 0
        while True:
            if self._header is not None:
                size, cas = self._header
                if len(buffer) - start < size + 2:
                    break
                value = bytes(buffer[start : start + size])
                if buffer[start + size : start + size + 2] != b"\r\n":
                    raise ValueError("memcached sent a value not followed by CRLF")
                start += size + 2
                self._header = None
                found.append(Reply(b"VA", cas, value))
                continue
            end = buffer.find(b"\r\n", start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + 2
            words = line.split()
            if not words:
                raise ValueError("memcached sent an empty line")
            code = words[0]
            if code == b"VA":
                self._header = (_size(words), _cas(words[2:]))
                continue
            if code in (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR"):
                found.append(ReplyError(line))
            elif code == b"VERSION":
                found.append(Reply(code, None, b" ".join(words[1:])))
            elif code in _CODES:
                found.append(Reply(code, _cas(words[1:]), None))
            else:
                raise ValueError(f"memcached sent a reply this client does not know: {line[:80]!r}")
        del buffer[:start]
        return found


def _size(words: list[bytes]) -> int:
    try:
        size = int(words[1])
    except (IndexError, ValueError):
        raise ValueError(f"memcached sent a VA line without a size: {b' '.join(words)!r}") from None
    if size < 0:
        raise ValueError(f"memcached sent a negative value size: {size}")
    return size


def _cas(flags: list[bytes]) -> int | None:
    for flag in flags:
        if flag[:1] == b"c":
            try:
                return int(flag[1:])
            except ValueError:
                raise ValueError(
                    f"memcached sent a CAS flag that is not a number: {flag!r}"
                ) from None
    return None
