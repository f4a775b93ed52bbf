"""The servers of a memcache store whose URL names a DNS SRV record (``memcache+srv://``).

As envoyproxy/ratelimit's ``MEMCACHE_SRV``: the record is looked up when the store is made
(a failed lookup, or one that lists no server, stops it there), and, with ``refresh``, again
every that many seconds. Every target the record lists is a server, with its port; priority
and weight are not read (upstream reads neither). The list in use stays until a lookup gives
another one; a failed lookup keeps it and is logged. A lookup after the start runs in a
thread of its own, started by the first step that finds one due, so no step waits on DNS.

dnspython does the lookup (``pip install 'ratewarden[memcache-srv]'``), through the
system's resolver (``/etc/resolv.conf``) unless the URL names ``nameserver``\\ s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ratewarden.errors import ConfigurationError
from ratewarden.storage._memcache_link import Servers
from ratewarden.storage._memcache_url import HostPort, Where, shown

__all__ = ["LOOKUP_TIMEOUT_S", "Found", "lookup"]

log = logging.getLogger("ratewarden.storage.memcache")

#: How long one SRV lookup may take, every try of every nameserver included.
LOOKUP_TIMEOUT_S = 5.0

Lookup = Callable[[str, tuple[HostPort, ...], float], tuple[HostPort, ...]]


class SrvLookupError(Exception):
    """The lookup failed or listed no server (the message says which)."""


def lookup(name: str, nameservers: tuple[HostPort, ...], timeout: float) -> tuple[HostPort, ...]:
    """The servers the SRV record ``name`` lists, as ``(target, port)``, sorted, each once."""
    try:
        import dns.exception
        import dns.name
        import dns.nameserver
        import dns.resolver
    except ImportError:
        raise ConfigurationError(
            "memcache+srv:// looks its servers up in DNS with dnspython: "
            "pip install 'ratewarden[memcache-srv]'"
        ) from None
    try:
        resolver = dns.resolver.Resolver(configure=not nameservers)
        if nameservers:
            resolver.nameservers = [
                dns.nameserver.Do53Nameserver(host, port) for host, port in nameservers
            ]
        answer = resolver.resolve(name + ".", "SRV", lifetime=timeout, search=False)
    except dns.exception.DNSException as exc:
        raise SrvLookupError(f"the SRV lookup of {name} failed: {exc}") from None
    found = {
        (record.target.to_text(omit_final_dot=True), record.port)
        for record in answer
        # "." is the record's way to say there is no such service here.
        if record.target != dns.name.root and record.port > 0
    }
    if not found:
        raise SrvLookupError(f"the SRV record {name} lists no server")
    return tuple(sorted(found))


class Found:
    """The servers of ``where.srv`` now (``current``), looked up again every
    ``where.refresh`` seconds of ``monotonic`` (the store passes its clock; module doc)."""

    def __init__(
        self,
        where: Where,
        *,
        timeout: float = LOOKUP_TIMEOUT_S,
        look: Lookup = lookup,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.where = where
        self.timeout = timeout
        self._look = look
        self._monotonic = monotonic
        try:
            addresses = look(where.srv, where.nameservers, timeout)
        except SrvLookupError as exc:
            raise ConfigurationError(
                f"memcache+srv://{where.srv}: {exc}; the store needs its servers to start"
            ) from None
        self.servers = Servers(addresses)
        self.lookups = 1
        self._due = monotonic() + where.refresh if where.refresh else float("inf")
        self._lock = threading.Lock()
        self._looking = False

    def current(self) -> Servers:
        """The newest list; a lookup is started when one is due."""
        if self._monotonic() >= self._due:
            self._start()
        return self.servers

    def _start(self) -> None:
        with self._lock:
            if self._looking or self._monotonic() < self._due:
                return
            self._looking = True
            self._due = self._monotonic() + self.where.refresh
        threading.Thread(target=self.refresh, name="ratewarden-memcache-srv", daemon=True).start()

    def refresh(self) -> None:
        """Look the record up again (in the caller's thread); keep the list on a failure."""
        try:
            addresses = self._look(self.where.srv, self.where.nameservers, self.timeout)
        except SrvLookupError as exc:
            log.warning("memcache SRV: %s; keeping %s", exc, ", ".join(self.servers.names))
        except Exception:  # a bug must not stop later lookups
            log.exception("memcache SRV: the lookup of %s failed", self.where.srv)
        else:
            if addresses != self.servers.addresses:
                log.info(
                    "memcache SRV %s: servers now %s",
                    self.where.srv,
                    ", ".join(shown(address) for address in addresses),
                )
                self.servers = Servers(addresses)
        finally:
            self.lookups += 1
            self._looking = False
