"""The warning for calls to a domain the rules in use do not define (from files or xDS).

Such a call is answered OK, every descriptor allowed without a rule, as envoyproxy/ratelimit
answers it, and only a metric counts it: a ``domain:`` in Envoy's filter that differs from the
rules' (a typo) would limit nothing, silently. ``UnknownDomains`` writes a warning
(event ``domain_not_found``) naming the domain and the rules' domains, at most once a minute
per domain, remembering at most ``MAX_DOMAINS`` domains (``LogRateLimiter``, as the service's
other lines), and at most ``MAX_LINES`` of these lines a minute in all, so that a caller that
sends a new domain on every call cannot flood the log.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Collection

from ratewarden.clock import Clock
from ratewarden.metrics import LogRateLimiter

__all__ = ["MAX_DOMAINS", "MAX_LINES", "UnknownDomains"]

# The service's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server.service")

#: Unknown domains remembered (each logged at most once a minute).
MAX_DOMAINS = 256
#: ``domain_not_found`` lines a minute, whatever the number of domains.
MAX_LINES = 20
#: Domains of the rules a line names (a config may define many).
_SHOWN = 10
#: Characters of a domain a line shows (a caller may send any string).
_LONGEST = 100


class UnknownDomains:
    """Writes ``domain_not_found`` warnings, bounded; ``saw`` on every such call."""

    __slots__ = ("_clock", "_lock", "_minute", "_per_domain", "_written")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._per_domain = LogRateLimiter(60.0, clock=clock, max_keys=MAX_DOMAINS)
        self._lock = threading.Lock()
        self._minute = -1
        self._written = 0

    def saw(self, domain: str, known: Collection[str]) -> None:
        """A call named ``domain``, which is not one of ``known`` (the rules' domains)."""
        minute = int(self._clock.now() // 60)
        with self._lock:
            if minute != self._minute:
                self._minute, self._written = minute, 0
            # Past the minute's lines the domain is not marked as said: it is said later.
            if self._written >= MAX_LINES or not self._per_domain.allow(domain):
                return
            self._written += 1
        near = difflib.get_close_matches(domain, known, n=1, cutoff=0.7)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = sorted(known)[:_SHOWN]
        listed = ", ".join(repr(name) for name in shown) or "none"
        more = f" and {len(known) - len(shown)} more" if len(known) > len(shown) else ""
        named = domain if len(domain) <= _LONGEST else domain[:_LONGEST] + "..."
        log.warning(
            "a call named domain %r, which the rules in use do not define: its descriptors were "
            "allowed without a rule; the rules' domains: %s%s (Envoy's domain: must be one of "
            "them)%s",
            named,
            listed,
            more,
            hint,
            extra={"event": "domain_not_found", "domain": named},
        )
