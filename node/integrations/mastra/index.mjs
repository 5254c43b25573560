// @tether/mastra: a Mastra workspace sandbox (@mastra/core 1.71.0,
// `MastraSandbox` and its `SandboxProcessManager` / `ProcessHandle`) on top
// of @tether/node, so a Mastra agent runs its commands in any sandbox tether
// reaches.
//
// What maps to what
// - new TetherSandbox({ provider: "local" | NAME, options } | { command })
//   -> tether.local(options) | tether.connect(NAME, options) |
//   tether.command(command, options), opened by start() (Mastra calls it
//   lazily through ensureRunning) and closed by stop() / destroy().
// - processes.spawn(command, { cwd, env, timeout, stdinMode, onStdout,
//   onStderr, maxRetainedBytes, abortSignal }) -> sandbox.processes.start
//   ({ command: { kind: "shell", script: command }, stdin: "pipe" | "closed",
//   output: { mode: "stream", format: "text" }, cwd, env }). The handle's pid
//   is the child's pid in the sandbox, as a string.
// - Streamed output: the handle consumes child.output() from the spawn on
//   and hands each { stream, text } chunk to ProcessHandle.emitStdout /
//   emitStderr, which keep Mastra's retained `stdout` / `stderr`, call the
//   onStdout / onStderr callbacks and feed `reader`.
// - sendStdin -> child.write (64 KiB pieces, in order, one call after
//   another); closeStdin -> child.closeStdin (after the pending writes);
//   kill -> child.signal("SIGKILL") to the process group; wait -> the
//   output drained, then child.wait(); list / get -> the manager's registry
//   of handles (the base class's `_tracked`, forgetting a finished process
//   once get() has returned it, as Mastra's base class does).
// - executeCommand is Mastra's own default (spawn with stdin "ignore", wait,
//   release), so it goes through the same mapping.
//
// Where Mastra's contract and tether's differ
// - Mastra's output is text; tether's library decodes it (a character split
//   across reads is joined, invalid UTF-8 becomes U+FFFD), so output bytes
//   are not exact through this interface. Input is: sendStdin also takes a
//   Uint8Array, written as is.
// - Mastra pushes output to callbacks as it arrives; tether's output is
//   pulled with backpressure. The handle pulls all the time, so a chatty
//   child is not slowed down; what is kept is Mastra's retention limit
//   (maxRetainedBytes, 1 MiB per stream by default, unbounded for
//   executeCommand as Mastra's default sets it).
// - A death by signal N reports exitCode 128+N (tether's CLI, the shell);
//   Mastra's LocalSandbox reports 128 for every signal. `killed` is true.
// - `timeout`: SIGTERM, then SIGKILL after kTimeoutGraceMs (tether's
//   terminate), so a child that ignores SIGTERM cannot outlive it; as in
//   LocalSandbox the result is exitCode 124 and timedOut, but stderr is left
//   exactly as the child wrote it (LocalSandbox appends a line).
// - env: a value of undefined is skipped. tether adds variables to the
//   sandbox's environment (minus credential-shaped ones) and cannot remove
//   one; LocalSandbox builds the child's environment from scratch.
// - Lifecycle: tether attaches to a sandbox that exists and never creates,
//   pauses or deletes it. start() reports outcome "connected"; stop() and
//   destroy() kill what this sandbox spawned and close the connection (no
//   pause, as in LocalSandbox; E2BSandbox pauses its VM instead).
// - A process that could not be started rejects spawn (and executeCommand)
//   with SandboxExecutionError, exitCode 127 (NOT_FOUND, e.g. no such cwd),
//   126 (PERMISSION_DENIED) or 125 (anything else), the `tether` CLI's
//   statuses; the tether error is its cause.
// - If the connection is lost for good, wait() rejects with the tether
//   error's code (UNAVAILABLE, OUTCOME_UNKNOWN) instead of inventing an exit
//   code, and list() shows the process as not running with no exitCode.
// - closeStdin after the exit rejects, as in LocalSandbox (tether itself
//   would accept it and send nothing).
// - While a spawned process runs, a read is in flight and holds Node's event
//   loop, as a child_process does; it is let go at the exit, or by stop() /
//   destroy().
// - Not offered: mount, networking, computer, writeFiles, clone; snapshot()
//   is Mastra's no-op (supportsCheckpoints false).
import { randomUUID } from "node:crypto";
import path from "node:path";

import {
  MastraSandbox,
  ProcessHandle,
  SandboxAbortError,
  SandboxError,
  SandboxExecutionError,
  SandboxNotReadyError,
  SandboxProcessManager,
} from "@mastra/core/workspace";

import * as tether from "../../lib/index.mjs";

const kTimeoutGraceMs = 2000; // SIGTERM to SIGKILL after a spawn's timeout
const kShutdownWaitMs = 10_000; // stop()/destroy(): how long killed processes get to report their exit
const kExitTimedOut = 124; // timeout(1)'s status, as Mastra's LocalSandbox reports it
const kStartFailed = { NOT_FOUND: 127, PERMISSION_DENIED: 126 }; // else 125, as `tether run`
const encoder = new TextEncoder();

function invalid(message) {
  return new SandboxError(message, "INVALID_ARGUMENT");
}

// A tether error as a Mastra SandboxError with tether's code; anything else as is.
function fromTether(e, what) {
  if (!(e instanceof tether.TetherError)) return e;
  const err = new SandboxError(`${what}: ${e.message}`, e.code);
  err.cause = e;
  return err;
}

function checkCallback(name, fn) {
  if (fn !== undefined && typeof fn !== "function") throw invalid(`${name} must be a function`);
}

// The spawn options tether acts on, checked before anything starts. Keys this
// file does not know are left alone: Mastra passes its own through.
function checkSpawn(command, options) {
  if (typeof command !== "string" || command.trim().length === 0) throw invalid("spawn() takes a non-empty command string");
  if (command.includes("\0")) throw invalid("the command cannot contain NUL");
  if (options === null || typeof options !== "object") throw invalid("spawn() options must be an object");
  const { timeout, cwd, env, stdinMode, abortSignal } = options;
  if (timeout !== undefined && (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout <= 0)) {
    throw invalid("timeout must be a positive number of milliseconds");
  }
  if (cwd !== undefined && (typeof cwd !== "string" || cwd.length === 0 || cwd.includes("\0"))) {
    throw invalid("cwd must be a non-empty string");
  }
  if (env !== undefined && (env === null || typeof env !== "object")) throw invalid("env must be an object of strings");
  if (stdinMode !== undefined && stdinMode !== "pipe" && stdinMode !== "ignore") {
    throw invalid('stdinMode must be "pipe" or "ignore"');
  }
  if (abortSignal !== undefined && !(abortSignal instanceof AbortSignal)) throw invalid("abortSignal must be an AbortSignal");
  checkCallback("onStdout", options.onStdout);
  checkCallback("onStderr", options.onStderr);
}

// Mastra's env may hold undefined ("not set"): skipped, since tether can only add.
function mergeEnv(...layers) {
  const out = {};
  for (const layer of layers) {
    for (const [k, v] of Object.entries(layer ?? {})) {
      if (v === undefined) continue;
      if (typeof v !== "string") throw invalid(`env.${k} must be a string`);
      out[k] = v;
    }
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

// A relative cwd is taken inside the sandbox's working directory when it has one.
function resolveCwd(cwd, workingDirectory) {
  if (cwd === undefined) return workingDirectory;
  if (path.posix.isAbsolute(cwd) || workingDirectory === undefined) return cwd;
  return path.posix.join(workingDirectory, cwd);
}

function startError(command, e) {
  if (!(e instanceof tether.TetherError)) return e;
  const code = kStartFailed[e.code] ?? 125;
  const err = new SandboxExecutionError(`could not start ${JSON.stringify(command)}: ${e.message}`, code, "", e.message);
  err.cause = e;
  return err;
}

/** A process spawned through tether, as Mastra's ProcessHandle. */
export class TetherProcessHandle extends ProcessHandle {
  #child;
  #stdinMode;
  #logger;
  #exitCode = undefined;
  #lost = null; // the tether error that ended observation, if any
  #finished = false; // the pump is over: the tether handle is released
  #writes = Promise.resolve(); // sendStdin / closeStdin, in call order
  #done;

  constructor(child, options, stdinMode, logger) {
    super(options); // retention and the spawn-time onStdout / onStderr
    this.pid = String(child.pid);
    this.#child = child;
    this.#stdinMode = stdinMode;
    this.#logger = logger;
    this.#done = this.#run(options.timeout);
    this.#done.catch(() => {}); // observed through wait()
  }

  /** Exit code once the process has ended and all its output was emitted. */
  get exitCode() {
    return this.#exitCode;
  }

  /** False once it ended, or once tether lost track of it. */
  get running() {
    return this.#exitCode === undefined && this.#lost === null;
  }

  #emit(stream, text) {
    try {
      if (stream === "stderr") this.emitStderr(text);
      else this.emitStdout(text);
    } catch (e) {
      // A throwing callback must not stop the output for everyone else.
      this.#logger?.warn?.("An output callback threw", { pid: this.pid, error: e });
    }
  }

  async #run(timeout) {
    const started = performance.now();
    let timedOut = false;
    const timer =
      timeout === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            this.#child.terminate({ graceMs: kTimeoutGraceMs }).catch(() => {});
          }, timeout);
    try {
      for await (const chunk of this.#child.output()) this.#emit(chunk.stream, chunk.text);
      const exit = await this.#child.wait();
      const byExit = exit.exitCode ?? 128 + exit.signalNumber;
      this.#exitCode = timedOut ? kExitTimedOut : byExit;
      return {
        success: this.#exitCode === 0,
        exitCode: this.#exitCode,
        stdout: this.stdout,
        stderr: this.stderr,
        executionTimeMs: Math.round(performance.now() - started),
        killed: exit.signal !== null,
        timedOut,
      };
    } catch (e) {
      this.#lost = fromTether(e, `process ${this.pid}`);
      throw this.#lost;
    } finally {
      clearTimeout(timer);
      this.#finished = true;
      await this.#child.detach().catch(() => {});
    }
  }

  /** Resolves once the process has ended and every chunk was emitted. */
  async wait() {
    return this.#done;
  }

  /** SIGKILL to the process group: true if sent, false if it had already ended. */
  async kill() {
    if (this.#finished || this.#exitCode !== undefined) return false;
    try {
      await this.#child.signal("SIGKILL");
      return true;
    } catch (e) {
      if (e?.code === "NOT_FOUND") return false; // it exited meanwhile
      throw fromTether(e, `kill ${this.pid}`);
    }
  }

  #checkStdin(what) {
    if (this.#stdinMode === "ignore") {
      throw new SandboxError(`${what}: process ${this.pid} was spawned with stdinMode "ignore" and has no stdin`, "INPUT_CLOSED");
    }
    if (this.#exitCode !== undefined) {
      throw new SandboxError(`${what}: process ${this.pid} has already exited with code ${this.#exitCode}`, "INPUT_CLOSED");
    }
    if (this.#finished) throw new SandboxError(`${what}: process ${this.pid} is no longer reachable`, "UNAVAILABLE");
  }

  // One call after another, so a later call never overtakes an earlier one.
  #queue(fn, what) {
    const step = this.#writes.then(fn);
    this.#writes = step.catch(() => {});
    return step.catch((e) => {
      throw fromTether(e, what);
    });
  }

  /** Writes to stdin: a string as UTF-8, or exact bytes. */
  async sendStdin(data) {
    let bytes;
    if (typeof data === "string") bytes = encoder.encode(data);
    else if (data instanceof Uint8Array) bytes = data;
    else throw invalid("sendStdin() takes a string or a Uint8Array");
    this.#checkStdin("sendStdin");
    const max = tether.limits.maxWriteBytes;
    return this.#queue(async () => {
      for (let at = 0; at < bytes.length; at += max) await this.#child.write(bytes.subarray(at, at + max));
    }, `sendStdin to ${this.pid}`);
  }

  /** EOF after every sendStdin before it; again: nothing is sent. */
  async closeStdin() {
    this.#checkStdin("closeStdin");
    return this.#queue(() => this.#child.closeStdin(), `closeStdin of ${this.pid}`);
  }
}

/** Mastra's process manager over one tether sandbox. */
export class TetherProcessManager extends SandboxProcessManager {
  async spawn(command, options = {}) {
    checkSpawn(command, options);
    if (options.abortSignal?.aborted) throw new SandboxAbortError("spawn", options.abortSignal.reason);
    const sandbox = this.sandbox.tether;
    const stdinMode = options.stdinMode ?? "pipe";
    let child;
    try {
      child = await sandbox.processes.start({
        command: { kind: "shell", script: command },
        stdin: stdinMode === "pipe" ? "pipe" : "closed",
        output: { mode: "stream", format: "text" },
        cwd: resolveCwd(options.cwd, this.sandbox.workingDirectory),
        env: mergeEnv(this.env, options.env),
      });
    } catch (e) {
      throw startError(command, e);
    }
    const handle = new TetherProcessHandle(child, options, stdinMode, this.sandbox.logger);
    this._tracked.set(handle.pid, handle);
    return handle;
  }

  async list() {
    return [...this._tracked.values()].map((h) => ({
      pid: h.pid,
      ...(h.command !== undefined ? { command: h.command } : {}),
      running: h.running,
      ...(h.exitCode !== undefined ? { exitCode: h.exitCode } : {}),
    }));
  }

  async get(pid) {
    if (typeof pid !== "string") throw invalid("a process id is the string handle.pid");
    return this._tracked.get(pid);
  }

  // stop()/destroy(): SIGKILL to what still runs, a bounded wait for the
  // exits, then every handle forgotten.
  async _shutdown() {
    const handles = [...this._tracked.values()];
    let timer;
    const bound = new Promise((resolve) => (timer = setTimeout(resolve, kShutdownWaitMs)));
    const ended = Promise.all(
      handles.map(async (h) => {
        if (h.running) await h.kill().catch(() => {});
        await h.wait().catch(() => {});
      }),
    );
    await Promise.race([ended, bound]);
    clearTimeout(timer);
    for (const h of handles) this.release(h.pid);
  }
}

const kSandboxOptions = ["provider", "command", "options", "id", "env", "workingDirectory", "onStart", "onStop", "onDestroy"];

// The tether sandbox a spec names: { provider, options } or { command, options }.
function checkSpec(o) {
  if (o === null || typeof o !== "object") throw invalid('TetherSandbox takes { provider: "local" } or { command: "ssh -T host" }');
  for (const k of Object.keys(o)) {
    if (!kSandboxOptions.includes(k)) throw invalid(`TetherSandbox: unknown option "${k}" (known: ${kSandboxOptions.join(", ")})`);
  }
  if ((o.provider === undefined) === (o.command === undefined)) throw invalid("TetherSandbox takes one of provider or command");
  if (o.options !== undefined && (o.options === null || typeof o.options !== "object")) throw invalid("options must be an object");
  if (o.id !== undefined && (typeof o.id !== "string" || o.id.length === 0)) throw invalid("id must be a non-empty string");
  if (o.command !== undefined) {
    if (typeof o.command !== "string" || o.command.trim().length === 0) throw invalid("command must be the channel's command line");
    return { provider: "command", command: o.command, options: o.options };
  }
  if (typeof o.provider !== "string" || !tether.providers().includes(o.provider)) {
    throw invalid(`provider must be one of ${tether.providers().join(", ")} (got ${JSON.stringify(o.provider)})`);
  }
  return { provider: o.provider, options: o.options };
}

function open(spec) {
  if (spec.provider === "command") return tether.command(spec.command, spec.options);
  if (spec.provider === "local") return tether.local(spec.options);
  return tether.connect(spec.provider, spec.options);
}

/** A Mastra workspace sandbox whose processes run through tether. */
export class TetherSandbox extends MastraSandbox {
  #spec;
  #tether = null;
  #createdAt = new Date();

  constructor(options) {
    const spec = checkSpec(options);
    super({
      name: "TetherSandbox",
      processes: new TetherProcessManager(),
      env: options.env,
      workingDirectory: options.workingDirectory,
      onStart: options.onStart,
      onStop: options.onStop,
      onDestroy: options.onDestroy,
    });
    this.#spec = spec;
    this.id = options.id ?? `tether-${randomUUID()}`;
    this.name = "TetherSandbox";
    this.provider = "tether";
    this.status = "pending";
  }

  /** The tether provider underneath ("local", "e2b", "command", ...). */
  get tetherProvider() {
    return this.#spec.provider;
  }

  /** The open @tether/node Sandbox; only while running. */
  get tether() {
    if (this.#tether === null) throw new SandboxNotReadyError(this.id);
    return this.#tether;
  }

  async start() {
    if (this.#tether === null) {
      try {
        this.#tether = open(this.#spec);
      } catch (e) {
        throw fromTether(e, `tether (${this.#spec.provider})`);
      }
    }
    return { outcome: "connected" }; // tether attaches; it never creates the sandbox
  }

  async stop() {
    await this.#close();
  }

  async destroy() {
    await this.#close();
  }

  async #close() {
    if (this.#tether === null) return;
    await this.processes._shutdown();
    this.#tether.close();
    this.#tether = null;
  }

  async getInfo() {
    // (not processes.list(): Mastra's wrapper would start the sandbox)
    const running = [...this.processes._tracked.values()].filter((h) => h.running).length;
    return {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: this.#createdAt,
      metadata: {
        tetherProvider: this.#spec.provider,
        ...(this.workingDirectory !== undefined ? { workingDirectory: this.workingDirectory } : {}),
        runningProcesses: running,
      },
    };
  }

  getInstructions() {
    const where = this.#spec.provider === "local" ? "on this machine" : `in a "${this.#spec.provider}" sandbox`;
    const cwd = this.workingDirectory ? ` Commands start in ${this.workingDirectory}.` : "";
    return `Commands run through tether ${where}, by /bin/sh -c; background processes take stdin, signals and EOF.${cwd}`;
  }
}
