"""tether: exact, uniform processes in any sandbox, from asyncio.

    import tether

    async with tether.local() as sandbox:            # or tether.command("ssh -T host"),
        p = await sandbox.start(["sh", "-c", "cat; exit 3"], stdin=True, output="stream")
        await p.write(b"bytes \\0\\xff")
        await p.close_stdin()
        async for chunk in p.output():               # Chunk(stream, data, offset)
            print(chunk.stream, chunk.data)
        status = await p.wait()                      # ExitStatus(code=3, signal=None)

Every call is the C++ host library's (through libtether_c): exact bytes both
ways, EOF, signals, a pty with resize, wait, status, terminate, and a
reference to reopen the process later, even from another program.
Cancelling a task that awaits a call aborts that call only (WAIT_ABORTED in
the library): the process and its other calls go on. Errors are TetherError
subclasses, one per stable code (tether.errors). `tether.sync` wraps the same
API for scripts without asyncio.
"""

from ._api import Chunk, ExitStatus, Process, ProcessStatus, Sandbox, command, connect, local, providers
from .errors import (Busy, Expired, InputClosed, InternalError, InvalidArgument, LaunchCancelled, NotFound,
                     OutcomeUnknown, OutputCapacity, PermissionDenied, ProtocolError, ResourceExhausted,
                     TetherError, Unavailable, Unsupported, WaitAborted)

__all__ = [
    "Chunk", "ExitStatus", "Process", "ProcessStatus", "Sandbox", "command", "connect", "local", "providers",
    "Busy", "Expired", "InputClosed", "InternalError", "InvalidArgument", "LaunchCancelled", "NotFound",
    "OutcomeUnknown", "OutputCapacity", "PermissionDenied", "ProtocolError", "ResourceExhausted", "TetherError",
    "Unavailable", "Unsupported", "WaitAborted",
]
