"""The Python package's half of the start-latency benchmark (start_latency.py).

Starts `echo hi` through the tether package on one provider, one job per
"run" line read on stdin, and prints one JSON line per job: ms to the first
stdout byte and to the exit status.

  python start_runner.py warm|cold PROVIDER [--flag value]...
    warm  one Sandbox opened before the first job and kept (as an agent
          runtime keeps its sandbox handle); the first job is its cold start
    cold  a new Sandbox (a new Transport) for every job
"""
import asyncio
import json
import sys
import time

import tether


async def job(sandbox: "tether.Sandbox") -> dict:
    t0 = time.monotonic()
    first = None
    async with await sandbox.start(["echo", "hi"]) as p:
        async for chunk in p.output():
            if first is None and chunk.stream == "stdout" and chunk.data:
                first = time.monotonic()
        status = await p.wait()
    end = time.monotonic()
    if status.code != 0:
        return {"error": f"echo hi: {status}"}
    if first is None:
        return {"error": "echo hi printed nothing"}
    return {"first": (first - t0) * 1000, "total": (end - t0) * 1000}


async def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("warm", "cold") or len(sys.argv) % 2 != 1:
        print(__doc__.strip().splitlines()[-5], file=sys.stderr)
        return 2
    cold = sys.argv[1] == "cold"
    flags = list(zip(sys.argv[3::2], sys.argv[4::2]))
    sandbox = await tether.Sandbox(sys.argv[2], flags).open()
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        if line.strip() != "run":
            continue
        try:
            if cold:
                await sandbox.close()
                sandbox = await tether.Sandbox(sys.argv[2], flags).open()
            out = await job(sandbox)
        except Exception as e:  # reported, the driver counts it as a failed job
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    await sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
