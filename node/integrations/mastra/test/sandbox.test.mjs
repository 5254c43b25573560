// TetherSandbox against Mastra's documented sandbox contract (@mastra/core
// 1.71.0: MastraSandbox, SandboxProcessManager, ProcessHandle, the workspace
// tools), on the local provider with the real static supervisor
// (run_test.sh builds the addon and sets TETHER_SUPERVISOR_DIR).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { createWorkspaceTools, SandboxError, SandboxExecutionError, Workspace, WORKSPACE_TOOLS } from "@mastra/core/workspace";

import { TetherSandbox } from "../index.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const kBoundMs = 15_000; // the longest any condition below is waited for

let sb;
before(() => {
  sb = new TetherSandbox({ provider: "local" });
});
after(() => sb._destroy());

// `promise`, or a failure naming `what` after kBoundMs.
async function bounded(promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${kBoundMs} ms`)), kBoundMs);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

// Text handed to a callback, and a wait for a marker in it.
function collector() {
  const c = { text: "", waiters: [] };
  c.push = (data) => {
    c.text += data;
    c.waiters = c.waiters.filter((w) => !(c.text.includes(w.marker) && (w.resolve(), true)));
  };
  c.until = (marker) =>
    bounded(
      new Promise((resolve) => (c.text.includes(marker) ? resolve() : c.waiters.push({ marker, resolve }))),
      JSON.stringify(marker),
    );
  return c;
}

// Gone, or a zombie nobody reaped yet: either way it no longer runs.
function ended(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] === "Z";
  } catch {
    return true;
  }
}

async function until(condition, what) {
  const deadline = Date.now() + kBoundMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`no ${what} within ${kBoundMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function allBytes(times) {
  const b = new Uint8Array(256 * times);
  for (let i = 0; i < b.length; ++i) b[i] = i % 256;
  return b;
}

function isCode(code) {
  return (e) => {
    assert.ok(e instanceof SandboxError, `not a SandboxError: ${e}`);
    assert.equal(e.code, code, e.message);
    return true;
  };
}

describe("spawn and streamed output", () => {
  test("stdout and stderr arrive apart and exact: callbacks, retained text, reader, wait()", async () => {
    const out = collector();
    const err = collector();
    const h = await sb.processes.spawn(
      "for i in 1 2 3; do printf 'out %s ü\\n' $i; printf 'err %s €\\n' $i >&2; done; printf 'no newline'",
      { onStdout: out.push, onStderr: err.push },
    );
    const read = [];
    const readerEnded = new Promise((resolve, reject) => {
      h.reader.on("data", (d) => read.push(String(d)));
      h.reader.on("end", resolve);
      h.reader.on("error", reject);
    });
    const r = await bounded(h.wait(), "exit");
    const stdout = "out 1 ü\nout 2 ü\nout 3 ü\nno newline";
    const stderr = "err 1 €\nerr 2 €\nerr 3 €\n";
    assert.equal(out.text, stdout);
    assert.equal(err.text, stderr);
    assert.equal(r.stdout, stdout);
    assert.equal(r.stderr, stderr);
    assert.equal(h.stdout, stdout);
    assert.equal(h.stderr, stderr);
    await bounded(readerEnded, "end of the reader");
    assert.equal(read.join(""), stdout);
    assert.equal(r.exitCode, 0);
    assert.equal(r.success, true);
    assert.equal(r.killed, false);
  });

  test("text: every byte value arrives as UTF-8 decodes it, invalid bytes as U+FFFD, a split character joined", async () => {
    const bytes = allBytes(4);
    const h = await sb.processes.spawn("cat; printf '\\342\\202'; printf '\\254|\\377|\\0|end'");
    await h.sendStdin(bytes);
    await h.closeStdin();
    const r = await bounded(h.wait(), "exit");
    assert.equal(r.stdout, new TextDecoder().decode(bytes) + "€|\uFFFD|\0|end");
    assert.ok(r.stdout.includes("\uFFFD"));
  });

  test("2.3 MB of output: every chunk reaches the callback in order; what is retained is bounded", async () => {
    const out = collector();
    const h = await sb.processes.spawn("seq 1 300000", { onStdout: out.push, maxRetainedBytes: 1000 });
    const r = await bounded(h.wait(), "exit");
    let expected = "";
    for (let i = 1; i <= 300000; ++i) expected += `${i}\n`;
    assert.equal(out.text.length, expected.length);
    assert.ok(out.text === expected, "the streamed text differs");
    assert.equal(r.stdout, expected.slice(-1000));
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.stdoutDroppedBytes, expected.length - 1000);
  });
});

describe("stdin", () => {
  test("sendStdin then closeStdin: the child reads everything, then EOF ends it", async () => {
    const h = await sb.processes.spawn("cat; echo EOF-seen");
    await h.sendStdin("hello ");
    await h.sendStdin("wörld\n");
    await h.closeStdin();
    const r = await bounded(h.wait(), "exit after EOF");
    assert.equal(r.stdout, "hello wörld\nEOF-seen\n");
    assert.equal(r.exitCode, 0);
  });

  test("exact bytes in: 76800 bytes of every value, over several 64 KiB writes", async () => {
    const bytes = allBytes(300);
    const h = await sb.processes.spawn("od -An -v -tx1 | tr -d ' \\n'");
    const sent = h.sendStdin(bytes); // closeStdin still comes after all of it
    await h.closeStdin();
    await sent;
    const r = await bounded(h.wait(), "exit");
    assert.equal(r.stdout, Buffer.from(bytes).toString("hex"));
  });

  test("concurrent sendStdin calls arrive in call order, each whole; writer.end() is EOF", async () => {
    const h = await sb.processes.spawn("cat");
    const big = ["a", "b"].map((c) => c.repeat(100 * 1024)); // over one 64 KiB write each
    const parts = [...big, ...Array.from({ length: 100 }, (_, i) => `${i},`)];
    await Promise.all(parts.map((p) => h.sendStdin(p)));
    await new Promise((resolve, reject) => h.writer.end("last", (e) => (e ? reject(e) : resolve())));
    const r = await bounded(h.wait(), "exit after writer.end()");
    const want = parts.join("") + "last";
    assert.ok(r.stdout === want, `out of order or mixed (${r.stdout.length} characters, want ${want.length})`);
  });

  test('stdinMode "ignore": the child sees EOF at once; sendStdin and closeStdin reject', async () => {
    const h = await sb.processes.spawn("cat; echo done", { stdinMode: "ignore" });
    await assert.rejects(h.sendStdin("x"), (e) => isCode("INPUT_CLOSED")(e) && /stdinMode "ignore"/.test(e.message));
    await assert.rejects(h.closeStdin(), isCode("INPUT_CLOSED"));
    const r = await bounded(h.wait(), "exit");
    assert.equal(r.stdout, "done\n");
  });

  test("after the exit sendStdin and closeStdin reject, naming the exit code", async () => {
    const h = await sb.processes.spawn("exit 6");
    await bounded(h.wait(), "exit");
    await assert.rejects(h.sendStdin("late"), (e) => isCode("INPUT_CLOSED")(e) && /code 6/.test(e.message));
    await assert.rejects(h.closeStdin(), isCode("INPUT_CLOSED"));
  });
});

describe("exit, kill, timeout, abort", () => {
  test("wait() returns the exit code, zero or not, and success follows it", async () => {
    const zero = await sb.processes.spawn("true");
    const three = await sb.processes.spawn("exit 3");
    const [a, b] = await bounded(Promise.all([zero.wait(), three.wait()]), "exits");
    assert.equal(a.exitCode, 0);
    assert.equal(a.success, true);
    assert.equal(b.exitCode, 3);
    assert.equal(b.success, false);
    assert.equal(b.killed, false);
    assert.equal(three.exitCode, 3);
  });

  test("a death by signal N reports 128+N and killed", async () => {
    const h = await sb.processes.spawn("kill -TERM $$; sleep 5");
    const r = await bounded(h.wait(), "exit");
    assert.equal(r.exitCode, 128 + os.constants.signals.SIGTERM);
    assert.equal(r.killed, true);
    assert.equal(r.success, false);
  });

  test("kill() sends SIGKILL to the process group: 137 and killed; a second kill() is false", async () => {
    const out = collector();
    const h = await sb.processes.spawn("sleep 60 & echo bg=$!; wait", { onStdout: out.push });
    assert.equal(h.exitCode, undefined);
    await out.until("\n");
    const bg = Number(/bg=(\d+)/.exec(out.text)[1]);
    assert.equal(await h.kill(), true);
    const r = await bounded(h.wait(), "exit after kill");
    assert.equal(r.exitCode, 128 + os.constants.signals.SIGKILL);
    assert.equal(r.killed, true);
    assert.equal(await h.kill(), false);
    await until(() => ended(bg), `end of the background sleep ${bg}`);
  });

  test("timeout: SIGTERM, then SIGKILL after the grace, reported as 124 and timedOut", { timeout: 30_000 }, async () => {
    const out = collector();
    const h = await sb.processes.spawn("trap '' TERM; echo ready; while :; do sleep 0.05; done", {
      timeout: 300,
      onStdout: out.push,
    });
    const r = await bounded(h.wait(), "exit after the timeout");
    assert.equal(out.text, "ready\n");
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
    assert.equal(r.stderr, ""); // left as the child wrote it
  });

  test("an abortSignal kills the process; one already aborted starts nothing", async () => {
    const ac = new AbortController();
    const out = collector();
    const h = await sb.processes.spawn("echo ready; exec sleep 60", { abortSignal: ac.signal, onStdout: out.push });
    await out.until("ready\n");
    ac.abort();
    const r = await bounded(h.wait(), "exit after abort");
    assert.equal(r.exitCode, 137);
    const before = (await sb.processes.list()).length;
    await assert.rejects(sb.processes.spawn("echo never", { abortSignal: AbortSignal.abort() }), isCode("ABORTED"));
    assert.equal((await sb.processes.list()).length, before);
  });

  test("wait({ abortSignal }) kills the process and settles with its result", async () => {
    const out = collector();
    const h = await sb.processes.spawn("echo ready; exec sleep 60", { onStdout: out.push });
    await out.until("ready\n");
    const ac = new AbortController();
    const waiting = h.wait({ abortSignal: ac.signal });
    ac.abort();
    const r = await bounded(waiting, "exit after the aborted wait");
    assert.equal(r.exitCode, 137);
  });
});

describe("list and get", () => {
  test("list and get see spawned processes; get forgets a finished one once read; kill(pid) forgets", async () => {
    const out = collector();
    const long = await sb.processes.spawn("echo ready; exec sleep 60", { onStdout: out.push });
    const short = await sb.processes.spawn("exit 5");
    await out.until("ready\n");
    await bounded(short.wait(), "exit");
    const list = await sb.processes.list();
    assert.deepEqual(
      list.find((p) => p.pid === long.pid),
      { pid: long.pid, command: "echo ready; exec sleep 60", running: true },
    );
    assert.deepEqual(
      list.find((p) => p.pid === short.pid),
      { pid: short.pid, command: "exit 5", running: false, exitCode: 5 },
    );
    assert.equal(await sb.processes.get(long.pid), long);
    assert.equal(await sb.processes.get(short.pid), short); // read after its exit: forgotten
    assert.equal(await sb.processes.get(short.pid), undefined);
    assert.equal((await sb.processes.list()).some((p) => p.pid === short.pid), false);
    assert.equal(await sb.processes.kill(long.pid), true);
    assert.equal(long.exitCode, 137);
    assert.equal(await sb.processes.get(long.pid), undefined);
    assert.equal(await sb.processes.kill(long.pid), false);
    assert.equal(await sb.processes.get("999999999"), undefined);
  });
});

describe("executeCommand", () => {
  test("exit codes, quoted args, cwd, env and the sandbox's env overlay", async () => {
    const seven = await sb.executeCommand("echo out; echo err >&2; exit 7");
    assert.deepEqual([seven.exitCode, seven.success, seven.stdout, seven.stderr], [7, false, "out\n", "err\n"]);
    const quoted = await sb.executeCommand("printf", ["%s|", "a b", "$HOME", "it's", ""]);
    assert.equal(quoted.stdout, "a b|$HOME|it's||");
    const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "mastra-cwd-")));
    fs.mkdirSync(path.join(dir, "sub"));
    assert.equal((await sb.executeCommand("pwd", [], { cwd: dir })).stdout, `${dir}\n`);
    sb.setEnv((env) => ({ ...env, FROM_SANDBOX: "overlay", BOTH: "sandbox" }));
    try {
      const env = await sb.executeCommand('printf "%s-%s-%s-%s" "$FOO" "$FROM_SANDBOX" "$BOTH" "${SKIPPED-unset}"', [], {
        env: { FOO: "bar", BOTH: "command", SKIPPED: undefined },
      });
      assert.equal(env.stdout, "bar-overlay-command-unset");
    } finally {
      sb.setEnv(({ FROM_SANDBOX, BOTH, ...rest }) => rest);
    }
    const missing = await sb.executeCommand("no-such-command-anywhere");
    assert.equal(missing.exitCode, 127);
    assert.match(missing.stderr, /no-such-command-anywhere/);
    const streamed = collector();
    await sb.executeCommand("echo a; echo b", [], { onStdout: streamed.push });
    assert.equal(streamed.text, "a\nb\n");
    // executeCommand releases its processes
    const listed = await sb.processes.list();
    assert.equal(listed.some((p) => p.command?.startsWith("echo out")), false);
  });

  test("workingDirectory: the default cwd, relative cwds inside it, an explicit absolute cwd wins", async () => {
    const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "mastra-wd-")));
    fs.mkdirSync(path.join(dir, "sub"));
    const wd = new TetherSandbox({ provider: "local", workingDirectory: dir });
    try {
      assert.equal((await wd.executeCommand("pwd")).stdout, `${dir}\n`);
      assert.equal((await wd.executeCommand("pwd", [], { cwd: "sub" })).stdout, `${dir}/sub\n`);
      assert.equal((await wd.executeCommand("pwd", [], { cwd: "/" })).stdout, "/\n");
    } finally {
      await wd._destroy();
    }
  });

  test("a command that cannot start rejects with SandboxExecutionError, tether's error as the cause", async () => {
    await assert.rejects(sb.executeCommand("true", [], { cwd: "/no/such/directory/here" }), (e) => {
      assert.ok(e instanceof SandboxExecutionError, String(e));
      assert.equal(e.exitCode, 127);
      assert.equal(e.cause?.code, "NOT_FOUND");
      assert.match(e.message, /no\/such\/directory/);
      return true;
    });
  });
});

describe("arguments", () => {
  test("bad spawn arguments are refused before anything starts, with INVALID_ARGUMENT", async () => {
    const before = (await sb.processes.list()).length;
    const bad = [
      [""],
      ["   "],
      [42],
      ["a\0b"],
      ["true", null],
      ["true", { timeout: -1 }],
      ["true", { timeout: "5" }],
      ["true", { cwd: "" }],
      ["true", { env: { A: 1 } }],
      ["true", { env: "A=1" }],
      ["true", { stdinMode: "inherit" }],
      ["true", { onStdout: "yes" }],
      ["true", { abortSignal: {} }],
    ];
    for (const args of bad) {
      await assert.rejects(sb.processes.spawn(...args), isCode("INVALID_ARGUMENT"), JSON.stringify(args));
    }
    await assert.rejects(sb.processes.get(42), isCode("INVALID_ARGUMENT"));
    assert.equal((await sb.processes.list()).length, before);
    const h = await sb.processes.spawn("cat");
    await assert.rejects(h.sendStdin(42), isCode("INVALID_ARGUMENT"));
    await h.closeStdin();
    await bounded(h.wait(), "exit");
  });

  test("the constructor refuses what names no tether sandbox", () => {
    for (const options of [
      undefined,
      {},
      { provider: "no-such-provider" },
      { provider: "local", command: "ssh -T host" },
      { command: "" },
      { provider: "local", unknown: true },
      { provider: "local", options: "x" },
      { provider: "local", id: "" },
    ]) {
      assert.throws(() => new TetherSandbox(options), isCode("INVALID_ARGUMENT"), JSON.stringify(options));
    }
  });
});

describe("lifecycle", () => {
  test("lazy start, stop ends what runs, start again, destroy refuses", async () => {
    const s = new TetherSandbox({ provider: "local", id: "lifecycle" });
    assert.equal(s.status, "pending");
    assert.equal((await s.getInfo()).status, "pending");
    const out = collector();
    const h = await s.processes.spawn("echo ready; exec sleep 60", { onStdout: out.push });
    assert.equal(s.status, "running");
    await out.until("ready\n");
    const info = await s.getInfo();
    assert.deepEqual([info.id, info.provider, info.metadata.tetherProvider, info.metadata.runningProcesses], ["lifecycle", "tether", "local", 1]);
    await s._stop();
    assert.equal(s.status, "stopped");
    assert.equal((await bounded(h.wait(), "exit after stop")).exitCode, 137);
    assert.equal((await s.executeCommand("echo again")).stdout, "again\n");
    assert.equal(s.status, "running");
    assert.deepEqual(await s.processes.list(), []);
    await s._destroy();
    assert.equal(s.status, "destroyed");
    await assert.rejects(s.processes.spawn("true"), isCode("NOT_READY"));
  });

  test("a Workspace inits it and an agent's tools run, watch and kill processes on it", async () => {
    const sandbox = new TetherSandbox({ provider: "local" });
    const workspace = new Workspace({ sandbox });
    await workspace.init();
    assert.equal(sandbox.status, "running");
    const tools = await createWorkspaceTools(workspace);
    const run = (name, input) => tools[name].execute(input, { workspace });
    const fg = await run(WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, { command: "echo tool-out; echo tool-err >&2; exit 3" });
    assert.match(fg, /tool-out/);
    assert.match(fg, /tool-err/);
    assert.match(fg, /3/);
    const bg = await run(WORKSPACE_TOOLS.SANDBOX.EXECUTE_COMMAND, { command: "echo started; exec sleep 60", background: true });
    const pid = /PID: (\d+)/.exec(bg)?.[1];
    assert.ok(pid, bg);
    const handle = await sandbox.processes.get(pid);
    await until(() => handle.stdout === "started\n", "the background process's output");
    assert.match(await run(WORKSPACE_TOOLS.SANDBOX.GET_PROCESS_OUTPUT, { pid }), /started/);
    assert.match(await run(WORKSPACE_TOOLS.SANDBOX.KILL_PROCESS, { pid }), /killed/);
    assert.equal(handle.exitCode, 137);
    await workspace.destroy();
    assert.equal(sandbox.status, "destroyed");
  });

  for (const mode of ["short", "destroy"]) {
    test(`a program that ends exits by itself (${mode})`, async () => {
      const child = spawn(process.execPath, [path.join(here, "fixtures", "finishes.mjs"), mode], {
        stdio: ["ignore", "pipe", "inherit"],
        env: process.env,
      });
      let text = "";
      child.stdout.setEncoding("utf8");
      child.stdout.on("data", (s) => (text += s));
      // (the bound: a program held open would never exit)
      const code = await new Promise((resolve) => {
        const t = setTimeout(() => (child.kill("SIGKILL"), resolve("held open")), kBoundMs);
        child.on("exit", (c) => (clearTimeout(t), resolve(c)));
      });
      assert.equal(code, 0);
      const seen = JSON.parse(text);
      assert.deepEqual(seen.exec, [2, "one\n"]);
      assert.equal(seen.cat, "two\n");
      if (mode === "destroy") {
        assert.equal(seen.status, "destroyed");
        assert.equal(seen.long, 137);
        assert.ok(ended(seen.longPid));
      }
    });
  }
});
