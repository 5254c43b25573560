#!/usr/bin/env node
// Runloop emulator: Runloop's devbox execution API for one devbox, backed by
// real local processes. No dependencies (Node 20 only). Wire facts:
// /work/shared/PROVIDERS.md and EMULATORS.md (Runloop), and the field names of
// @runloop/api-client 1.32.0 (read from its type declarations, not copied).
// Proven by the official SDK: sdk_runloop.test.mjs.
//
// Command line (tests/lib/runloop_emulator.sh relies on it exactly):
//   node tests/emulators/runloop.mjs --dir DIR [--tls] [--faults SPEC]
//        [--stdin-kills] [--sse-ms MS] [--long-poll-ms MS]
//     --dir DIR        scratch directory: requests.log, endpoint.json, the
//                      certificates (with --tls) and the devbox DIR/dbx_emu/
//                      (home/ is HOME and the cwd of every command, tmp/ TMPDIR).
//     --tls            HTTPS (h2 and HTTP/1.1 by ALPN) with a throwaway CA in DIR/ca.pem.
//     --faults SPEC    seeded faults (lib/faults.mjs): seed=N; http5xx=P (answer
//                      502/503 without doing anything); slow=P (answer 1-3 s
//                      late); cut=P (per SSE event: write half of it, then
//                      reset the stream); stall=P (per SSE event: hold it 2-4 s);
//                      lost5xx=P (execute_async, execute, send_std_in, kill or
//                      upload_file does its work, then the answer is lost:
//                      502/503, as a gateway that timed out on a call that took
//                      effect); http429=P (answer 429 with Retry-After: 1
//                      without doing anything).
//   Violations: an execute_async (or an execute without command_id) whose
//   command is that of a call that started and lost its answer (the first
//   such start after it) is the command started twice; a send_std_in whose text (or INTERRUPT) is
//   that of the execution's send_std_in just before, applied with its answer
//   lost, is input applied twice (neither call has a request id or an offset: the command and the
//   execution with the text are what identify one; execute's command_id is
//   honoured as its idempotency key, as the SDK documents it); a JSON
//   request sent again before its 429's Retry-After is early. Each is logged
//   as a " VIOLATION duplicate ..." or " VIOLATION retry-after ..." line in
//   requests.log and counted in /_emulator/stats and the shutdown line.
//     --stdin-kills    send_std_in kills the execution (the SDK's comment: "the
//                      execution is killed when the stdin is sent"), as a
//                      service that behaves so would: SIGKILL, exit 137.
//     --sse-ms MS      an SSE stream ends with `event: error` 408 after MS
//                      (default 5000): the client resumes from its offset.
//     --long-poll-ms MS  wait_for_status holds at most MS (default 25000), then 408.
//   Plain http serves BOTH h2c with prior knowledge (the SDK's default
//   node:http2 transport) and HTTP/1.1 (tether's client) on one port: the
//   first bytes of a connection decide.
//   Listens on 127.0.0.1, port 0; when ready prints ONE JSON line (also
//   DIR/endpoint.json): {"url":...,"ca":path|null,"devbox":"dbx_emu","api_key":...}
//   and runs until SIGTERM/SIGINT or EOF on a piped stdin; then SIGKILLs the
//   process groups it started. Exit code 2: a bad command line.
//
// Endpoints (Authorization: Bearer <api_key> on every one, else 401):
//   GET  /v1/devboxes/{id}                   DevboxView {id, status: "running", ...}
//   POST /v1/devboxes/{id}/wait_for_status   DevboxView (it is always running)
//   POST /v1/devboxes/{id}/execute_async {command, attach_stdin?, shell_name?}
//        -> ExecutionView; `/bin/sh -c command` in its own process group,
//        stdin a pipe only with attach_stdin (else /dev/null).
//   POST /v1/devboxes/{id}/execute {command, command_id?, optimistic_timeout?}
//        ?last_n=N -> the view once completed or after optimistic_timeout s
//        (default and max 25; then status "running"); idempotent per command_id.
//   GET  .../executions/{eid}?last_n=N       ExecutionView
//   POST .../executions/{eid}/send_std_in {text?: string|null, signal?: "EOF"|"INTERRUPT"|null}
//        text is written as UTF-8; EOF closes stdin; INTERRUPT SIGINTs the group.
//   GET  .../executions/{eid}/stream_stdout_updates?offset=N (and _stderr_)
//        SSE `data: {"output": string, "offset": byte offset AFTER the chunk}`;
//        ends (the response closes) once the process exited and everything
//        was sent; every --sse-ms it ends with `event: error` + 408 instead.
//   POST .../executions/{eid}/wait_for_status {statuses: [...]} -> the view when
//        its status is listed, else 408 after --long-poll-ms.
//   POST .../executions/{eid}/kill {kill_process_group?} -> the completed view (137)
//   POST /v1/devboxes/{id}/upload_file multipart {path, file}; relative paths
//        are under home; parents are created.
// Lossy, as a JSON-string API is: output is decoded as UTF-8 (invalid bytes
// become U+FFFD; a chunk never ends inside a sequence that may still
// complete), stdin text is encoded as UTF-8 (a lone surrogate becomes U+FFFD).
// ExecutionView: {execution_id, devbox_id, status, exit_status, stdout,
// stderr, shell_name, stdout_truncated, stderr_truncated}; stdout/stderr are
// the last last_n (default 100) lines, set once completed.
// Errors: {"code": N, "message": ...} with 400, 401, 404, 405, 408, 413.
// Test only: GET /_emulator/stats -> {requests, body_bytes_in, body_bytes_out}
// (HTTP bodies only, not headers or framing), for the cost benchmark.
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Duplex } from 'node:stream';

import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, readBody, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node runloop.mjs --dir DIR [--tls] [--faults SPEC] [--stdin-kills] [--sse-ms MS] [--long-poll-ms MS]';
const DEVBOX_ID = 'dbx_emu';
const kMaxJsonBody = 8 << 20;        // a JSON request (stdin text, a command)
const kMaxUploadBody = 256 << 20;    // a multipart upload (buffered)
// How much output the real service keeps per execution, and for how long it
// can be re-read from an offset, is unknown: PROVIDERS.md and EMULATORS.md
// state no figure. So this is the emulator's own memory bound, not a fact
// (a cap to model once the real one is known; audit section 4).
const kMaxLogBytes = 512 << 20;      // per stream; more is dropped (counted in the log)
const kMaxChunkBytes = 32 << 10;     // one SSE event's output, in bytes before decoding
const kMaxOptimisticSeconds = 25;    // execute's cap (SDK docs: "up to 25 seconds")

// --stdin-kills is a flag: pull it out before the shared parser sees it.
const argv = process.argv.slice(2);
const stdinKills = argv.includes('--stdin-kills');
const args = parseArgs(argv.filter((a) => a !== '--stdin-kills'), { usage: USAGE, valued: ['sse-ms', 'long-poll-ms'] });
const positiveMs = (v, dflt, name) => {
  if (v === undefined) return dflt;
  if (!/^\d+$/.test(v) || Number(v) <= 0) {
    process.stderr.write(`--${name} must be a positive integer (ms)\nusage: ${USAGE}\n`);
    process.exit(2);
  }
  return Number(v);
};
const sseMs = positiveMs(args['sse-ms'], 5000, 'sse-ms');
const longPollMs = positiveMs(args['long-poll-ms'], 25_000, 'long-poll-ms');
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['http5xx', 'slow', 'cut', 'stall', 'lost5xx', 'http429'], flags: [] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const apiKey = 'rl_' + randomBytes(16).toString('hex');
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, DEVBOX_ID), { hostname: DEVBOX_ID });
const executions = new Map();  // execution_id -> Execution
const byCommandId = new Map(); // execute's command_id -> execution_id
const kRetryAfterSeconds = 1;   // a 429's Retry-After
const kRetryAfterSlackMs = 50;  // timer granularity: a resend this early still counts as waiting
const lostStarts = new Map();   // the command of a start whose answer was lost -> its execution
const retryNotBefore = new Map();  // method, path and body hash of a call answered 429 -> the earliest resend
const requestKey = (req, buf) =>
  `${req.method} ${new URL(req.url, 'http://e').pathname} ${createHash('sha256').update(buf).digest('hex')}`;

function violation(label, kind, what) {
  stats.violations[kind]++;
  log.line(label, 'VIOLATION', kind, what);
  process.stderr.write(`runloop emulator: VIOLATION ${kind}: ${label} ${what}\n`);
}

// A request answered 429 that comes again before its Retry-After has passed.
function checkRetryAfter(req, buf) {
  const key = requestKey(req, buf);
  const notBefore = retryNotBefore.get(key);
  if (notBefore === undefined) return;
  retryNotBefore.delete(key);
  if (Date.now() < notBefore - kRetryAfterSlackMs) {
    violation(key.split(' ').slice(0, 2).join(' '), 'retry-after',
              `sent again ${notBefore - Date.now()} ms before the Retry-After of its 429 had passed`);
  }
}

// The answer of a call that did its work but whose answer a gateway lost.
function loseAnswer(res, label, what) {
  const status = faults.status5xx();
  log.line(label, 'FAULT lost5xx', status, `(after ${what}: the answer is lost)`);
  res.writeHead(status, { 'content-type': 'text/plain' });
  res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault, after the call took effect)\n`);
}

// A start of `command` (no idempotency key): a VIOLATION when it is the
// first start of that command since one that lost its answer.
function checkStart(label, command) {
  const lost = lostStarts.get(command);
  lostStarts.delete(command);  // (the first start after the loss is the resend; later ones are new calls)
  if (lost !== undefined) {
    violation(label, 'duplicate', `the command of ${lost}, which started and whose answer was lost, was sent again: ` +
              'it starts twice');
  }
}
let nextId = 1;

// One stream's bytes as the service keeps them: everything, addressable by offset.
class Log {
  constructor() { this.chunks = []; this.size = 0; this.dropped = 0; this.waiters = new Set(); }
  push(buf) {
    if (this.size + buf.length > kMaxLogBytes) { this.dropped += buf.length; return; }
    this.chunks.push(buf);
    this.size += buf.length;
    this.wake();
  }
  wake() { for (const w of this.waiters) w(); this.waiters.clear(); }
  wait() { return new Promise((r) => this.waiters.add(r)); }
  // Bytes [from, min(size, from + max)).
  slice(from, max) {
    const end = Math.min(this.size, from + max);
    const out = [];
    let pos = 0;
    for (const c of this.chunks) {
      const cEnd = pos + c.length;
      if (cEnd > from && pos < end) out.push(c.subarray(Math.max(0, from - pos), Math.min(c.length, end - pos)));
      if (cEnd >= end) break;
      pos = cEnd;
    }
    return Buffer.concat(out);
  }
  all() { return Buffer.concat(this.chunks); }
}

// How many trailing bytes of `b` are an incomplete UTF-8 sequence that more
// bytes could still complete (0..3).
function incompleteTail(b) {
  for (let back = 1; back <= Math.min(3, b.length); back++) {
    const c = b[b.length - back];
    if ((c & 0xc0) === 0x80) continue;  // continuation: look further back
    const need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

class Execution {
  constructor(id, command, { attachStdin, shellName }) {
    this.id = id;
    this.command = command;
    this.shellName = shellName ?? null;
    this.out = new Log();
    this.err = new Log();
    this.exit = null;       // exit_status once completed
    this.done = false;      // process exited and both pipes reached EOF
    this.doneWaiters = new Set();
    this.stdinBytes = 0;          // text applied so far (the offset of the next)
    this.lostInput = null;        // {keys, at} of the last send_std_in when it was applied and its answer lost
    const r = sandbox.spawn('/bin/sh', ['-c', command], { stdin: attachStdin });
    if (r.error) {
      this.err.push(Buffer.from(`${r.error.message}\n`));
      this.finish(127);
      return;
    }
    this.child = r.child;
    this.pgid = r.child.pid;
    r.child.stdout.on('data', (c) => this.out.push(c));
    r.child.stderr.on('data', (c) => this.err.push(c));
    r.child.on('error', () => {});
    r.child.on('close', (code, signal) => {
      this.finish(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : 255));
    });
  }
  finish(code) {
    if (this.done) return;
    this.exit = this.exit ?? code;
    this.done = true;
    for (const l of [this.out, this.err]) {
      if (l.dropped) log.line(this.id, 'output dropped above the cap:', l.dropped, 'bytes');
      l.wake();
    }
    for (const w of this.doneWaiters) w();
    this.doneWaiters.clear();
    log.line(this.id, 'completed exit', this.exit);
  }
  waitDone(ms) {
    if (this.done) return Promise.resolve(true);
    return new Promise((resolve) => {
      const w = () => { clearTimeout(t); resolve(true); };
      const t = setTimeout(() => { this.doneWaiters.delete(w); resolve(false); }, ms);
      this.doneWaiters.add(w);
    });
  }
  kill(group, sig = 'SIGKILL') {
    if (this.done || this.pgid === undefined) return;
    try { process.kill(group ? -this.pgid : this.pgid, sig); } catch { /* gone */ }
  }
  view(lastN = 100) {
    const lastLines = (l) => {
      // Lossy: the service holds text.
      const lines = l.all().toString('utf8').split(/(?<=\n)/);
      return lines.slice(-lastN).join('');
    };
    return {
      execution_id: this.id,
      devbox_id: DEVBOX_ID,
      status: this.done ? 'completed' : 'running',
      exit_status: this.done ? this.exit : null,
      stdout: this.done ? lastLines(this.out) : null,
      stderr: this.done ? lastLines(this.err) : null,
      stdout_truncated: this.done ? this.out.dropped > 0 : null,
      stderr_truncated: this.done ? this.err.dropped > 0 : null,
      shell_name: this.shellName,
    };
  }
}

function sendJson(res, status, obj, headers = {}) {
  if (res.writableEnded || res.destroyed) return;
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}
const fail = (res, status, message) => sendJson(res, status, { code: status, message });

async function jsonBody(req, res) {
  const buf = await readBody(req, kMaxJsonBody);
  if (buf !== null) stats.body_bytes_in += buf.length;
  if (buf === null) {
    fail(res, 413, `request body above ${kMaxJsonBody} bytes`);
    return undefined;
  }
  checkRetryAfter(req, buf);
  let v;
  try {
    v = buf.length ? JSON.parse(buf.toString('utf8')) : {};
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

function lastN(url, res) {
  const s = url.searchParams.get('last_n');
  if (s === null || s === '') return 100;
  if (!/^\d+$/.test(s)) { fail(res, 400, 'last_n must be a non-negative integer'); return undefined; }
  return Number(s);
}

function devboxView() {
  return { id: DEVBOX_ID, status: 'running', name: 'emulated', create_time_ms: 0, launch_parameters: {}, metadata: {} };
}

function newExecution(command, opts) {
  const id = `exe_${String(nextId++).padStart(6, '0')}`;
  const ex = new Execution(id, command, opts);
  executions.set(id, ex);
  log.line(id, 'started', opts.attachStdin ? 'attach_stdin' : 'no stdin');
  return ex;
}

function checkCommand(v, res) {
  if (typeof v.command !== 'string' || v.command === '') { fail(res, 400, 'command must be a non-empty string'); return false; }
  if (v.command.includes('\0')) { fail(res, 400, 'command must not contain NUL'); return false; }
  return true;
}

async function handleExecuteAsync(req, res) {
  const v = await jsonBody(req, res);
  if (v === undefined || !checkCommand(v, res)) return;
  if (v.attach_stdin !== undefined && v.attach_stdin !== null && typeof v.attach_stdin !== 'boolean') {
    return fail(res, 400, 'attach_stdin must be a boolean');
  }
  const label = `POST ${new URL(req.url, 'http://e').pathname}`;
  checkStart(label, v.command);
  const ex = newExecution(v.command, { attachStdin: v.attach_stdin === true, shellName: v.shell_name });
  if (faults.roll('lost5xx')) {
    lostStarts.set(v.command, ex.id);
    return loseAnswer(res, label, `${ex.id} started`);
  }
  sendJson(res, 200, ex.view());
}

async function handleExecute(req, res, url) {
  const n = lastN(url, res);
  if (n === undefined) return;
  const v = await jsonBody(req, res);
  if (v === undefined || !checkCommand(v, res)) return;
  if (v.attach_stdin) return fail(res, 400, 'attach_stdin is not supported by execute; use execute_async');
  let timeout = v.optimistic_timeout ?? kMaxOptimisticSeconds;
  if (typeof timeout !== 'number' || !(timeout >= 0)) return fail(res, 400, 'optimistic_timeout must be a number >= 0');
  timeout = Math.min(timeout, kMaxOptimisticSeconds);
  let ex;
  const cid = typeof v.command_id === 'string' && v.command_id ? v.command_id : undefined;
  if (cid !== undefined && byCommandId.has(cid)) {
    ex = executions.get(byCommandId.get(cid));
    log.line(ex.id, 'execute again with the same command_id: not run twice');
  } else {
    const label = `POST ${url.pathname}`;
    if (cid === undefined) checkStart(label, v.command);
    ex = newExecution(v.command, { attachStdin: false, shellName: v.shell_name });
    if (cid !== undefined) byCommandId.set(cid, ex.id);
  }
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  await ex.waitDone(timeout * 1000);
  if (gone) return log.line(ex.id, 'client gone: execute answer dropped');
  if (faults.roll('lost5xx')) {
    if (cid === undefined) lostStarts.set(v.command, ex.id);
    return loseAnswer(res, `POST ${url.pathname}`, `${ex.id} ran`);
  }
  sendJson(res, 200, ex.view(n));
}

async function handleSendStdin(req, res, ex) {
  const v = await jsonBody(req, res);
  if (v === undefined) return;
  const { text = null, signal = null } = v;
  if (text !== null && typeof text !== 'string') return fail(res, 400, 'text must be a string or null');
  if (signal !== null && signal !== 'EOF' && signal !== 'INTERRUPT') return fail(res, 400, 'signal must be EOF or INTERRUPT');
  if (ex.done) return fail(res, 400, `execution ${ex.id} is not running`);
  if (!ex.child?.stdin && (text !== null || signal === 'EOF')) return fail(res, 400, `execution ${ex.id} has no stdin attached`);
  if (stdinKills && (text !== null || signal === 'EOF')) {
    log.line(ex.id, 'stdin-kills: killing the execution');
    ex.exit = 137;
    ex.kill(true);
    await ex.waitDone(5000);
    return sendJson(res, 200, ex.view());
  }
  const label = `POST .../executions/${ex.id}/send_std_in`;
  const keys = [];
  if (text !== null && text !== '') keys.push(text);
  if (signal === 'INTERRUPT') keys.push('signal INTERRUPT');
  // A resend comes next: the same text (or INTERRUPT) as the call before,
  // whose answer was lost. (The same text later on is new input.)
  if (ex.lostInput !== null && keys.some((k) => ex.lostInput.keys.includes(k))) {
    violation(label, 'duplicate', `the input applied at byte ${ex.lostInput.at}, whose answer was lost, was sent ` +
              `again: applied twice (again at byte ${ex.stdinBytes})`);
  }
  ex.lostInput = null;
  const at = ex.stdinBytes;
  if (text !== null && text !== '') {
    const bytes = Buffer.from(text, 'utf8');
    ex.stdinBytes += bytes.length;
    ex.child.stdin.write(bytes);
  }
  if (signal === 'EOF') ex.child.stdin.end();
  if (signal === 'INTERRUPT') ex.kill(true, 'SIGINT');
  if (faults.roll('lost5xx')) {
    ex.lostInput = { keys, at };
    return loseAnswer(res, label, `the input was applied at byte ${at}`);
  }
  sendJson(res, 200, ex.view());
}

async function handleWait(req, res, ex) {
  const v = await jsonBody(req, res);
  if (v === undefined) return;
  if (!Array.isArray(v.statuses) || v.statuses.some((s) => !['queued', 'running', 'completed'].includes(s))) {
    return fail(res, 400, 'statuses must be a list of queued, running, completed');
  }
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  if (!v.statuses.includes(ex.view().status)) {
    if (v.statuses.includes('completed')) await ex.waitDone(longPollMs);
    else await sleep(longPollMs);
  }
  if (gone) return;
  if (!v.statuses.includes(ex.view().status)) {
    return sendJson(res, 408, { code: 408, message: 'timed out waiting for the execution status' }, { 'x-should-retry': 'true' });
  }
  sendJson(res, 200, ex.view());
}

async function handleKill(req, res, ex) {
  const v = await jsonBody(req, res);
  if (v === undefined) return;
  if (!ex.done) {
    ex.exit = 137;
    ex.kill(v.kill_process_group !== false);
    await ex.waitDone(5000);
  }
  // (A kill sent twice kills what is dead: no violation to look for.)
  if (faults.roll('lost5xx')) return loseAnswer(res, `POST .../executions/${ex.id}/kill`, 'the kill');
  sendJson(res, 200, ex.view());
}

// SSE of one stream from `offset`; ends with a 408 error event every sseMs.
async function handleStream(req, res, url, ex, which) {
  const l = which === 'stdout' ? ex.out : ex.err;
  const q = url.searchParams.get('offset');
  if (q !== null && q !== '' && !/^\d+$/.test(q)) return fail(res, 400, 'offset must be a non-negative integer');
  let offset = q ? Number(q) : 0;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders?.();  // HTTP/1.1: the SDK's await needs the headers now
  let closed = false;
  res.on('close', () => { closed = true; l.wake(); });
  const deadline = Date.now() + sseMs;
  let events = 0;
  for (;;) {
    if (closed) return;
    if (offset < l.size) {
      let bytes = l.slice(offset, kMaxChunkBytes);
      const more = offset + bytes.length < l.size || !ex.done;
      const tail = more ? incompleteTail(bytes) : 0;
      if (tail < bytes.length) bytes = bytes.subarray(0, bytes.length - tail);
      else if (more && offset + bytes.length === l.size) {
        // Only an incomplete sequence so far: wait for its rest.
        await Promise.race([l.wait(), sleep(Math.max(0, deadline - Date.now()))]);
        if (Date.now() >= deadline) break;
        continue;
      }
      offset += bytes.length;
      const ev = `data: ${JSON.stringify({ output: bytes.toString('utf8'), offset })}\n\n`;
      events++;
      if (faults.roll('stall')) {
        const ms = 2000 + Math.floor(faults.slowDelayMs() - 1000);
        log.line(ex.id, which, 'FAULT stall', ms, 'ms');
        await sleep(ms);
        if (closed) return;
      }
      if (faults.roll('cut')) {
        log.line(ex.id, which, 'FAULT cut at offset', offset - bytes.length);
        res.write(ev.slice(0, Math.max(1, ev.length >> 1)));
        await sleep(20);
        // A reset, not a clean end: h2 RST_STREAM(INTERNAL_ERROR), h1 a closed socket.
        if (res.stream) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        else res.socket?.destroy();
        return;
      }
      res.write(ev);
      continue;
    }
    if (ex.done) {
      res.end();
      return;
    }
    const left = deadline - Date.now();
    if (left <= 0) break;
    await Promise.race([l.wait(), sleep(left)]);
  }
  if (closed) return;
  log.line(ex.id, which, 'stream ends with 408 after', events, 'events at offset', offset);
  res.end(`event: error\ndata: ${JSON.stringify({ code: 408, message: 'stream idle timeout; reconnect from your offset' })}\n\n`);
}

function parseMultipart(body, contentType) {
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!m) return null;
  const delim = Buffer.from('--' + (m[1] ?? m[2]).trim());
  const parts = [];
  let pos = body.indexOf(delim);
  if (pos < 0) return null;
  for (;;) {
    pos += delim.length;
    if (body.subarray(pos, pos + 2).toString() === '--') return parts;
    if (body.subarray(pos, pos + 2).toString() !== '\r\n') return null;
    pos += 2;
    const headEnd = body.indexOf('\r\n\r\n', pos);
    if (headEnd < 0) return null;
    const headers = body.subarray(pos, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delim]), headEnd + 4);
    if (next < 0) return null;
    const disp = /content-disposition:([^\r\n]*)/i.exec(headers)?.[1] ?? '';
    const name = /\bname="([^"]*)"/i.exec(disp)?.[1];
    parts.push({ name, data: body.subarray(headEnd + 4, next) });
    pos = next + 2;
  }
}

async function handleUpload(req, res) {
  const ctype = req.headers['content-type'] ?? '';
  if (!ctype.startsWith('multipart/form-data')) return fail(res, 400, 'upload_file takes multipart/form-data');
  const body = await readBody(req, kMaxUploadBody);
  if (body !== null) stats.body_bytes_in += body.length;
  if (body === null) return fail(res, 413, `upload above ${kMaxUploadBody} bytes`);
  const parts = parseMultipart(body, ctype);
  if (parts === null) return fail(res, 400, 'malformed multipart body');
  const p = parts.find((x) => x.name === 'path');
  const f = parts.find((x) => x.name === 'file');
  if (!p || !f) return fail(res, 400, 'upload_file needs the fields path and file');
  const rel = p.data.toString('utf8');
  if (rel === '' || rel.includes('\0')) return fail(res, 400, 'path must be a non-empty string without NUL');
  const dst = sandbox.resolve(rel);
  try {
    fs.mkdirSync(path.dirname(dst), { recursive: true });
    fs.writeFileSync(dst, f.data);
  } catch (e) {
    return fail(res, 400, `cannot write ${rel}: ${e.code ?? e.message}`);
  }
  log.line('upload_file wrote', f.data.length, 'bytes');
  // (A file written twice is the same file: no violation to look for.)
  if (faults.roll('lost5xx')) return loseAnswer(res, 'POST upload_file', 'the file was written');
  sendJson(res, 200, {});
}

// Body bytes in and out and requests, for tests/bench/runloop_vs_sdk.mjs
// (GET /_emulator/stats with the bearer key; not part of Runloop's API).
const stats = { requests: 0, body_bytes_in: 0, body_bytes_out: 0, violations: { duplicate: 0, 'retry-after': 0 } };

async function handle(req, res) {
  const url = new URL(req.url, 'http://emulator');
  if (url.pathname === '/_emulator/stats' && (req.headers.authorization ?? '') === `Bearer ${apiKey}`) {
    req.resume();
    return sendJson(res, 200, stats);
  }
  stats.requests++;
  const write = res.write.bind(res);
  const end = res.end.bind(res);
  const count = (c) => { if (c && typeof c !== 'function') stats.body_bytes_out += Buffer.byteLength(c); };
  res.write = (c, ...rest) => { count(c); return write(c, ...rest); };
  res.end = (c, ...rest) => { count(c); return end(c, ...rest); };
  const label = `${req.method} ${url.pathname}`;
  res.on('finish', () => log.line(label, '->', res.statusCode));
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (gone) return log.line(label, 'client gone during the delay: request dropped');
  }
  if (faults.roll('http429')) {
    log.line(label, 'FAULT http429 Retry-After', kRetryAfterSeconds);
    // Its body names the call that must not come again before the delay.
    const buf = req.method === 'POST' ? await readBody(req, kMaxJsonBody) : (req.resume(), null);
    if (buf !== null) {
      checkRetryAfter(req, buf);  // (an early resend refused again is early all the same)
      retryNotBefore.set(requestKey(req, buf), Date.now() + kRetryAfterSeconds * 1000);
    }
    return sendJson(res, 429, { code: 429, message: 'rate limited (emulated fault)' },
                    { 'retry-after': String(kRetryAfterSeconds) });
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
    return fail(res, 401, 'invalid or missing bearer token');
  }
  const m = /^\/v1\/devboxes\/([^/]+)(?:\/(.*))?$/.exec(url.pathname);
  if (!m) {
    req.resume();
    return fail(res, 404, `no route for ${label}`);
  }
  if (decodeURIComponent(m[1]) !== DEVBOX_ID) {
    req.resume();
    return fail(res, 404, `devbox ${JSON.stringify(decodeURIComponent(m[1]))} not found`);
  }
  const rest = m[2] ?? '';
  const route = (method, fn) => {
    if (req.method !== method) {
      req.resume();
      return fail(res, 405, `${rest || 'devbox'} takes ${method}`);
    }
    return fn();
  };
  if (rest === '') return route('GET', () => sendJson(res, 200, devboxView()));
  if (rest === 'wait_for_status') return route('POST', async () => { await jsonBody(req, res); sendJson(res, 200, devboxView()); });
  if (rest === 'execute_async') return route('POST', () => handleExecuteAsync(req, res));
  if (rest === 'execute') return route('POST', () => handleExecute(req, res, url));
  if (rest === 'upload_file') return route('POST', () => handleUpload(req, res));
  const e = /^executions\/([^/]+)(?:\/([a-z_]+))?$/.exec(rest);
  if (!e) {
    req.resume();
    return fail(res, 404, `no route for ${label}`);
  }
  const ex = executions.get(decodeURIComponent(e[1]));
  if (!ex) {
    req.resume();
    return fail(res, 404, `execution ${JSON.stringify(decodeURIComponent(e[1]))} not found`);
  }
  switch (e[2] ?? '') {
    case '': return route('GET', () => { const n = lastN(url, res); if (n !== undefined) sendJson(res, 200, ex.view(n)); });
    case 'send_std_in': return route('POST', () => handleSendStdin(req, res, ex));
    case 'wait_for_status': return route('POST', () => handleWait(req, res, ex));
    case 'kill': return route('POST', () => handleKill(req, res, ex));
    case 'stream_stdout_updates': return route('GET', () => handleStream(req, res, url, ex, 'stdout'));
    case 'stream_stderr_updates': return route('GET', () => handleStream(req, res, url, ex, 'stderr'));
    default:
      req.resume();
      return fail(res, 404, `no route for ${label}`);
  }
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    log.line('internal error', req.method, req.url, String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) {
      try { fail(res, 500, 'emulator internal error'); } catch { /* closed */ }
    } else {
      (res.stream ?? res.socket)?.destroy?.();
    }
  });
}

let listener;
let ca = null;
if (args.tls) {
  const certs = makeCerts(args.dir);
  ca = certs.ca;
  listener = http2.createSecureServer(
    { key: fs.readFileSync(certs.key), cert: fs.readFileSync(certs.chain), allowHTTP1: true }, onRequest);
  // Nagle's algorithm off, as Node's own http(s).Server does (a TLS server
  // of http2 leaves it on: a small write after the response's head then
  // waited for the client's delayed ACK, ~40 ms).
  listener.on('secureConnection', (socket) => socket.setNoDelay(true));
} else {
  // One port, two protocols: h2c with prior knowledge starts with the
  // connection preface "PRI * HTTP/2.0"; anything else is HTTP/1.1.
  const h1 = http.createServer(onRequest);
  h1.keepAliveTimeout = 60_000;
  h1.requestTimeout = 0;
  h1.headersTimeout = 60_000;
  const h2 = http2.createServer({}, onRequest);
  const preface = Buffer.from('PRI * HTTP/2.0');
  listener = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.setNoDelay(true);  // (as http.Server does; net.Server does not)
    let got = Buffer.alloc(0);
    const onData = (d) => {
      got = Buffer.concat([got, d]);
      if (got.length < preface.length && preface.subarray(0, got.length).equals(got)) return;
      socket.removeListener('data', onData);
      if (!got.subarray(0, preface.length).equals(preface)) {
        socket.pause();
        socket.unshift(got);
        h1.emit('connection', socket);
        socket.resume();
        return;
      }
      // node:http2 reads a net.Socket through its handle, past unshift():
      // give it a plain Duplex that replays the sniffed bytes first.
      const dup = new Duplex({
        read() { socket.resume(); },
        write(chunk, _enc, cb) { socket.write(chunk, cb); },
        final(cb) { socket.end(); cb(); },
        destroy(err, cb) { socket.destroy(); cb(err); },
      });
      dup.push(got);
      socket.on("data", (c) => { if (!dup.push(c)) socket.pause(); });
      socket.on("end", () => dup.push(null));
      socket.on("close", () => dup.destroy());
      h2.emit("connection", dup);
    };
    socket.on('data', onData);
  });
}
listener.on('clientError', (_e, socket) => socket.destroy());
listener.listen(0, '127.0.0.1', () => {
  const { port } = listener.address();
  const url = `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  log.line('listening', url, `faults=${faults.describe()}`, stdinKills ? 'stdin-kills' : '', `sse-ms=${sseMs}`, `long-poll-ms=${longPollMs}`);
  announceAndWait(args.dir, { url, ca, devbox: DEVBOX_ID, api_key: apiKey }, (why) => {
    log.line('shutdown', why, 'violations', JSON.stringify(stats.violations), 'faults', JSON.stringify(faults.count));
    for (const ex of executions.values()) ex.kill(true);
    sandbox.killAll();
  });
});
