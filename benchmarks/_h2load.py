"""h2load, the load generator of ``python -m benchmarks --serve``: one timed run and what it saw.

h2load is nghttp2's HTTP/2 (and HTTP/1.1) benchmarking client, in C (Debian and
Ubuntu ``nghttp2-client``, Homebrew and Fedora ``nghttp2``). It costs a few
microseconds of CPU per call where the Python gRPC client this harness used
before cost ~290, so on a 2-core machine the load no longer takes the CPU the
server needs.

A gRPC unary call, to h2load, is a POST whose body is one gRPC frame (a zero
byte, the 4-byte big-endian length, the serialized request) with
``content-type: application/grpc`` and ``te: trailers``; every call of a run
sends the same body. ``connections`` HTTP/2 connections carry ``streams``
calls each at every moment, so ``connections x streams`` calls are in flight.

h2load counts HTTP statuses only, and a gRPC error travels in the trailers
(``grpc-status``) of a 200. So a run reports the DATA bytes its replies
carried: a call answered with an error has none, and the harness compares the
bytes with what a real reply weighs (``Run.replies``).

Timing: a run is ``-D`` seconds of load with no warm-up of its own (h2load's
``--warm-up-time`` would count the warm-up's bytes with the run's), started on
fresh connections; ``--log-file`` gives each request's status and microseconds,
from which the percentiles come. Only requests that finished inside the
duration are logged or counted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

GRPC_HEADERS = ("content-type: application/grpc", "te: trailers")
#: Seconds past a run's duration before a stuck h2load is killed.
OVERRUN_S = 30.0
INSTALL_HINT = (
    "h2load is not on PATH: it is the serve benchmark's load generator. Install it with "
    "`apt-get install nghttp2-client` (Debian, Ubuntu), `brew install nghttp2` (macOS) or "
    "`dnf install nghttp2` (Fedora); scripts/bench --serve installs it when run as root"
)

_REQUESTS = re.compile(r"^requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed")
_DATA = re.compile(r"^traffic: .*\((\d+)\) data$")


def binary() -> str:
    """The h2load on PATH; ``RuntimeError`` saying how to get it when there is none."""
    found = shutil.which("h2load")
    if found is None:
        raise RuntimeError(INSTALL_HINT)
    return found


@dataclass(frozen=True, slots=True)
class Load:
    """What to send: ``connections x streams`` requests in flight to ``url``.

    ``body`` is a file of one gRPC frame (a POST per call, the gRPC headers); without
    one, a GET over HTTP/1.1, one request in flight per connection (``streams`` 1).
    """

    url: str
    connections: int
    streams: int
    body: Path | None = None
    headers: tuple[str, ...] = ()

    @property
    def in_flight(self) -> int:
        return self.connections * self.streams

    def args(self, seconds: float, log: Path | None) -> list[str]:
        """h2load's command line for ``seconds`` of this load (per-request log to ``log``)."""
        args = [
            binary(), "-D", f"{max(1, round(seconds * 1000))}ms", "-t", "1",
            "-c", str(self.connections), "-m", str(self.streams),
        ]  # fmt: skip
        headers = self.headers
        if self.body is None:
            args.append("--h1")
        else:
            args += ["-d", str(self.body)]
            headers = (*GRPC_HEADERS, *headers)
        for header in headers:
            args += ["-H", header]
        if log is not None:
            args.append(f"--log-file={log}")
        return [*args, self.url]


@dataclass(frozen=True, slots=True)
class Run:
    """What one timed run saw."""

    seconds: float
    #: Microseconds of each call answered HTTP 200, in the order h2load logged them.
    latencies_us: list[int]
    #: Requests that failed (reset, timed out, refused) or were answered with another status.
    failed: int
    #: Bytes of DATA frames received over the run (the gRPC reply frames).
    data_bytes: int
    #: h2load's own user + system CPU seconds.
    cpu_s: float
    output: str

    @property
    def calls(self) -> int:
        return len(self.latencies_us)

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    def replies(self, frame_bytes: int) -> float:
        """The DATA bytes received per call, as a share of a reply of ``frame_bytes``.

        Replies of one request differ by up to a fifth (varints, a duration of 0
        left out, the over-limit cache's statuses), so 0.8-1.2 is a run whose calls
        all carried a reply; a gRPC error has no DATA frame and pulls it down.
        """
        return self.data_bytes / (frame_bytes * self.calls) if self.calls else 0.0

    def percentile_ms(self, fraction: float) -> float:
        """Nearest-rank percentile of the calls' latencies, in milliseconds."""
        ordered = sorted(self.latencies_us)
        if not ordered:
            return float("nan")
        rank = max(1, -(-len(ordered) * fraction // 1))
        return ordered[int(rank) - 1] / 1e3


def start(load: Load, seconds: float, log: Path | None, output: Path) -> subprocess.Popen[bytes]:
    """Start h2load for ``seconds`` of ``load``, its output to ``output``."""
    if log is not None:
        log.unlink(missing_ok=True)  # h2load appends to its log
    with open(output, "wb") as out:
        return subprocess.Popen(load.args(seconds, log), stdout=out, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes], seconds: float, log: Path | None, output: Path) -> Run:
    """Wait for ``proc`` (killed ``OVERRUN_S`` past its time) and read what it saw."""
    timer = threading.Timer(seconds + OVERRUN_S, proc.kill)
    timer.start()
    try:
        # wait4, not Popen.wait: the rusage of the child reaped is h2load's own CPU.
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = output.read_text(errors="replace")
    requests = data = None
    for line in text.splitlines():
        if found := _REQUESTS.match(line):
            requests = found
        elif found := _DATA.match(line):
            data = int(found[1])
    if proc.returncode != 0 or requests is None or data is None:
        raise RuntimeError(f"h2load exited {proc.returncode}:\n{text[-2000:]}")
    latencies, other = _log(log) if log is not None else ([], 0)
    return Run(
        seconds=seconds,
        latencies_us=latencies,
        # h2load's "failed" counts HTTP-level failures (4xx, 5xx) too; the log has them all.
        failed=max(int(requests[1]), other),
        data_bytes=data,
        cpu_s=usage.ru_utime + usage.ru_stime,
        output=text,
    )


def _log(path: Path) -> tuple[list[int], int]:
    """The 200s' microseconds from an h2load log (start us, status, elapsed us), and the
    count of other statuses."""
    latencies = []
    other = 0
    for line in path.read_text().splitlines():
        _, status, elapsed = line.split("\t")
        if status == "200":
            latencies.append(int(elapsed))
        else:
            other += 1
    return latencies, other
