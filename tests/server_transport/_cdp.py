"""A headless Chromium driven over the Chrome DevTools Protocol, with no extra dependency.

``Browser.start()`` runs Debian's ``chromium`` (or ``$RATEWARDEN_CHROMIUM``) on a
loopback debugging port; ``browser.page()`` is a ``Page`` whose ``call`` sends one
CDP command and whose ``events`` keep everything Chromium reported meanwhile
(console messages, exceptions, log entries). The WebSocket client is the few
lines of RFC 6455 a test needs: text frames, masking, ping/pong, close.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: ``$RATEWARDEN_CHROMIUM``, else the first candidate on PATH."""
    given = os.environ.get("RATEWARDEN_CHROMIUM")
    if given:
        return given
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class WebSocket:
    """A blocking WebSocket client for text messages (what CDP speaks)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        self._sock = socket.create_connection((parts.hostname, parts.port or 80), timeout)
        self._file = self._sock.makefile("rb")
        key = base64.b64encode(os.urandom(16)).decode()
        head = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self._sock.sendall(head.encode())
        status = self._file.readline()
        if b" 101 " not in status:
            raise ConnectionError(f"WebSocket upgrade refused: {status!r}")
        expected = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        accepted = False
        while (line := self._file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "sec-websocket-accept":
                accepted = value.strip() == expected
        if not accepted:
            raise ConnectionError("WebSocket handshake: wrong Sec-WebSocket-Accept")

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._sock.sendall(head + mask + masked)

    def _read(self, n: int) -> bytes:
        data = self._file.read(n)
        if len(data) != n:
            raise ConnectionError("WebSocket closed mid-frame")
        return data

    def recv(self) -> str:
        """The next whole text message (answers pings on the way)."""
        parts: list[bytes] = []
        while True:
            first, second = self._read(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read(8))
            mask = self._read(4) if second & 0x80 else b""
            payload = self._read(length)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("WebSocket closed by the browser")
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if first & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._frame(0x8, b"")
        self._file.close()
        self._sock.close()


class Page:
    """One browser tab over CDP: ``call(method, **params)`` and the ``events`` seen."""

    def __init__(self, ws_url: str) -> None:
        self._ws = WebSocket(ws_url)
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        reply = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        """Poll ``expression`` until it is truthy; its value. Bounded by ``timeout``.

        An expression that throws counts as false (the page may still be loading).
        """
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:
                value, last = None, str(exc)[:300]
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true within {timeout} s: {expression} {last}")
            time.sleep(0.1)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (CSP, network) so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", "")[:500])
        return found

    def close(self) -> None:
        self._ws.close()


class Browser:
    """Headless Chromium on a loopback debugging port, in a throwaway profile."""

    def __init__(self, binary: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="ratewarden-chromium-")
        self._process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--window-size=1400,1000",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.port = self._wait_port(Path(self._profile) / "DevToolsActivePort")

    def _wait_port(self, marker: Path, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited {self._process.returncode} at start")
            if marker.exists():
                first = marker.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    return int(first)
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its debugging port")

    def page(self) -> Page:
        """The first tab, with console, runtime and log events on."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=10) as r:
            targets = json.loads(r.read())
        [tab] = [t for t in targets if t["type"] == "page"][:1]
        page = Page(tab["webSocketDebuggerUrl"])
        for domain in ("Runtime", "Log", "Page"):
            page.call(f"{domain}.enable")
        return page

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
        shutil.rmtree(self._profile, ignore_errors=True)
