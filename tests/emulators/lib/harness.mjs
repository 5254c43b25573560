// Test helpers: start an emulator as a child process on a fresh temp dir, read
// its ready line, stop it (stdin EOF, then SIGTERM, then SIGKILL).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const EMULATORS_DIR = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

export async function startEmulator(name, extraArgs = [], { readyTimeoutMs = 20_000 } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `emu-${name}-`));
  const child = spawn(process.execPath, [path.join(EMULATORS_DIR, `${name}.mjs`), '--dir', dir, ...extraArgs], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const info = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${name} emulator not ready in ${readyTimeoutMs} ms: ${stderr}`)), readyTimeoutMs);
    child.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        try { resolve(JSON.parse(out.slice(0, nl))); } catch (e) { reject(e); }
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} emulator exited with ${code} before ready: ${stderr}`));
    });
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    info,
    dir,
    child,
    stderr: () => stderr,
    log: () => fs.readFileSync(path.join(dir, 'requests.log'), 'utf8'),
    async stop() {
      child.stdin.end();
      const t1 = setTimeout(() => child.kill('SIGTERM'), 3000);
      const t2 = setTimeout(() => child.kill('SIGKILL'), 6000);
      const r = await exited;
      clearTimeout(t1);
      clearTimeout(t2);
      fs.rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(pred, { timeoutMs = 10_000, stepMs = 20, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(stepMs);
  }
}

export function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}
