"""A loopback TCP proxy that adds a one-way delay and counts round trips.

The start-latency benchmark (start_latency.py) puts it between a client
(tether, or a provider's SDK) and a local emulator, so that a start can be
measured at an ordinary WAN round trip and its turns counted. Each byte is
delivered `delay` after it arrived, in order, in both directions; a new
connection also pays the TCP handshake (the client's first bytes reach the
server 3 x delay after it connected, the server's first bytes reach the
client 2 x delay after it). TLS handshakes, HTTP requests and everything
else are data and pay their own turns.

Counts, per connection and in total:
  connections  connections accepted
  turns        request/response turns: a client-to-server burst that
               follows server-to-client data (or opens the connection)
               counts one. Turns on connections that overlap in time are
               each counted, so the sum is an upper bound of the round
               trips on the critical path; start_latency.py also derives
               those from the slope between two delays.
  up, down     bytes client-to-server and server-to-client

Used in-process (DelayProxy, on its own thread and event loop, so that the
measured client's work never delays the proxy's deliveries) or as a program:

  python3 delay_proxy.py TARGET_HOST:TARGET_PORT DELAY_MS
    prints the listening port on stdout, then one JSON line of counts per
    SIGUSR1 (and resets them), until SIGTERM.
"""
import asyncio
import json
import signal
import socket
import sys
import threading
import time
from typing import Dict, Optional

_CHUNK = 64 * 1024


class Counts:
    def __init__(self) -> None:
        self.connections = 0
        self.turns = 0
        self.up = 0
        self.down = 0

    def as_dict(self) -> Dict[str, int]:
        return {"connections": self.connections, "turns": self.turns, "up": self.up, "down": self.down}


class _Pipe:
    """One direction of one connection: chunks delivered `delay` after arrival."""

    def __init__(self, proxy: "DelayProxy", writer: asyncio.StreamWriter, not_before: float) -> None:
        self.proxy = proxy
        self.writer = writer
        self.not_before = not_before
        self.queue: "asyncio.Queue[Optional[tuple]]" = asyncio.Queue()

    async def deliver(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                item = await self.queue.get()
                if item is None:
                    break
                due, data = item
                wait = max(due, self.not_before) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                self.writer.write(data)
                await self.writer.drain()
            if self.writer.can_write_eof():
                self.writer.write_eof()
        except (ConnectionError, OSError):
            pass


class DelayProxy:
    """Listens on 127.0.0.1 (port 0: any free port) and forwards to target."""

    def __init__(self, target_host: str, target_port: int, delay_ms: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay = delay_ms / 1000.0
        self.counts = Counts()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if not self.port:
            raise RuntimeError("delay proxy: could not listen on 127.0.0.1")

    # -- control (any thread)
    def set_delay(self, delay_ms: float) -> None:
        self.delay = delay_ms / 1000.0

    def take(self) -> Dict[str, int]:
        """The counts since the last take(), and resets them."""
        with self._lock:
            c, self.counts = self.counts, Counts()
        return c.as_dict()

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(timeout=5)

    # -- the proxy's own thread
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_CHUNK)
            self.port = self._server.sockets[0].getsockname()[1]

        try:
            self._loop.run_until_complete(start())
        finally:
            self._ready.set()
        self._loop.run_forever()

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        delay = self.delay
        with self._lock:
            self.counts.connections += 1
        try:
            sr, sw = await asyncio.open_connection(*self.target, limit=_CHUNK)
        except OSError:
            cw.close()
            return
        for w in (cw, sw):
            s = w.get_extra_info("socket")
            if s is not None:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The handshake: SYN, SYN-ACK, then the client's first data.
        up = _Pipe(self, sw, accepted + 3 * delay)
        down = _Pipe(self, cw, accepted + 2 * delay)
        last = {"dir": "down"}  # a connection's first request is a turn

        async def pump(reader: asyncio.StreamReader, pipe: _Pipe, direction: str) -> None:
            try:
                while True:
                    data = await reader.read(_CHUNK)
                    if not data:
                        break
                    with self._lock:
                        if direction == "up":
                            self.counts.up += len(data)
                            if last["dir"] == "down":
                                self.counts.turns += 1
                        else:
                            self.counts.down += len(data)
                    last["dir"] = direction
                    pipe.queue.put_nowait((loop.time() + self.delay, data))
            except (ConnectionError, OSError):
                pass
            pipe.queue.put_nowait(None)

        tasks = [
            asyncio.ensure_future(pump(cr, up, "up")),
            asyncio.ensure_future(pump(sr, down, "down")),
            asyncio.ensure_future(up.deliver()),
            asyncio.ensure_future(down.deliver()),
        ]
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in (cw, sw):
            try:
                w.close()
            except OSError:
                pass


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-4], file=sys.stderr)
        return 2
    host, _, port = sys.argv[1].rpartition(":")
    proxy = DelayProxy(host or "127.0.0.1", int(port), float(sys.argv[2]))
    print(proxy.port, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: print(json.dumps(proxy.take()), flush=True))
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    while not done.wait(0.2):
        pass
    proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
