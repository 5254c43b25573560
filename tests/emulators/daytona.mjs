#!/usr/bin/env node
// Daytona emulator: the control plane's sandbox lookup and the toolbox's
// session processes and file upload for one sandbox, backed by real local
// processes, as lossy as the real service. Wire facts: EMULATORS.md section 2
// and PROVIDERS.md (Daytona); proven by @daytonaio/sdk 0.218.0
// (sdk_daytona.test.mjs). Needs the `ws` package (tests/emulators/setup.sh).
//
// Command line (tests/lib/daytona_emulator.sh relies on it exactly):
//   node tests/emulators/daytona.mjs --dir DIR [--tls] [--faults SPEC]
//                                    [--no-proxy-url] [--force-echo]
//     --dir DIR        scratch directory: requests.log, endpoint.json, the
//                      certificates (with --tls) and the sandbox DIR/sbx-daytona/
//                      (home/ is HOME and the cwd of every command, tmp/ is TMPDIR).
//     --tls            serve HTTPS/WSS with a throwaway CA written to DIR/ca.pem.
//     --no-proxy-url   the sandbox DTO has no toolboxProxyUrl: clients must ask
//                      GET /sandbox/{id}/toolbox-proxy-url (older API servers).
//     --force-echo     echo input into the log even when suppressInputEcho is
//                      true (a daemon that ignores the field).
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
//   Violations: an exec into a session whose earlier exec of the same command
//   took effect and lost its answer is the command started twice; an input
//   to a command whose input just before, with the same data, was applied
//   and lost its answer is input applied twice (the toolbox has no request id and no
//   input offset: the session, the command and the data are what identify a
//   call); a JSON request sent again after a 429 before its Retry-After has
//   passed ignores the delay. Each is logged as a " VIOLATION duplicate ..."
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
// violations {duplicate, retry-after}}.
// The log, as the real daemon writes it (a `while IFS= read -r line` loop per
// stream): every line of stdout becomes 01 01 01 + line + "\n", of stderr
// 02 02 02 + line + "\n"; NUL bytes are dropped; a last line without a newline
// gets one. Bytes in the output that look like markers are not escaped.
// Commands run as `bash -c command` (sh when there is no bash) in their own
// process group, stdin a pipe; exit code 128+N for signal N.
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

const USAGE = 'node daytona.mjs --dir DIR [--tls] [--faults SPEC] [--no-proxy-url] [--force-echo]';
const SANDBOX_ID = 'sbx-daytona';
const kMaxJsonBody = 8 << 20;        // an exec or input request
const kMaxUploadBody = 128 << 20;    // a multipart upload
const kMaxLogBytes = 512 << 20;      // one command's log; more is dropped (counted in the log)
const kWsChunk = 64 << 10;           // a log message's size at most
const OUT = Buffer.from([1, 1, 1]);
const ERR = Buffer.from([2, 2, 2]);
const kRetryAfterSeconds = 1;        // a 429's Retry-After
const kRetryAfterSlackMs = 50;       // timer granularity: a resend this early still counts as waiting

const argv = process.argv.slice(2);
const noProxyUrl = argv.includes('--no-proxy-url');
const forceEcho = argv.includes('--force-echo');
const args = parseArgs(argv.filter((a) => a !== '--no-proxy-url' && a !== '--force-echo'), { usage: USAGE });
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

async function handleToolbox(req, res, rest, url) {
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
  res.on('finish', () => log.line(label, '->', res.statusCode));
  if (!(await admit(req, res, label))) return;
  if (url.pathname.startsWith('/api/')) return handleApi(req, res, url.pathname.slice(4));
  const tm = /^\/toolbox\/([^/]+)(\/.*)$/.exec(url.pathname);
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
  const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(url.pathname);
  if (!m || decodeURIComponent(m[1]) !== SANDBOX_ID) return refuse(404, `no WebSocket route ${url.pathname}`);
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
  log.line('listening', baseUrl, `faults=${faults.describe()}`, noProxyUrl ? 'no-proxy-url' : '', forceEcho ? 'force-echo' : '');
  announceAndWait(args.dir, { url: `${baseUrl}/api`, toolbox: `${baseUrl}/toolbox`, ca, sandbox: SANDBOX_ID, api_key: apiKey }, (why) => {
    log.line('shutdown', why, 'violations', JSON.stringify(stats.violations), 'faults', JSON.stringify(faults.count));
    for (const s of sessions.values()) for (const c of s.commands.values()) c.kill();
    sandbox.killAll();
  });
});
