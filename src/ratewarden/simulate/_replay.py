"""The replay pattern: the requests of a timestamped log file, one per line."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ratewarden.checks import init_checked
from ratewarden.errors import ConfigurationError
from ratewarden.simulate._pattern import SECOND_US, Arrival, Horizon, Pattern, is_whole

__all__ = ["Replay"]

#: Replay timestamps beyond this many seconds from the epoch are refused (year 5138).
_MAX_SECONDS = 10**11

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@init_checked
@dataclass(frozen=True, slots=True)
class Replay(Pattern):
    """The requests of a timestamped log: ``SECONDS [COST]`` or ``ISO-8601 [COST]`` per line."""

    file: str = ""
    name = "replay"

    def __post_init__(self) -> None:
        if not self.file:
            raise ConfigurationError("pattern replay needs file=PATH")

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        """The log's requests from the start, up to the run's end (``requests`` says how many
        the run leaves out)."""
        requests = self.requests()
        horizon.check_volume(self.name, len(requests))
        return [
            (horizon.start_us + offset, 0, cost)
            for offset, cost in requests
            if offset < horizon.duration_us
        ]

    def volume(self, horizon: Horizon) -> float:
        """The log's requests that fall in the run."""
        return sum(1 for offset, _ in self.requests() if offset < horizon.duration_us)

    def requests(self) -> list[tuple[int, int]]:
        """Every line's ``(microseconds after the earliest, cost)``, in time order."""
        try:
            lines = Path(self.file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"pattern replay: cannot read {self.file}: {exc}") from exc
        stamps: list[tuple[int, int]] = []
        for number, line in enumerate(lines, 1):
            text = line.split("#", 1)[0].split()
            if not text:
                continue
            stamps.append(self._parse_line(text, f"{self.file}:{number}"))
        if not stamps:
            raise ConfigurationError(f"pattern replay: {self.file} has no timestamps")
        first = min(stamp for stamp, _ in stamps)
        return sorted((stamp - first, cost) for stamp, cost in stamps)

    @staticmethod
    def _parse_line(text: list[str], where: str) -> tuple[int, int]:
        """``(time_us, cost)`` of one line: ``SECONDS [COST]`` or ``ISO-8601 [COST]``."""
        if len(text) > 2:
            raise ConfigurationError(
                f"{where}: expected 'SECONDS [COST]' or 'ISO-8601-TIME [COST]', "
                f"got {' '.join(text)!r}"
            )
        stamp = _stamp_us(text[0], where)
        cost = 1
        if len(text) == 2:
            if not is_whole(text[1]):
                sign = ", not negative" if text[1].startswith("-") and is_whole(text[1][1:]) else ""
                raise ConfigurationError(f"{where}: cost {text[1]!r} must be a whole number{sign}")
            cost = int(text[1])
        return stamp, cost

    def describe(self) -> str:
        return f"replay {self.file}"  # the path as given: logs of one name in two folders differ


def _stamp_us(raw: str, where: str) -> int:
    """Whole microseconds of ``SECONDS`` (exact decimal) or an ISO 8601 time (naive is UTC)."""
    try:
        seconds = Decimal(raw)
    except InvalidOperation:
        seconds = None
    if seconds is not None:
        if not seconds.is_finite():
            raise ConfigurationError(f"{where}: timestamp {raw!r} is not finite")
        if abs(seconds) > _MAX_SECONDS:
            raise ConfigurationError(f"{where}: timestamp {raw!r} is out of range")
        return int((seconds * SECOND_US).to_integral_value())
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ConfigurationError(
            f"{where}: timestamp {raw!r} is neither seconds nor an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)
