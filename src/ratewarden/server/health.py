"""What serve's health says (gRPC health, ``/healthcheck``), and the line logged at each change.

SERVING needs the store to answer its ping, with ``--health-follows-store``, and, with
``--health-needs-rules`` (upstream's ``HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED``: xDS may
leave none), a domain loaded. ``HealthState.decide`` takes what the ping found and whether
a domain is loaded, and logs one ``health`` line at the first decision (the start: a
NOT_SERVING for want of rules at an ``--xds-force-start`` included) and at each change, with
its reason: the store's fault, rules missing or back. The server decides again at each
``--health-interval`` tick and, with ``--health-needs-rules``, as soon as a new config
brings the first domain or leaves none.
"""

from __future__ import annotations

import logging

from ratewarden.server.settings import Settings
from ratewarden.server.store_check import named_fault

__all__ = ["HealthState"]

# The server's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server")


class HealthState:
    """The health decided last (``serving``, the store's ``fault``), and its log lines."""

    def __init__(self, settings: Settings) -> None:
        self.follows_store = settings.health_follows_store
        self.needs_rules = settings.health_needs_rules
        self.store_url = settings.store_url
        self.serving = False
        #: Why the store is not serving, when it is not (what its last ping met).
        self.fault: str | None = None
        self._said: tuple[bool, str | None, bool] | None = None  # nothing said yet

    def decide(self, fault: str | None, has_domains: bool) -> bool:
        """Whether to serve, with the store's ``fault`` (None: it answers) and rules that
        do (``has_domains``) or do not define a domain; logged when it changes."""
        alive = fault is None
        ruled = has_domains or not self.needs_rules
        serving = (alive or not self.follows_store) and ruled
        state = (serving, fault, ruled)
        if state != self._said:
            rules_back = self._said is not None and not self._said[2]
            level = logging.INFO if serving and alive else logging.WARNING
            message = self._reason(fault, ruled, rules_back)
            log.log(level, message, extra={"event": "health", "serving": serving})
        self._said = state
        self.serving, self.fault = serving, fault
        return serving

    def _reason(self, fault: str | None, ruled: bool, rules_back: bool) -> str:
        said = named_fault(fault, self.store_url)
        if said is not None and self.follows_store:
            return f"{said}: not serving"
        if not ruled:
            return "no domain loaded (--health-needs-rules): not serving"
        if said is not None:
            return f"{said}: serving (--no-health-follows-store)"
        if rules_back:
            return "a domain is loaded (--health-needs-rules): serving"
        return "store answers: serving"
