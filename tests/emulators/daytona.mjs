#!/usr/bin/env node
// Daytona emulator: the control plane's sandbox lookup and the toolbox's
// session processes and file upload for one sandbox, backed by real local
// processes, as lossy as the real service. Wire facts: EMULATORS.md section 2
// and PROVIDERS.md (Daytona); proven by @daytonaio/sdk 0.218.0
// (sdk_daytona.test.mjs). Needs the `ws` package (tests/emulators/setup.sh).
// Optionally also the newer "process API v2" (--process-api): wire facts in
// /work/shared/DAYTONA_V2.md (no released SDK has it: daytona_v2_facts.test.mjs
// checks it with plain fetch); see "Process API v2" below.
//
// Command line (tests/lib/daytona_emulator.sh relies on it exactly):
//   node tests/emulators/daytona.mjs --dir DIR [--tls] [--faults SPEC]
//                                    [--no-proxy-url] [--force-echo]
//                                    [--process-api v1|v2|both]
//                                    [--v2-prefix /processes|/process/v2/processes]
//                                    [--v2-log-cap BYTES]
//     --dir DIR        scratch directory: requests.log, endpoint.json, the
//                      certificates (with --tls) and the sandbox DIR/sbx-daytona/
//                      (home/ is HOME and the cwd of every command, tmp/ is TMPDIR).
//     --tls            serve HTTPS/WSS with a throwaway CA written to DIR/ca.pem.
//     --no-proxy-url   the sandbox DTO has no toolboxProxyUrl: clients must ask
//                      GET /sandbox/{id}/toolbox-proxy-url (older API servers).
//     --force-echo     echo input into the log even when suppressInputEcho is
//                      true (a daemon that ignores the field).
//     --process-api A  which process API the toolbox serves: v1 (default: the
//                      session API only, as before), v2 (only the v2 API; the
//                      /process/session paths and their WebSocket answer 404 as
//                      unknown paths do: an older/newer daemon) or both.
//     --v2-prefix P    where v2 is served below the toolbox base: /processes
//                      (default) or /process/v2/processes (both were seen on
//                      the unreleased branch); the other one is an unknown path.
//     --v2-log-cap N   v2: the log data one process retains, bytes (default
//                      8 MiB); above it the oldest frames are evicted.
//     --faults SPEC    seeded faults (lib/faults.mjs): seed=N, http5xx=P (a
//                      request or WebSocket upgrade answered 502/503 without
//                      doing anything), slow=P (answered 1-3 s late), cut=P (per
//                      log message: send only part of it, then drop the TCP
//                      connection without a close frame: a stream cut mid-line),
//                      lost5xx=P (a session creation, exec, input or upload
//                      does its work, and then the answer is lost: 502/503, as
//                      a gateway that timed out on a call that took effect),
//                      http429=P (a REST request answered 429 with
//                      Retry-After: 1 without doing anything).
//                      The same kinds apply to v2: http5xx, slow and http429
//                      to every v2 request (before the key is checked, as for
//                      v1); lost5xx to POST P (the process started) and POST
//                      P/{id}/stdin (the data was written, the eof applied);
//                      cut per SSE `log` event (half of the event is written,
//                      then the TCP connection is destroyed: no chunked
//                      terminator, no eof event). Each fault is one
//                      " FAULT kind ..." line in requests.log.
//   Violations: an exec into a session whose earlier exec of the same command
//   took effect and lost its answer is the command started twice; an input
//   to a command whose input just before, with the same data, was applied
//   and lost its answer is input applied twice (the toolbox has no request id and no
//   input offset: the session, the command and the data are what identify a
//   call); a JSON request sent again after a 429 before its Retry-After has
//   passed ignores the delay. v2: a POST P with the `name` of a process whose
//   creation took effect and lost its answer, which starts a second process
//   (a resend refused NAME_IN_USE started nothing; a GET P listing that
//   process first clears the watch: the client looked), and POST P/{id}/stdin
//   data equal to that process's previous stdin data, which was written and
//   lost its answer (unnamed creates cannot be told apart: no name, no id);
//   the retry-after check covers v2 requests too.
//   Each is logged as a " VIOLATION duplicate ..."
//   or " VIOLATION retry-after ..." line in requests.log (the tests fail on
//   any) and counted in /_emulator/stats and the shutdown line.
//   Listens on 127.0.0.1, port 0; when ready prints ONE JSON line (also
//   DIR/endpoint.json): {"url": API URL (…/api), "toolbox": toolbox proxy URL,
//   "ca": path|null, "sandbox": "sbx-daytona", "api_key": ...}
//   and runs until SIGTERM/SIGINT or EOF on a piped stdin; then SIGKILLs the
//   process groups it started. Exit code 2: a bad command line.
//
// Every request (REST and WebSocket) needs Authorization: Bearer <api_key>
// (else 401). API (prefix /api):
//   GET /sandbox/{id}                    SandboxDto {id, state:"started", toolboxProxyUrl, ...}
//   GET /sandbox/{id}/toolbox-proxy-url  {url}
//   /socket.io/...                       404 (the SDK's event stream, unused)
// Toolbox (prefix /toolbox/{id}; the toolbox base is toolboxProxyUrl + "/" + id):
//   POST   /process/session {sessionId}          201; 409 when it exists
//   GET    /process/session                       [{sessionId, commands}]
//   GET    /process/session/{sid}                 {sessionId, commands: [{id, command, exitCode?}]}
//   DELETE /process/session/{sid}                 kills the session's process groups; 204
//   POST   /process/session/{sid}/exec {command, runAsync, suppressInputEcho}
//          runAsync: 202 {cmdId}; else 200 {cmdId, exitCode, output, stdout, stderr}
//   GET    /process/session/{sid}/command/{cid}   {id, command, exitCode?} (absent while running)
//   POST   /process/session/{sid}/command/{cid}/input {data: string}: a newline
//          is appended when missing; echoed into the log as stdout unless
//          suppressInputEcho; 400 once the command has exited. stdin is never
//          closed: an async command never sees EOF.
//   GET    /process/session/{sid}/command/{cid}/logs
//          WebSocket (?follow=true): the log from byte 0 on EVERY connect, then
//          live; closed with 1000 once the command exited and all was sent.
//          Plain GET: {output, stdout, stderr} (demultiplexed, UTF-8 decoded).
//   POST   /files/bulk-upload  multipart: files[i].path + files[i].file
//   POST   /files/upload?path=P  multipart field "file"
// Test only (no key, not counted): GET /_emulator/stats -> {requests (REST
// calls and WebSocket upgrades), ws_messages, ws_bytes (log bytes sent,
// replays included), input_posts, input_bytes (the data strings), log_bytes,
// v2_requests (requests to P and below, faulted ones included; also counted
// in requests), v2_stdin_posts (stdin posts applied), v2_log_events (frames
// served: SSE `log` events and frames in pages), v2_stdin_bytes (the data
// written to stdin), v2_sse_bytes (the SSE `log` events' bytes on the wire),
// v2_log_bytes (their raw data
// bytes), violations {duplicate, retry-after}}.
// The log, as the real daemon writes it (a `while IFS= read -r line` loop per
// stream): every line of stdout becomes 01 01 01 + line + "\n", of stderr
// 02 02 02 + line + "\n"; NUL bytes are dropped; a last line without a newline
// gets one. Bytes in the output that look like markers are not escaped.
// Commands run as `bash -c command` (sh when there is no bash) in their own
// process group, stdin a pipe; exit code 128+N for signal N.
//
// Process API v2 (--process-api v2|both), below the same toolbox base
// (/toolbox/{id}) and the same key (else 401 {message, statusCode}); P is
// --v2-prefix. Errors of the daemon itself are {code, message[, details]}
// (an unknown path is a plain 404 {message, statusCode} without `code`: how a
// client tells an older daemon). A bad body, query or field: 400
// {code:"INVALID_ARGUMENT"}, a body above 8 MiB included; a method a route
// does not have: 405 {code:"METHOD_NOT_ALLOWED"}; an unknown id: 404
// {code:"PROCESS_NOT_FOUND"}.
//   GET    P[?name=N]        200 [Process] (only those named N)
//   POST   P {argv: [string] (non-empty), stdin?: pipe|open|none|closed
//          (default none; pipe/open = a pipe, none/closed = /dev/null),
//          kind?: "exec" (the default; pty/code: 400), name?, cwd? (relative
//          and ~ under home; default home), env? {k: v} (over HOME, TMPDIR,
//          PATH... as v1), keepLogs?: until_cleanup|on_exit_ttl|none (default
//          until_cleanup when named, else on_exit_ttl; recorded, not acted on:
//          records and logs stay until DELETE)} -> 201 Process. Other fields
//          (shellCommand, shell, user, timeoutMs, terminal...) are ignored.
//          argv runs directly (no shell) in its own process group. A name of
//          a running process: 409 {code:"NAME_IN_USE"}; argv[0] not found or
//          a bad cwd: 400 {code:"PROCESS_START_FAILED"} (no record).
//   GET    P/{id}            200 Process
//   DELETE P/{id}            204; a running process's group is SIGKILLed
//          first; the record and log are gone at once (SSE followers' streams
//          end without eof; a reconnect gets 404).
//   GET    P/{id}/logs?cursor=&encoding=text|base64&limit=1..10000&follow=
//          (defaults: start, text, 1000, false) -> ProcessLogPage, or SSE
//          when follow=true (whatever the Accept header says).
//   POST   P/{id}/stdin {data?: string, eof?: bool} -> 204: data written as
//          its UTF-8 bytes (nothing added; a lone surrogate is EF BF BD), then
//          stdin closed when eof. 409 {code:"STDIN_UNAVAILABLE"} without a
//          pipe; an eof alone after an eof is 204 (even once terminal); else
//          409 {code:"PROCESS_TERMINAL"} once terminal; data after an eof: 409
//          {code:"STDIN_CLOSED"}. data not a string, eof not a bool: 400.
//   POST   P/{id}/signals {signal, escalateAfterMs?, escalateTo?} -> 204.
//          signal: TERM KILL INT HUP QUIT USR1 USR2, a SIG prefix allowed
//          (else 400), sent to the whole process group; escalateTo (default
//          KILL) goes to the group escalateAfterMs (0-600000) later unless the
//          process is terminal by then. A terminal process: 204, nothing sent.
//   GET    P/{id}/wait?timeoutMs=N (default 30000, at most 300000: more is
//          clamped) -> 200 ProcessResult {reason, exitCode, signal} once
//          terminal; still running at the timeout: 408 {code:"WAIT_TIMEOUT"}.
//   (resize and attach are pty only: not served, plain 404.)
// Process: {id (a UUID), kind:"exec", name|null, state: running|terminal, pid,
// exitCode: int|null, signal: "KILL"|...|null (the name without SIG),
// reason: null|exited|signaled, firstAvailableCursor, lastCursor (the newest
// frame's; null before any), truncatedHead, stdin: pipe|none, keepLogs,
// createdAt, startedAt, exitedAt (ISO 8601; exitedAt null while running)}.
// Exit: exitCode = the code; death by signal: exitCode null, signal its name,
// reason signaled. Terminal once the child exited AND its stdout and stderr
// reached EOF (a grandchild holding them keeps it running).
// Log: each chunk read from the child's stdout or stderr is one frame
// {channel: stdout|stderr, cursor, seq (1, 2, ... per process), timestamp,
// data, encoding}; data is base64 of the exact bytes, or (text) the chunk
// decoded as UTF-8 on its own, lossy (U+FFFD; a character split across two
// chunks is lost). Retention: the oldest frames are evicted while the data
// retained is above --v2-log-cap (the newest frame always stays, a frame is
// never split); then truncatedHead is true. The child is never held back.
// Cursors are opaque to clients; here "c" + seq, and a cursor means
// "strictly after that frame": "start" (or none, or "c0") is before the
// oldest retained frame, whatever was evicted. firstAvailableCursor is the
// cursor whose read starts at the oldest retained frame ("c" + its seq - 1;
// "c0" while nothing was evicted), so resuming from it loses nothing more.
// A cursor older than that (frames after it were evicted: a gap): 409
// {code:"CURSOR_EXPIRED", message, details: {firstAvailableCursor}}; the
// cursor of the newest evicted frame is not expired (no gap). A cursor that
// is not ours, or of a frame not yet written: 400 {code:"INVALID_CURSOR"}.
// ProcessLogPage: {frames: up to limit frames after the cursor, nextCursor
// (the last frame's cursor; the request's cursor, "start" when none, if no
// frame), firstAvailableCursor, truncatedHead, eof (terminal and no retained
// frame after nextCursor)}.
// SSE (content-type text/event-stream), events "event: NAME\ndata: JSON\n\n":
//   log      the frame JSON, one per frame after the cursor, then live ones
//   warning  {cursor (the last sent), firstAvailableCursor, truncatedHead:
//            true, message}: a reader that fell behind had unsent frames
//            evicted; the stream goes on from the oldest retained frame
//   state    the Process record, once terminal and every frame was sent
//   eof      {cursor: the last frame's sent, or the request's ("start" when
//            none)}; then the response ends.
// An idle stream gets a ": keepalive" comment every 15 s. A reader that does
// not read is waited for ('drain'); the child is not.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { WebSocketServer } from 'ws';

import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, readBody, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node daytona.mjs --dir DIR [--tls] [--faults SPEC] [--no-proxy-url] [--force-echo]\n' +
  '                        [--process-api v1|v2|both] [--v2-prefix /processes|/process/v2/processes] [--v2-log-cap BYTES]';
const SANDBOX_ID = 'sbx-daytona';
const kMaxJsonBody = 8 << 20;        // an exec or input request
const kMaxUploadBody = 128 << 20;    // a multipart upload
const kMaxLogBytes = 512 << 20;      // one command's log; more is dropped (counted in the log)
const kWsChunk = 64 << 10;           // a log message's size at most
const OUT = Buffer.from([1, 1, 1]);
const ERR = Buffer.from([2, 2, 2]);
const kRetryAfterSeconds = 1;        // a 429's Retry-After
const kRetryAfterSlackMs = 50;       // timer granularity: a resend this early still counts as waiting
const kV2LogCap = 8 << 20;           // v2: one process's retained log data (--v2-log-cap)
const kV2PageLimit = 1000;           // v2: frames in a log page when ?limit is absent
const kV2PageMax = 10000;            // v2: the largest ?limit
const kV2WaitMs = 30_000;            // v2: /wait when ?timeoutMs is absent
const kV2WaitMaxMs = 300_000;        // v2: the longest /wait
const kV2EscalateMaxMs = 600_000;    // v2: the longest escalateAfterMs (the docs: 600 s)
const kV2KeepaliveMs = 15_000;       // v2: an idle SSE stream gets a comment this often
const V2_SIGNALS = new Set(['TERM', 'KILL', 'INT', 'HUP', 'QUIT', 'USR1', 'USR2']);

const argv = process.argv.slice(2);
const noProxyUrl = argv.includes('--no-proxy-url');
const forceEcho = argv.includes('--force-echo');
const args = parseArgs(argv.filter((a) => a !== '--no-proxy-url' && a !== '--force-echo'), {
  usage: USAGE, valued: ['process-api', 'v2-prefix', 'v2-log-cap'],
});
const badFlag = (msg) => {
  process.stderr.write(`${msg}\nusage: ${USAGE}\n`);
  process.exit(2);
};
const processApi = args['process-api'] ?? 'v1';
if (!['v1', 'v2', 'both'].includes(processApi)) badFlag(`--process-api must be v1, v2 or both, got '${processApi}'`);
const v1Enabled = processApi !== 'v2';
const v2Enabled = processApi !== 'v1';
// Both prefixes were seen on the same branch (DAYTONA_V2.md): a client must
// be told which one it talks to, so only one is served.
const v2Prefix = args['v2-prefix'] ?? '/processes';
if (!['/processes', '/process/v2/processes'].includes(v2Prefix)) {
  badFlag(`--v2-prefix must be /processes or /process/v2/processes, got '${v2Prefix}'`);
}
const v2LogCap = args['v2-log-cap'] === undefined ? kV2LogCap : Number(args['v2-log-cap']);
if (!Number.isSafeInteger(v2LogCap) || v2LogCap < 1 || !/^\d+$/.test(args['v2-log-cap'] ?? '1')) {
  badFlag(`--v2-log-cap must be a positive number of bytes, got '${args['v2-log-cap']}'`);
}
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['http5xx', 'slow', 'cut', 'lost5xx', 'http429'], flags: [] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const apiKey = 'dtn_' + randomBytes(16).toString('hex');
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, SANDBOX_ID), { hostname: SANDBOX_ID });
const shell = fs.existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
const sessions = new Map();  // sessionId -> {id, commands: Map}
let baseUrl = '';
const stats = {
  requests: 0, ws_messages: 0, ws_bytes: 0, input_posts: 0, input_bytes: 0, log_bytes: 0,
  v2_requests: 0, v2_stdin_posts: 0, v2_stdin_bytes: 0, v2_log_events: 0, v2_log_bytes: 0, v2_sse_bytes: 0,
  violations: { duplicate: 0, 'retry-after': 0 },
};
// Requests answered 429: method, path and body hash -> the time before which
// a resend ignores the Retry-After.
const retryNotBefore = new Map();
const requestKey = (req, buf) =>
  `${req.method} ${new URL(req.url, 'http://e').pathname} ${createHash('sha256').update(buf).digest('hex')}`;

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

function violation(label, kind, what) {
  stats.violations[kind]++;
  log.line(label, 'VIOLATION', kind, what);
  process.stderr.write(`daytona emulator: VIOLATION ${kind}: ${label} ${what}\n`);
}

// The answer of a call that did its work but whose answer a gateway lost.
function loseAnswer(res, label, what) {
  const status = faults.status5xx();
  log.line(label, 'FAULT lost5xx', status, `(after ${what}: the answer is lost)`);
  res.writeHead(status, { 'content-type': 'text/plain' });
  res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault, after the call took effect)\n`);
}

function sendJson(res, status, obj) {
  if (res.writableEnded || res.destroyed) return;
  const body = obj === undefined ? '' : JSON.stringify(obj);
  const h = { 'content-length': Buffer.byteLength(body) };
  if (body) h['content-type'] = 'application/json';
  res.writeHead(status, h);
  res.end(body);
}
const fail = (res, status, message) => sendJson(res, status, { message, statusCode: status });

async function jsonBody(req, res, limit = kMaxJsonBody) {
  const buf = await readBody(req, limit);
  if (buf === null) {
    fail(res, 413, `request body above ${limit} bytes`);
    return undefined;
  }
  checkRetryAfter(req, buf);
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

// One stream's labeller: what `while IFS= read -r line || [[ -n $line ]]; do
// printf '\x01\x01\x01%s\n' "$line"; done` appends to the log.
class Labeller {
  constructor(marker, append) {
    this.marker = marker;
    this.append = append;
    this.partial = [];
  }
  data(chunk) {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) break;
      this.partial.push(chunk.subarray(start, nl));
      this.emit();
      start = nl + 1;
    }
    if (start < chunk.length) this.partial.push(chunk.subarray(start));
  }
  end() {
    const line = stripNul(Buffer.concat(this.partial));
    this.partial = [];
    if (line.length > 0) this.append(Buffer.concat([this.marker, line, Buffer.from('\n')]));
  }
  emit() {
    const line = stripNul(Buffer.concat(this.partial));
    this.partial = [];
    this.append(Buffer.concat([this.marker, line, Buffer.from('\n')]));
  }
}

function stripNul(b) {
  if (b.indexOf(0) < 0) return b;
  return Buffer.from(b.filter((x) => x !== 0));
}

// Splits a log into its two streams as the SDK does (markers switch).
function demux(buf) {
  const out = { stdout: [], stderr: [] };
  let cur = null;
  let i = 0;
  let from = 0;
  const flush = (to) => { if (cur && to > from) out[cur].push(buf.subarray(from, to)); };
  while (i + 3 <= buf.length) {
    const m = buf[i] === 1 && buf[i + 1] === 1 && buf[i + 2] === 1 ? 'stdout'
      : buf[i] === 2 && buf[i + 1] === 2 && buf[i + 2] === 2 ? 'stderr' : null;
    if (m) {
      flush(i);
      cur = m;
      i += 3;
      from = i;
    } else {
      i++;
    }
  }
  flush(buf.length);
  const stdout = Buffer.concat(out.stdout).toString('utf8');
  const stderr = Buffer.concat(out.stderr).toString('utf8');
  return { stdout, stderr, output: stdout + stderr };
}

class Command {
  constructor(session, command, suppressEcho) {
    this.id = randomUUID();
    this.session = session;
    this.command = command;
    this.echo = forceEcho || !suppressEcho;
    this.exitCode = undefined;
    this.chunks = [];
    this.size = 0;
    this.dropped = 0;
    this.watchers = new Set();  // functions called on every append and at the end
    this.done = new Promise((r) => { this.resolveDone = r; });
    this.inputBytes = 0;       // input applied so far (the offset of the next)
    this.lostInput = null;     // {data, at} of the last input when it was applied and its answer lost
  }

  append(b) {
    if (this.size + b.length > kMaxLogBytes) {
      this.dropped += b.length;
      return;
    }
    this.chunks.push(b);
    this.size += b.length;
    stats.log_bytes += b.length;
    for (const w of this.watchers) w();
  }

  logBuffer() {
    return Buffer.concat(this.chunks, this.size);
  }

  start() {
    const child = spawn(shell, ['-c', this.command], {
      cwd: sandbox.home,
      env: sandbox.baseEnv(),
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    this.child = child;
    child.stdin.on('error', () => {});
    const out = new Labeller(OUT, (b) => this.append(b));
    const err = new Labeller(ERR, (b) => this.append(b));
    child.stdout.on('data', (c) => out.data(c));
    child.stderr.on('data', (c) => err.data(c));
    const finish = (code) => {
      if (this.exitCode !== undefined) return;
      out.end();
      err.end();
      if (this.dropped) log.line('command', this.id, 'log dropped above the cap:', this.dropped, 'bytes');
      this.exitCode = code;
      log.line('command', this.id, 'exit', code);
      for (const w of this.watchers) w();
      this.resolveDone();
    };
    child.on('error', (e) => {
      log.line('command', this.id, 'spawn error', e.code ?? e.message);
      finish(127);
    });
    child.on('close', (code, signal) => finish(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : 255)));
  }

  input(data) {
    const text = data.endsWith('\n') ? data : data + '\n';
    if (this.echo) {
      for (const line of text.slice(0, -1).split('\n')) this.append(Buffer.concat([OUT, Buffer.from(line), Buffer.from('\n')]));
    }
    this.child.stdin.write(text);
  }

  kill() {
    try { process.kill(-this.child.pid, 'SIGKILL'); } catch { /* gone */ }
  }

  view() {
    const v = { id: this.id, command: this.command };
    if (this.exitCode !== undefined) v.exitCode = this.exitCode;
    return v;
  }
}

function sandboxDto() {
  const dto = {
    id: SANDBOX_ID, name: SANDBOX_ID, organizationId: 'org-emulator', user: 'daytona', target: 'us',
    env: {}, labels: {}, public: false, networkBlockAll: false, cpu: 1, gpu: 0, memory: 1, disk: 3,
    state: 'started', desiredState: 'started', backupState: 'None',
    createdAt: '2026-12-01T00:00:00.000Z', updatedAt: '2026-12-01T00:00:00.000Z',
  };
  if (!noProxyUrl) dto.toolboxProxyUrl = `${baseUrl}/toolbox`;
  return dto;
}

async function handleApi(req, res, rest) {
  if (rest.startsWith('/socket.io')) return fail(res, 404, 'no event stream here');
  const m = /^\/sandbox\/([^/]+)(\/toolbox-proxy-url)?$/.exec(rest);
  if (!m || req.method !== 'GET') return fail(res, 404, `no route for ${req.method} /api${rest}`);
  const id = decodeURIComponent(m[1]);
  if (id !== SANDBOX_ID) return fail(res, 404, `Sandbox with ID or name ${id} not found`);
  if (m[2]) return sendJson(res, 200, { url: `${baseUrl}/toolbox` });
  return sendJson(res, 200, sandboxDto());
}

function findCommand(res, sid, cid) {
  const s = sessions.get(sid);
  if (!s) {
    fail(res, 404, `session ${sid} not found`);
    return undefined;
  }
  const c = s.commands.get(cid);
  if (!c) {
    fail(res, 404, `command ${cid} not found`);
    return undefined;
  }
  return c;
}

// The v1 session routes: /process/session and below.
const isV1Path = (rest) => rest === '/process/session' || rest.startsWith('/process/session/');
// The v2 routes: P and below (the other prefix is an unknown path).
const isV2Path = (rest) => v2Enabled && (rest === v2Prefix || rest.startsWith(v2Prefix + '/'));

async function handleToolbox(req, res, rest, url) {
  if (isV2Path(rest)) return handleV2(req, res, rest.slice(v2Prefix.length), url);
  if (!v1Enabled && isV1Path(rest)) {
    // A daemon without the session API: a plain 404 as for any unknown path.
    req.resume();
    return fail(res, 404, `no route for ${req.method} ${rest}`);
  }
  if (rest === '/process/session') {
    if (req.method === 'GET') {
      return sendJson(res, 200, [...sessions.values()].map((s) => ({ sessionId: s.id, commands: [...s.commands.values()].map((c) => c.view()) })));
    }
    if (req.method !== 'POST') return fail(res, 405, 'POST or GET');
    const v = await jsonBody(req, res);
    if (v === undefined) return;
    if (typeof v.sessionId !== 'string' || !/^[A-Za-z0-9._-]{1,128}$/.test(v.sessionId)) {
      return fail(res, 400, 'sessionId must be 1-128 characters of [A-Za-z0-9._-]');
    }
    if (sessions.has(v.sessionId)) return fail(res, 409, `session ${v.sessionId} already exists`);
    sessions.set(v.sessionId, { id: v.sessionId, commands: new Map(), lostExecs: new Map() });
    if (faults.roll('lost5xx')) return loseAnswer(res, `POST ${url.pathname}`, 'the session was made');
    return sendJson(res, 201, undefined);
  }
  let m = /^\/process\/session\/([^/]+)$/.exec(rest);
  if (m) {
    const sid = decodeURIComponent(m[1]);
    const s = sessions.get(sid);
    if (!s) return fail(res, 404, `session ${sid} not found`);
    if (req.method === 'GET') return sendJson(res, 200, { sessionId: sid, commands: [...s.commands.values()].map((c) => c.view()) });
    if (req.method !== 'DELETE') return fail(res, 405, 'GET or DELETE');
    for (const c of s.commands.values()) c.kill();
    sessions.delete(sid);
    return sendJson(res, 204, undefined);
  }
  m = /^\/process\/session\/([^/]+)\/exec$/.exec(rest);
  if (m) {
    if (req.method !== 'POST') return fail(res, 405, 'POST');
    const sid = decodeURIComponent(m[1]);
    const v = await jsonBody(req, res);
    if (v === undefined) return;
    const s = sessions.get(sid);
    if (!s) return fail(res, 404, `session ${sid} not found`);
    if (typeof v.command !== 'string' || v.command === '') return fail(res, 400, 'command must be a non-empty string');
    if (v.command.includes('\0')) return fail(res, 400, 'command must not contain NUL');
    const label = `POST ${url.pathname}`;
    const lost = s.lostExecs.get(v.command);
    if (lost !== undefined) {
      violation(label, 'duplicate', `the command of exec ${lost}, which started and whose answer was lost, was sent ` +
                'again into the same session: it starts twice');
    }
    const c = new Command(s, v.command, v.suppressInputEcho === true);
    s.commands.set(c.id, c);
    c.start();
    log.line('exec', sid, c.id, v.runAsync ? 'async' : 'sync');
    const loseIt = faults.roll('lost5xx');
    if (loseIt) s.lostExecs.set(v.command, c.id);
    if (v.runAsync) return loseIt ? loseAnswer(res, label, 'the command started') : sendJson(res, 202, { cmdId: c.id });
    await c.done;
    if (loseIt) return loseAnswer(res, label, 'the command ran');
    return sendJson(res, 200, { cmdId: c.id, exitCode: c.exitCode, ...demux(c.logBuffer()) });
  }
  m = /^\/process\/session\/([^/]+)\/command\/([^/]+)(\/input|\/logs)?$/.exec(rest);
  if (m) {
    const c = findCommand(res, decodeURIComponent(m[1]), decodeURIComponent(m[2]));
    if (!c) return;
    if (!m[3]) {
      if (req.method !== 'GET') return fail(res, 405, 'GET');
      return sendJson(res, 200, c.view());
    }
    if (m[3] === '/logs') {
      if (req.method !== 'GET') return fail(res, 405, 'GET');
      if (url.searchParams.get('follow') === 'true') return fail(res, 400, 'follow=true needs a WebSocket upgrade');
      return sendJson(res, 200, demux(c.logBuffer()));
    }
    if (req.method !== 'POST') return fail(res, 405, 'POST');
    const v = await jsonBody(req, res);
    if (v === undefined) return;
    if (typeof v.data !== 'string') return fail(res, 400, 'data must be a string');
    if (c.exitCode !== undefined) return fail(res, 400, `command ${c.id} is not running`);
    const label = `POST ${url.pathname}`;
    const at = c.inputBytes;
    // A resend comes next: the same data as the input before, whose answer
    // was lost. (The same text later on is new input.)
    if (c.lostInput !== null && c.lostInput.data === v.data) {
      violation(label, 'duplicate', `the input applied at byte ${c.lostInput.at}, whose answer was lost, was sent ` +
                `again: applied twice (again at byte ${at})`);
    }
    c.lostInput = null;
    stats.input_posts++;
    stats.input_bytes += Buffer.byteLength(v.data);
    c.inputBytes += Buffer.byteLength(v.data);
    c.input(v.data);
    if (faults.roll('lost5xx')) {
      c.lostInput = { data: v.data, at };
      return loseAnswer(res, label, `the input was applied at byte ${at}`);
    }
    return sendJson(res, 200, undefined);
  }
  if (rest === '/files/bulk-upload' || rest === '/files/upload') {
    if (req.method !== 'POST') return fail(res, 405, 'POST');
    const ct = req.headers['content-type'] ?? '';
    const bm = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(ct);
    if (!/^multipart\/form-data/i.test(ct) || !bm) return fail(res, 400, 'multipart/form-data expected');
    const body = await readBody(req, kMaxUploadBody);
    if (body === null) return fail(res, 413, `upload above ${kMaxUploadBody} bytes`);
    const parts = parseMultipart(body, bm[1] ?? bm[2].trim());
    if (parts === null) return fail(res, 400, 'malformed multipart body');
    const files = [];
    if (rest === '/files/upload') {
      const f = parts.find((p) => p.name === 'file');
      const p = url.searchParams.get('path');
      if (!f || !p) return fail(res, 400, 'a "file" part and ?path= are required');
      files.push({ path: p, data: f.data });
    } else {
      const byIndex = new Map();
      for (const part of parts) {
        const pm = /^files\[(\d+)\]\.(path|file)$/.exec(part.name ?? '');
        if (!pm) return fail(res, 400, `unexpected part ${JSON.stringify(part.name)}`);
        const e = byIndex.get(pm[1]) ?? {};
        if (pm[2] === 'path') e.path = part.data.toString('utf8');
        else e.data = part.data;
        byIndex.set(pm[1], e);
      }
      for (const [i, e] of byIndex) {
        if (typeof e.path !== 'string' || e.path === '' || e.data === undefined) return fail(res, 400, `files[${i}] needs a path and a file`);
        files.push(e);
      }
      if (files.length === 0) return fail(res, 400, 'no files');
    }
    for (const f of files) {
      if (f.path.includes('\0')) return fail(res, 400, 'a path must not contain NUL');
      const dst = sandbox.resolve(f.path);
      try {
        fs.mkdirSync(path.dirname(dst), { recursive: true });
        fs.writeFileSync(dst, f.data);
      } catch (e) {
        return fail(res, 400, `cannot write ${f.path}: ${e.code ?? e.message}`);
      }
      log.line('files wrote', path.relative(sandbox.root, dst), f.data.length, 'bytes');
    }
    // (A file written twice is the same file: no violation to look for.)
    if (faults.roll('lost5xx')) return loseAnswer(res, `POST ${url.pathname}`, 'the files were written');
    return sendJson(res, 200, undefined);
  }
  return fail(res, 404, `no route for ${req.method} ${rest}`);
}

// multipart/form-data -> [{name, filename, data}], or null when malformed.
function parseMultipart(body, boundary) {
  const delim = Buffer.from(`--${boundary}`);
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
    const head = body.subarray(pos, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delim]), headEnd + 4);
    if (next < 0) return null;
    const name = /name="([^"]*)"/i.exec(head)?.[1];
    const filename = /filename="([^"]*)"/i.exec(head)?.[1];
    parts.push({ name, filename, data: body.subarray(headEnd + 4, next) });
    pos = next + 2;
  }
}

// ---- Process API v2 (--process-api v2|both) ----------------------------------------------

const processes = new Map();    // id -> Proc, until DELETE
const lostCreates = new Map();  // name -> id of a named process that started and lost its answer

// v2 errors are the daemon's own: {code, message[, details]}. (401, 429 and
// the 5xx faults come from the proxy in front of it and keep their shape.)
function v2Error(res, status, code, message, details) {
  const body = { code, message };
  if (details !== undefined) body.details = details;
  sendJson(res, status, body);
}
const badArgument = (res, message) => v2Error(res, 400, 'INVALID_ARGUMENT', message);

// A v2 JSON object body; undefined when answered (every refusal is a 400,
// an oversized body included).
async function v2Body(req, res) {
  const buf = await readBody(req, kMaxJsonBody);
  if (buf === null) {
    badArgument(res, `request body above ${kMaxJsonBody} bytes`);
    return undefined;
  }
  checkRetryAfter(req, buf);
  let v;
  try {
    v = JSON.parse(buf.toString('utf8'));
  } catch {
    badArgument(res, 'request body is not JSON');
    return undefined;
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    badArgument(res, 'request body is not a JSON object');
    return undefined;
  }
  return v;
}

// A cursor names the frame a read resumes after: "c" + its seq. "c0" is before
// the first frame; firstAvailableCursor is "c" + (oldest retained seq - 1), so
// reading from it returns the oldest retained frame.
const cursorOf = (seq) => `c${seq}`;

// "TERM" or "SIGTERM" -> "TERM"; null when not one of the named signals.
function signalName(v) {
  if (typeof v !== 'string') return null;
  const n = v.toUpperCase().replace(/^SIG/, '');
  return V2_SIGNALS.has(n) ? n : null;
}

// One v2 process: its child, its record, and its log as a ledger of frames
// (one per chunk read from stdout or stderr), capped at v2LogCap bytes of data
// by evicting the oldest frames. The child is never held back for a reader.
class Proc {
  constructor({ name, stdin, keepLogs }) {
    this.id = randomUUID();
    this.name = name;
    this.stdin = stdin;                // 'pipe' | 'none'
    this.keepLogs = keepLogs;
    this.state = 'running';
    this.exitCode = null;
    this.signal = null;
    this.reason = null;
    this.createdAt = new Date().toISOString();
    this.startedAt = null;
    this.exitedAt = null;
    this.frames = [];                  // frames[head..] are retained; frames[head].seq === firstSeq
    this.head = 0;
    this.firstSeq = 1;
    this.nextSeq = 1;
    this.bytes = 0;                    // data bytes retained
    this.truncatedHead = false;
    this.stdinClosed = false;          // an eof was applied
    this.lostInput = null;             // {data, at} of the last input when it was applied and its answer lost
    this.inputBytes = 0;
    this.timers = new Set();           // pending escalations
    this.watchers = new Set();         // called on every frame, at the end and at DELETE
    this.deleted = false;
    this.done = new Promise((r) => { this.resolveDone = r; });
  }

  // Spawns argv; null, or {kind, message} when it could not start.
  start(argv, { cwd, env }) {
    const r = sandbox.spawn(argv[0], argv.slice(1), { envs: env, cwd, stdin: this.stdin === 'pipe' });
    if (r.error) return r.error;
    const child = r.child;
    this.child = child;
    this.pid = child.pid;
    this.startedAt = new Date().toISOString();
    child.on('error', (e) => log.line('process', this.id, 'error', e.code ?? e.message));
    child.stdout.on('data', (c) => this.append('stdout', c));
    child.stderr.on('data', (c) => this.append('stderr', c));
    child.on('exit', (code, signal) => this.exited(code, signal));
    // Terminal once exited AND both pipes reached EOF ('close'): a grandchild
    // holding stdout keeps the process running.
    child.on('close', (code, signal) => {
      this.exited(code, signal);
      this.terminate();
    });
    return null;
  }

  exited(code, signal) {
    if (this.exitedAt !== null) return;
    this.exitedAt = new Date().toISOString();
    this.exitCode = signal ? null : code;
    this.signal = signal ? signal.replace(/^SIG/, '') : null;
  }

  terminate() {
    this.state = 'terminal';
    this.reason = this.signal ? 'signaled' : 'exited';
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.child.stdin?.destroy();
    log.line('process', this.id, 'terminal', this.reason, this.signal ?? this.exitCode,
             this.truncatedHead ? `(log evicted before seq ${this.firstSeq})` : '');
    this.resolveDone();
    this.notify();
  }

  notify() {
    for (const w of this.watchers) w();
  }

  append(channel, data) {
    this.frames.push({ seq: this.nextSeq++, channel, data, timestamp: new Date().toISOString() });
    this.bytes += data.length;
    this.evict();
    this.notify();
  }

  // Oldest frames out until under the cap; the newest stays even when it
  // alone is above it (a frame is never split).
  evict() {
    while (this.bytes > v2LogCap && this.frames.length - this.head > 1) {
      this.bytes -= this.frames[this.head].data.length;
      this.frames[this.head++] = undefined;
      this.firstSeq++;
      this.truncatedHead = true;
    }
    if (this.head > 1024 && this.head * 2 > this.frames.length) {
      this.frames = this.frames.slice(this.head);
      this.head = 0;
    }
  }

  lastSeq() { return this.nextSeq - 1; }

  // The retained frame `seq`, or undefined (evicted or not yet written).
  frame(seq) {
    if (seq < this.firstSeq || seq >= this.nextSeq) return undefined;
    return this.frames[this.head + seq - this.firstSeq];
  }

  firstAvailableCursor() { return cursorOf(this.firstSeq - 1); }

  // The seq a read starts after, or {status, code, message, details} when the
  // cursor cannot be served. "start" (or none) is before the oldest retained
  // frame, whatever was evicted.
  position(cursor) {
    if (cursor === null || cursor === '' || cursor === 'start') return { after: this.firstSeq - 1 };
    const m = /^c(0|[1-9]\d{0,14})$/.exec(cursor);
    if (!m || Number(m[1]) > this.lastSeq()) {
      return { status: 400, code: 'INVALID_CURSOR', message: `cursor ${JSON.stringify(cursor)} is not a cursor of process ${this.id}` };
    }
    const seq = Number(m[1]);
    // Only a gap is an expiry: the cursor of the newest evicted frame still
    // resumes at the oldest retained one.
    if (seq < this.firstSeq - 1) {
      return {
        status: 409, code: 'CURSOR_EXPIRED',
        message: `the frames after cursor ${cursor} up to ${this.firstAvailableCursor()} were evicted`,
        details: { firstAvailableCursor: this.firstAvailableCursor() },
      };
    }
    return { after: seq };
  }

  sendSignal(name) {
    log.line('process', this.id, 'signal', name, 'pgid', this.pid);
    try { process.kill(-this.pid, `SIG${name}`); } catch { /* the group is gone */ }
  }

  // `name` to the group after `ms` unless the process is terminal by then.
  escalate(ms, name) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (this.state === 'running') this.sendSignal(name);
    }, ms);
    this.timers.add(t);
  }

  kill() {
    if (this.pid === undefined) return;
    try { process.kill(-this.pid, 'SIGKILL'); } catch { /* gone */ }
  }

  view() {
    return {
      id: this.id, kind: 'exec', name: this.name, state: this.state, pid: this.pid,
      exitCode: this.exitCode, signal: this.signal, reason: this.reason,
      firstAvailableCursor: this.firstAvailableCursor(),
      lastCursor: this.nextSeq > 1 ? cursorOf(this.lastSeq()) : null,
      truncatedHead: this.truncatedHead, stdin: this.stdin, keepLogs: this.keepLogs,
      createdAt: this.createdAt, startedAt: this.startedAt, exitedAt: this.exitedAt,
    };
  }

  result() {
    return { reason: this.reason, exitCode: this.exitCode, signal: this.signal };
  }
}

function frameJson(f, encoding) {
  return {
    channel: f.channel, cursor: cursorOf(f.seq), seq: f.seq, timestamp: f.timestamp,
    data: encoding === 'base64' ? f.data.toString('base64') : f.data.toString('utf8'),  // text: each frame decoded alone, lossy
    encoding,
  };
}

// The CreateProcessRequest's fields as the process needs them, or a string
// saying what is wrong. Fields not listed here (shell, user, timeoutMs...) are
// ignored.
function createRequest(v) {
  const kind = v.kind ?? 'exec';
  if (kind !== 'exec') return `kind ${JSON.stringify(kind)} is not supported (only exec)`;
  if (!Array.isArray(v.argv) || v.argv.length === 0 || !v.argv.every((a) => typeof a === 'string')) {
    return 'argv must be a non-empty array of strings';
  }
  if (v.argv[0] === '' || v.argv.some((a) => a.includes('\0'))) return 'argv[0] must not be empty and no argument may contain NUL';
  const stdin = v.stdin ?? 'none';
  if (!['pipe', 'open', 'none', 'closed'].includes(stdin)) return 'stdin must be pipe, open, none or closed';
  if (v.name !== undefined && v.name !== null && (typeof v.name !== 'string' || v.name === '' || v.name.length > 256)) {
    return 'name must be a string of 1-256 characters';
  }
  if (v.cwd !== undefined && v.cwd !== null && (typeof v.cwd !== 'string' || v.cwd === '' || v.cwd.includes('\0'))) {
    return 'cwd must be a non-empty string';
  }
  const env = v.env ?? {};
  if (typeof env !== 'object' || Array.isArray(env) || !Object.entries(env).every(([k, x]) => typeof x === 'string' && k !== '' && !k.includes('=') && !(k + x).includes('\0'))) {
    return 'env must be an object of strings';
  }
  const name = v.name ?? null;
  // The docs' defaults: named processes are kept until cleanup.
  const keepLogs = v.keepLogs ?? (name === null ? 'on_exit_ttl' : 'until_cleanup');
  if (!['until_cleanup', 'on_exit_ttl', 'none'].includes(keepLogs)) return 'keepLogs must be until_cleanup, on_exit_ttl or none';
  return { argv: v.argv, stdin: stdin === 'pipe' || stdin === 'open' ? 'pipe' : 'none', name, cwd: v.cwd ?? undefined, env, keepLogs };
}

// GET P[?name=]: listing is how a client finds a process whose creation lost
// its answer, so it also clears the duplicate watch on the names it shows.
function listProcesses(res, url) {
  const name = url.searchParams.get('name');
  const list = [...processes.values()].filter((p) => name === null || p.name === name);
  if (name === null) lostCreates.clear();
  else lostCreates.delete(name);
  return sendJson(res, 200, list.map((p) => p.view()));
}

async function createProcess(req, res, url) {
  const v = await v2Body(req, res);
  if (v === undefined) return;
  const r = createRequest(v);
  if (typeof r === 'string') return badArgument(res, r);
  if (r.name !== null && [...processes.values()].some((p) => p.name === r.name && p.state === 'running')) {
    return v2Error(res, 409, 'NAME_IN_USE', `a running process is named ${JSON.stringify(r.name)}`);
  }
  const label = `POST ${url.pathname}`;
  // (A resend refused NAME_IN_USE above started nothing: the name protected it.)
  if (r.name !== null && lostCreates.has(r.name)) {
    violation(label, 'duplicate', `process ${lostCreates.get(r.name)} named ${JSON.stringify(r.name)} started and lost its ` +
              'answer; a create with that name, sent without listing first, starts it twice');
    lostCreates.delete(r.name);
  }
  const p = new Proc(r);
  const err = p.start(r.argv, r);
  if (err) return v2Error(res, 400, 'PROCESS_START_FAILED', err.message);
  processes.set(p.id, p);
  log.line('process', p.id, 'started pid', p.pid, 'stdin', p.stdin);
  if (faults.roll('lost5xx')) {
    if (r.name !== null) lostCreates.set(r.name, p.id);
    return loseAnswer(res, label, `process ${p.id} started`);
  }
  return sendJson(res, 201, p.view());
}

// The ?-parameters of a logs read; a string when one is bad.
function logsQuery(url) {
  const encoding = url.searchParams.get('encoding') ?? 'text';
  if (encoding !== 'text' && encoding !== 'base64') return 'encoding must be text or base64';
  const follow = url.searchParams.get('follow') ?? 'false';
  if (follow !== 'true' && follow !== 'false') return 'follow must be true or false';
  const ls = url.searchParams.get('limit');
  const limit = ls === null ? kV2PageLimit : Number(ls);
  if (!/^\d+$/.test(ls ?? '1') || limit < 1 || limit > kV2PageMax) return `limit must be 1-${kV2PageMax}`;
  return { encoding, follow: follow === 'true', limit, cursor: url.searchParams.get('cursor') };
}

function readLogs(req, res, p, url) {
  const q = logsQuery(url);
  if (typeof q === 'string') return badArgument(res, q);
  const pos = p.position(q.cursor);
  if (pos.status) return v2Error(res, pos.status, pos.code, pos.message, pos.details);
  const from = q.cursor || 'start';
  if (q.follow) return followV2(req, res, p, pos.after, from, q.encoding, `GET ${url.pathname}`);
  return logPage(res, p, pos.after, from, q.encoding, q.limit);
}

// ProcessLogPage: up to `limit` frames after seq `after`.
function logPage(res, p, after, from, encoding, limit) {
  const frames = [];
  let seq = after;
  for (let f = p.frame(seq + 1); f && frames.length < limit; f = p.frame(seq + 1)) {
    frames.push(frameJson(f, encoding));
    seq = f.seq;
    stats.v2_log_events++;
    stats.v2_log_bytes += f.data.length;
  }
  return sendJson(res, 200, {
    frames,
    nextCursor: frames.length ? frames[frames.length - 1].cursor : from,
    firstAvailableCursor: p.firstAvailableCursor(),
    truncatedHead: p.truncatedHead,
    eof: p.state === 'terminal' && seq >= p.lastSeq(),
  });
}

const sseEvent = (name, obj) => `event: ${name}\ndata: ${JSON.stringify(obj)}\n\n`;

// follow=true: an SSE stream of `log` events from after seq `after`, live,
// then `state` and `eof` once the process is terminal and all was sent. A
// reader that does not keep up is waited for ('drain'), never the child: when
// its next frame was evicted meanwhile it gets a `warning` and goes on from
// the oldest retained frame.
function followV2(req, res, p, after, from, encoding, label) {
  let cursor = from;    // the last cursor sent (the request's before any)
  let sent = 0;         // bytes of events written
  let busy = false;     // waiting for 'drain'
  let closing = false;
  let lastWrite = Date.now();
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  log.line(label, 'SSE follow after', from, 'encoding', encoding);
  const write = (text) => {
    sent += Buffer.byteLength(text);
    lastWrite = Date.now();
    return res.write(text);
  };
  const keepalive = setInterval(() => {
    if (!busy && !closing && Date.now() - lastWrite >= kV2KeepaliveMs) write(': keepalive\n\n');
  }, kV2KeepaliveMs / 3);
  const stop = () => {
    closing = true;
    clearInterval(keepalive);
    p.watchers.delete(pump);
  };
  const pump = () => {
    if (closing || busy) return;
    if (p.deleted) {
      stop();
      return res.end();  // no eof: the record is gone (a reconnect gets 404)
    }
    for (;;) {
      if (after < p.firstSeq - 1) {
        write(sseEvent('warning', {
          cursor, firstAvailableCursor: p.firstAvailableCursor(), truncatedHead: true,
          message: `frames after ${cursor} were evicted before this stream sent them; going on from ${p.firstAvailableCursor()}`,
        }));
        log.line(label, 'SSE reader behind: frames', after + 1, 'to', p.firstSeq - 1, 'evicted unsent');
        after = p.firstSeq - 1;
      }
      const f = p.frame(after + 1);
      if (!f) break;
      const ev = Buffer.from(sseEvent('log', frameJson(f, encoding)));
      if (faults.roll('cut')) {
        const part = Math.floor(ev.length / 2);
        log.line(label, 'FAULT cut after', sent + part, 'bytes (in the log event of seq', f.seq + ')');
        stop();
        return res.write(ev.subarray(0, part), () => res.destroy());
      }
      after = f.seq;
      cursor = cursorOf(f.seq);
      stats.v2_log_events++;
      stats.v2_log_bytes += f.data.length;
      stats.v2_sse_bytes += ev.length;
      if (!write(ev)) {
        busy = true;
        res.once('drain', () => {
          busy = false;
          pump();
        });
        return;
      }
    }
    if (p.state === 'terminal') {
      stop();
      write(sseEvent('state', p.view()));
      write(sseEvent('eof', { cursor }));
      res.end();
    }
  };
  res.on('close', stop);
  p.watchers.add(pump);
  pump();
}

async function writeStdin(req, res, p, url) {
  const v = await v2Body(req, res);
  if (v === undefined) return;
  if (v.data !== undefined && typeof v.data !== 'string') return badArgument(res, 'data must be a string');
  if (v.eof !== undefined && typeof v.eof !== 'boolean') return badArgument(res, 'eof must be a boolean');
  if (p.stdin !== 'pipe') return v2Error(res, 409, 'STDIN_UNAVAILABLE', `process ${p.id} was started without a stdin pipe`);
  const data = v.data ?? '';
  // An eof again changes nothing, even once the process ended: a safe resend.
  if (data === '' && v.eof === true && p.stdinClosed) return sendJson(res, 204, undefined);
  if (p.state === 'terminal') return v2Error(res, 409, 'PROCESS_TERMINAL', `process ${p.id} is terminal`);
  if (data !== '' && p.stdinClosed) return v2Error(res, 409, 'STDIN_CLOSED', `stdin of process ${p.id} was closed`);
  const label = `POST ${url.pathname}`;
  const at = p.inputBytes;
  // A resend comes next: the same data as the input before, whose answer was
  // lost. (The same data later on is new input.)
  if (data !== '' && p.lostInput !== null && p.lostInput.data === data) {
    violation(label, 'duplicate', `the stdin data applied at byte ${p.lostInput.at}, whose answer was lost, was sent ` +
              `again: applied twice (again at byte ${at})`);
  }
  p.lostInput = null;
  const bytes = Buffer.from(data, 'utf8');  // (a lone surrogate becomes EF BF BD)
  if (bytes.length) p.child.stdin.write(bytes);
  p.inputBytes += bytes.length;
  stats.v2_stdin_bytes += bytes.length;
  if (v.eof === true) {
    p.stdinClosed = true;
    p.child.stdin.end();
  }
  stats.v2_stdin_posts++;
  if (faults.roll('lost5xx')) {
    if (data !== '') p.lostInput = { data, at };
    return loseAnswer(res, label, `the stdin data was written at byte ${at}${v.eof ? ' and stdin closed' : ''}`);
  }
  return sendJson(res, 204, undefined);
}

async function signalProcess(req, res, p) {
  const v = await v2Body(req, res);
  if (v === undefined) return;
  const sig = signalName(v.signal);
  if (sig === null) return badArgument(res, `signal must be one of ${[...V2_SIGNALS].join(', ')} (SIG prefix allowed)`);
  const ms = v.escalateAfterMs;
  if (ms !== undefined && ms !== null && (!Number.isInteger(ms) || ms < 0 || ms > kV2EscalateMaxMs)) {
    return badArgument(res, `escalateAfterMs must be an integer of 0-${kV2EscalateMaxMs}`);
  }
  const to = v.escalateTo === undefined || v.escalateTo === null ? 'KILL' : signalName(v.escalateTo);
  if (to === null) return badArgument(res, 'escalateTo must be a named signal');
  if (p.state === 'terminal') return sendJson(res, 204, undefined);  // nothing to do
  p.sendSignal(sig);
  if (ms !== undefined && ms !== null) p.escalate(ms, to);
  return sendJson(res, 204, undefined);
}

async function waitProcess(req, res, p, url) {
  const ts = url.searchParams.get('timeoutMs');
  if (ts !== null && !/^\d+$/.test(ts)) return badArgument(res, 'timeoutMs must be a non-negative integer');
  const ms = Math.min(ts === null ? kV2WaitMs : Number(ts), kV2WaitMaxMs);
  if (p.state !== 'terminal') {
    let timer;
    const timedOut = await Promise.race([
      p.done.then(() => false),
      new Promise((r) => { timer = setTimeout(() => r(true), ms); }),
    ]);
    clearTimeout(timer);
    if (timedOut) return v2Error(res, 408, 'WAIT_TIMEOUT', `process ${p.id} still running after ${ms} ms`);
  }
  return sendJson(res, 200, p.result());
}

// DELETE: a running process is SIGKILLed (its group) first; the record and
// its log are gone at once, and followers' streams end without eof.
function deleteProcess(res, p) {
  if (p.state === 'running') {
    log.line('process', p.id, 'deleted while running: SIGKILL pgid', p.pid);
    p.kill();
  }
  processes.delete(p.id);
  p.deleted = true;
  p.notify();
  p.frames = [];
  p.head = 0;
  p.bytes = 0;
  return sendJson(res, 204, undefined);
}

// Routes below the prefix P: sub is '' or '/{id}[/op]'.
async function handleV2(req, res, sub, url) {
  const methodNotAllowed = (allowed) => {
    req.resume();
    return v2Error(res, 405, 'METHOD_NOT_ALLOWED', `${req.method} not allowed here (${allowed})`);
  };
  if (sub === '') {
    if (req.method === 'GET') return listProcesses(res, url);
    if (req.method === 'POST') return createProcess(req, res, url);
    return methodNotAllowed('GET or POST');
  }
  const m = /^\/([^/]+)(?:\/(logs|stdin|signals|wait))?$/.exec(sub);
  if (!m) {
    req.resume();
    return fail(res, 404, `no route for ${req.method} ${url.pathname}`);
  }
  const op = m[2] ?? '';
  const allowed = { '': ['GET', 'DELETE'], logs: ['GET'], wait: ['GET'], stdin: ['POST'], signals: ['POST'] }[op];
  if (!allowed.includes(req.method)) return methodNotAllowed(allowed.join(' or '));
  const id = decodeURIComponent(m[1]);
  const p = processes.get(id);
  if (!p) {
    req.resume();
    return v2Error(res, 404, 'PROCESS_NOT_FOUND', `process ${id} not found`);
  }
  if (op === '') return req.method === 'GET' ? sendJson(res, 200, p.view()) : deleteProcess(res, p);
  if (op === 'logs') return readLogs(req, res, p, url);
  if (op === 'wait') return waitProcess(req, res, p, url);
  if (op === 'stdin') return writeStdin(req, res, p, url);
  return signalProcess(req, res, p);
}

// Checks the fault schedule and the key; false when the request was answered.
async function admit(req, res, label) {
  let gone = false;
  res.on('close', () => { if (!res.writableEnded) gone = true; });
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (gone) return false;
  }
  if (faults.roll('http429')) {
    log.line(label, 'FAULT http429 Retry-After', kRetryAfterSeconds);
    // Its body names the call that must not come again before the delay.
    const buf = req.method === 'POST' ? await readBody(req, kMaxJsonBody) : (req.resume(), null);
    if (buf !== null) {
      checkRetryAfter(req, buf);  // (an early resend refused again is early all the same)
      retryNotBefore.set(requestKey(req, buf), Date.now() + kRetryAfterSeconds * 1000);
    }
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(kRetryAfterSeconds) });
    res.end(JSON.stringify({ message: 'rate limited (emulated fault)', statusCode: 429 }));
    return false;
  }
  if (faults.roll('http5xx')) {
    const status = faults.status5xx();
    log.line(label, 'FAULT http5xx', status);
    req.resume();
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault)\n`);
    return false;
  }
  if ((req.headers.authorization ?? '') !== `Bearer ${apiKey}`) {
    req.resume();
    fail(res, 401, 'invalid or missing API key');
    return false;
  }
  return true;
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://emulator');
  const label = `${req.method} ${url.pathname}`;
  if (url.pathname === '/_emulator/stats') return sendJson(res, 200, stats);
  stats.requests++;
  const tm = /^\/toolbox\/([^/]+)(\/.*)$/.exec(url.pathname);
  if (tm && isV2Path(tm[2])) stats.v2_requests++;  // (faulted ones too, as `requests` counts them)
  res.on('finish', () => log.line(label, '->', res.statusCode));
  if (!(await admit(req, res, label))) return;
  if (url.pathname.startsWith('/api/')) return handleApi(req, res, url.pathname.slice(4));
  if (!tm) {
    req.resume();
    return fail(res, 404, `no route for ${req.method} ${url.pathname}`);
  }
  if (decodeURIComponent(tm[1]) !== SANDBOX_ID) {
    req.resume();
    return fail(res, 404, `sandbox ${tm[1]} not found`);
  }
  return handleToolbox(req, res, tm[2], url);
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    log.line('internal error', req.method, new URL(req.url, 'http://e').pathname, String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) {
      try { fail(res, 500, 'emulator internal error'); } catch { /* closed */ }
    } else {
      res.destroy?.();
    }
  });
}

// The follow-logs WebSocket: the whole log from byte 0, then what is appended;
// closed with 1000 after the command's end.
function followLogs(ws, c, label) {
  let ci = 0;    // the next chunk of c.chunks to send
  let off = 0;   // bytes of it already sent
  let sent = 0;  // bytes of the log sent
  let closing = false;
  let busy = false;
  const next = () => {
    // Up to kWsChunk bytes from the chunks not yet sent, as one message.
    const parts = [];
    let n = 0;
    while (ci < c.chunks.length && n < kWsChunk) {
      const ch = c.chunks[ci];
      const take = Math.min(ch.length - off, kWsChunk - n);
      parts.push(ch.subarray(off, off + take));
      n += take;
      off += take;
      if (off === ch.length) {
        ci++;
        off = 0;
      }
    }
    return n === 0 ? null : Buffer.concat(parts, n);
  };
  const stop = () => {
    closing = true;
    c.watchers.delete(pump);
  };
  const pump = () => {
    if (closing || busy) return;
    for (let msg = next(); msg !== null; msg = next()) {
      if (faults.roll('cut')) {
        const part = Math.floor(msg.length / 2);
        log.line(label, 'FAULT cut after', sent + part, 'bytes');
        stop();
        if (part > 0) ws.send(msg.subarray(0, part), { binary: true }, () => ws.terminate());
        else ws.terminate();
        return;
      }
      ws.send(msg, { binary: true });
      sent += msg.length;
      stats.ws_messages++;
      stats.ws_bytes += msg.length;
      if (ws.bufferedAmount > 4 << 20) {
        busy = true;
        const wait = () => {
          if (ws.readyState !== ws.OPEN) return;
          if (ws.bufferedAmount > 1 << 20) return setTimeout(wait, 5);
          busy = false;
          pump();
        };
        setTimeout(wait, 5);
        return;
      }
    }
    if (c.exitCode !== undefined) {
      stop();
      ws.close(1000);
    }
  };
  c.watchers.add(pump);
  ws.on('close', stop);
  ws.on('error', stop);
  ws.on('message', () => {});
  pump();
}

const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });

async function onUpgrade(req, socket, head) {
  const url = new URL(req.url, 'http://emulator');
  const label = `WS ${url.pathname}`;
  stats.requests++;
  const refuse = (status, message) => {
    const body = JSON.stringify({ message, statusCode: status });
    log.line(label, '->', status);
    socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  };
  socket.on('error', () => {});
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (socket.destroyed) return;
  }
  if (faults.roll('http5xx')) {
    const status = faults.status5xx();
    log.line(label, 'FAULT http5xx', status);
    return refuse(status, 'emulated fault');
  }
  if ((req.headers.authorization ?? '') !== `Bearer ${apiKey}`) return refuse(401, 'invalid or missing API key');
  // (v2 has no WebSocket: its attach is for pty processes, not emulated.)
  const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(url.pathname);
  if (!m || !v1Enabled || decodeURIComponent(m[1]) !== SANDBOX_ID) return refuse(404, `no WebSocket route ${url.pathname}`);
  const s = sessions.get(decodeURIComponent(m[2]));
  const c = s?.commands.get(decodeURIComponent(m[3]));
  if (!c) return refuse(404, 'command not found');
  wss.handleUpgrade(req, socket, head, (ws) => {
    log.line(label, '-> 101 follow from byte 0, log', c.size, 'bytes');
    followLogs(ws, c, label);
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
server.requestTimeout = 0;  // a sync exec may run long
server.headersTimeout = 60_000;
server.on('clientError', (_e, socket) => socket.destroy());
server.on('upgrade', (req, socket, head) => {
  onUpgrade(req, socket, head).catch((e) => {
    log.line('internal error (upgrade)', String(e?.stack ?? e).split('\n')[0]);
    socket.destroy();
  });
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  baseUrl = `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  log.line('listening', baseUrl, `faults=${faults.describe()}`, noProxyUrl ? 'no-proxy-url' : '', forceEcho ? 'force-echo' : '',
           `process-api=${processApi}`, v2Enabled ? `v2-prefix=${v2Prefix} v2-log-cap=${v2LogCap}` : '');
  announceAndWait(args.dir, { url: `${baseUrl}/api`, toolbox: `${baseUrl}/toolbox`, ca, sandbox: SANDBOX_ID, api_key: apiKey }, (why) => {
    log.line('shutdown', why, 'violations', JSON.stringify(stats.violations), 'faults', JSON.stringify(faults.count));
    for (const s of sessions.values()) for (const c of s.commands.values()) c.kill();
    // v2 groups whose leader is gone (a grandchild left running) are no longer
    // the Sandbox's children: kill every recorded group as v1 does.
    for (const p of processes.values()) p.kill();
    sandbox.killAll();
  });
});
