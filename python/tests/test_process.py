"""The Python package through the real static supervisor, on the local
provider and the command provider (sh -c as the command channel)."""

import asyncio
import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

import tether
from tether import sync

ALL_BYTES = bytes(range(256)) * 4  # NUL, invalid UTF-8, every value


def providers():
    return [tether.local(), tether.command("sh -c")]


@pytest.fixture(params=["local", "command"])
async def sandbox(request):
    sb = tether.local() if request.param == "local" else tether.command("sh -c")
    async with sb:
        yield sb


async def collect(p):
    out = {"stdout": b"", "stderr": b"", "pty": b""}
    async for chunk in p.output():
        out[chunk.stream] += chunk.data
    return out


async def test_every_byte_value_on_both_streams(sandbox):
    p = await sandbox.start(["tee", "/dev/stderr"], stdin=True, output="stream")
    await p.write(ALL_BYTES)
    await p.close_stdin()
    out = await collect(p)
    assert out["stdout"] == ALL_BYTES
    assert out["stderr"] == ALL_BYTES
    status = await p.wait()
    assert (status.code, status.signal, status.output_complete) == (0, None, True)


async def test_ten_mib_of_stdin_hashed_inside(sandbox):
    data = os.urandom(10 << 20)
    p = await sandbox.start(["sha256sum"], stdin=True, output="stream")
    await p.write(data)
    await p.close_stdin()
    out = await collect(p)
    assert out["stdout"].split()[0].decode() == hashlib.sha256(data).hexdigest()
    assert (await p.wait()).code == 0


async def test_exit_codes_and_signals(sandbox):
    p = await sandbox.start(["sh", "-c", "exit 42"])
    status = await p.wait()
    assert (status.code, status.returncode, status.shell_status) == (42, 42, 42)
    p = await sandbox.start(["sh", "-c", "kill -TERM $$"])
    status = await p.wait()
    assert (status.code, status.signal, status.returncode, status.shell_status) == (None, 15, -15, 143)
    p = await sandbox.start(["sleep", "30"])
    assert (await p.status()).state == "running"
    await p.signal("INT")
    status = await p.wait()
    assert status.signal == 2
    assert (await p.status()).state == "exited"


async def test_terminate_and_text_output(sandbox):
    p = await sandbox.start(["sh", "-c", "trap '' TERM; printf 'caf\\303\\251 \\377'; while :; do :; done"], text=True,
                            output="stream")
    chunk = await p.read()
    assert chunk.data == "café \ufffd"
    await p.terminate(grace=0.2)
    assert (await p.wait()).signal == 9


async def test_pty_with_resize(sandbox):
    p = await sandbox.start(["sh", "-c", "stty size; read x; stty size"], pty=(100, 30), output="stream")
    seen = b""
    while b"30 100" not in seen:
        seen += (await p.read()).data
    await p.resize(120, 40)
    await p.write(b"\n")
    while b"40 120" not in seen:
        chunk = await p.read()
        assert chunk is not None, seen
        assert chunk.stream == "pty"
        seen += chunk.data
    assert (await p.wait()).code == 0


async def test_eof_and_input_after_close(sandbox):
    p = await sandbox.start(["cat"], stdin=True, output="stream")
    await p.close_stdin()
    await p.close_stdin()  # idempotent
    with pytest.raises(tether.InputClosed):
        await p.write(b"late")
    assert await collect(p) == {"stdout": b"", "stderr": b"", "pty": b""}
    assert (await p.wait()).code == 0


async def test_errors_have_their_codes(sandbox):
    with pytest.raises(tether.InvalidArgument):
        await sandbox.start([])
    with pytest.raises(tether.NotFound):
        await sandbox.start(["/nonexistent/program"])
    with pytest.raises(tether.InvalidArgument):
        await sandbox.start("echo hi")
    p = await sandbox.start(["true"])
    with pytest.raises(tether.InputClosed):
        await p.write(b"x")  # stdin is /dev/null
    with pytest.raises(tether.InvalidArgument):
        await p.signal("NOPE")
    await p.wait()


async def test_finite_output_stops_at_its_cap(sandbox):
    p = await sandbox.start(["head", "-c", "100000", "/dev/zero"], max_output_bytes=1000)
    got = b""
    with pytest.raises(tether.OutputCapacity):
        while True:
            chunk = await p.read()
            assert chunk is not None
            got += chunk.data
    assert got == b"\0" * 1000
    await p.wait()


async def test_cancelling_a_task_aborts_that_call_only(sandbox):
    p = await sandbox.start(["sh", "-c", "read x; echo got $x"], stdin=True, output="stream")
    waiter = asyncio.create_task(p.wait())
    reader = asyncio.create_task(p.read())
    await asyncio.sleep(0.2)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (await p.status()).state == "running"
    await p.write(b"it\n")  # the process and the other calls go on
    chunk = await reader
    assert chunk.data == b"got it\n"
    assert (await p.wait()).code == 0


async def test_reopen_after_the_starting_program_exited(tmp_path):
    script = textwrap.dedent("""
        import asyncio, sys, tether
        async def main():
            async with tether.local() as sb:
                p = await sb.start(["sh", "-c", "echo first; read x; echo second $x"], stdin=True, output="stream")
                chunk = await p.read()
                assert chunk.data == b"first\\n", chunk
                print(p.reference())
                await p.disconnect()
        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reference = done.stdout.strip()
    async with tether.local() as sb:
        p = await sb.reopen(reference)
        await p.write(b"again\n")
        assert await collect(p) == {"stdout": b"second again\n", "stderr": b"", "pty": b""}
        assert (await p.wait()).code == 0
        with pytest.raises(tether.TetherError):
            await sb.reopen("{not a reference")


async def test_two_hundred_processes_from_one_loop():
    async with tether.local() as sb:
        async def one(i):
            p = await sb.start(["sh", "-c", f"printf %s-%s {i} $$"], output="stream")
            out = await collect(p)
            status = await p.wait()
            p.close()
            return out["stdout"], status.code
        results = await asyncio.gather(*(one(i) for i in range(200)))
    for i, (out, code) in enumerate(results):
        assert code == 0 and out.startswith(f"{i}-".encode()), (i, out)


def native_threads():
    return len(os.listdir("/proc/self/task"))


def open_fds():
    return len(os.listdir("/proc/self/fd"))


async def test_close_leaks_no_thread_or_fd():
    async def round_trip():
        async with tether.local() as sb:
            p = await sb.start(["sh", "-c", "echo hi"], output="stream")
            assert (await collect(p))["stdout"] == b"hi\n"
            await p.wait()
    await round_trip()  # warm-up: libraries, the supervisor image cache
    threads, fds = native_threads(), open_fds()
    for _ in range(5):
        await round_trip()
    assert (native_threads(), open_fds()) == (threads, fds)


async def test_unknown_provider_and_bad_flags():
    with pytest.raises(tether.InvalidArgument):
        await tether.connect("no-such-provider").open()
    with pytest.raises(tether.InvalidArgument):
        await tether.connect("local", prefix="ssh host").open()
    assert "local" in tether.providers() and "command" in tether.providers()


def test_sync_wrapper():
    with sync.local() as sb:
        p = sb.start(["sh", "-c", "cat; exit 7"], stdin=True, output="stream")
        p.write(ALL_BYTES)
        p.close_stdin()
        data = b"".join(c.data for c in p.output())
        assert data == ALL_BYTES
        assert p.wait().code == 7


def test_the_readme_example_runs_as_shown():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    example = os.path.join(root, "python", "examples", "agent_tool.py")
    with open(example) as f, open(os.path.join(root, "README.md")) as readme:
        assert f.read() in readme.read(), "README.md must show python/examples/agent_tool.py verbatim"
    done = subprocess.run([sys.executable, example, "printf 'out\\0'; printf err >&2; exit 5"],
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (5, b"out\0", b"err")
