"""The live dashboard of ``ratewarden serve``: what is recorded, how it is merged, the page.

- ``live.LiveStats``: per-second counts per rule, store latency and top keys,
  bounded, fed by the stats hooks (``ratewarden.server.stats.ServiceStats``).
- ``ratewarden.topk.SpaceSaving`` (a leaf of the package): the bounded, mergeable
  heavy-hitters sketch behind the top keys.
- ``view.render``: the JSON that ``GET /dashboard.json`` answers.
- ``shared``: how ``--workers`` processes pool their states.
- ``page.PAGE``: the single self-contained HTML page at ``GET /dashboard``.
"""
