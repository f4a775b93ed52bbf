"""Where one ``ratewarden serve --transport native`` process spends its CPU, thread by thread.

``threads(store, descriptors)`` starts a serve process (the benchmark rules,
``--workers 1``), puts ``connections x streams`` calls in flight with h2load for a
warm-up and then for ``seconds``, and reads the CPU time of each of the process's
threads from ``/proc/<pid>/task`` over the timed run, per call answered: the event
loop's thread (where every call is decided), the front's I/O threads (HTTP/2 and
gRPC, in Rust) and the thread that hands the front's batches to the loop. ``src``
names the ``src/`` directory the serve process imports ratewarden from, so that two
checkouts can be measured one after the other with the same harness (by default the
one the serve command finds). Linux only (``/proc``).

    PYTHONPATH=src:. python -c "from benchmarks._serve_threads import threads; \\
        print(threads('memory', 3))"
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import _h2load
from benchmarks._serve import DOMAIN, RULES
from benchmarks._serve_load import grpc_frame, rls_requests
from benchmarks._serve_stack import HOST, redis_server, serve

__all__ = ["threads"]

_WARMUP_S = 1.0


def _cpu(pid: int) -> dict[int, tuple[str, float, float]]:
    """Each thread of ``pid``: (its name, user + system CPU seconds, system CPU seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        user, system = int(fields[11]) / tick, int(fields[12]) / tick
        found[int(task.name)] = (name, user + system, system)
    return found


def threads(
    store: str,
    descriptors: int,
    seconds: float = 4.0,
    connections: int = 4,
    streams: int = 4,
    src: str | None = None,
) -> dict[str, Any]:
    """Calls per second and CPU microseconds per call of one serve process's threads.

    ``store``: ``memory``, or ``redis`` for a redis-server started here (loopback,
    persistence off). The answer: ``calls_per_s``, ``main_us`` (the event loop's
    thread; ``main_sys_us`` of it in the kernel), ``other_us`` (every other thread),
    ``total_us`` and ``by_name`` (the other threads' microseconds by thread name).
    """
    env = None
    if src is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve())])}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rw-threads-")))
        (workdir / "rules").mkdir()
        for name, text in RULES.items():
            (workdir / "rules" / name).write_text(text)
        body = workdir / "request.bin"
        body.write_bytes(grpc_frame(rls_requests(DOMAIN, descriptors, False)[0]))
        url = redis_server(stack, workdir) if store == "redis" else store
        running = serve(stack, workdir, "threads", url, 1, "native", env)
        load = _h2load.Load(
            f"http://{HOST}:{running.grpc_port}/envoy.service.ratelimit.v3.RateLimitService/"
            "ShouldRateLimit",
            connections,
            streams,
            body=body,
        )
        output, log = workdir / "h2load.txt", workdir / "h2load.log"
        _h2load.finish(_h2load.start(load, _WARMUP_S, log, output), _WARMUP_S, log, output)
        before = _cpu(running.pid)
        run = _h2load.finish(_h2load.start(load, seconds, log, output), seconds, log, output)
        after = _cpu(running.pid)
    calls = run.calls
    if calls == 0 or run.failed:
        raise RuntimeError(f"{run.failed} calls failed, {calls} answered:\n{run.output[-2000:]}")
    main = running.pid

    def used(tid: int, field: int) -> float:
        start = before.get(tid)
        return after[tid][field] - (start[field] if start is not None else 0.0)

    by_name: dict[str, float] = {}
    for tid, (name, _, _) in after.items():
        if tid != main:
            by_name[name] = by_name.get(name, 0.0) + used(tid, 1) / calls * 1e6
    main_us = used(main, 1) / calls * 1e6
    other_us = sum(by_name.values())
    return {
        "calls_per_s": round(run.rate),
        "main_us": round(main_us, 1),
        "main_sys_us": round(used(main, 2) / calls * 1e6, 1),
        "other_us": round(other_us, 1),
        "total_us": round(main_us + other_us, 1),
        "by_name": {name: round(value, 1) for name, value in sorted(by_name.items())},
    }
