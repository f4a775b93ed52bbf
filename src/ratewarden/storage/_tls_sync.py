"""One SSL context per blocking store, reused by every connection it makes.

redis-py's blocking ``SSLConnection`` gets its context inside ``connect``: it
builds one (redis-py 5-7), or takes one from a cache that keeps it only while a
live connection holds it (8.x). Building a context loads the system's CA store
(~45 ms of CPU on a small VM), so a store's first call, and its first call after
a failure closed its connections, took about twice the 20 ms default timeout.

``reusing_context`` returns a subclass of the connection class whose sockets are
wrapped with one context, built when the store is (its errors are settings
mistakes, raised there) in redis-py's own way: the system's CAs plus the CA
options, the client certificate, ``ssl_cert_reqs``, ``ssl_check_hostname``, the
verify flags, ``ssl_min_version`` and ``ssl_ciphers``. As redis-py does, it is
rebuilt when one of its files changes (a rotated certificate is used by the next
connection); a check is a few ``stat`` calls. OCSP options, and any ``ssl_*``
option this module does not know, keep redis-py's own class, and its per-connect
context, unchanged.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable, Mapping
from typing import Any

from redis import exceptions as rx
from redis.connection import Connection, SSLConnection

from ratewarden.errors import ConfigurationError

__all__ = ["StoreContext", "reusing_context"]

#: The ``ssl_*`` options the prebuilt context carries (a connection's other options are its own).
CARRIED = frozenset(
    {
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_ca_path",
        "ssl_check_hostname",
        "ssl_password",
        "ssl_min_version",
        "ssl_ciphers",
    }
)
#: Options shown by name only in an error message.
_SECRET = frozenset({"ssl_password", "ssl_ca_data"})

Signature = tuple[tuple[str, tuple[int, int, int, int] | None], ...]


def _signature(paths: tuple[str, ...]) -> Signature:
    """What identifies the files' contents (as redis-py's cache does): times, size, inode."""
    found: list[tuple[str, tuple[int, int, int, int] | None]] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append((path, None))
        else:
            found.append((path, (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)))
    return tuple(found)


def _build(settings: SSLConnection) -> ssl.SSLContext:
    """The context redis-py's ``SSLConnection`` builds for ``settings`` (redis-py 8.2)."""
    context = ssl.create_default_context()
    context.check_hostname = settings.check_hostname
    context.verify_mode = settings.cert_reqs
    for flag in getattr(settings, "ssl_include_verify_flags", None) or ():
        context.verify_flags |= flag
    for flag in getattr(settings, "ssl_exclude_verify_flags", None) or ():
        context.verify_flags &= ~flag
    if settings.certfile or settings.keyfile:
        context.load_cert_chain(
            certfile=settings.certfile,
            keyfile=settings.keyfile,
            password=settings.certificate_password,
        )
    ca_data = getattr(settings, "ca_data", None)
    if settings.ca_certs is not None or settings.ca_path is not None or ca_data is not None:
        context.load_verify_locations(
            cafile=settings.ca_certs, capath=settings.ca_path, cadata=ca_data
        )
    min_version = getattr(settings, "ssl_min_version", None)
    if min_version is not None:
        context.minimum_version = min_version
    ciphers = getattr(settings, "ssl_ciphers", None)
    if ciphers:
        context.set_ciphers(ciphers)
    return context


class StoreContext:
    """The context of one store's connections; ``get`` rebuilds it if one of its files changed.

    ``built`` counts the contexts made (1 once the store is made).
    """

    def __init__(self, build: Callable[[], ssl.SSLContext], paths: tuple[str, ...]) -> None:
        self._build = build
        self._paths = paths
        self._lock = threading.Lock()
        self._signature = _signature(paths)
        self._context = build()
        self.built = 1

    def get(self) -> ssl.SSLContext:
        signature = _signature(self._paths)
        if signature != self._signature:
            with self._lock:
                if signature != self._signature:
                    # A rebuild that fails fails this connection, as redis-py's would.
                    self._context = self._build()
                    self._signature = signature
                    self.built += 1
        return self._context


class _ReusedContext:
    """Wraps the TCP socket with the store's context instead of building one per connect."""

    store_context: StoreContext
    host: str
    socket_timeout: float | None
    socket_connect_timeout: float | None

    def _connect(self) -> Any:
        sock = Connection._connect(self)  # type: ignore[arg-type,no-untyped-call] # TCP, as redis-py
        try:
            sock.settimeout(self.socket_connect_timeout)
            wrapped = self.store_context.get().wrap_socket(sock, server_hostname=self.host)
            wrapped.settimeout(self.socket_timeout)
        except BaseException:
            sock.close()
            raise
        return wrapped


def _files(settings: SSLConnection) -> tuple[str, ...]:
    defaults = ssl.get_default_verify_paths()
    given = (settings.certfile, settings.keyfile, settings.ca_certs, settings.ca_path)
    found = (*given, defaults.cafile, defaults.capath)
    return tuple(os.fspath(path) for path in found if path is not None)


def reusing_context(base: type, options: Mapping[str, Any], where: str) -> type | None:
    """``base`` (an ``SSLConnection`` class) wrapping every socket with one context made now
    from ``options`` (a connection's keyword options), or None to keep ``base``: options
    carrying OCSP checks, or an ``ssl_*`` option not known here."""
    ssl_options = {name: value for name, value in options.items() if name.startswith("ssl_")}
    if any(value for name, value in ssl_options.items() if name not in CARRIED):
        return None
    try:
        settings = SSLConnection(**ssl_options)
        context = StoreContext(lambda: _build(settings), _files(settings))
    except (OSError, ValueError, TypeError, rx.RedisError) as exc:  # ssl.SSLError is an OSError
        shown = ", ".join(
            name if name in _SECRET else f"{name}={value!r}"
            for name, value in sorted(ssl_options.items())
            if value is not None
        )
        raise ConfigurationError(
            f"{where}: the TLS options ({shown or 'none'}) cannot make an SSL context: {exc}"
        ) from None
    name = f"ReusedContext{base.__name__}"
    made: type = type(name, (_ReusedContext, base), {"store_context": context})
    return made
