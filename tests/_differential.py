"""Run one algorithm's Python reference and its Lua twin on the same inputs.

``run_python`` folds ``layered`` over a dict of states; ``run_lua`` sends the
same plans to a real Redis (standalone or Cluster) with an explicit ``now``.
Both return the list of Decisions, which a differential test demands be equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from ratewarden.algorithms._base import layered
from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.storage import _decisions, _plan
from ratewarden.storage._scripts import script

#: A step of a run: (microseconds to move the clock forward, cost).
Step = tuple[int, int]

START_US = 1_700_000_000_000_000


def run_python(
    algorithm: str, key: str, rates: Sequence[Rate], steps: Sequence[Step]
) -> list[Decision]:
    states: dict[str, Any] = {}
    now = START_US
    decisions = []
    for dt, cost in steps:
        now += dt
        plan = _plan.build(algorithm, "rw", key, rates, cost)
        current = [states.get(k) for k in plan.keys]
        outcomes, writes = layered(plan.algorithm.check, plan.params, current, now, cost)
        if writes is not None:
            for k, (state, _ttl) in zip(plan.keys, writes, strict=True):
                states[k] = state
        decisions.append(_decisions.to_decision(plan.rates, outcomes, cost))
    return decisions


def run_lua(
    client: redis.Redis | redis.RedisCluster,
    algorithm: str,
    key: str,
    rates: Sequence[Rate],
    steps: Sequence[Step],
) -> list[Decision]:
    source = script(algorithm).source
    now = START_US
    decisions = []
    for dt, cost in steps:
        now += dt
        plan = _plan.build(algorithm, "rw", key, rates, cost)
        reply = client.eval(source, len(plan.keys), *plan.keys, *_plan.argv(plan, now))
        decisions.append(_plan.parse(plan, reply))
    return decisions
