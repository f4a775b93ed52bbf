"""Injected time and chance for the client tests: sleeps are recorded, not slept."""

from __future__ import annotations

import time

from ratewarden.testing import ManualClock


class RecordingClock(ManualClock):
    """A ManualClock (starting at the real time, for HTTP-dates) that keeps every sleep."""

    def __init__(self) -> None:
        super().__init__(time.time())
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        super().sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await super().asleep(seconds)
