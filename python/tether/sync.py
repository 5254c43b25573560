"""The same API without asyncio, for scripts:

    from tether import sync

    with sync.local() as sandbox:
        p = sandbox.start(["sh", "-c", "echo hi"], output="stream")
        for chunk in p.output():
            print(chunk.data)
        print(p.wait().code)

Each sandbox runs a private event loop on the calling thread; its objects
must be used from that thread.
"""

from __future__ import annotations

import asyncio
from typing import Iterator, Optional, Union

from . import _api
from ._api import Chunk, ExitStatus, ProcessStatus


class Process:
    """tether.Process, each coroutine run to completion."""

    def __init__(self, loop: asyncio.AbstractEventLoop, process: _api.Process) -> None:
        self._loop = loop
        self._p = process
        self.pid = process.pid
        self.has_pty = process.has_pty

    def _run(self, aw):
        return self._loop.run_until_complete(aw)

    def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        self._run(self._p.write(data))

    def close_stdin(self) -> None:
        self._run(self._p.close_stdin())

    def read(self) -> Optional[Chunk]:
        return self._run(self._p.read())

    def output(self) -> Iterator[Chunk]:
        while True:
            chunk = self.read()
            if chunk is None:
                return
            yield chunk

    def wait(self) -> ExitStatus:
        return self._run(self._p.wait())

    def status(self) -> ProcessStatus:
        return self._run(self._p.status())

    def signal(self, sig: Union[str, int]) -> None:
        self._run(self._p.signal(sig))

    def terminate(self, grace: float = 5.0) -> None:
        self._run(self._p.terminate(grace))

    def resize(self, cols: int, rows: int) -> None:
        self._run(self._p.resize(cols, rows))

    def reference(self) -> str:
        return self._p.reference()

    def disconnect(self) -> None:
        self._run(self._p.disconnect())

    def detach(self) -> None:
        self._run(self._p.detach())

    def close(self) -> None:
        self._p.close()


class Sandbox:
    """tether.Sandbox on a private event loop."""

    def __init__(self, sandbox: _api.Sandbox) -> None:
        self._loop = asyncio.new_event_loop()
        self._s = sandbox
        self._loop.run_until_complete(sandbox.open())

    def start(self, argv, **options) -> Process:
        return Process(self._loop, self._loop.run_until_complete(self._s.start(argv, **options)))

    def reopen(self, reference: str, **options) -> Process:
        return Process(self._loop, self._loop.run_until_complete(self._s.reopen(reference, **options)))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.run_until_complete(self._s.close())
        self._loop.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def local() -> Sandbox:
    return Sandbox(_api.local())


def command(prefix: str, **options: object) -> Sandbox:
    return Sandbox(_api.command(prefix, **options))


def connect(provider: str, **options: object) -> Sandbox:
    return Sandbox(_api.connect(provider, **options))
