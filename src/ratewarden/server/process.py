"""Running ``ratewarden serve``: one process (``serve``) or ``--workers`` of them (``run``).

``serve`` runs one ``RateLimitServer`` (``server/app.py``) on the event loop
``--loop`` names until SIGTERM, SIGHUP or SIGINT, then stops it gracefully: after
SIGTERM or SIGHUP it first drains for ``--drain`` seconds (health NOT_SERVING, calls
still answered; a second signal ends the drain at once). ``run``
does that in this process for one worker, or starts ``--workers`` spawned children
sharing the ports and forwards the signals to them. A child watches its parent
through a pipe only the parent writes to: when the parent is gone (killed, even by
SIGKILL), the pipe reads end-of-file and the child stops too, so that no worker
outlives the set and keeps serving on the ports.

A child is started with the stop signals blocked, and unblocks them once its handlers are
in place: a stop asked for while it is still importing waits for them, instead of killing
it by the signal's default action (which would read as a worker that died, exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_sentinels

from ratewarden.errors import RatewardenError
from ratewarden.server import heap, metrics_dir
from ratewarden.server.app import (
    RateLimitServer,
    configure_logging,
    settings_store,
)
from ratewarden.server.port_claim import claim_ports
from ratewarden.server.rules_source import file_loader
from ratewarden.server.settings import Settings, uvloop_installed
from ratewarden.server.stats import MULTIPROC_ENV, multiprocess_dir
from ratewarden.server.xds import source_of

__all__ = ["loop_factory", "run", "serve"]

log = logging.getLogger("ratewarden.server")

#: The signals that stop the server gracefully. SIGHUP does not reload anything (rules are
#: reloaded by polling, certificates when they change): it stops, as SIGTERM does.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
#: What a stop request that is no signal is called: the parent of a worker is gone.
PARENT_GONE = "parent_gone"
#: The stop requests that drain first (``--drain``): a supervisor's. SIGINT (Ctrl-C at a
#: terminal) and a parent gone stop at once.
DRAINING = (signal.SIGTERM.name, signal.SIGHUP.name)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``--loop`` names: uvloop's, or None for asyncio's own.

    ``auto`` takes uvloop when it is installed: under load it cost about 13% less
    CPU per call and answered 15-20% more calls per second (docs/performance-serve.md).
    """
    if name == "asyncio" or (name == "auto" and not uvloop_installed()):
        return None
    import uvloop

    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _stop_requests(parent: Connection | None) -> asyncio.Queue[str]:
    """The requests to stop, in order: a signal's name, or ``PARENT_GONE`` once the pipe from
    the parent (``parent``, a worker's) reads end-of-file, which it does when the parent exits
    or is killed: the parent never writes to it."""
    requests: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, requests.put_nowait, signum.name)
    # A worker starts with them blocked (``_run_workers``): one that came while it was still
    # starting is delivered now, to the handlers.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if parent is not None:

        def parent_gone() -> None:
            loop.remove_reader(parent.fileno())
            log.warning("the parent process is gone: stopping", extra={"event": PARENT_GONE})
            requests.put_nowait(PARENT_GONE)

        loop.add_reader(parent.fileno(), parent_gone)
    return requests


async def _serve(settings: Settings, parent: Connection | None = None) -> None:
    server = RateLimitServer(settings)
    requests = _stop_requests(parent)
    # Racing the start against the signals: with rules from xDS, the start waits for them,
    # and SIGTERM must end that wait as it ends serving.
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(requests.get())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            await server.close()
            log.info("stopped before serving", extra={"event": "stopped"})
            return
        starting.result()
        # The long-lived objects, out of the cycle collector's full collections (heap.py).
        heap.freeze()
        server.config_applied = heap.refreeze
    except BaseException:
        stopping.cancel()
        await server.close()
        raise
    reason = await stopping
    if settings.drain > 0 and reason in DRAINING:
        await _drain(server, settings.drain, requests, reason)
    log.info(
        "shutting down",
        extra={"event": "shutting_down", "grace_s": settings.grace, "reason": reason},
    )
    await server.stop()


async def _drain(
    server: RateLimitServer, drain: float, requests: asyncio.Queue[str], reason: str
) -> None:
    """Health NOT_SERVING for ``drain`` seconds, calls still answered, so that Envoy's health
    check takes this replica out before its ports close; another stop request cuts it short."""
    log.info("draining", extra={"event": "draining", "drain_s": drain, "reason": reason})
    await server.drain()
    try:
        again = await asyncio.wait_for(requests.get(), drain)
    except TimeoutError:
        return
    log.info("drain cut short", extra={"event": "drain_cut_short", "reason": again})


def serve(settings: Settings, parent: Connection | None = None) -> int:
    """Run one server process until SIGTERM, SIGHUP or SIGINT (or, for a worker, until the
    pipe from its ``parent`` closes); the exit code."""
    with asyncio.Runner(loop_factory=loop_factory(settings.loop)) as runner:
        runner.run(_serve(settings, parent))
    return 0


def _worker(settings: Settings, index: int, parent: Connection) -> None:
    configure_logging(settings.log_level, settings.log_format, worker=index)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            serve(settings, parent)
        except (OSError, RatewardenError) as exc:
            log.error(str(exc), extra={"event": "worker_failed"})
            sys.exit(1)


def run(settings: Settings) -> int:
    """Serve with ``settings.workers`` processes; the exit code.

    One worker runs in this process. Several run as spawned children sharing the
    ports through SO_REUSEPORT (the kernel spreads connections); this process
    forwards SIGTERM, SIGHUP (as SIGTERM) and SIGINT to them and waits. If a child
    dies on its own, the others are stopped too and the exit code is 1, so a
    supervisor restarts the whole set rather than running short-handed; if this
    process dies, the children stop on their own (``serve``'s ``parent``). After a
    stop request each child exits 0 (one still starting stops before it serves); one
    that ends otherwise (killed, failed) is logged as ``worker_exited`` and the exit
    code is 1 as well.

    Before they start, the ports are claimed for this set (``server/port_claim.py``): a
    port another process listens on, or another set is claiming, is refused (``OSError``)
    as it is for one process.

    The workers count into one set of metrics: unless ``PROMETHEUS_MULTIPROC_DIR``
    names a directory already, a fresh temporary one is made for them (and
    removed when they are done) before they start, so prometheus_client runs in
    multiprocess mode in each.
    """
    if settings.workers == 1:
        return serve(settings)
    # Fail here, once, rather than in every worker: a bad config, then a bad store URL
    # (building a store checks its URL without connecting). Rules from xDS: each worker
    # subscribes on its own, as upstream's replicas each do.
    if settings.config_xds is None:
        file_loader(settings)(settings.config_paths)
    else:
        source_of(settings)  # its TLS files, read once here rather than failing in each worker
    asyncio.run(settings_store(settings).aclose())
    # SO_REUSEPORT would let a second set join these ports: refuse them as one process would.
    claims = claim_ports(settings)
    created = None
    try:
        if multiprocess_dir() is None:
            created = metrics_dir.make()
            os.environ[MULTIPROC_ENV] = created
        return _run_workers(settings)
    finally:
        for claim in claims:
            claim.close()
        if created is not None:
            os.environ.pop(MULTIPROC_ENV, None)
            shutil.rmtree(created, ignore_errors=True)


def _run_workers(settings: Settings) -> int:
    context = multiprocessing.get_context("spawn")
    # The children hold the reading end; this process holds the writing end, and never
    # writes: when it dies, the children read end-of-file.
    reading, writing = context.Pipe(duplex=False)
    children = [
        context.Process(
            target=_worker, args=(settings, index, reading), name=f"ratewarden-worker-{index}"
        )
        for index in range(settings.workers)
    ]
    #: The signal sent to the children for the latest stop request, once one has come.
    requested: list[signal.Signals] = []
    told: set[int] = set()

    def tell(sent: signal.Signals, among: Sequence[multiprocessing.process.BaseProcess]) -> None:
        for child in among:
            if child.pid is not None and child.exitcode is None:
                told.add(child.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, sent)

    def forward(signum: int, _frame: object) -> None:
        requested.append(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        tell(requested[-1], children)

    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)
    # The children inherit the mask: blocked until their handlers are in place (_stop_requests).
    # Starting a child starts multiprocessing's resource tracker first, the first time, and
    # that unblocks SIGINT and SIGTERM here (it blocks them around its own start, for the
    # same reason): started now, it is left running and the mask stays as set.
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for child in children:
            child.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a stop that came runs forward now
    reading.close()
    if requested:  # a stop that came (to another thread) before some children had a pid
        tell(requested[-1], [child for child in children if child.pid not in told])
    log.info(
        "workers started",
        extra={
            "event": "workers",
            "pids": [c.pid for c in children],
            "metrics_dir": multiprocess_dir(),
        },
    )
    code = 0
    pending = list(children)
    while pending:
        wait_for_sentinels([child.sentinel for child in pending])
        for child in [c for c in pending if c.exitcode is not None]:
            pending.remove(child)
            # A worker asked to stop exits 0; any other end is said, and fails the set.
            if requested and child.exitcode == 0:
                continue
            log.error(
                "worker exited while stopping"
                if requested
                else "worker exited; stopping the others",
                extra={"event": "worker_exited", "pid": child.pid, "exitcode": child.exitcode},
            )
            code = 1
            if not requested:
                forward(signal.SIGTERM, None)
    writing.close()
    return code
