#!/usr/bin/env node
// Boat emulator: Boat's REST API for one sandbox, backed by real local
// processes. No dependencies (Node 20 only). Wire facts: PROVIDERS.md (Boat);
// everything else is the assumption include/tether/providers/boat.h states
// (bearer key, field names, error bodies), made here the same way.
//
// Command line (tests/lib/boat_emulator.sh relies on it exactly):
//   node tests/emulators/boat.mjs --dir DIR [--tls] [--faults SPEC]
//     --dir DIR      scratch directory: requests.log, endpoint.json, the
//                    certificates (with --tls) and the sandbox DIR/sbx-boat/
//                    (home/ is HOME and the cwd of every command, tmp/ is TMPDIR).
//     --tls          serve HTTPS with a throwaway CA written to DIR/ca.pem.
//     --faults SPEC  seeded faults (lib/faults.mjs): seed=N, http5xx=P (answer
//                    502/503 without doing anything), slow=P (answer 1-3 s late),
//                    lost5xx=P (a POST commands or PUT files does its work, the
//                    command runs to its end, and then the answer is lost: 502/503
//                    instead of 200, as a gateway that timed out on a call that ran),
//                    http429=P (answer 429 with Retry-After: 1 without doing anything).
//   Violations: a commands request whose body (the client-visible identity of
//   the call: Boat has no request id) is the body of an earlier one that ran
//   and whose answer was lost is the same command run twice; one sent again
//   after a 429 before its Retry-After has passed ignores the delay. Each is
//   logged as a " VIOLATION duplicate ..." or " VIOLATION retry-after ..."
//   line in requests.log (the tests fail on any), and counted in the
//   shutdown line.
//   Listens on 127.0.0.1, port 0; when ready prints ONE JSON line (also
//   DIR/endpoint.json): {"url":...,"ca":path|null,"sandbox":"sbx-boat","api_key":...}
//   and runs until SIGTERM/SIGINT or EOF on a piped stdin; then SIGKILLs the
//   process groups it started. Exit code 2: a bad command line.
//
// Endpoints (Authorization: Bearer <api_key> on every one, else 401):
//   POST /sandboxes/{id}/commands {command: string, timeoutSeconds: int > 0}
//     -> 200 {exitCode, stdout, stderr, timedOut}. `sh -c command` runs with
//     stdin /dev/null in its own process group; timeoutSeconds is capped at
//     600; at the timeout the group is SIGKILLed and the answer says timedOut
//     true, exitCode null. The answer comes once the command exited and its
//     stdout/stderr reached EOF. Output is decoded as UTF-8 (invalid bytes
//     become U+FFFD, as a JSON string API does). The caller cannot kill a
//     command: a client that goes away changes nothing.
//   PUT /sandboxes/{id}/files {path: absolute string, content: base64}
//     -> 200 {path, size}; parents are created; the file gets 0644 & ~umask.
//   Errors: {"message": ...} with 400 (bad JSON or fields), 401, 404 (unknown
//   sandbox or route), 405, 413 (body too large).
import { createHash, randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, readBody, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node boat.mjs --dir DIR [--tls] [--faults SPEC]';
const SANDBOX_ID = 'sbx-boat';
const kMaxTimeoutSeconds = 600;          // Boat's cap on a sync command
const kMaxCommandBody = 4 << 20;         // a commands request
const kMaxFilesBody = 128 << 20;         // a files request (base64 in JSON)
const kMaxOutputBytes = 64 << 20;        // per stream; more is dropped (counted in the log)
const kRetryAfterSeconds = 1;            // a 429's Retry-After
const kRetryAfterSlackMs = 50;           // timer granularity: a resend this early still counts as waiting

const args = parseArgs(process.argv.slice(2), { usage: USAGE });
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['http5xx', 'slow', 'lost5xx', 'http429'], flags: [] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const apiKey = 'boat_' + randomBytes(16).toString('hex');
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, SANDBOX_ID), { hostname: SANDBOX_ID });
const groups = new Set();  // pids of the process groups still running
// Violations by the client: the body hashes of commands that ran and whose
// answer was lost (-> where), and of commands answered 429 (-> the time
// before which a resend ignores the Retry-After).
const lostAnswers = new Map();
const retryNotBefore = new Map();
const violations = { duplicate: 0, 'retry-after': 0 };
function violation(label, kind, what) {
  violations[kind]++;
  log.line(label, 'VIOLATION', kind, what);
  process.stderr.write(`boat emulator: VIOLATION ${kind}: ${label} ${what}\n`);
}
const bodyKey = (buf) => createHash('sha256').update(buf).digest('hex');
// A call answered 429 that comes again before its Retry-After has passed.
function checkRetryAfter(label, key) {
  const notBefore = retryNotBefore.get(key);
  if (notBefore === undefined) return;
  retryNotBefore.delete(key);
  if (Date.now() < notBefore - kRetryAfterSlackMs) {
    violation(label, 'retry-after', `sent again ${notBefore - Date.now()} ms before the Retry-After of its 429 had passed`);
  }
}

function sendJson(res, status, obj) {
  if (res.writableEnded || res.destroyed) return;
  const body = JSON.stringify(obj);
  res.bodyBytes = Buffer.byteLength(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': res.bodyBytes });
  res.end(body);
}
const fail = (res, status, message) => sendJson(res, status, { message });

// The body as a JSON object (`raw` gets the bytes when given), or undefined
// when the request was answered with an error.
async function jsonBody(req, res, limit, raw) {
  const buf = await readBody(req, limit);
  if (buf === null) {
    fail(res, 413, `request body above ${limit} bytes`);
    return undefined;
  }
  if (raw) raw.buf = buf;
  let v;
  try {
    v = JSON.parse(buf.toString('utf8'));
  } catch {
    fail(res, 400, 'request body is not JSON');
    return undefined;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    fail(res, 400, 'request body is not a JSON object');
    return undefined;
  }
  return v;
}

// Runs `command`; resolves {exitCode, stdout, stderr, timedOut}.
function runCommand(command, timeoutSeconds, label) {
  return new Promise((resolve) => {
    const child = spawn('/bin/sh', ['-c', command], {
      cwd: sandbox.home,
      env: sandbox.baseEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const out = { stdout: [], stderr: [], size: { stdout: 0, stderr: 0 }, dropped: 0 };
    for (const name of ['stdout', 'stderr']) {
      child[name].on('data', (c) => {
        if (out.size[name] + c.length > kMaxOutputBytes) {
          out.dropped += c.length;
          return;
        }
        out.size[name] += c.length;
        out[name].push(c);
      });
    }
    let timedOut = false;
    let done = false;
    if (child.pid !== undefined) groups.add(child.pid);
    const finish = (exitCode) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      groups.delete(child.pid);
      if (out.dropped) log.line(label, 'output dropped above the cap:', out.dropped, 'bytes');
      resolve({
        exitCode: timedOut ? null : exitCode,
        // Lossy, as a JSON string API is: invalid UTF-8 becomes U+FFFD.
        stdout: Buffer.concat(out.stdout).toString('utf8'),
        stderr: Buffer.concat(out.stderr).toString('utf8'),
        timedOut,
      });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      log.line(label, 'timeout after', timeoutSeconds, 's: killing the process group');
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
      // Whatever still holds the pipes (a daemon that left the group) does
      // not hold the answer past the timeout.
      setTimeout(() => finish(null), 200);
    }, timeoutSeconds * 1000);
    child.on('error', (e) => {
      log.line(label, 'spawn error', e.code ?? e.message);
      finish(127);
    });
    child.on('close', (code, signal) => finish(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : 255)));
  });
}

// The answer of a call that did its work but whose answer a gateway lost.
function loseAnswer(res, label, what) {
  const status = faults.status5xx();
  log.line(label, 'FAULT lost5xx', status, `(after ${what}: the answer is lost)`);
  res.writeHead(status, { 'content-type': 'text/plain' });
  res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault, after the call took effect)\n`);
}

async function handleCommands(req, res, label) {
  const raw = {};
  const v = await jsonBody(req, res, kMaxCommandBody, raw);
  if (v === undefined) return;
  const key = bodyKey(raw.buf);
  const lost = lostAnswers.get(key);
  if (lost !== undefined) {
    violation(label, 'duplicate', `the command of a call that ran and whose answer was lost (${lost}) was sent ` +
              'again: it runs twice');
  }
  checkRetryAfter(label, key);
  const loseIt = faults.roll('lost5xx');
  if (typeof v.command !== 'string' || v.command === '') return fail(res, 400, 'command must be a non-empty string');
  if (v.command.includes('\0')) return fail(res, 400, 'command must not contain NUL');
  let timeout = v.timeoutSeconds;
  if (timeout === undefined) timeout = kMaxTimeoutSeconds;
  if (!Number.isInteger(timeout) || timeout <= 0) return fail(res, 400, 'timeoutSeconds must be a positive integer');
  timeout = Math.min(timeout, kMaxTimeoutSeconds);
  log.line(label, `timeout ${timeout} s`);
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  const result = await runCommand(v.command, timeout, label);
  if (gone) {
    log.line(label, 'client gone: answer dropped (the command ran to its end)');
    return;
  }
  log.line(label, 'exit', result.exitCode, result.timedOut ? 'timedOut' : '');
  if (loseIt) {
    lostAnswers.set(key, new Date().toISOString());
    return loseAnswer(res, label, 'the command ran');
  }
  sendJson(res, 200, result);
}

async function handleFiles(req, res) {
  const v = await jsonBody(req, res, kMaxFilesBody);
  if (v === undefined) return;
  if (typeof v.path !== 'string' || !v.path.startsWith('/') || v.path.includes('\0')) {
    return fail(res, 400, 'path must be an absolute path');
  }
  if (typeof v.content !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(v.content) || v.content.length % 4 !== 0) {
    return fail(res, 400, 'content must be base64');
  }
  const bytes = Buffer.from(v.content, 'base64');
  try {
    fs.mkdirSync(path.dirname(v.path), { recursive: true });
    fs.writeFileSync(v.path, bytes);
  } catch (e) {
    return fail(res, 400, `cannot write ${v.path}: ${e.code ?? e.message}`);
  }
  // (A file written twice is the same file: no violation to look for.)
  if (faults.roll('lost5xx')) return loseAnswer(res, label, 'the file was written');
  sendJson(res, 200, { path: v.path, size: bytes.length });
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://emulator');
  const label = `${req.method} ${url.pathname}`;
  // Body sizes for the cost benchmark (tests/bench/boat_cost.sh).
  res.on('finish', () => log.line(label, '->', res.statusCode, 'in', req.headers['content-length'] ?? 0,
                                  'out', res.bodyBytes ?? 0));
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (gone) {
      log.line(label, 'client gone during the delay: request dropped');
      return;
    }
  }
  if (faults.roll('http429')) {
    log.line(label, 'FAULT http429 Retry-After', kRetryAfterSeconds);
    // Its body names the call the client must not resend before the delay.
    const buf = await readBody(req, kMaxCommandBody);
    if (buf !== null && req.method === 'POST') {
      checkRetryAfter(label, bodyKey(buf));  // (an early resend refused again is early all the same)
      retryNotBefore.set(bodyKey(buf), Date.now() + kRetryAfterSeconds * 1000);
    }
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(kRetryAfterSeconds) });
    res.end(JSON.stringify({ message: 'rate limited (emulated fault)' }));
    return;
  }
  if (faults.roll('http5xx')) {
    const status = faults.status5xx();
    log.line(label, 'FAULT http5xx', status);
    req.resume();
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault)\n`);
    return;
  }
  if ((req.headers.authorization ?? '') !== `Bearer ${apiKey}`) {
    req.resume();
    return fail(res, 401, 'invalid or missing API key');
  }
  const m = /^\/sandboxes\/([^/]+)\/(commands|files)$/.exec(url.pathname);
  if (!m) {
    req.resume();
    return fail(res, 404, `no route for ${req.method} ${url.pathname}`);
  }
  const id = decodeURIComponent(m[1]);
  if (id !== SANDBOX_ID) {
    req.resume();
    return fail(res, 404, `sandbox ${JSON.stringify(id)} not found`);
  }
  const want = m[2] === 'commands' ? 'POST' : 'PUT';
  if (req.method !== want) {
    req.resume();
    return fail(res, 405, `${m[2]} takes ${want}`);
  }
  return m[2] === 'commands' ? handleCommands(req, res, label) : handleFiles(req, res);
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    log.line('internal error', req.method, req.url, String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) {
      try { fail(res, 500, 'emulator internal error'); } catch { /* closed */ }
    } else {
      res.destroy?.();
    }
  });
}

let server;
let ca = null;
if (args.tls) {
  const certs = makeCerts(args.dir);
  ca = certs.ca;
  server = https.createServer({ key: fs.readFileSync(certs.key), cert: fs.readFileSync(certs.chain) }, onRequest);
} else {
  server = http.createServer(onRequest);
}
server.keepAliveTimeout = 60_000;
server.requestTimeout = 0;  // a command may run for 600 s
server.headersTimeout = 60_000;
server.on('clientError', (_e, socket) => socket.destroy());
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const url = `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  log.line('listening', url, `faults=${faults.describe()}`);
  announceAndWait(args.dir, { url, ca, sandbox: SANDBOX_ID, api_key: apiKey }, (why) => {
    log.line('shutdown', why, 'violations', JSON.stringify(violations), 'faults', JSON.stringify(faults.count));
    for (const pid of groups) {
      try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ }
    }
    sandbox.killAll();
  });
});
