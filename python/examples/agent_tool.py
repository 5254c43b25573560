import asyncio, sys, tether

async def run_tool(sandbox, command: str) -> int:
    """An agent's shell tool: run `command`, stream its output, return its status."""
    p = await sandbox.start(["sh", "-c", command], output="stream")
    async for chunk in p.output():
        (sys.stdout if chunk.stream == "stdout" else sys.stderr).buffer.write(chunk.data)
    return (await p.wait()).shell_status

async def main():
    async with tether.local() as sandbox:  # or tether.connect("e2b", sandbox="...")
        sys.exit(await run_tool(sandbox, " ".join(sys.argv[1:]) or "uname -a"))

asyncio.run(main())
