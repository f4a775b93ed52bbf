"""ratewarden's benchmark suite, side by side with the peers.

Run it with ``scripts/bench`` (``--quick`` for a smoke run); results go to
``benchmarks/results/`` and the last published run is in ``benchmarks/RESULTS.md``.
"""
