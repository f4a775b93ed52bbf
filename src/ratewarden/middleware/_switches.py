"""The runtime switches of a ``RuleSet``: the kill switch, shadow mode and the shadow report.

They are thread-safe and take effect on the next request, without a restart,
in this process only: each worker process (gunicorn's, ``uvicorn --workers``)
holds its own, so a switch flipped through one worker's admin endpoint leaves
the others as they were (middleware.md, "Shadow mode and the kill switch").
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ratewarden.checks import check_bool
from ratewarden.errors import ConfigurationError
from ratewarden.middleware._decorators import declared_rule_names
from ratewarden.middleware._rules import Rule, check_name
from ratewarden.middleware._shadow import ShadowLog, ShadowSummary

__all__ = ["Switches"]


class Switches:
    """Which rules are switched off or into shadow mode, and what shadow rules would have
    blocked; the rules are a ``RuleSet``'s, or a route's ``@limit``."""

    def __init__(self, rules: Sequence[Rule], report_size: int) -> None:
        self.rules = rules
        self._shadow_log = ShadowLog(report_size)
        self._lock = threading.Lock()
        self._disabled: frozenset[str] = frozenset()
        self._shadow: dict[str, bool] = {}

    def _known(self, name: str) -> str:
        check_name(name)
        if name not in {r.name for r in self.rules} | declared_rule_names():
            raise ConfigurationError(
                f"no rule named {name!r}; known: {sorted(r.name for r in self.rules)} "
                f"and route rules {sorted(declared_rule_names())}"
            )
        return name

    def disable(self, name: str) -> None:
        """Kill switch: stop evaluating rule ``name`` from the next request on."""
        name = self._known(name)
        with self._lock:
            self._disabled = self._disabled | {name}

    def enable(self, name: str) -> None:
        """Evaluate rule ``name`` again."""
        name = self._known(name)
        with self._lock:
            self._disabled = self._disabled - {name}

    @property
    def disabled(self) -> frozenset[str]:
        """Names of the rules switched off."""
        return self._disabled

    def set_shadow(self, name: str, shadow: bool) -> None:
        """Switch rule ``name`` into shadow mode (True) or enforcement (False) at runtime."""
        name = self._known(name)
        check_bool(f"set_shadow({name!r}): shadow", shadow)
        with self._lock:
            self._shadow = {**self._shadow, name: shadow}

    def shadow_report(self, top: int = 10) -> dict[str, ShadowSummary]:
        """What each shadow rule would have blocked: count, first/last time, top keys."""
        return self._shadow_log.report(top)

    def clear_shadow_report(self) -> None:
        """Start the shadow report over."""
        self._shadow_log.clear()
