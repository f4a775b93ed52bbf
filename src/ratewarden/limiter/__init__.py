"""The decision core: ``Limiter`` and ``AsyncLimiter``, and the parts they are made of.

Every decision in ratewarden is made by a limiter's flows (``DecisionCore``):
validation, layered limits and cost, the local tier (negative cache, local
bucket, leases), the circuit breaker and failure mode, shadow, the decision
hook and metrics live there once. ``Limiter`` drives a flow with a blocking
loop, ``AsyncLimiter`` with an awaiting one. Adapters (two tiers, hot keys,
regions, budgets, the Envoy service, the middleware, simulate, plan) configure a
limiter, or compose its flows with ``yield from`` and run them with
``limiter.run(flow)``.

``blocking`` / ``awaiting`` turn a flow method into a blocking or a coroutine
method with the same signature and docstring: an adapter's sync and async twins
are made from its flows the way ``Limiter`` and ``AsyncLimiter`` are.
``arguments_checked`` gives a subclass a method written out (``Limiter.hit``)
whose bad keywords are refused naming the subclass, as those methods' are.

What an adapter needs beyond the flows is exported here too, so that adapters
import no store: ``aged`` (a remembered Decision as seen later: the one aging of
the negative cache and of leases), and the store operation vocabulary of
``apply_flow`` (``Op``, with ``axis_key`` and ``record_key`` for its keys) and
``hash_tag`` (what picks the Cluster slot of a key's state): the same objects as
``ratewarden.storage``'s; and ``quota_shares_op`` with its reply ``FleetRound`` (one
round of an RLQS bucket's shares over every replica's demand, ``storage/quota_shares``).
And ``check_metrics``, the one check of a ``metrics=`` option (``DECISION_HOOKS``: the
hooks a decision calls).
"""

from __future__ import annotations

from ratewarden.limiter._aged import aged
from ratewarden.limiter._arguments import arguments_checked
from ratewarden.limiter._breaker import CircuitBreaker
from ratewarden.limiter._core import (
    FAILURE_MODES,
    LOCAL_ALGORITHM,
    DecisionCore,
    DecisionHook,
    FailureHook,
    check_failure_mode,
)
from ratewarden.limiter._counts import TierCounts
from ratewarden.limiter._each import EachCall
from ratewarden.limiter._flows import Ask, Flow, Gather, Wait, adrive, drive
from ratewarden.limiter._leases import DEFAULT_LEASE_KEYS, Balance, LeaseBook
from ratewarden.limiter._limiters import AsyncLimiter, Limiter, awaiting, blocking
from ratewarden.limiter._local import LocalRates, local_rates, scaled
from ratewarden.limiter._metrics_check import DECISION_HOOKS, check_metrics
from ratewarden.limiter._negative import DEFAULT_NEGATIVE_KEYS, Denial, NegativeCache
from ratewarden.limiter._report import FailureReport, failure_reason
from ratewarden.limiter._slots import Lease, lease_ttl_us
from ratewarden.limiter._undo import UNDO_WAIT, release_by_id, undo_cancelled
from ratewarden.storage import Op, axis_key, hash_tag, record_key
from ratewarden.storage.quota_shares import (
    FleetRound,
    give_each_a_token,
    hold_back,
    quota_shares_op,
)

__all__ = [
    "DECISION_HOOKS",
    "DEFAULT_LEASE_KEYS",
    "DEFAULT_NEGATIVE_KEYS",
    "FAILURE_MODES",
    "LOCAL_ALGORITHM",
    "UNDO_WAIT",
    "Ask",
    "AsyncLimiter",
    "Balance",
    "CircuitBreaker",
    "DecisionCore",
    "DecisionHook",
    "Denial",
    "EachCall",
    "FailureHook",
    "FailureReport",
    "FleetRound",
    "Flow",
    "Gather",
    "Lease",
    "LeaseBook",
    "Limiter",
    "LocalRates",
    "NegativeCache",
    "Op",
    "TierCounts",
    "Wait",
    "adrive",
    "aged",
    "arguments_checked",
    "awaiting",
    "axis_key",
    "blocking",
    "check_failure_mode",
    "check_metrics",
    "drive",
    "failure_reason",
    "give_each_a_token",
    "hash_tag",
    "hold_back",
    "lease_ttl_us",
    "release_by_id",
    "undo_cancelled",
    "quota_shares_op",
    "local_rates",
    "record_key",
    "scaled",
]
