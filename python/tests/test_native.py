"""The Python package over native providers, through their emulators
(tests/emulators/, backed by real local processes): exact bytes and EOF on
channels that natively carry only text (Runloop) or one-shot commands (Boat)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import tether

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ALL_BYTES = bytes(range(256)) * 4


def start_emulator(name, tmp_path, *args):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = os.path.join(ROOT, "tests", "emulators", f"{name}.mjs")
    out = open(tmp_path / "emulator.json", "w+")
    proc = subprocess.Popen([node, script, "--dir", str(tmp_path), *args], stdout=out,
                            stderr=open(tmp_path / "emulator.log", "w"), start_new_session=True)
    for _ in range(300):
        out.seek(0)
        line = out.readline()
        if line.endswith("\n") or line.rstrip().endswith("}"):
            try:
                return proc, json.loads(line)
            except ValueError:
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the emulator did not start: " + (tmp_path / "emulator.log").read_text()[-2000:])


@pytest.fixture(params=["boat", "runloop"])
def native(request, tmp_path, monkeypatch):
    proc, info = start_emulator(request.param, tmp_path)
    if request.param == "boat":
        monkeypatch.setenv("BOAT_API_KEY", info["api_key"])
        sandbox = tether.connect("boat", sandbox=info["sandbox"], endpoint=info["url"], ca_file=info.get("ca"))
    else:
        monkeypatch.setenv("RUNLOOP_API_KEY", info["api_key"])
        sandbox = tether.connect("runloop", devbox=info["devbox"], endpoint=info["url"], ca_file=info.get("ca"))
    yield sandbox
    os.killpg(proc.pid, 15)
    proc.wait(timeout=10)


async def test_exact_bytes_and_eof_through_a_text_or_one_shot_channel(native):
    async with native as sandbox:
        p = await sandbox.start(["sh", "-c", "cat; printf '\\377\\0' >&2; exit 9"], stdin=True, output="stream")
        await p.write(ALL_BYTES)
        await p.close_stdin()
        out = {"stdout": b"", "stderr": b""}
        async for chunk in p.output():
            out[chunk.stream] += chunk.data
        assert out == {"stdout": ALL_BYTES, "stderr": b"\xff\0"}
        status = await p.wait()
        assert (status.code, status.output_complete) == (9, True)
        p = await sandbox.start(["sleep", "30"])
        await p.signal("TERM")
        assert (await p.wait()).signal == 15


async def test_a_lying_endpoint_cannot_put_terminal_control_in_an_exception(tmp_path, monkeypatch):
    """Error text from a hostile endpoint (tests/lib/hostile_http.py) reaches
    the exception escaped and bounded: no ESC, BEL, C1 or bidi override."""
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "lib", "hostile_http.py"),
                               str(tmp_path), "400", "json"], start_new_session=True)
    try:
        for _ in range(500):
            if (tmp_path / "port").exists():
                break
            time.sleep(0.01)
        url = "http://127.0.0.1:" + (tmp_path / "port").read_text()
        monkeypatch.setenv("BOAT_API_KEY", "boat-key")
        with pytest.raises(tether.TetherError) as caught:
            async with tether.connect("boat", sandbox="sbx-1", endpoint=url) as sandbox:
                await sandbox.start(["true"])
        text = str(caught.value)
        assert "PWNED\\x1b]0;owned\\x07" in text  # the server's words arrived, escaped
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E for c in text)
        assert len(text) <= 4096
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=10)
