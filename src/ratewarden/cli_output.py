"""The ``ratewarden`` command's stdout, watched: a write that fails for a reason other than a
reader gone (a full disk, ``ratewarden plan ... > /dev/full``) is told from every other
``OSError`` (a plot file's, a port's) in one place, whichever command printed, so that
``cli.main`` says it in one line instead of a traceback."""

from __future__ import annotations

import os
from typing import Any, TextIO

__all__ = ["Output", "OutputError", "quiet"]


class OutputError(Exception):
    """stdout refused a write, not for a reader gone (that is a ``BrokenPipeError``): the
    reason, as the system says it (``No space left on device``)."""


class Output:
    """Stands for ``sys.stdout`` while a command runs; everything but ``write`` and ``flush``
    is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from exc

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def quiet(*streams: TextIO) -> None:
    """Point ``streams`` at devnull, so that nothing more is written and the flush at exit
    (of what the failed write left in the buffer) has nothing to fail on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in streams:
        os.dup2(devnull, stream.fileno())
    os.close(devnull)
