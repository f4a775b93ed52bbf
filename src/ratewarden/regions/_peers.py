"""PeerWatch: what a budget learns of its peers round by round, and logs as it changes:
which answer but complete no rounds (silent, ``silent_peers``), and which run with other
regions than this one.

A silent peer is held at its whole budget (docs/regions.md, "A region that cannot read
its peers is held at its budget"). For the regions: every round publishes the regions its
budget runs with (its own and its peers', from ``region_rates``) beside its active keys,
and reads each peer's with its counts. A peer that runs with other regions than this one
has not been told of a region joining or leaving: a peer that does not list a region does
not count that region's admissions, so the caps of its regions add up to the whole limit
without it (docs/regions.md, "Adding or removing a region").

So a budget treats such a peer conservatively: it holds it at its whole budget when it
recomputes its cap (its cap of this window, else the whole limit), and, while some peer
does not list this region at all, this region's own cap before a round (its default cap)
is 0. Counts of a region this one does not know still count here: a peer that reads that
region merges its counts into its own hash, and this region's merge takes every entry it
reads. Pure: no I/O. ``Reconciler`` (``_reconcile``) feeds it each round's view.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from ratewarden.regions._rounds import PeerView, silent_peers

__all__ = ["PeerWatch"]

log = logging.getLogger("ratewarden.regions")


class PeerWatch:
    """The peers held as silent, and those whose published regions differ from ``regions``
    (this region's), as last read; each change logged once as it appears (a warning) and
    once as it goes. Peers get ``silence_us`` from ``started_us`` (the budget's start)."""

    def __init__(
        self, region: str, regions: Iterable[str], started_us: int, silence_us: int
    ) -> None:
        self.region = region
        self.regions = tuple(sorted(regions))
        self._started_us, self._silence_us = started_us, silence_us
        self._silent: frozenset[str] = frozenset()
        self._differ: dict[str, tuple[str, ...]] = {}
        #: Whether some peer runs without this region (its default cap is then 0).
        self.unlisted = False

    def silent(self, view: PeerView) -> tuple[str, ...]:
        """The answering peers of a complete round held at their budget (``silent_peers``),
        logged as they go silent and come back."""
        silent = silent_peers(view, self._started_us, self._silence_us)
        for peer in sorted(set(silent) ^ self._silent):
            if peer in silent:
                what = "completed no round in the last %.3gs: its whole budget is held for it"
                args = (self.region, peer, self._silence_us / 1e6)
                log.warning(
                    "region %s: peer %s " + what, *args, extra={"event": "region_peer_held"}
                )
            else:
                back = {"event": "region_peer_back"}
                log.info("region %s: peer %s completes rounds again", self.region, peer, extra=back)
        self._silent = frozenset(silent)
        return silent

    @property
    def differing(self) -> tuple[str, ...]:
        """The peers that run with other regions than this one, sorted."""
        return tuple(sorted(self._differ))

    def configs(self, configs: Sequence[tuple[str, tuple[str, ...] | None]]) -> tuple[str, ...]:
        """Take what a round read (peer, its regions or None when it published none) and
        return the peers that differ. A peer not read keeps what was known of it."""
        for peer, published in configs:
            before = self._differ.get(peer)
            found = None if published is None else tuple(sorted(published))
            if found is None or found == self.regions:
                if before is not None:
                    del self._differ[peer]
                    log.info(
                        "region %s: peer %s runs with the same regions again",
                        self.region,
                        peer,
                        extra={"event": "region_config_agrees", "region": self.region},
                    )
                continue
            if found != before:
                self._warn(peer, found)
            self._differ[peer] = found
        self.unlisted = any(self.region not in found for found in self._differ.values())
        return self.differing

    def _warn(self, peer: str, found: tuple[str, ...]) -> None:
        if self.region in found:
            what = (
                f"runs with the regions {list(found)}, this region with {list(self.regions)}: "
                f"{self.region} holds it at its whole budget until they agree"
            )
        else:
            what = (
                f"runs with the regions {list(found)}, which leave out this region: it does "
                f"not count {self.region}'s admissions. Until it lists {self.region}, "
                f"{self.region} holds it at its whole budget and admits only what its rounds "
                "leave (its default cap is 0); add a region to every peer's configuration "
                "before starting it"
            )
        log.warning(
            "region %s: peer %s %s (docs/regions.md#adding-or-removing-a-region)",
            self.region,
            peer,
            what,
            extra={"event": "region_config_differs", "region": self.region, "peer": peer},
        )
