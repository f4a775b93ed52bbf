"""A reload on a frozen heap (``server/heap.py``): no full collection walks the config
being built, the new config ends frozen, and a config holds no reference cycle (which
is what lets ``refreeze`` leave the frozen heap alone).

Each test runs a script in a process of its own: a freeze, and the collector's
thresholds, are process-wide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

#: A rule file of many descriptors: its load promotes tens of thousands of objects
#: into the oldest generation, which, on a frozen heap, called full collections.
RULES = "domain: big\ndescriptors:\n" + "".join(
    f"  - key: k{i}\n    rate_limit: {{unit: minute, requests_per_unit: {i + 1}}}\n"
    for i in range(3000)
)

#: Every feature of a rule file, each of which builds objects of its own.
FEATURES = """\
domain: features
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: minute, requests_per_unit: 100, name: base}
  - key: remote_address
    rate_limit: &shared
      unit: second
      requests_per_unit: 10
      algorithm: gcra
      burst: 20
      failure_mode: local
    descriptors:
      - key: path
        value: "/api/*"
        share_threshold: true
        rate_limit:
          limits:
            - {unit: second, requests_per_unit: 5}
            - {unit: hour, requests_per_unit: 1000, unit_multiplier: 2}
  - key: tenant
    shadow_mode: true
    detailed_metric: true
    metadata: {team: edge, weights: [1, 2.5], nested: {a: 1}}
    rlqs_weights: {edge-eu: 3, default: 1}
    rate_limit:
      <<: *shared
      replaces: [{name: base}]
  - key: model
    value_to_metric: true
    budget: {unit: minute, tokens_per_unit: 1000, burst: 1500, name: tokens}
  - key: blocked
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 0}
"""


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


RELOAD = """
    import gc, os, sys
    from ratewarden.server import config, heap
    from ratewarden.server.reload import ConfigWatcher, ReloadOutcome

    path = sys.argv[1]
    applied = []

    def apply(new):
        applied[:] = [new]  # the old config is let go here, as the server's swap does
        heap.refreeze()

    watcher = ConfigWatcher([path], config.load, apply)
    applied.append(watcher.load_initial())
    heap.freeze()
    threshold = gc.get_threshold()
    full = []
    gc.callbacks.append(
        lambda phase, info: phase == "start" and full.append(info["generation"] == 2)
    )

    text = open(path).read()
    open(path, "w").write(text.replace("requests_per_unit: 1}", "requests_per_unit: 7}"))
    os.utime(path, ns=(os.stat(path).st_mtime_ns + 10**9,) * 2)
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert applied[0].domains["big"].rules[0].limits[0].requests_per_unit == 7
    print("full collections during the reload:", sum(full))
    print("left to the collector:", len(gc.get_objects()) < 10_000)

    open(path, "w").write(text + "  - key: [broken\\n")
    os.utime(path, ns=(os.stat(path).st_mtime_ns + 2 * 10**9,) * 2)
    assert watcher.check_once() is ReloadOutcome.FAILED
    print("thresholds kept:", gc.get_threshold() == threshold)
"""


def test_a_reload_on_a_frozen_heap_runs_no_full_collection_and_freezes_the_new_config(
    tmp_path: Path,
) -> None:
    """Reloading 3,000 descriptors: no full collection while the file is read (each would
    walk every object the load has built, every call waiting), the new config frozen once
    applied, and the collector's thresholds as they were after a reload that failed."""
    path = tmp_path / "big.yaml"
    path.write_text(RULES)
    assert run(RELOAD, str(path)).splitlines() == [
        "full collections during the reload: 0",
        "left to the collector: True",
        "thresholds kept: True",
    ]


ACYCLIC = """
    import gc, sys
    from ratewarden.server import config

    gc.disable()
    paths = sys.argv[1:]
    config.load(paths)  # the first load imports and caches what it needs
    gc.collect()
    loaded = config.load(paths)
    assert loaded.domains
    del loaded
    print("cyclic garbage:", gc.collect())
"""


def test_a_config_and_its_load_leave_no_reference_cycle(tmp_path: Path) -> None:
    """A config, and all its load makes, are freed by reference counting: ``refreeze``
    leaves the replaced config frozen, so a cycle in it would never be freed. The files
    use every feature of a rule file (``FEATURES``) and those of the tests' fixtures."""
    fixtures = Path(__file__).parent / "fixtures"
    files = [str(path) for path in sorted(fixtures.glob("valid_*"))]
    assert len(files) >= 3
    (tmp_path / "features.yaml").write_text(FEATURES)
    (tmp_path / "big.yaml").write_text(RULES)
    files += [str(tmp_path / "features.yaml"), str(tmp_path / "big.yaml")]
    assert run(ACYCLIC, *files) == "cyclic garbage: 0"


UNFROZEN = """
    import gc
    from ratewarden.server import heap

    before = gc.get_threshold()
    with heap.loading():
        inside = gc.get_threshold()
    print(before == inside == gc.get_threshold(), gc.get_freeze_count() == 0)
"""


def test_loading_changes_nothing_in_a_process_that_never_froze_its_heap() -> None:
    """A server embedded in another program: its loads leave that program's collector be."""
    assert run(UNFROZEN) == "True True"
