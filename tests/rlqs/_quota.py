"""A quota service on a manual clock, as the one-process tests make it, and what it sent."""

from __future__ import annotations

from ratewarden.server.config import loads
from ratewarden.server.rlqs import Action, QuotaService
from ratewarden.testing import ManualClock


def quota_service(text: str, **options: object) -> tuple[QuotaService, ManualClock]:
    """A ``QuotaService`` over the rules ``text``, rounds 1 s apart and a TTL of 3 s unless
    ``options`` say otherwise, on a fresh ``ManualClock``."""
    clock = ManualClock()
    options = {"interval": 1.0, "ttl_s": 3, **options}
    return QuotaService(loads(text), clock=clock, **options), clock  # type: ignore[arg-type]


def held(actions: list[Action]) -> dict[int, object]:
    """Each stream's assignment in ``actions`` (the last one where a stream has several)."""
    return {action.stream: action.assignment for action in actions}
