"""The asyncio API over libtether_c (see __init__ for the tour).

One runtime per open Sandbox: the C library's thread runs the host library;
this side watches the runtime's fd with loop.add_reader and resolves one
future per call from its completion. Cancelling a task that awaits a call
cancels that future, which aborts that call alone in the library
(WAIT_ABORTED there); its late completion is consumed and anything it made
(a process handle) freed.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from dataclasses import dataclass
from typing import AsyncIterator, Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import _native as n
from .errors import InvalidArgument, TetherError, Unavailable, from_code

ffi, lib = n.ffi, n.lib

_MAX_WRITE = 64 * 1024  # kMaxWriteBytes: one C write carries at most this
_WRITES_IN_FLIGHT = 4   # 256 KiB, the library's input queue


def _message(c) -> str:
    return ffi.string(c.message).decode("utf-8", "replace") if c.message != ffi.NULL else ""


@dataclass(frozen=True)
class Chunk:
    """A piece of output: `stream` is "stdout", "stderr" or "pty"; `data`
    bytes (str when the process was started with text=True); `offset` of
    data's first byte within its stream (bytes, also in text mode)."""

    stream: str
    data: Union[bytes, str]
    offset: int


@dataclass(frozen=True)
class ExitStatus:
    """How the process ended: `code` when it exited, `signal` when a signal
    ended it. `returncode` follows subprocess (-signal); `shell_status` the
    shell (128 + signal)."""

    code: Optional[int]
    signal: Optional[int]
    core_dumped: bool = False
    output_cut: bool = False
    output_complete: bool = False
    user_seconds: float = 0.0
    system_seconds: float = 0.0
    max_rss_kib: int = 0

    @property
    def returncode(self) -> int:
        return self.code if self.code is not None else -(self.signal or 0)

    @property
    def shell_status(self) -> int:
        return self.code if self.code is not None else 128 + (self.signal or 0)


@dataclass(frozen=True)
class ProcessStatus:
    """`state` is "running", "exited" or "unknown"; `exit` is set once exited."""

    state: str
    exit: Optional[ExitStatus] = None


_STREAMS = {n.STREAM_STDOUT: "stdout", n.STREAM_STDERR: "stderr", n.STREAM_PTY: "pty"}
_STATES = {n.STATE_RUNNING: "running", n.STATE_EXITED: "exited", n.STATE_UNKNOWN: "unknown"}


def _exit_of(e) -> ExitStatus:
    return ExitStatus(
        code=e.code if e.has_code else None,
        signal=e.signal if e.has_signal else None,
        core_dumped=bool(e.core_dumped),
        output_cut=bool(e.output_cut),
        output_complete=bool(e.output_complete),
        user_seconds=e.user_us / 1e6,
        system_seconds=e.system_us / 1e6,
        max_rss_kib=e.max_rss_kib,
    )


class _Runtime:
    """A libtether_c runtime driven by one asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        rt = lib.tether_runtime_new()
        if rt == ffi.NULL:
            raise OSError(ffi.errno, "tether: could not start the runtime's thread")
        self.rt = rt
        self.loop = loop
        self.closed = False
        self._fd = lib.tether_runtime_fd(rt)
        self._tokens = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._c = ffi.new("tether_completion*")
        self.processes: "weakref.WeakSet[Process]" = weakref.WeakSet()
        loop.add_reader(self._fd, self._drain)

    def call(self, fn, *args) -> asyncio.Future:
        """Queues fn(*args, token); the future resolves with its completion."""
        if self.closed:
            raise Unavailable("the sandbox is closed")
        token = next(self._tokens)
        rc = fn(*args, token)
        if rc != 0:
            raise from_code(rc, "tether: a bad argument (NULL handle)")
        fut = self.loop.create_future()
        self._pending[token] = fut
        fut.add_done_callback(lambda f, t=token: self._abort_if_cancelled(t, f))
        return fut

    def _abort_if_cancelled(self, token: int, fut: asyncio.Future) -> None:
        if fut.cancelled() and not self.closed and token in self._pending:
            lib.tether_cancel(self.rt, token)

    def _drain(self) -> None:
        c = self._c
        while not self.closed and lib.tether_runtime_next(self.rt, c):
            try:
                self._complete(c)
            finally:
                lib.tether_completion_release(c)

    def _complete(self, c) -> None:
        fut = self._pending.pop(c.token, None)
        if fut is None or fut.done():
            # Nobody waits (the call was cancelled): free what it made.
            if c.error == 0 and c.process != ffi.NULL:
                lib.tether_process_free(c.process)
            return
        if c.error != 0:
            fut.set_exception(from_code(c.error, _message(c)))
            return
        op = c.op
        if op == n.OP_READ:
            if c.stream == n.STREAM_END:
                fut.set_result((None, bool(c.output_gap)))
            else:
                fut.set_result(((c.stream, c.offset, ffi.unpack(ffi.cast("char*", c.data), c.size)),
                                bool(c.output_gap)))
        elif op in (n.OP_START, n.OP_REOPEN):
            fut.set_result((c.process, c.pid, bool(c.has_pty)))
        elif op == n.OP_WAIT:
            fut.set_result(_exit_of(c.exit))
        elif op == n.OP_STATUS:
            state = _STATES.get(c.state, "unknown")
            fut.set_result(ProcessStatus(state, _exit_of(c.exit) if state == "exited" else None))
        else:
            fut.set_result(None)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.loop.remove_reader(self._fd)
        except Exception:  # the loop is already closed
            pass
        for p in list(self.processes):
            p._handle = None  # freed with the runtime below
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(Unavailable("the sandbox was closed"))
        self._pending.clear()
        lib.tether_runtime_free(self.rt)  # joins its thread (the GIL is released)
        self.rt = ffi.NULL


def _pty_size(pty) -> Tuple[int, int]:
    if pty is True:
        return (80, 24)
    cols, rows = pty
    return int(cols), int(rows)


class Process:
    """A process in a sandbox, from Sandbox.start() or Sandbox.reopen()."""

    def __init__(self, runtime: _Runtime, handle, pid: int, has_pty: bool, text: bool) -> None:
        self._rt = runtime
        self._handle = handle
        self._text = text
        self._ended = False
        self.pid = pid
        self.has_pty = has_pty
        self.output_gap = False
        runtime.processes.add(self)

    def _h(self):
        if self._handle is None:
            raise InvalidArgument("the process handle is closed")
        return self._handle

    async def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Writes exact bytes to stdin, in call order (any length: sent as
        pieces of at most 64 KiB, a few in flight)."""
        view = memoryview(data).cast("B")
        h = self._h()
        if len(view) == 0:
            await self._rt.call(lib.tether_process_write, h, ffi.NULL, 0)
            return
        in_flight: list[asyncio.Future] = []
        try:
            for start in range(0, len(view), _MAX_WRITE):
                piece = view[start:start + _MAX_WRITE]
                in_flight.append(self._rt.call(lib.tether_process_write, h, ffi.from_buffer(piece), len(piece)))
                if len(in_flight) >= _WRITES_IN_FLIGHT:
                    await in_flight.pop(0)
            while in_flight:
                await in_flight.pop(0)
        finally:
            for fut in in_flight:
                fut.cancel()

    async def close_stdin(self) -> None:
        """EOF after everything written so far. Idempotent."""
        await self._rt.call(lib.tether_process_close_stdin, self._h())

    async def read(self) -> Optional[Chunk]:
        """The next chunk (at most 16 KiB), or None once all output was read."""
        if self._ended:
            return None
        got, gap = await self._rt.call(lib.tether_process_read, self._h())
        self.output_gap = self.output_gap or gap
        if got is None:
            self._ended = True
            return None
        stream, offset, data = got
        return Chunk(_STREAMS.get(stream, "stdout"), data.decode("utf-8") if self._text else data, offset)

    async def output(self) -> AsyncIterator[Chunk]:
        """Every chunk of output in arrival order, until both streams end."""
        while True:
            chunk = await self.read()
            if chunk is None:
                return
            yield chunk

    async def wait(self) -> ExitStatus:
        """Waits for the confirmed exit."""
        return await self._rt.call(lib.tether_process_wait, self._h())

    async def status(self) -> ProcessStatus:
        """Asks the supervisor: running, exited or unknown."""
        return await self._rt.call(lib.tether_process_status, self._h())

    def signal(self, sig: Union[str, int]) -> "asyncio.Future[None]":
        """Sends `sig` ("TERM", "SIGTERM" or 15) to the process group. Sent at
        once; await the result to learn whether it was delivered."""
        return self._rt.call(lib.tether_process_signal, self._h(), str(sig).encode())

    async def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds if still alive. Returns
        once the supervisor took the request; wait() confirms the exit."""
        await self._rt.call(lib.tether_process_terminate, self._h(), max(0, int(grace * 1000)))

    async def resize(self, cols: int, rows: int) -> None:
        """New terminal size (pty processes only)."""
        await self._rt.call(lib.tether_process_resize, self._h(), cols, rows)

    def reference(self) -> str:
        """Private text for Sandbox.reopen(), here or in another program
        (expires within 24 h). Holds the right to this process: keep it secret."""
        out = ffi.new("char**")
        size = ffi.new("size_t*")
        msg = ffi.new("char**")
        rc = lib.tether_process_reference(self._h(), out, size, msg)
        if rc != 0:
            text = ffi.string(msg[0]).decode("utf-8", "replace") if msg[0] != ffi.NULL else ""
            lib.tether_free_string(msg[0])
            raise from_code(rc, text)
        try:
            return ffi.unpack(out[0], size[0]).decode("utf-8")
        finally:
            lib.tether_free_string(out[0])

    async def disconnect(self) -> None:
        """Releases the attachment; the child and its stdin go on; unread
        output waits for a reopen."""
        await self._rt.call(lib.tether_process_disconnect, self._h())

    async def detach(self) -> None:
        """Done with this handle: like disconnect(), discarding unread output."""
        await self._rt.call(lib.tether_process_detach, self._h())

    def close(self) -> None:
        """Frees the handle (aborting its calls in flight); the child goes on."""
        h, self._handle = self._handle, None
        if h is not None and not self._rt.closed:
            lib.tether_process_free(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()


class Sandbox:
    """One provider's sandbox: `async with tether.local() as sandbox`."""

    def __init__(self, provider: str, flags: Sequence[Tuple[str, str]] = ()) -> None:
        self.provider = provider
        self._flags = [(str(f), str(v)) for f, v in flags]
        self._rt: Optional[_Runtime] = None
        self._transport = None

    async def open(self) -> "Sandbox":
        """Starts the runtime and makes the transport (nothing is contacted
        until the first call)."""
        if self._rt is not None:
            return self
        rt = _Runtime(asyncio.get_running_loop())
        flat = [s.encode() for pair in self._flags for s in pair]
        keep = [ffi.new("char[]", s) for s in flat]
        arr = ffi.new("const char*[]", keep) if keep else ffi.NULL
        out = ffi.new("tether_transport**")
        msg = ffi.new("char**")
        rc = lib.tether_transport_new(rt.rt, self.provider.encode(), arr, len(self._flags), out, msg)
        if rc != 0:
            text = ffi.string(msg[0]).decode("utf-8", "replace") if msg[0] != ffi.NULL else ""
            lib.tether_free_string(msg[0])
            rt.close()
            raise from_code(rc, text)
        self._rt, self._transport = rt, out[0]
        return self

    def _runtime(self) -> _Runtime:
        if self._rt is None or self._rt.closed:
            raise Unavailable("the sandbox is not open (use `async with` or `await sandbox.open()`)")
        return self._rt

    async def start(
        self,
        argv: Sequence[str],
        *,
        stdin: bool = False,
        pty: Union[None, bool, Tuple[int, int]] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        inherit_env: bool = True,
        output: str = "finite",
        text: bool = False,
        max_output_bytes: int = 0,
        output_window_bytes: int = 0,
        backpressure: bool = True,
        reconnect: bool = False,
        setup_timeout: Optional[float] = None,
        supervisor_path: Optional[str] = None,
        upload_supervisor: bool = True,
    ) -> Process:
        """Starts argv (argv[0] absolute or found on PATH). stdin=True gives
        a pipe (else /dev/null); pty=(cols, rows) or True runs it on a
        terminal; output="finite" keeps at most max_output_bytes (1 MiB),
        "stream" has no total limit; text=True decodes output as UTF-8
        (invalid bytes as U+FFFD), else exact bytes."""
        rt = self._runtime()
        if isinstance(argv, (str, bytes)):
            raise InvalidArgument("argv is a list of strings, not one string")
        if output not in ("finite", "stream"):
            raise InvalidArgument('output must be "finite" or "stream"')
        keep = []

        def cstr(s: str):
            p = ffi.new("char[]", s.encode())
            keep.append(p)
            return p

        o = ffi.new("tether_start_options*")
        lib.tether_start_options_init(o)
        args = [cstr(a) for a in argv]
        argv_c = ffi.new("const char*[]", args) if args else ffi.NULL
        o.argv, o.argc = argv_c, len(args)
        if cwd is not None:
            o.cwd = cstr(cwd)
        env_c = None
        if env:
            env_c = ffi.new("const char*[]", [cstr(x) for kv in env.items() for x in kv])
            o.env, o.env_pairs = env_c, len(env)
        o.inherit_env = int(inherit_env)
        o.stdin_pipe = int(stdin)
        if pty:
            o.pty = 1
            o.pty_cols, o.pty_rows = _pty_size(pty)
        o.output_mode = n.OUTPUT_STREAM if output == "stream" else n.OUTPUT_FINITE
        o.output_text = int(text)
        o.max_output_bytes = max_output_bytes
        o.output_window_bytes = output_window_bytes
        o.backpressure = int(backpressure)
        o.reconnect = int(reconnect)
        if setup_timeout is not None:
            o.setup_timeout_ms = max(1, int(setup_timeout * 1000))
        if supervisor_path is not None:
            o.supervisor_path = cstr(supervisor_path)
        o.upload_supervisor = int(upload_supervisor)
        fut = rt.call(lib.tether_start, rt.rt, self._transport, o)
        del keep, argv_c, env_c  # copied by tether_start before it returned
        handle, pid, has_pty = await fut
        return Process(rt, handle, pid, has_pty, text)

    async def reopen(self, reference: str, *, control: bool = False, timeout: Optional[float] = None,
                     text: bool = False) -> Process:
        """Reattaches to a process from its reference(): output resumes where
        the reference's holder stopped. control=True: a handle for status,
        signal, terminate and resize only, usable while another holds it."""
        rt = self._runtime()
        ref = reference.encode()
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        handle, pid, has_pty = await rt.call(lib.tether_reopen, rt.rt, self._transport, ref, len(ref), int(control), ms)
        return Process(rt, handle, pid, has_pty, text)

    async def close(self) -> None:
        """Frees every handle (the processes go on in the sandbox) and stops
        the runtime's thread."""
        rt, self._rt = self._rt, None
        if rt is None:
            return
        rt.close()  # frees the transport and the processes with it
        self._transport = None

    async def __aenter__(self) -> "Sandbox":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _flags(options: Mapping[str, object]) -> list:
    out = []
    for key, value in options.items():
        if value is None:
            continue
        out.append(("--" + key.replace("_", "-"), str(value)))
    return out


def local() -> Sandbox:
    """This machine (the supervisor runs as a local process)."""
    return Sandbox("local")


def command(prefix: str, **options: object) -> Sandbox:
    """Any command channel: prefix="ssh -T host", "kubectl exec -i pod --", ..."""
    return Sandbox("command", [("--prefix", prefix)] + _flags(options))


def connect(provider: str, **options: object) -> Sandbox:
    """Any registered provider by name, its flags as keywords:
    connect("e2b", sandbox="id") is --provider e2b --sandbox id; credentials
    come from the environment as for the CLI."""
    return Sandbox(provider, _flags(options))


def providers() -> list:
    """The names of the registered providers."""
    return ffi.string(lib.tether_providers()).decode().split(",")
