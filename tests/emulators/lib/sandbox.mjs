// A local "sandbox": a scratch directory that real child processes run in.
//   ROOT/home  HOME and the default working directory
//   ROOT/tmp   TMPDIR
// Processes are spawned with pipes (stdin is /dev/null unless asked for), in a
// new session/process group of their own (so shutdown can reap whole groups;
// signals sent on behalf of a client go to the one pid only).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export class Sandbox {
  constructor(root, { hostname = 'sandbox', user = os.userInfo().username } = {}) {
    this.root = path.resolve(root);
    this.home = path.join(this.root, 'home');
    this.tmp = path.join(this.root, 'tmp');
    this.hostname = hostname;
    this.user = user;
    fs.mkdirSync(this.home, { recursive: true });
    fs.mkdirSync(this.tmp, { recursive: true });
    this.children = new Set();
  }

  // The environment a sandbox process starts with (before request envs).
  baseEnv() {
    return {
      PATH: process.env.PATH || '/usr/local/bin:/usr/bin:/bin',
      HOME: this.home,
      TMPDIR: this.tmp,
      USER: this.user,
      LOGNAME: this.user,
      HOSTNAME: this.hostname,
      LANG: 'C.UTF-8',
      SHELL: '/bin/sh',
    };
  }

  // A path as the sandbox resolves it: `~` and relative paths are under home.
  resolve(p) {
    if (p === '~') return this.home;
    if (p.startsWith('~/')) return path.join(this.home, p.slice(2));
    return path.resolve(this.home, p);
  }

  // Spawns `cmd args` for real. Returns {child} or {error} (ENOENT, EACCES, a
  // missing cwd...), decided synchronously enough for a caller to report it.
  spawn(cmd, args, { envs = {}, cwd, stdin = false } = {}) {
    const dir = cwd ? this.resolve(cwd) : this.home;
    let st;
    try {
      st = fs.statSync(dir);
    } catch {
      return { error: { kind: 'cwd', message: `cwd '${dir}' does not exist` } };
    }
    if (!st.isDirectory()) return { error: { kind: 'cwd', message: `cwd '${dir}' is not a directory` } };
    let child;
    try {
      child = spawn(cmd, args, {
        cwd: dir,
        env: { ...this.baseEnv(), ...envs },
        stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
        detached: true,
      });
    } catch (e) {
      return { error: { kind: 'exec', message: String(e.message || e) } };
    }
    if (child.pid === undefined) {
      // spawn() reports ENOENT/EACCES asynchronously; swallow the event.
      child.on('error', () => {});
      return { error: { kind: 'exec', message: `exec: "${cmd}": ${notFoundText(cmd)}` } };
    }
    if (child.stdin) child.stdin.on('error', () => {}); // EPIPE after the reader is gone
    this.children.add(child);
    child.on('close', () => this.children.delete(child));
    return { child };
  }

  // Kills every process group this sandbox started (emulator shutdown).
  killAll() {
    for (const child of this.children) {
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
      try { child.kill('SIGKILL'); } catch { /* gone */ }
    }
  }
}

function notFoundText(cmd) {
  if (cmd.includes('/')) {
    try {
      fs.accessSync(cmd, fs.constants.X_OK);
      return 'exec format error';
    } catch (e) {
      return e.code === 'EACCES' ? 'permission denied' : 'no such file or directory';
    }
  }
  return 'executable file not found in $PATH';
}

// Go's syscall.Signal.String() names, as envd's "signal: ..." status uses them.
const GO_SIGNAL_NAMES = {
  SIGHUP: 'hangup', SIGINT: 'interrupt', SIGQUIT: 'quit', SIGILL: 'illegal instruction',
  SIGTRAP: 'trace/breakpoint trap', SIGABRT: 'aborted', SIGBUS: 'bus error',
  SIGFPE: 'floating point exception', SIGKILL: 'killed', SIGUSR1: 'user defined signal 1',
  SIGSEGV: 'segmentation fault', SIGUSR2: 'user defined signal 2', SIGPIPE: 'broken pipe',
  SIGALRM: 'alarm clock', SIGTERM: 'terminated',
};

export function goSignalName(sig) {
  return GO_SIGNAL_NAMES[sig] ?? `signal ${os.constants.signals[sig] ?? sig}`;
}

export function signalNumber(sig) {
  return os.constants.signals[sig] ?? 0;
}
