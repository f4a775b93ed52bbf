"""A process in prometheus_client's multiprocess mode, for tests/test_histograms.py.

Run as ``python -m tests._multiprocess_histograms`` with ``PROMETHEUS_MULTIPROC_DIR`` set (it
is read when prometheus_client is first imported) and a JSON list of samples on stdin. It
observes the samples into ``bulk_seconds`` with ``observe_many`` and into ``each_seconds``
with ``observe`` for each (both without labels, and both on a labelled child), then prints
what prometheus_client's ``MultiProcessCollector`` reads back from the shared files, as a
JSON object: the value class, whether ``observe_many`` had the parts it needs, the samples.
"""

from __future__ import annotations

import json
import os
import sys

from prometheus_client import CollectorRegistry, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector

from ratewarden.histograms import _parts, observe_many
from ratewarden.metrics import LATENCY_BUCKETS


def main() -> None:
    samples = [float(sample) for sample in json.load(sys.stdin)]
    made = {
        name: (
            Histogram(f"{name}_seconds", "d", buckets=LATENCY_BUCKETS, registry=None),
            Histogram(
                f"{name}_labelled_seconds", "d", ("m",), buckets=LATENCY_BUCKETS, registry=None
            ).labels("x"),
        )
        for name in ("bulk", "each")
    }
    for histogram in made["bulk"]:
        observe_many(histogram, samples)
    for histogram in made["each"]:
        for sample in samples:
            histogram.observe(sample)
    registry = CollectorRegistry()
    shared = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    MultiProcessCollector(registry, path=shared)  # type: ignore[no-untyped-call]
    read = {
        f"{sample.name}{sorted(sample.labels.items())}": sample.value
        for family in registry.collect()
        for sample in family.samples
    }
    json.dump(
        {
            "value_class": values.ValueClass.__name__,
            "fast": [_parts(histogram) is not None for histogram in made["bulk"]],
            "samples": read,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
