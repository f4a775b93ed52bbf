"""Moved: the Space-Saving sketch is ``ratewarden.topk``, shared with the hot-key detector and
the shadow report. ``Heavy``, ``SpaceSaving`` and ``merge`` still resolve here, with a
``DeprecationWarning``, for one release (docs/reference.md says so).
"""

from __future__ import annotations

from ratewarden.deprecation import moved

__all__: list[str] = []

__getattr__ = moved(__name__, dict.fromkeys(("Heavy", "SpaceSaving", "merge"), "ratewarden.topk"))
