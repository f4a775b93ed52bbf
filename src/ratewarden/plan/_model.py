"""The plan's arithmetic: inputs in, figures out, each with the formula that made it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from ratewarden import algorithms
from ratewarden.checks import init_checked
from ratewarden.errors import ConfigurationError
from ratewarden.plan._checks import bounded, positive, share, whole
from ratewarden.plan._text import as_bytes, count, exact, utilization
from ratewarden.rate import Rate
from ratewarden.regions import overshoot_bound

__all__ = [
    "DEFAULT_BYTES_PER_CALL",
    "DEFAULT_MAX_UTILIZATION",
    "Plan",
    "PlanInput",
    "Region",
    "Row",
    "format_plan",
    "plan",
]

#: Round-trip bytes of one script call when not given (a common rough figure, not measured).
DEFAULT_BYTES_PER_CALL = 300

#: Share of a primary's capacity the plan fills, leaving room for failover and spikes.
DEFAULT_MAX_UTILIZATION = 0.5


@init_checked
@dataclass(frozen=True, slots=True)
class Region:
    """One region's rate cap on a key, its burst included, as ``ReconciledBudget`` takes it in
    ``region_rates``."""

    name: str
    rate: Rate

    def __post_init__(self) -> None:
        if not isinstance(self.rate, Rate):
            raise ConfigurationError(
                f"region {self.name!r}: rate {self.rate!r} must be a Rate, "
                "such as Rate.parse('10/second', burst=1)"
            )


@init_checked
@dataclass(frozen=True, slots=True)
class PlanInput:
    """Everything the plan is computed from; validated on construction."""

    rps: float
    local_reject: float = 0.0
    global_share: float = 1.0
    descriptors: float = 1.0
    keys: int | None = None
    algorithm: str = "gcra"
    limit: Rate = field(default_factory=lambda: Rate.parse("100/minute"))
    key_bytes: float | None = None
    primaries: int | None = None
    calls_per_primary: float | None = None
    max_utilization: float = DEFAULT_MAX_UTILIZATION
    bytes_per_call: float = DEFAULT_BYTES_PER_CALL
    rtt_ms: float | None = None
    timeout_ms: float | None = None
    replicas: int = 0
    replication_lag_ms: float | None = None
    instances: int | None = None
    lease: int | None = None
    regions: tuple[Region, ...] = ()
    sync_interval_ms: float | None = None
    region_lag_ms: float = 0.0

    def __post_init__(self) -> None:
        positive("rps", self.rps)
        share("local_reject", self.local_reject, upper_open=True)
        share("global_share", self.global_share)
        positive("descriptors", self.descriptors)
        share("max_utilization", self.max_utilization, lower_open=True, upper_open=True)
        if not isinstance(self.limit, Rate):
            raise ConfigurationError(
                f"limit {self.limit!r} must be a Rate, such as Rate.parse('100/minute', burst=10)"
            )
        # The algorithm's own check of its rate, as hit runs it: a window has no separate burst.
        algorithms.get(self.algorithm).params(self.limit)
        for name in (
            "key_bytes",
            "calls_per_primary",
            "rtt_ms",
            "timeout_ms",
            "bytes_per_call",
            "replication_lag_ms",
            "sync_interval_ms",
        ):
            value = getattr(self, name)
            if value is not None:
                positive(name, value, zero_ok=name in ("rtt_ms", "replication_lag_ms"))
        positive("region_lag_ms", self.region_lag_ms, zero_ok=True)
        for name in ("keys", "primaries", "instances", "lease"):
            whole(name, getattr(self, name), minimum=1)
        whole("replicas", self.replicas, minimum=0)
        if (self.instances is None) != (self.lease is None):
            raise ConfigurationError("leases need both instances and lease (units per lease)")
        if self.regions and self.sync_interval_ms is None:
            raise ConfigurationError("regions need sync_interval_ms (how often counts exchange)")
        names = [region.name for region in self.regions]
        twice = [name for name in names if names.count(name) > 1]
        if twice:
            raise ConfigurationError(f"regions name {twice[0]!r} twice: give each region once")
        if self.regions and self.sync_interval_ms is not None:
            # The library's checks of each region's name and rate, here on construction.
            _regions_bound(self.regions, self.sync_interval_ms, self.region_lag_ms)


@dataclass(frozen=True, slots=True)
class Row:
    """One figure of the plan: what, its value as text, and how it was computed."""

    section: str
    name: str
    value: str
    how: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The computed figures, in order; ``calls_per_second`` etc. for programs."""

    rows: tuple[Row, ...]
    calls_per_second: float
    calls_per_primary_second: float | None
    memory_bytes: float | None
    bandwidth_bytes: float
    primaries_needed: int | None
    latency_ms: float | None
    over_admission: dict[str, float]


#: The inputs each figure grows with (the shares only shrink them), named in FigureTooLargeError.
_CALLS = ("rps", "descriptors")
_LOAD = (*_CALLS, "calls_per_primary")
_HEADROOM = ("timeout_ms", "calls_per_primary")
_REGIONS = ("regions", "sync_interval_ms", "region_lag_ms")


def _traffic(p: PlanInput, rows: list[Row]) -> tuple[float, float | None]:
    after_local = p.rps * (1 - p.local_reject)
    calls = bounded(after_local * p.global_share * p.descriptors, "script calls/s", _CALLS)
    rows.append(
        Row(
            "traffic",
            "reach the global tier",
            f"{count(after_local)}/s",
            f"{count(p.rps)} x (1 - {p.local_reject:g})",
        )
    )
    rows.append(
        Row(
            "traffic",
            "script calls",
            f"{count(calls)}/s",
            f"{count(after_local)} x {p.global_share:g} x {p.descriptors:g} descriptors",
        )
    )
    per_primary = None
    if p.primaries is not None:
        per_primary = calls / p.primaries
        rows.append(
            Row(
                "traffic",
                "per primary",
                f"{count(per_primary)}/s",
                f"{count(calls)} / {_primaries(p.primaries)}",
            )
        )
    return calls, per_primary


def _memory(p: PlanInput, rows: list[Row]) -> float | None:
    also = f"; --replicas {p.replicas} needs it too" if p.replicas else ""
    if p.keys is None:
        rows.append(Row("memory", "total", "-", f"give --keys (active keys) to size memory{also}"))
        return None
    if p.key_bytes is None:
        how = f"give --key-bytes, or --measure redis://... to read MEMORY USAGE{also}"
        rows.append(Row("memory", "total", "-", how))
        return None
    total = bounded(p.keys * p.key_bytes, "memory", ("keys", "key_bytes"))
    rows.append(
        Row(
            "memory",
            "on primaries",
            as_bytes(total),
            f"{count(p.keys)} keys x {count(p.key_bytes)} B ({p.algorithm})",
        )
    )
    if p.primaries is not None:
        rows.append(
            Row(
                "memory",
                "per primary",
                as_bytes(total / p.primaries),
                f"{as_bytes(total)} / {_primaries(p.primaries)}",
            )
        )
    if p.replicas:
        total = bounded(total * (1 + p.replicas), "memory", ("keys", "key_bytes", "replicas"))
        rows.append(
            Row("memory", "with replicas", as_bytes(total), f"x (1 + {p.replicas} replicas)")
        )
    return total


def _capacity(p: PlanInput, calls: float, rows: list[Row]) -> tuple[int | None, float | None]:
    bandwidth = bounded(calls * p.bytes_per_call, "bandwidth", (*_CALLS, "bytes_per_call"))
    rows.append(
        Row(
            "network",
            "bandwidth",
            f"{as_bytes(bandwidth)}/s",
            f"{count(calls)} calls/s x {count(p.bytes_per_call)} B per call",
        )
    )
    if p.calls_per_primary is None:
        rows.append(Row("primaries", "needed", "-", "give --calls-per-primary (script calls/s "
                        "one primary sustains in a load test)"))  # fmt: skip
        unused = [f"--{name.replace('_', '-')}" for name in ("rtt_ms", "timeout_ms")
                  if getattr(p, name) is not None]  # fmt: skip
        if unused:
            need = "need" if len(unused) > 1 else "needs"
            rows.append(Row("latency", "added", "-", f"{' and '.join(unused)} given: {need} "
                            "--calls-per-primary too (the service time per call)"))  # fmt: skip
        return None, None
    usable = p.calls_per_primary * p.max_utilization
    ratio = calls / usable if usable else math.inf
    supply = ("calls_per_primary", "max_utilization")
    bounded(ratio, "primaries needed", (*_CALLS, *supply))
    # The formula's own numbers, evaluated exactly: float noise (24,300.000000000004 / 8,100)
    # adds no primary the formula does not show, and a huge ratio loses none.
    operands = (exact(calls), exact(p.calls_per_primary), exact(p.max_utilization))
    wanted, per, share = (Fraction(Decimal(text.replace(",", ""))) for text in operands)
    formula = f"ceil({operands[0]} / ({operands[1]} x {operands[2]}))"
    needed = math.ceil(wanted / (per * share))
    if needed == 0:  # no calls still take a primary to hold the keys
        needed, formula = 1, f"max(1, {formula}): at least one"
    rows.append(Row("primaries", "needed", f"{needed:,}", formula))
    primaries = p.primaries or needed
    rho = bounded(calls / primaries / p.calls_per_primary, "utilization", _LOAD)
    percent, fraction = utilization(rho)
    per_primary = f"{count(calls / primaries)} / {exact(p.calls_per_primary)} per primary"
    rows.append(Row("primaries", "utilization", percent, per_primary))
    service = f"{1000 / p.calls_per_primary:.3g}"
    return needed, _latency(p, calls, primaries, (rho, fraction, service), rows)


def _primaries(number: int) -> str:
    return f"{number:,} {'primary' if number == 1 else 'primaries'}"


def _latency(
    p: PlanInput, calls: float, primaries: int, load: tuple[float, str, str], rows: list[Row]
) -> float | None:
    """rtt + S / (1 - rho), computed from the service time S and rho as the formula shows them
    (``load``: rho, and rho and S in milliseconds as shown)."""
    rho, fraction, service = load
    if p.rtt_ms is None:
        also = "; --timeout-ms needs it too" if p.timeout_ms is not None else ""
        rows.append(
            Row("latency", "added", "-", f"give --rtt-ms (client to Redis round trip){also}")
        )
        return None
    if rho >= 1:
        cannot = f"{_primaries(primaries)} cannot serve {count(calls)} calls/s"
        rows.append(Row("latency", "added", "unbounded", cannot))
        return math.inf
    latency = p.rtt_ms + float(service) / (1 - float(fraction))
    latency = float(f"{bounded(latency, 'latency', ('rtt_ms', 'calls_per_primary')):.3g}")
    how = f"{exact(p.rtt_ms)} ms rtt + {service} ms / (1 - {fraction})"
    rows.append(Row("latency", "added per check", f"{latency:g} ms", how))
    if p.timeout_ms is not None:
        headroom = bounded(p.timeout_ms / latency, "headroom", _HEADROOM)
        how = f"{exact(p.timeout_ms)} ms timeout / {latency:g} ms"
        rows.append(Row("latency", "headroom", f"{headroom:.1f}x", how))
    return latency


def _over_admission(p: PlanInput, rows: list[Row]) -> dict[str, float]:
    bounds: dict[str, float] = {}
    per_second = p.limit.limit * 1_000_000 / p.limit.period_us
    # The rate is named when a row is computed from it: not for leases, nor regions of their own.
    at_limit = p.replication_lag_ms is not None or (
        p.regions and all(region.rate == p.limit for region in p.regions)
    )
    section = "over-admission on one key" + (f" at {p.limit}" if at_limit else "")
    unit = "requests"
    if p.replication_lag_ms is not None:
        lag_s = p.replication_lag_ms / 1000
        failover = p.limit.capacity + per_second * lag_s
        bounds["failover"] = bounded(
            failover, "the failover bound", ("limit", "replication_lag_ms")
        )
        rows.append(
            Row(
                section,
                "failover",
                f"{count(bounds['failover'])} {unit}",
                f"{p.limit.capacity} capacity + {per_second:.3g}/s x {lag_s:g} s lag",
            )
        )
    if p.instances is not None and p.lease is not None:
        bounds["leases"] = bounded(
            p.instances * (p.lease - 1), "the leases bound", ("instances", "lease")
        )
        rows.append(
            Row(
                section,
                "leases",
                f"{count(bounds['leases'])} {unit}",
                f"{p.instances} instances x ({p.lease} - 1) units",
            )
        )
    if p.regions and p.sync_interval_ms is not None:
        bound = _regions_bound(p.regions, p.sync_interval_ms, p.region_lag_ms)
        bounds["regions"] = bounded(bound, "the regions bound", _REGIONS)
        rows.append(_regions_row(p, p.sync_interval_ms, bounds["regions"], section))
    return bounds


def _regions_bound(regions: tuple[Region, ...], sync_interval_ms: float, lag_ms: float) -> int:
    """``ratewarden.regions.overshoot_bound`` of ``regions``, the plan's milliseconds in seconds."""
    for flag, ms in (("--sync-interval-ms", sync_interval_ms), ("--region-lag-ms", lag_ms)):
        if ms > _DAY_MS:  # ReconciledBudget takes no more: a unit mistake, not a plan
            raise ConfigurationError(
                f"{flag} {ms:g} is more than a day ({_DAY_MS:,} ms), the most a "
                "ReconciledBudget takes; check the unit (milliseconds)"
            )
    rates = {region.name: region.rate for region in regions}
    return overshoot_bound(rates, sync_interval_ms / 1000, lag_ms / 1000)


#: The longest sync interval or lag a ReconciledBudget takes, in milliseconds: a day.
_DAY_MS = 86_400_000


def _regions_row(p: PlanInput, sync_interval_ms: float, total: float, section: str) -> Row:
    """The bound, with each region's burst and its admissions in the staleness (``N x (burst +
    admissions)`` when every region has the same)."""
    terms = []
    for region in p.regions:
        stale = _regions_bound((region,), sync_interval_ms, p.region_lag_ms) - region.rate.capacity
        terms.append((region.name, f"{region.rate.capacity} + {stale}"))
    how = f"burst + ceil(rate x ({sync_interval_ms:g} + {p.region_lag_ms:g}) ms) per region: "
    if len(terms) > 1 and len({term for _, term in terms}) == 1:
        how += f"{len(terms)} x ({terms[0][1]})"
    else:
        how += ", ".join(f"{name} {term}" for name, term in terms)
    return Row(section, "regions", f"{count(total)} requests", how)


def plan(p: PlanInput) -> Plan:
    """Compute every figure ``p`` has the inputs for; the rows say what is missing."""
    rows: list[Row] = []
    calls, per_primary = _traffic(p, rows)
    memory = _memory(p, rows)
    needed, latency = _capacity(p, calls, rows)
    bounds = _over_admission(p, rows)
    return Plan(
        rows=tuple(rows),
        calls_per_second=calls,
        calls_per_primary_second=per_primary,
        memory_bytes=memory,
        bandwidth_bytes=calls * p.bytes_per_call,
        primaries_needed=needed,
        latency_ms=latency,
        over_admission=bounds,
    )


def format_plan(result: Plan) -> str:
    """The plan as aligned text: section, figure, value, formula."""
    width = max(len(row.name) for row in result.rows)
    value_width = max(len(row.value) for row in result.rows)
    lines: list[str] = []
    section = ""
    for row in result.rows:
        if row.section != section:
            section = row.section
            lines.append(section)
        lines.append(f"  {row.name:<{width}}  {row.value:>{value_width}}  {row.how}".rstrip())
    return "\n".join(lines) + "\n"
