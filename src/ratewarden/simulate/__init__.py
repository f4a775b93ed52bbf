"""See a limit before shipping it: traffic patterns, burst analysis, accuracy and plots.

Everything here runs the pure algorithms (``ratewarden.algorithms``) in
simulated time on a ``ManualClock``: no store, no sleeps, minutes of traffic
per second of CPU.

- ``patterns``: steady, Poisson, on/off, boundary bursts, retry storms, replays.
- ``runner``: one pattern through one algorithm and rate; the summary table.
- ``layered``: one pattern through several rates on one key, all or nothing; a row per layer.
- ``bursts``: each algorithm's worst case, found by a greedy attacker.
- ``accuracy``: the sliding window's estimate against the exact sliding log.
- ``regions``: a ``ReconciledBudget`` per region, each on an in-process region store; what
  the regions admit together per window against the limit and the stated bound, with
  links cut for a while if asked (``parse_partition``).
- ``plots``: PNG/SVG figures (needs matplotlib, the ``simulate`` extra).
- ``command``: the ``ratewarden simulate`` command line.
"""

from __future__ import annotations

from ratewarden.simulate._partitions import Partition, parse_partition
from ratewarden.simulate.accuracy import Accuracy, estimate_accuracy, format_accuracy
from ratewarden.simulate.bursts import BurstRow, analytic, burst_table, format_bursts
from ratewarden.simulate.layered import (
    LayeredRun,
    LayeredSummary,
    LayerSummary,
    format_layered,
    parse_layers,
    run_layered,
)
from ratewarden.simulate.patterns import Pattern, parse
from ratewarden.simulate.regions import (
    RegionRow,
    RegionsRun,
    WindowRow,
    format_regions,
    run_regions,
)
from ratewarden.simulate.runner import Run, Summary, format_table, run

__all__ = [
    "Accuracy",
    "BurstRow",
    "LayerSummary",
    "LayeredRun",
    "LayeredSummary",
    "Partition",
    "Pattern",
    "RegionRow",
    "RegionsRun",
    "Run",
    "Summary",
    "WindowRow",
    "analytic",
    "burst_table",
    "estimate_accuracy",
    "format_accuracy",
    "format_bursts",
    "format_layered",
    "format_regions",
    "format_table",
    "parse",
    "parse_layers",
    "parse_partition",
    "run",
    "run_layered",
    "run_regions",
]
