// @tether/node: the process API of seed 000 over tether's C interface.
//
// Design
// - A Sandbox owns one runtime of the C library (its own thread, see
//   src/addon.c) and one transport; every call is a promise settled by its
//   completion. An AbortSignal given to a call cancels that call alone in
//   the library, which settles it with WAIT_ABORTED (a start aborted after
//   its launch was dispatched is OUTCOME_UNKNOWN, never run twice).
// - Output is pulled: the iterator asks for the next read only when the
//   consumer asks for the next chunk and holds nothing unread, so the
//   unread output held here is one read of at most 64 KiB
//   (limits.maxUnreadBytes, in at most 4 chunks). Below it the library's
//   output window (OUTPUT_WINDOW_BYTES, 256 KiB: received and not yet read,
//   plus in flight) backpressures the child. A slow consumer slows the
//   child; nothing is dropped and OUTPUT_CAPACITY cannot happen with
//   backpressure on. The window is wider than one read so the sandbox
//   keeps sending while JS works through a read: with the window at
//   64 KiB, every read waited on the supervisor, two thread hand-offs per
//   read, and `output()` moved 0.4-0.6x child_process's bytes
//   (docs/benchmarks.md "Node").
// - Text is decoded by the library (characters split across reads joined,
//   invalid bytes as U+FFFD); bytes are exact. Chunks are at most 16 KiB
//   (text cut at a character boundary) and own their bytes.
// - The limits checked here (write size, queued input, option ranges) are
//   checked before anything is sent, with INVALID_ARGUMENT or
//   RESOURCE_EXHAUSTED; the rest is the library's, with the same codes as
//   C, C++ and Python.
// - Where tether does better than seed 000 says a provider can, it keeps
//   the better behaviour and says so: a reopened handle resumes the output
//   where its reference was taken, without loss (outputGap is true only if
//   the supervisor really lost output), so its wait can report
//   outputComplete: true.
import os from "node:os";

import native from "./native.mjs";
import { fromNative, makeError } from "./errors.mjs";

export * from "./errors.mjs";
export { readProcessLines, createProcessTail } from "./lines.mjs";

const KiB = 1024;
export const limits = Object.freeze({
  maxChunkBytes: 16 * KiB,
  maxUnreadBytes: 64 * KiB,
  maxWriteBytes: 64 * KiB,
  maxQueuedInputBytes: 256 * KiB,
  maxQueuedWrites: 256,
  maxFiniteOutputBytes: 1024 * KiB,
  setupTimeoutMs: 30_000,
});

// The library's output window per process (see Design above).
const OUTPUT_WINDOW_BYTES = 256 * KiB;

const STREAMS = { 1: "stdout", 2: "stderr", 3: "pty" };
const STATES = { 0: "running", 1: "exited", 2: "unknown" };
const SIGNAL_NAMES = Object.fromEntries(Object.entries(os.constants.signals).map(([name, n]) => [n, name]));
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

function bad(message) {
  return makeError("INVALID_ARGUMENT", message);
}

function abortError(signal) {
  return makeError("WAIT_ABORTED", "the wait was aborted", { cause: signal?.reason });
}

function checkKeys(what, obj, allowed) {
  if (obj === undefined) return {};
  if (obj === null || typeof obj !== "object") throw bad(`${what} must be an object`);
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) throw bad(`${what}: unknown option "${k}" (known: ${allowed.join(", ")})`);
  }
  return obj;
}

function checkSignal(signal) {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw bad("signal must be an AbortSignal");
  return signal;
}

// One C runtime and transport; calls as promises.
class Runtime {
  constructor(provider, flags) {
    this.rt = native.runtimeNew();
    try {
      this.transport = native.transportNew(this.rt, provider, flags);
    } catch (e) {
      native.runtimeClose(this.rt);
      throw fromNative(e);
    }
    this.nextToken = 1;
    this.closed = false;
  }

  // fn(...args, token) as { token, promise }; `signal` aborts it.
  begin(fn, args, signal) {
    if (this.closed) return { token: 0, promise: Promise.reject(makeError("UNAVAILABLE", "the sandbox is closed")) };
    if (signal?.aborted) return { token: 0, promise: Promise.reject(abortError(signal)) };
    const token = this.nextToken++;
    let p;
    try {
      p = fn(...args, token);
    } catch (e) {
      return { token: 0, promise: Promise.reject(fromNative(e)) };
    }
    const onAbort = () => native.cancel(this.rt, token);
    signal?.addEventListener("abort", onAbort, { once: true });
    const promise = p.then(
      (v) => {
        signal?.removeEventListener("abort", onAbort);
        return v;
      },
      (e) => {
        signal?.removeEventListener("abort", onAbort);
        const err = fromNative(e);
        if (err?.code === "WAIT_ABORTED" && signal?.aborted) err.cause = signal.reason;
        throw err;
      },
    );
    return { token, promise };
  }

  call(fn, args, signal) {
    return this.begin(fn, args, signal).promise;
  }

  cancel(token) {
    if (!this.closed && token) native.cancel(this.rt, token);
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    native.runtimeClose(this.rt);
  }
}

function exitInfo(e) {
  return {
    exitCode: e.code,
    signal: e.signal === null ? null : (SIGNAL_NAMES[e.signal] ?? `SIG${e.signal}`),
    signalNumber: e.signal,
    coreDumped: e.coreDumped,
    outputCut: e.outputCut,
    cpu: { userMs: e.userUs / 1000, systemMs: e.systemUs / 1000 },
    maxRssKiB: e.maxRssKib,
  };
}

// The one consumer of a process's output (child.output()).
class OutputIterator {
  constructor(child, signal) {
    this.child = child;
    this.signal = signal;
    this.ready = [];
    this.ended = false;
    this.closed = false;
    this.token = 0;
    this.chain = Promise.resolve();
    this.busy = 0; // steps queued or running
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  next() {
    // A chunk already here, nothing queued before it: no read, no chain.
    if (this.busy === 0 && this.ready.length > 0 && !this.closed) {
      return Promise.resolve({ done: false, value: this.ready.shift() });
    }
    // One read at a time, in order, whatever the caller does.
    ++this.busy;
    const step = this.chain.then(() => this.step()).finally(() => --this.busy);
    this.chain = step.catch(() => {});
    return step;
  }

  async step() {
    const c = this.child;
    while (this.ready.length === 0) {
      if (this.closed || this.ended) return { done: true, value: undefined };
      const text = c._format === "text" && !c._terminal;
      const { token, promise } = c._rt.begin(native.read, [c._handle(), text, limits.maxUnreadBytes], this.signal);
      this.token = token;
      let r;
      try {
        r = await promise;
      } catch (e) {
        if (this.closed) return { done: true, value: undefined };
        throw e;
      } finally {
        this.token = 0;
      }
      if (r.gap) c.outputGap = true;
      if (r.stream === 0) {
        this.ended = true;
        c._outputEnded = true;
        break;
      }
      // Pieces of at most maxChunkBytes, each owning its bytes; text cut
      // only between characters (src/addon.c).
      const stream = STREAMS[r.stream] ?? "stdout";
      for (const piece of r.pieces) {
        if (c._terminal) this.ready.push(piece);
        else if (text) this.ready.push({ stream, text: piece });
        else this.ready.push({ stream, bytes: piece });
      }
    }
    if (this.ready.length === 0) return { done: true, value: undefined };
    return { done: false, value: this.ready.shift() };
  }

  // Leaving the loop: stops reading (a read in flight is cancelled). In
  // finite mode the whole local handle is detached (seed 000).
  async return(value) {
    if (!this.closed) {
      this.closed = true;
      this.ready = [];
      this.child._rt.cancel(this.token);
      if (this.child._mode === "finite" && !this.ended) await this.child.detach().catch(() => {});
    }
    return { done: true, value };
  }
}

class BaseProcess {
  constructor(rt, handle, pid, settings) {
    this._rt = rt;
    this._h = handle;
    this.pid = pid;
    this.outputGap = false;
    this._format = settings.format;
    this._mode = settings.mode;
    this._terminal = settings.terminal;
    this._outputTaken = false;
    this._outputEnded = false;
    this._confirmedExit = null;
    this._terminating = null;
    this._stdin = settings.stdin;
    this._inputClosed = false;
    this._queuedBytes = 0;
    this._queuedWrites = 0;
  }

  _handle() {
    if (this._h === null) throw bad("the process handle was released (detach or disconnect)");
    return this._h;
  }

  _call(fn, args, signal) {
    if (this._h === null) return Promise.reject(bad("the process handle was released (detach or disconnect)"));
    return this._rt.call(fn, [this._h, ...args], checkSignal(signal));
  }

  // Every chunk of output, in arrival order, until both streams end; one
  // consumer per process. `signal` aborts a read waiting for output.
  output(options = {}) {
    const { signal } = checkKeys("output()", options, ["signal"]);
    if (this._outputTaken) throw bad("output() has one consumer per process, and it was already called");
    this._handle();
    this._outputTaken = true;
    return new OutputIterator(this, checkSignal(signal));
  }

  async write(data, options = {}) {
    const { signal } = checkKeys("write()", options, ["signal"]);
    checkSignal(signal);
    if (this._stdin !== "pipe") throw makeError("INPUT_CLOSED", 'stdin is closed: start the process with stdin: "pipe"');
    if (this._inputClosed) throw makeError("INPUT_CLOSED", "stdin was closed (closeStdin) or its delivery is unknown");
    let bytes;
    if (typeof data === "string") bytes = encoder.encode(data);
    else if (data instanceof Uint8Array) bytes = data;
    else throw bad("write() takes a string or a Uint8Array");
    if (bytes.length > limits.maxWriteBytes) {
      throw bad(`a write carries at most ${limits.maxWriteBytes} bytes (got ${bytes.length}): split it and await each`);
    }
    if (this._queuedWrites + 1 > limits.maxQueuedWrites || this._queuedBytes + bytes.length > limits.maxQueuedInputBytes) {
      throw makeError(
        "RESOURCE_EXHAUSTED",
        `the input queue holds at most ${limits.maxQueuedInputBytes} bytes and ${limits.maxQueuedWrites} writes: await earlier writes`,
      );
    }
    this._queuedWrites += 1;
    this._queuedBytes += bytes.length;
    try {
      await this._call(native.write, [bytes], signal);
    } catch (e) {
      if (e?.code === "OUTCOME_UNKNOWN" || e?.code === "UNAVAILABLE" || e?.code === "INPUT_CLOSED") this._inputClosed = true;
      throw e;
    } finally {
      this._queuedWrites -= 1;
      this._queuedBytes -= bytes.length;
    }
  }

  async status(options = {}) {
    const { signal } = checkKeys("status()", options, ["signal"]);
    const s = await this._call(native.status, [], signal);
    let state = STATES[s.state] ?? "unknown";
    let exit = state === "exited" ? exitInfo(s.exit) : undefined;
    if (state !== "exited" && this._confirmedExit) {
      state = "exited"; // a confirmed exit is preserved
      exit = this._confirmedExit;
    }
    if (exit) this._confirmedExit = exit;
    return { state, ...(exit ? { exit } : {}), observedAt: new Date() };
  }

  // The confirmed exit. outputComplete: the output stream ended and every
  // chunk was delivered through this handle, without a gap.
  async wait(options = {}) {
    const { signal } = checkKeys("wait()", options, ["signal"]);
    const e = await this._call(native.wait, [], signal);
    const exit = exitInfo(e);
    this._confirmedExit = exit;
    return { ...exit, outputComplete: e.outputComplete && this._outputEnded && !this.outputGap };
  }

  // "SIGTERM", "TERM" or 15, to the process group.
  async signal(name, options = {}) {
    const { signal } = checkKeys("signal()", options, ["signal"]);
    if (typeof name === "number" && Number.isSafeInteger(name)) name = String(name);
    if (typeof name !== "string" || name.length === 0) throw bad('signal() takes a name ("SIGTERM") or a number');
    await this._call(native.signal, [name], signal);
  }

  // SIGTERM to the process group, then SIGKILL after graceMs (default 0: at
  // once): { status: "requested" | "not-found" | "exited" }. Concurrent
  // callers share one request; `signal` stops only this caller's wait. A
  // request whose acknowledgement was lost (OUTCOME_UNKNOWN) is not sent
  // again: later calls get the same failure. wait() confirms the exit.
  async terminate(options = {}) {
    const { signal, graceMs = 0 } = checkKeys("terminate()", options, ["signal", "graceMs"]);
    checkSignal(signal);
    if (!Number.isSafeInteger(graceMs) || graceMs < 0 || graceMs > 3_600_000) throw bad("graceMs must be 0..3600000");
    if (signal?.aborted) throw abortError(signal);
    if (this._confirmedExit) return { status: "exited" };
    if (!this._terminating) {
      const request = this._call(native.terminate, [graceMs], undefined).then(
        () => ({ status: "requested" }),
        (e) => {
          if (e?.code === "NOT_FOUND") return { status: "not-found" };
          throw e;
        },
      );
      this._terminating = request;
      request.then(
        () => (this._terminating = null),
        (e) => {
          if (e?.code !== "OUTCOME_UNKNOWN") this._terminating = null;
        },
      );
    }
    if (!signal) return this._terminating;
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(abortError(signal));
      signal.addEventListener("abort", onAbort, { once: true });
      this._terminating.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
    });
  }

  // Private text for processes.reopen() / terminals.reopen(), here or in
  // another program (C, C++, Python take it too); expires within 24 h.
  reference() {
    try {
      return native.reference(this._handle());
    } catch (e) {
      throw fromNative(e);
    }
  }

  // Releases the attachment; the child and its stdin go on, unread output
  // waits for a reopen. The handle then refuses further calls.
  async disconnect(options = {}) {
    const { signal } = checkKeys("disconnect()", options, ["signal"]);
    if (this._h === null) return;
    await this._call(native.disconnect, [], signal);
    this._release();
  }

  // Done with this handle: unread output is discarded, nothing is killed.
  // Safe to call again.
  async detach() {
    if (this._h === null) return;
    try {
      await this._rt.call(native.detach, [this._h]);
    } catch (e) {
      if (e?.code !== "UNAVAILABLE" && e?.code !== "INVALID_ARGUMENT") throw e;
    } finally {
      this._release();
    }
  }

  _release() {
    if (this._h === null) return;
    const h = this._h;
    this._h = null;
    if (!this._rt.closed) native.processFree(h);
  }
}

export class ChildProcess extends BaseProcess {
  // EOF after everything written so far; a repeated close sends nothing.
  async closeStdin(options = {}) {
    const { signal } = checkKeys("closeStdin()", options, ["signal"]);
    if (this._stdin !== "pipe") throw makeError("INPUT_CLOSED", 'stdin is closed: start the process with stdin: "pipe"');
    if (this._eofSent) return;
    await this._call(native.closeStdin, [], signal);
    this._eofSent = true;
    this._inputClosed = true;
  }
}

export class Terminal extends BaseProcess {
  constructor(rt, handle, pid) {
    super(rt, handle, pid, { format: "bytes", mode: "stream", terminal: true, stdin: "pipe" });
  }

  async resize(size, options = {}) {
    const { columns, rows } = checkKeys("resize()", size, ["columns", "rows"]);
    const { signal } = checkKeys("resize()", options, ["signal"]);
    for (const [name, v] of [["columns", columns], ["rows", rows]]) {
      if (!Number.isSafeInteger(v) || v < 1 || v > 65535) throw bad(`${name} must be 1..65535`);
    }
    await this._call(native.resize, [columns, rows], signal);
  }
}

function argvOf(command) {
  if (command === null || typeof command !== "object") {
    throw bad('command must be { kind: "argv", argv: [...] } or { kind: "shell", script: "..." }');
  }
  if (command.kind === "argv") {
    checkKeys("command", command, ["kind", "argv"]);
    const argv = command.argv;
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string")) {
      throw bad("command.argv must be a non-empty array of strings");
    }
    if (argv.some((a) => a.includes("\0"))) throw bad("command.argv cannot contain NUL");
    return argv;
  }
  if (command.kind === "shell") {
    checkKeys("command", command, ["kind", "script"]);
    if (typeof command.script !== "string" || command.script.length === 0 || command.script.includes("\0")) {
      throw bad("command.script must be a non-empty string without NUL");
    }
    return ["/bin/sh", "-c", command.script];
  }
  throw bad(`command.kind must be "argv" or "shell", got ${JSON.stringify(command.kind)}`);
}

function envPairs(env) {
  if (env === undefined) return undefined;
  if (env === null || typeof env !== "object") throw bad("env must be an object of strings");
  const out = [];
  for (const [k, v] of Object.entries(env)) {
    if (typeof v !== "string") throw bad(`env.${k} must be a string`);
    if (k.length === 0 || k.includes("=") || k.includes("\0") || v.includes("\0")) {
      throw bad(`env: a name must be non-empty without "=" or NUL, a value without NUL (${JSON.stringify(k)})`);
    }
    out.push(k, v);
  }
  return out;
}

function setupTimeout(ms) {
  if (ms === undefined) return undefined;
  if (!Number.isSafeInteger(ms) || ms < 1 || ms > 3_600_000) throw bad("setupTimeoutMs must be 1..3600000");
  return ms;
}

function referenceSettings(reference) {
  if (typeof reference !== "string") throw bad("a reference is the string reference() returned");
  let r;
  try {
    r = JSON.parse(reference);
  } catch {
    throw bad("not a process reference (not JSON)");
  }
  if (r === null || typeof r !== "object" || typeof r.tether_process !== "number") {
    throw bad("not a process reference");
  }
  return { pty: r.pty === true, text: r.text === true, stdin: r.stdin_pipe === true ? "pipe" : "closed" };
}

export class Sandbox {
  #rt;

  constructor(provider, flags = []) {
    this.provider = provider;
    this.#rt = new Runtime(provider, flags);
    this.processes = Object.freeze({
      start: (input) => this.#start(input),
      reopen: (reference, options) => this.#reopen(reference, options, false),
    });
    this.terminals = Object.freeze({
      start: (input) => this.#startTerminal(input),
      reopen: (reference, options) => this.#reopen(reference, options, true),
    });
  }

  #launch(opts, signal) {
    return this.#rt.call(native.start, [this.#rt.rt, this.#rt.transport, { ...opts, outputWindowBytes: OUTPUT_WINDOW_BYTES }], signal);
  }

  async #start(input) {
    const allowed = ["command", "stdin", "output", "maxOutputBytes", "cwd", "env", "signal", "setupTimeoutMs", "deadlineSeconds"];
    const i = checkKeys("processes.start()", input, allowed);
    if (i.deadlineSeconds !== undefined) {
      throw bad("deadlineSeconds is not supported: a portable runtime deadline cannot be guaranteed (use an AbortSignal for your wait, terminate() to stop)");
    }
    const argv = argvOf(i.command);
    const stdin = i.stdin ?? "closed";
    if (stdin !== "pipe" && stdin !== "closed") throw bad('stdin must be "pipe" or "closed"');
    const output = checkKeys("output", i.output, ["mode", "format"]);
    const mode = output.mode ?? "finite";
    const format = output.format ?? "text";
    if (mode !== "stream" && mode !== "finite") throw bad('output.mode must be "stream" or "finite"');
    if (format !== "text" && format !== "bytes") throw bad('output.format must be "text" or "bytes"');
    let maxOutputBytes = 0;
    if (i.maxOutputBytes !== undefined) {
      if (mode === "stream") throw bad("maxOutputBytes applies to finite output only, not to stream mode");
      if (!Number.isSafeInteger(i.maxOutputBytes) || i.maxOutputBytes < 1 || i.maxOutputBytes > limits.maxFiniteOutputBytes) {
        throw bad(`maxOutputBytes must be 1..${limits.maxFiniteOutputBytes}`);
      }
      maxOutputBytes = i.maxOutputBytes;
    }
    if (i.cwd !== undefined && (typeof i.cwd !== "string" || i.cwd.includes("\0"))) throw bad("cwd must be a string");
    const opts = {
      argv,
      env: envPairs(i.env),
      cwd: i.cwd,
      stdinPipe: stdin === "pipe",
      outputMode: mode === "stream" ? 1 : 0,
      outputText: format === "text",
      maxOutputBytes,
      setupTimeoutMs: setupTimeout(i.setupTimeoutMs),
    };
    const r = await this.#launch(opts, checkSignal(i.signal));
    return new ChildProcess(this.#rt, r.process, r.pid, { stdin, mode, format, terminal: false });
  }

  async #startTerminal(input) {
    const i = checkKeys("terminals.start()", input, ["command", "columns", "rows", "cwd", "env", "signal", "setupTimeoutMs"]);
    const argv = argvOf(i.command);
    const columns = i.columns ?? 80;
    const rows = i.rows ?? 24;
    for (const [name, v] of [["columns", columns], ["rows", rows]]) {
      if (!Number.isSafeInteger(v) || v < 1 || v > 65535) throw bad(`${name} must be 1..65535`);
    }
    if (i.cwd !== undefined && (typeof i.cwd !== "string" || i.cwd.includes("\0"))) throw bad("cwd must be a string");
    const opts = {
      argv,
      env: envPairs(i.env),
      cwd: i.cwd,
      stdinPipe: true,
      pty: true,
      columns,
      rows,
      outputMode: 1,
      outputText: false,
      setupTimeoutMs: setupTimeout(i.setupTimeoutMs),
    };
    const r = await this.#launch(opts, checkSignal(i.signal));
    return new Terminal(this.#rt, r.process, r.pid);
  }

  async #reopen(reference, options, terminal) {
    const o = checkKeys("reopen()", options, ["signal", "control", "timeoutMs"]);
    const s = referenceSettings(reference);
    if (s.pty !== terminal) {
      throw bad(terminal ? "a process's reference: use processes.reopen()" : "a terminal's reference: use terminals.reopen()");
    }
    const control = o.control ?? false;
    if (typeof control !== "boolean") throw bad("control must be a boolean");
    const timeoutMs = o.timeoutMs ?? 0;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > 3_600_000) throw bad("timeoutMs must be 0..3600000");
    const r = await this.#rt.call(native.reopen, [this.#rt.rt, this.#rt.transport, reference, control, timeoutMs], checkSignal(o.signal));
    if (terminal) return new Terminal(this.#rt, r.process, r.pid);
    return new ChildProcess(this.#rt, r.process, r.pid, {
      stdin: s.stdin,
      mode: "stream",
      format: s.text ? "text" : "bytes",
      terminal: false,
    });
  }

  // Runs a command to its end and returns what it printed, bounded:
  // { exitCode, signal, stdout, stderr, stdoutBytes, stderrBytes, truncated,
  // outputComplete }. `input.stdin` (a string or bytes) is written, then EOF.
  // `onOutput({ stream, text })` is awaited for each chunk; the capture
  // (maxOutputBytes, 1 MiB by default, both streams together) bounds only
  // what is kept, not what the callback sees. A failing callback or an
  // aborted signal ends observation, never the process: the error has the
  // original failure as `cause` and what was captured as `output`.
  async exec(input, options = {}) {
    const i = checkKeys("exec()", input, ["command", "cwd", "env", "stdin", "maxOutputBytes", "deadlineSeconds", "setupTimeoutMs"]);
    const { onOutput, signal } = checkKeys("exec() options", options, ["onOutput", "signal"]);
    if (i.deadlineSeconds !== undefined) throw bad("deadlineSeconds is not supported by exec with callbacks: pass an AbortSignal");
    if (onOutput !== undefined && typeof onOutput !== "function") throw bad("onOutput must be a function");
    checkSignal(signal);
    let stdinBytes = null;
    if (i.stdin !== undefined) {
      if (typeof i.stdin === "string") stdinBytes = encoder.encode(i.stdin);
      else if (i.stdin instanceof Uint8Array) stdinBytes = i.stdin;
      else throw bad("stdin must be a string or a Uint8Array");
    }
    const cap = i.maxOutputBytes ?? limits.maxFiniteOutputBytes;
    if (!Number.isSafeInteger(cap) || cap < 1 || cap > limits.maxFiniteOutputBytes) {
      throw bad(`maxOutputBytes must be 1..${limits.maxFiniteOutputBytes}`);
    }
    const child = await this.#start({
      command: i.command,
      cwd: i.cwd,
      env: i.env,
      stdin: stdinBytes ? "pipe" : "closed",
      output: { mode: "stream", format: "bytes" },
      setupTimeoutMs: i.setupTimeoutMs,
      signal,
    });
    const kept = { stdout: [], stderr: [] };
    let keptBytes = 0;
    let truncated = false;
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const captured = () => {
      const join = (parts) => {
        const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) (out.set(p, at), (at += p.length));
        return out;
      };
      const stdoutBytes = join(kept.stdout);
      const stderrBytes = join(kept.stderr);
      return { stdout: decoder.decode(stdoutBytes), stderr: decoder.decode(stderrBytes), stdoutBytes, stderrBytes, truncated };
    };
    const writer = (async () => {
      if (!stdinBytes) return;
      for (let at = 0; at < stdinBytes.length; at += limits.maxWriteBytes) {
        await child.write(stdinBytes.subarray(at, at + limits.maxWriteBytes), { signal });
      }
      await child.closeStdin({ signal });
    })();
    writer.catch(() => {}); // observed below
    let exit = null;
    try {
      for await (const chunk of child.output({ signal })) {
        const room = cap - keptBytes;
        if (chunk.bytes.length > room) truncated = true;
        if (room > 0) {
          const part = chunk.bytes.subarray(0, room);
          kept[chunk.stream].push(part);
          keptBytes += part.length;
        }
        if (onOutput) {
          const text = decoders[chunk.stream].decode(chunk.bytes, { stream: true });
          try {
            if (text.length > 0) await onOutput({ stream: chunk.stream, text });
          } catch (e) {
            throw Object.assign(makeError("CANCELLED", `exec: onOutput failed (${e?.message ?? e}); observation stopped, the process was not stopped`, { cause: e }), { output: captured() });
          }
        }
      }
      if (onOutput) {
        for (const stream of ["stdout", "stderr"]) {
          const rest = decoders[stream].decode();
          if (rest.length > 0) await onOutput({ stream, text: rest });
        }
      }
      await writer;
      exit = await child.wait({ signal });
      return { ...exit, ...captured() };
    } catch (e) {
      if (e && typeof e === "object" && !("output" in e)) {
        e.output = captured();
        if (exit) e.confirmedExit = exit;
      }
      throw e;
    } finally {
      await child.detach().catch(() => {});
    }
  }

  // Frees every handle (the processes go on in the sandbox) and the runtime.
  close() {
    this.#rt.close();
  }
}

if (typeof Symbol.asyncDispose === "symbol") {
  Sandbox.prototype[Symbol.asyncDispose] = async function () {
    this.close();
  };
}

function flagsOf(options) {
  const out = [];
  if (options !== undefined && (options === null || typeof options !== "object")) throw bad("options must be an object");
  for (const [key, value] of Object.entries(options ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    const flag = "--" + key.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase()).replace(/_/g, "-");
    out.push(flag, value === true ? "true" : String(value));
  }
  return out;
}

// This machine (the supervisor runs as a local process).
export function local(options) {
  return new Sandbox("local", flagsOf(options));
}

// Any command channel: command("ssh -T host"), command("kubectl exec -i pod --").
export function command(prefix, options) {
  if (typeof prefix !== "string" || prefix.length === 0) throw bad("command() takes the channel's command line");
  return new Sandbox("command", ["--prefix", prefix, ...flagsOf(options)]);
}

// Any registered provider by name, its CLI flags as options:
// connect("e2b", { sandbox: "id" }) is --provider e2b --sandbox id;
// credentials come from the environment as for the CLI.
export function connect(provider, options) {
  if (typeof provider !== "string" || provider.length === 0) throw bad("connect() takes a provider's name");
  return new Sandbox(provider, flagsOf(options));
}

// The registered providers' names.
export function providers() {
  return native.providers().split(",");
}
