"""The leaky-bucket shaper under a deadline: what ``acquire(timeout=...)`` returns
when the queue ahead of a request would hold it past its timeout.

An admitted shaper request leaves after its ``delay``, the time for the work
already queued ahead of it to drain. Waiting cannot shorten that (the queue
drains at the rate whatever the caller does), so a request whose delay passes
the deadline cannot go through in time: ``acquire`` gives up at once, as it does
when a retry would pass the deadline, and returns a denial saying so.
"""

from __future__ import annotations

import dataclasses

from ratewarden.decision import Decision, layered_decision

__all__ = ["SHAPER", "too_late"]

#: The one algorithm whose admitted requests carry a ``delay``.
SHAPER = "leaky_bucket"


def too_late(decision: Decision, cost: int, budget: float) -> Decision:
    """``decision`` (a shaper's admission, or a peek's) as the denial of a request of
    ``cost`` that may wait at most ``budget`` seconds more.

    Each layer whose ``delay`` passes ``budget`` is denied, with ``retry_after`` its
    delay: by then the queue ahead of the request has drained and it would go
    through at once. ``remaining`` and the other fields stay the decision's.
    """
    if not decision.layers:
        return dataclasses.replace(
            decision, allowed=False, retry_after=decision.delay, delay=0.0, cost=cost
        )
    layers = [
        too_late(layer, cost, budget) if layer.delay > budget else layer
        for layer in decision.layers
    ]
    return layered_decision(layers, cost)
