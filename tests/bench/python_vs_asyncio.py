"""The Python package against asyncio's own subprocesses, in one run
(alternating, best of N): bytes through p.output() and fan-out of many
processes from one event loop. Run: ./dev bench --python (or directly with
the venv that tests/python/run_pytest.sh makes)."""

import asyncio
import os
import sys
import time

import tether

MIB = 1 << 20


async def tether_bytes(sb, size):
    p = await sb.start(["head", "-c", str(size), "/dev/zero"], output="stream")
    got = 0
    async for chunk in p.output():
        got += len(chunk.data)
    await p.wait()
    assert got == size, got


async def asyncio_bytes(size):
    p = await asyncio.create_subprocess_exec("head", "-c", str(size), "/dev/zero", stdout=asyncio.subprocess.PIPE)
    got = 0
    while True:
        data = await p.stdout.read(1 << 16)
        if not data:
            break
        got += len(data)
    await p.wait()
    assert got == size, got


async def tether_fanout(sb, n):
    async def one(i):
        p = await sb.start(["sh", "-c", f"head -c 65536 /dev/zero; echo {i}"], output="stream")
        async for _ in p.output():
            pass
        await p.wait()
        p.close()
    await asyncio.gather(*(one(i) for i in range(n)))


async def asyncio_fanout(n):
    async def one(i):
        p = await asyncio.create_subprocess_exec("sh", "-c", f"head -c 65536 /dev/zero; echo {i}",
                                                 stdout=asyncio.subprocess.PIPE)
        await p.stdout.read()
        await p.wait()
    await asyncio.gather(*(one(i) for i in range(n)))


async def timed(coro):
    t0 = time.perf_counter()
    await coro
    return time.perf_counter() - t0


async def main():
    size = int(os.environ.get("BENCH_MIB", "256")) * MIB
    n = int(os.environ.get("BENCH_PROCS", "200"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    async with tether.local() as sb:
        await tether_bytes(sb, MIB)  # warm-up: the supervisor in place
        best = {}
        for _ in range(rounds):
            for name, make in (("tether bytes", lambda: tether_bytes(sb, size)),
                               ("asyncio bytes", lambda: asyncio_bytes(size)),
                               ("tether fan-out", lambda: tether_fanout(sb, n)),
                               ("asyncio fan-out", lambda: asyncio_fanout(n))):
                t = await timed(make())
                best[name] = min(best.get(name, t), t)
    mb = size / MIB
    print(f"| {mb:.0f} MiB through output() | tether {mb / best['tether bytes']:.0f} MiB/s | "
          f"asyncio subprocess {mb / best['asyncio bytes']:.0f} MiB/s | "
          f"ratio {best['asyncio bytes'] / best['tether bytes']:.2f}x |")
    print(f"| {n} processes from one loop | tether {best['tether fan-out']:.2f} s | "
          f"asyncio subprocess {best['asyncio fan-out']:.2f} s | "
          f"ratio {best['asyncio fan-out'] / best['tether fan-out']:.2f}x |")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
