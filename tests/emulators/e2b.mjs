#!/usr/bin/env node
// E2B emulator: the control plane (api.e2b.app) and envd (the in-sandbox
// daemon, port 49983) on ONE local port, backed by real local processes.
// Wire facts: /work/shared/EMULATORS.md section 1 and PROVIDERS.md (E2B envd).
//
// Command line (the C++ tests rely on it exactly):
//   node tests/emulators/e2b.mjs --dir DIR [--tls] [--faults SPEC] [--envd-version V] [--debug-envd]
//     --dir DIR          scratch directory: requests.log, endpoint.json, the
//                        certificates (with --tls) and the sandbox DIR/sbx-test/
//                        (home/ is HOME and the default cwd, tmp/ is TMPDIR).
//     --tls              serve HTTPS (HTTP/1.1 and h2 via ALPN) with a throwaway CA
//                        written to DIR/ca.pem; otherwise plain HTTP/1.1.
//     --faults SPEC      seeded fault injection, see below.
//     --envd-version V   the envdVersion reported by connect (default 0.5.7);
//                        < 0.5.2 rejects CloseStdin, < 0.5.7 rejects
//                        application/octet-stream uploads.
//     --debug-envd       envd as the SDK's debug mode (E2B_DEBUG=true) reaches
//                        it: a locally run envd, no edge proxy in front and no
//                        access token set. The SDK then sends no X-Access-Token,
//                        so none is required, and E2b-Sandbox-Id/-Port (which
//                        only the proxy reads) are not checked.
//   Listens on 127.0.0.1, port 0. When ready it prints ONE JSON line on stdout
//   (also written to DIR/endpoint.json):
//     {"url":"http(s)://127.0.0.1:P","ca":"DIR/ca.pem" (null without --tls),
//      "sandbox":"sbx-test","api_key":"e2b_test"}
//   and runs until SIGTERM/SIGINT or EOF on stdin (when stdin is a pipe);
//   it then SIGKILLs the process groups it started and exits 0. Exit code 2
//   means a bad command line.
//
// Point the SDK (or an adapter) at it with apiUrl = sandboxUrl = url.
// Auth: the control plane accepts only X-API-KEY: e2b_test; envd accepts only
// X-Access-Token: <the envdAccessToken that connect returned>; 401 otherwise.
// Routing: every envd call (also /health) must carry E2b-Sandbox-Id: sbx-test
// and E2b-Sandbox-Port: 49983, else the proxy's 502 (unless --debug-envd).
//
// Endpoints:
//   POST /v2/sandboxes/{id}/connect  -> 200 {sandboxID, envdVersion,
//        envdAccessToken, domain, ...}; 404 {"code":404,...} for an unknown id.
//   GET  /sandboxes/{id}             -> sandbox detail (state "running").
//   POST /process.Process/Start|Connect   Connect protocol, JSON codec,
//        server streaming (application/connect+json envelopes).
//   POST /process.Process/SendInput|CloseStdin|SendSignal|Update|List   unary
//        (application/json); StreamInput (client streaming) too.
//   POST /files?path=P   multipart field "file" (or application/octet-stream,
//        optionally gzip, for envd >= 0.5.7); parents created.
//   GET  /files?path=P   the bytes (gzip-encoded when Accept-Encoding asks for it).
//   GET  /health -> 204 (no auth).
// Faithful limits: Connect-Timeout-Ms on Start kills the process (SIGKILL) when
// it elapses and ends the stream with deadline_exceeded (on Connect it only
// ends that stream); output produced while no stream is attached is dropped;
// every attached stream gets every event; dropping a stream never kills the
// process; SendSignal accepts SIGTERM/SIGKILL only and hits the one pid.
// Backpressure: while an attached stream has more than kMaxUnflushedBytes
// that its connection has not taken, the process's output is not read, so a
// reader that does not read blocks the process in write(2) (as TCP flow
// control does to a real envd); the emulator's memory stays bounded.
// Keepalive events every Keepalive-Ping-Interval seconds (default 50). The end
// event comes once the process has exited AND its stdout/stderr pipes reached
// EOF (a background grandchild holding them delays it, as envd's output
// readers do); a signal death reports exitCode -1, exited false, status
// "signal: killed" (Go's wording), and error = status for any failure.
//
// Faults (--faults SPEC, comma-separated; see lib/faults.mjs):
//   seed=N      PRNG seed (default 1), reproducible per request order.
//   cut=P       per data event on a Start/Connect stream: write half an
//               envelope, then destroy the connection (HTTP/1.1: the socket;
//               h2: the whole session). The process keeps running.
//   http5xx=P   per request (unary, files, control plane, new Start/Connect):
//               answer 502 / 503 (alternating) without doing anything.
//   slow=P      per request: delay the response by 1-3 s.
//   rotate=P    per envd request carrying the current access token: a new
//               token replaces it (as a pause and resume gives one) and this
//               request is refused 401 with the old one; connect returns
//               the new one. Streams already open go on.
//
// Paths for /files: "~" and relative paths resolve under the sandbox home;
// absolute paths are used as they are (the "sandbox" is this machine).
import { createGunzip, createGzip } from 'node:zlib';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';

import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox, goSignalName } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, readBody, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node e2b.mjs --dir DIR [--tls] [--faults SPEC] [--envd-version V] [--debug-envd]';
const SANDBOX_ID = 'sbx-test';
const API_KEY = 'e2b_test';
const DEFAULT_ENVD_VERSION = '0.5.7';
const ENVD_PORT = '49983';
const kMaxUnaryBytes = 64 << 20;      // JSON bodies of unary RPCs
const kMaxStartBytes = 4 << 20;       // the one request envelope of Start/Connect
const kMaxMultipartBytes = 256 << 20; // multipart uploads are buffered
const kMaxDataChunk = 32 << 10;       // envd reads process output in 32 KiB chunks
// Bytes of envelopes a stream may hold that its connection has not taken yet
// (not yet written to the socket / h2 session). Above it the process's
// output is no longer read, so its pipe fills and it blocks in write(2), as
// a real envd behind TCP flow control makes it: envd copies output to the
// response with blocking writes and buffers no more than a chunk.
const kMaxUnflushedBytes = 256 << 10;
const kDefaultKeepaliveS = 50;

const argv = process.argv.slice(2);
const debugEnvd = argv.includes('--debug-envd'); // (a flag: parseArgs knows valued options only)
const args = parseArgs(argv.filter((a) => a !== '--debug-envd'), { usage: USAGE, valued: ['envd-version'] });
const envdVersion = args['envd-version'] ?? DEFAULT_ENVD_VERSION;
if (!/^\d+\.\d+\.\d+$/.test(envdVersion)) {
  process.stderr.write(`--envd-version must look like 1.2.3\nusage: ${USAGE}\n`);
  process.exit(2);
}
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['cut', 'http5xx', 'slow', 'rotate'], flags: [] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
let accessToken = 'envd_' + randomBytes(16).toString('hex');
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, SANDBOX_ID), { hostname: SANDBOX_ID });

function versionAtLeast(v, min) {
  const a = v.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
  return true;
}

// ---- Connect protocol helpers ----------------------------------------------

const CONNECT_HTTP_STATUS = {
  canceled: 499, unknown: 500, invalid_argument: 400, deadline_exceeded: 504,
  not_found: 404, already_exists: 409, permission_denied: 403,
  resource_exhausted: 429, failed_precondition: 400, aborted: 409,
  out_of_range: 400, unimplemented: 501, internal: 500, unavailable: 503,
  data_loss: 500, unauthenticated: 401,
};

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function envelope(flags, obj) {
  const json = Buffer.from(JSON.stringify(obj));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

// Splits `buf` into complete envelopes; returns {messages, rest}.
function parseEnvelopes(buf) {
  const messages = [];
  let off = 0;
  while (buf.length - off >= 5) {
    const flags = buf[off];
    const len = buf.readUInt32BE(off + 1);
    if (buf.length - off - 5 < len) break;
    messages.push({ flags, data: buf.subarray(off + 5, off + 5 + len) });
    off += 5 + len;
  }
  return { messages, rest: buf.subarray(off) };
}

function parseJson(buf, what) {
  try {
    const v = JSON.parse(buf.toString('utf8'));
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v;
  } catch (e) {
    throw new RpcError('invalid_argument', `invalid ${what}: ${e.message}`);
  }
}

function sendJson(res, status, obj, extra = {}) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length, ...extra });
  res.end(body);
}

function sendRpcError(res, err) {
  sendJson(res, CONNECT_HTTP_STATUS[err.code] ?? 500, { code: err.code, message: err.message });
}

// uint32 pids may arrive as JSON numbers or strings (proto3 JSON).
function selectProcess(sel) {
  if (!sel || typeof sel !== 'object') throw new RpcError('invalid_argument', 'process selector is required');
  if (sel.pid !== undefined) {
    const pid = Number(sel.pid);
    if (!Number.isInteger(pid) || pid < 0 || pid > 0xffffffff) throw new RpcError('invalid_argument', 'invalid pid');
    const p = procs.get(pid);
    if (!p) throw new RpcError('not_found', `process with pid ${pid} not found`);
    return p;
  }
  if (typeof sel.tag === 'string') {
    for (const p of procs.values()) if (p.tag === sel.tag) return p;
    throw new RpcError('not_found', `process with tag ${sel.tag} not found`);
  }
  throw new RpcError('invalid_argument', 'process selector needs pid or tag');
}

function decodeBytes(s, what) {
  if (typeof s !== 'string') throw new RpcError('invalid_argument', `${what} must be base64 bytes`);
  return Buffer.from(s, 'base64');
}

// ---- processes and their event streams ---------------------------------------

const procs = new Map(); // pid -> Proc

class Proc {
  constructor(child, config, tag, stdin) {
    this.child = child;
    this.pid = child.pid;
    this.config = config;
    this.tag = tag;
    this.stdinOpen = stdin;
    this.streams = new Set();
    this.paused = false; // reading of stdout/stderr stopped by backpressure
    this.pauses = 0;
    procs.set(this.pid, this);
    const onData = (kind) => (buf) => {
      for (let off = 0; off < buf.length; off += kMaxDataChunk) {
        const piece = buf.subarray(off, off + kMaxDataChunk);
        // Nobody attached: the output is dropped, as envd does.
        for (const s of [...this.streams]) s.send({ data: { [kind]: piece.toString('base64') } }, true);
      }
      this.flow();
    };
    child.stdout.on('data', onData('stdout'));
    child.stderr.on('data', onData('stderr'));
    // 'exit' comes first (the pid is reaped and may be reused); 'close' once
    // the output pipes reach EOF, which is when envd reports the end.
    this.exited = false;
    child.on('exit', () => { this.exited = true; });
    child.on('close', (code, signal) => this.onClose(code, signal));
  }

  onClose(code, signal) {
    if (procs.get(this.pid) === this) procs.delete(this.pid);
    clearTimeout(this.lifetime);
    const end = code !== null
      ? { exitCode: code, exited: true, status: `exit status ${code}` }
      : { exitCode: -1, exited: false, status: `signal: ${goSignalName(signal)}` };
    if (code !== 0) end.error = end.status; // Go's exec.ExitError text
    log.line('process', this.pid, 'ended', end.status, `streams=${this.streams.size}`, `backpressure_pauses=${this.pauses}`);
    for (const s of [...this.streams]) {
      s.send({ end }, false);
      s.finish(null);
    }
  }

  // Stops reading the output while any attached stream holds more than
  // kMaxUnflushedBytes (the slowest reader sets the pace: one output feeds
  // every stream); reads again once all are below it or gone.
  flow() {
    let blocked = false;
    for (const s of this.streams) if (s.unflushed > kMaxUnflushedBytes) blocked = true;
    if (blocked === this.paused) return;
    this.paused = blocked;
    if (blocked && ++this.pauses === 1) log.line('process', this.pid, 'output paused: a stream holds', kMaxUnflushedBytes, 'bytes unflushed');
    for (const pipe of [this.child.stdout, this.child.stderr]) {
      if (blocked) pipe.pause();
      else pipe.resume();
    }
  }

  info() {
    const out = { config: this.config, pid: this.pid };
    if (this.tag !== undefined) out.tag = this.tag;
    return out;
  }
}

class EventStream {
  constructor(req, res, label) {
    this.req = req;
    this.res = res;
    this.label = label;
    this.proc = null;
    this.done = false;
    this.unflushed = 0; // bytes written to res that the connection has not taken yet
    this.timers = [];
    res.on('close', () => {
      if (!this.done) {
        this.done = true;
        log.line(label, 'client went away');
        this.cleanup();
      }
    });
  }

  open() {
    this.res.writeHead(200, { 'content-type': 'application/connect+json' });
    if (this.res.flushHeaders) this.res.flushHeaders();
  }

  attach(proc, { keepaliveS, timeoutMs, onTimeout }) {
    this.proc = proc;
    proc.streams.add(this);
    this.send({ start: { pid: proc.pid } }, false);
    if (keepaliveS > 0) {
      this.timers.push(setInterval(() => this.send({ keepalive: {} }, false), keepaliveS * 1000));
    }
    if (timeoutMs > 0) {
      this.timers.push(setTimeout(() => onTimeout(this), timeoutMs));
    }
  }

  send(event, isData) {
    if (this.done) return;
    const env = envelope(0, { event });
    if (isData && faults.roll('cut')) {
      this.cut(env);
      return;
    }
    this.unflushed += env.length;
    this.res.write(env, () => {
      this.unflushed -= env.length;
      if (this.proc && !this.done) this.proc.flow();
    });
  }

  // Ends the stream with the end-stream envelope ({} or {"error":...}).
  finish(error) {
    if (this.done) return;
    this.done = true;
    this.cleanup();
    this.res.end(envelope(2, error ? { error: { code: error.code, message: error.message } } : {}));
    log.line(this.label, 'finished', error ? error.code : 'ok');
  }

  cut(env) {
    this.done = true;
    this.cleanup();
    log.line(this.label, 'FAULT cut');
    const partial = env.subarray(0, Math.max(1, env.length >> 1));
    this.res.write(partial, () => destroyConnection(this.req, this.res));
  }

  cleanup() {
    for (const t of this.timers) { clearInterval(t); clearTimeout(t); }
    this.timers = [];
    if (this.proc) {
      this.proc.streams.delete(this);
      this.proc.flow(); // a reader that left no longer holds the process back
    }
  }
}

function destroyConnection(req, res) {
  if (req.httpVersionMajor === 2) {
    req.stream.session.destroy();
  } else {
    (res.socket ?? req.socket)?.destroy();
  }
}

function streamHeaders(req) {
  const ka = req.headers['keepalive-ping-interval'];
  const keepaliveS = ka !== undefined && /^\d{1,6}$/.test(ka) && Number(ka) > 0 ? Number(ka) : kDefaultKeepaliveS;
  const to = req.headers['connect-timeout-ms'];
  if (to !== undefined && !/^\d{1,10}$/.test(to)) throw new RpcError('invalid_argument', `protocol error: invalid timeout "${to}"`);
  return { keepaliveS, timeoutMs: to === undefined ? 0 : Number(to) };
}

async function handleServerStream(req, res, method, label) {
  if (req.headers['content-type'] !== 'application/connect+json') {
    res.writeHead(415, { 'accept-post': 'application/connect+json' });
    res.end();
    return;
  }
  const body = await readBody(req, kMaxStartBytes);
  const stream = new EventStream(req, res, label);
  stream.open();
  try {
    if (body === null) throw new RpcError('resource_exhausted', 'request message too large');
    const { messages, rest } = parseEnvelopes(body);
    if (messages.length !== 1 || rest.length) throw new RpcError('invalid_argument', 'protocol error: expected exactly one request envelope');
    if (messages[0].flags & 1) throw new RpcError('internal', 'protocol error: compressed message without an encoding');
    const msg = parseJson(messages[0].data, 'request');
    const { keepaliveS, timeoutMs } = streamHeaders(req);
    if (method === 'Start') {
      const p = msg.process;
      if (!p || typeof p.cmd !== 'string' || !p.cmd) throw new RpcError('invalid_argument', 'process.cmd is required');
      const argv = p.args ?? [];
      const envs = p.envs ?? {};
      if (!Array.isArray(argv) || argv.some((a) => typeof a !== 'string')) throw new RpcError('invalid_argument', 'process.args must be strings');
      if (typeof envs !== 'object' || Object.values(envs).some((v) => typeof v !== 'string')) throw new RpcError('invalid_argument', 'process.envs must map strings');
      if (p.cwd !== undefined && typeof p.cwd !== 'string') throw new RpcError('invalid_argument', 'process.cwd must be a string');
      if (msg.pty) throw new RpcError('unimplemented', 'pty is not supported by this emulator');
      const wantStdin = msg.stdin === true;
      const r = sandbox.spawn(p.cmd, argv, { envs, cwd: p.cwd, stdin: wantStdin });
      if (r.error) {
        throw r.error.kind === 'cwd'
          ? new RpcError('invalid_argument', r.error.message)
          : new RpcError('internal', `error starting process '${p.cmd}': ${r.error.message}`);
      }
      const config = { cmd: p.cmd, args: argv, envs };
      if (p.cwd !== undefined) config.cwd = p.cwd;
      const proc = new Proc(r.child, config, typeof msg.tag === 'string' ? msg.tag : undefined, wantStdin);
      log.line(label, 'started pid', proc.pid, `stdin=${wantStdin}`, `timeout_ms=${timeoutMs}`, `keepalive_s=${keepaliveS}`);
      if (timeoutMs > 0) {
        // envd starts the process under a context with this deadline: it is the
        // process lifetime, whether or not the stream is still attached.
        proc.lifetime = setTimeout(() => {
          log.line(label, 'Connect-Timeout-Ms elapsed: SIGKILL pid', proc.pid);
          try { process.kill(proc.pid, 'SIGKILL'); } catch { /* already gone */ }
        }, timeoutMs);
      }
      stream.attach(proc, {
        keepaliveS, timeoutMs,
        onTimeout: (s) => s.finish(new RpcError('deadline_exceeded', 'the operation timed out')),
      });
    } else {
      const proc = selectProcess(msg.process);
      log.line(label, 'attached pid', proc.pid, `timeout_ms=${timeoutMs}`, `keepalive_s=${keepaliveS}`);
      stream.attach(proc, {
        keepaliveS, timeoutMs,
        onTimeout: (s) => s.finish(new RpcError('deadline_exceeded', 'the operation timed out')),
      });
    }
  } catch (e) {
    if (!(e instanceof RpcError)) throw e;
    stream.finish(e);
  }
}

// StreamInput: client streaming; {start:{process}} then {data:{input}} / {keepalive}.
async function handleStreamInput(req, res) {
  if (req.headers['content-type'] !== 'application/connect+json') {
    res.writeHead(415, { 'accept-post': 'application/connect+json' });
    res.end();
    return;
  }
  let buf = Buffer.alloc(0);
  let proc = null;
  let error = null;
  for await (const chunk of req) {
    if (error) continue;
    buf = Buffer.concat([buf, chunk]);
    if (buf.length > kMaxUnaryBytes) { error = new RpcError('resource_exhausted', 'message too large'); continue; }
    const { messages, rest } = parseEnvelopes(buf);
    buf = Buffer.from(rest);
    try {
      for (const m of messages) {
        if (m.flags & 1) throw new RpcError('internal', 'protocol error: compressed message without an encoding');
        const msg = parseJson(m.data, 'StreamInputRequest');
        if (msg.start) proc = selectProcess(msg.start.process);
        else if (msg.data) {
          if (!proc) throw new RpcError('failed_precondition', 'missing start event');
          writeInput(proc, msg.data.input);
        }
      }
    } catch (e) {
      if (!(e instanceof RpcError)) throw e;
      error = e;
    }
  }
  res.writeHead(200, { 'content-type': 'application/connect+json' });
  if (!error) res.write(envelope(0, {}));
  res.end(envelope(2, error ? { error: { code: error.code, message: error.message } } : {}));
}

function writeInput(proc, input) {
  if (!input || typeof input !== 'object') throw new RpcError('invalid_argument', 'input is required');
  if (input.pty !== undefined) throw new RpcError('failed_precondition', 'tty not assigned to process');
  const data = decodeBytes(input.stdin, 'input.stdin');
  if (!proc.stdinOpen || !proc.child.stdin || proc.child.stdin.destroyed) {
    throw new RpcError('failed_precondition', 'stdin not enabled or closed');
  }
  proc.child.stdin.write(data);
}

const SIGNALS = { SIGNAL_SIGTERM: 'SIGTERM', SIGNAL_SIGKILL: 'SIGKILL', 15: 'SIGTERM', 9: 'SIGKILL' };

async function handleUnary(req, res, method) {
  if (req.headers['content-type'] !== 'application/json') {
    res.writeHead(415, { 'accept-post': 'application/json' });
    res.end();
    return;
  }
  const body = await readBody(req, kMaxUnaryBytes);
  try {
    if (body === null) throw new RpcError('resource_exhausted', 'request message too large');
    const msg = body.length ? parseJson(body, 'request') : {};
    switch (method) {
      case 'List':
        sendJson(res, 200, { processes: [...procs.values()].map((p) => p.info()) });
        return;
      case 'SendInput':
        writeInput(selectProcess(msg.process), msg.input);
        break;
      case 'CloseStdin': {
        const proc = selectProcess(msg.process);
        if (!proc.stdinOpen || !proc.child.stdin) throw new RpcError('failed_precondition', 'stdin not enabled or closed');
        proc.stdinOpen = false;
        proc.child.stdin.end();
        break;
      }
      case 'SendSignal': {
        const proc = selectProcess(msg.process);
        const sig = SIGNALS[msg.signal];
        if (!sig) throw new RpcError('invalid_argument', `invalid signal: ${JSON.stringify(msg.signal ?? null)}`);
        // Never signal a reaped pid: the number may belong to someone else now.
        if (proc.exited) throw new RpcError('not_found', `process with pid ${proc.pid} not found`);
        try { process.kill(proc.pid, sig); } catch (e) { throw new RpcError('internal', `error sending signal: ${e.code}`); }
        log.line('SendSignal', sig, 'pid', proc.pid);
        break;
      }
      case 'Update': {
        const proc = selectProcess(msg.process);
        if (msg.pty) throw new RpcError('failed_precondition', `tty not assigned to process ${proc.pid}`);
        break;
      }
      default:
        throw new RpcError('unimplemented', `process.Process.${method} is not implemented`);
    }
    sendJson(res, 200, {});
  } catch (e) {
    if (!(e instanceof RpcError)) throw e;
    sendRpcError(res, e);
  }
}

// ---- files -------------------------------------------------------------------

function restError(res, code, message) {
  sendJson(res, code, { code, message });
}

function entry(p) {
  return { name: path.basename(p), type: 'file', path: p };
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
    const filename = /\bfilename="([^"]*)"/i.exec(disp)?.[1];
    parts.push({ name, filename, data: body.subarray(headEnd + 4, next) });
    pos = next + 2;
  }
}

function prepareTarget(p) {
  try {
    if (fs.statSync(p).isDirectory()) return `path '${p}' is a directory`;
  } catch { /* new file */ }
  try {
    fs.mkdirSync(path.dirname(p), { recursive: true });
  } catch (e) {
    return `cannot create parent directories of '${p}': ${e.code}`;
  }
  return null;
}

async function handleFiles(req, res, url) {
  const qpath = url.searchParams.get('path');
  if (req.method === 'GET') {
    if (!qpath) return restError(res, 400, 'path is required');
    const p = sandbox.resolve(qpath);
    let st;
    try { st = fs.statSync(p); } catch { return restError(res, 404, `path '${p}' does not exist`); }
    if (st.isDirectory()) return restError(res, 400, `path '${p}' is a directory`);
    const headers = {
      'content-type': 'application/octet-stream',
      'content-disposition': `attachment; filename="${path.basename(p).replace(/"/g, '')}"`,
    };
    const gzip = /\bgzip\b/i.test(req.headers['accept-encoding'] ?? '');
    if (gzip) headers['content-encoding'] = 'gzip';
    else headers['content-length'] = st.size;
    res.writeHead(200, headers);
    const stages = [fs.createReadStream(p)];
    if (gzip) stages.push(createGzip());
    await pipeline(...stages, res).catch(() => {});
    return;
  }
  if (req.method !== 'POST') return restError(res, 405, 'method not allowed');
  const ctype = (req.headers['content-type'] ?? '').toLowerCase();
  if (ctype.startsWith('application/octet-stream')) {
    if (!versionAtLeast(envdVersion, '0.5.7')) {
      await readBody(req, 0).catch(() => {});
      return restError(res, 400, 'error parsing multipart form: request Content-Type isn\'t multipart/form-data');
    }
    if (!qpath) return restError(res, 400, 'path is required for application/octet-stream uploads');
    const p = sandbox.resolve(qpath);
    const err = prepareTarget(p);
    if (err) return restError(res, 400, err);
    const enc = (req.headers['content-encoding'] ?? '').toLowerCase();
    if (enc && enc !== 'gzip' && enc !== 'identity') return restError(res, 400, `unsupported content encoding ${enc}`);
    try {
      const stages = [req];
      if (enc === 'gzip') stages.push(createGunzip());
      await pipeline(...stages, fs.createWriteStream(p));
    } catch (e) {
      return restError(res, 400, `error writing file: ${e.code ?? e.message}`);
    }
    log.line('files wrote', qpath, enc === 'gzip' ? 'octet-stream gzip' : 'octet-stream');
    return sendJson(res, 200, [entry(p)]);
  }
  if (!ctype.startsWith('multipart/form-data')) {
    await readBody(req, 0).catch(() => {});
    return restError(res, 400, 'error parsing multipart form: request Content-Type isn\'t multipart/form-data');
  }
  const body = await readBody(req, kMaxMultipartBytes);
  if (body === null) return restError(res, 413, 'upload too large for this emulator');
  const parts = parseMultipart(body, req.headers['content-type']);
  if (!parts) return restError(res, 400, 'error parsing multipart form');
  const files = parts.filter((x) => x.name === 'file');
  if (!files.length) return restError(res, 400, 'no file in the multipart form');
  const written = [];
  for (const f of files) {
    const target = qpath ?? f.filename;
    if (!target) return restError(res, 400, 'path is required');
    const p = sandbox.resolve(target);
    const err = prepareTarget(p);
    if (err) return restError(res, 400, err);
    fs.writeFileSync(p, f.data);
    written.push(entry(p));
    log.line('files wrote', target, 'multipart');
  }
  return sendJson(res, 200, written);
}

// ---- control plane -----------------------------------------------------------

function sandboxDetail() {
  return {
    templateID: 'base',
    sandboxID: SANDBOX_ID,
    alias: 'base',
    clientID: 'emulator',
    envdVersion,
    envdAccessToken: accessToken,
    trafficAccessToken: null,
    domain: 'e2b.local',
  };
}

async function handleControl(req, res, url) {
  if (req.headers['x-api-key'] !== API_KEY) return restError(res, 401, 'Invalid API key');
  let m = /^\/v2\/sandboxes\/([^/]+)\/connect$/.exec(url.pathname);
  if (m && req.method === 'POST') {
    const body = await readBody(req, 1 << 20);
    let msg = {};
    try {
      if (body === null) throw new Error('body too large');
      if (body.length) msg = JSON.parse(body.toString('utf8'));
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) throw new Error('not an object');
      if (msg.timeout !== undefined && !(Number.isInteger(msg.timeout) && msg.timeout >= 0)) throw new Error('timeout must be a non-negative integer');
    } catch (e) {
      return restError(res, 400, `invalid request body: ${e.message}`);
    }
    if (decodeURIComponent(m[1]) !== SANDBOX_ID) return restError(res, 404, `sandbox "${decodeURIComponent(m[1])}" not found`);
    return sendJson(res, 200, sandboxDetail());
  }
  m = /^\/sandboxes\/([^/]+)$/.exec(url.pathname);
  if (m && req.method === 'GET') {
    if (decodeURIComponent(m[1]) !== SANDBOX_ID) return restError(res, 404, `sandbox "${decodeURIComponent(m[1])}" not found`);
    const now = new Date();
    return sendJson(res, 200, {
      ...sandboxDetail(),
      startedAt: startedAt.toISOString(),
      endAt: new Date(now.getTime() + 3600e3).toISOString(),
      cpuCount: 2, memoryMB: 512, diskSizeMB: 1024, state: 'running', metadata: {},
    });
  }
  return restError(res, 404, `no route for ${req.method} ${url.pathname}`);
}

// ---- dispatch ----------------------------------------------------------------

const startedAt = new Date();

async function handle(req, res) {
  const url = new URL(req.url, 'http://emulator');
  const proto = req.httpVersionMajor === 2 ? 'h2' : 'h1';
  const label = `${proto} ${req.method} ${url.pathname}${url.search}`;
  res.on('finish', () => log.line(label, '->', res.statusCode));
  let gone = false; // 'close' before the response is finished: the client left
  res.on('close', () => { gone = true; });
  if (faults.roll('slow')) {
    const ms = faults.slowDelayMs();
    log.line(label, 'FAULT slow', ms, 'ms');
    await sleep(ms);
    if (gone) {
      log.line(label, 'client gone during the delay: request dropped');
      return;
    }
  }
  if (faults.roll('http5xx')) {
    const status = faults.status5xx();
    log.line(label, 'FAULT http5xx', status);
    req.resume();
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(`${status} ${http.STATUS_CODES[status]} (emulated fault)\n`);
    return;
  }
  const p = url.pathname;
  const isRpc = p.startsWith('/process.Process/') || p.startsWith('/filesystem.Filesystem/');
  const isEnvd = isRpc || p === '/files' || p === '/health';
  if (!isEnvd) return handleControl(req, res, url);
  // envd runs inside the sandbox, where sandbox code can read what reaches
  // it: the account API key must never go there (envd has its own access
  // token). Logged as a VIOLATION line, which fails the conformance run.
  for (const [name, value] of Object.entries(req.headers)) {
    if (name === 'x-api-key' || String(value).includes(API_KEY)) {
      log.line(label, 'VIOLATION', 'credential', `the account API key reached envd in ${name}`);
      process.stderr.write(`e2b emulator: VIOLATION credential: ${label} the API key in ${name}\n`);
    }
  }
  if (!debugEnvd) {
    // The edge proxy routes envd calls by these headers (EMULATORS.md: the
    // SDK sends both on every call, the port is envd's 49983). What it
    // answers without them is not documented: here, what it answers for a
    // sandbox or port it cannot reach.
    const sbxHeader = req.headers['e2b-sandbox-id'];
    if (sbxHeader !== SANDBOX_ID) {
      req.resume();
      log.line(label, 'proxy: E2b-Sandbox-Id', sbxHeader === undefined ? 'missing' : 'unknown');
      return sendJson(res, 502, { sandboxId: sbxHeader ?? '', message: 'The sandbox was not found', code: 502 });
    }
    const portHeader = req.headers['e2b-sandbox-port'];
    if (portHeader !== ENVD_PORT) {
      req.resume();
      log.line(label, 'proxy: E2b-Sandbox-Port', portHeader === undefined ? 'missing' : 'not envd\'s');
      return sendJson(res, 502, { sandboxId: sbxHeader, message: 'The sandbox is running but port is not open', port: Number(portHeader) || 0, code: 502 });
    }
  }
  if (p === '/health') {
    req.resume();
    res.writeHead(204);
    return res.end();
  }
  if (!debugEnvd && req.headers['x-access-token'] === accessToken && faults.roll('rotate')) {
    accessToken = 'envd_' + randomBytes(16).toString('hex');
    log.line(label, 'FAULT rotate');
  }
  if (!debugEnvd && req.headers['x-access-token'] !== accessToken) {
    req.resume();
    return isRpc
      ? sendRpcError(res, new RpcError('unauthenticated', 'unauthorized access, please provide a valid access token'))
      : restError(res, 401, 'unauthorized access, please provide a valid access token');
  }
  if (p === '/files') return handleFiles(req, res, url);
  const method = p.slice(p.lastIndexOf('/') + 1);
  if (req.method !== 'POST') return sendRpcError(res, new RpcError('unimplemented', 'method must be POST'));
  if (p.startsWith('/filesystem.Filesystem/')) {
    req.resume();
    return sendRpcError(res, new RpcError('unimplemented', `filesystem.Filesystem.${method} is not implemented by this emulator`));
  }
  if (method === 'Start' || method === 'Connect') return handleServerStream(req, res, method, label);
  if (method === 'StreamInput') return handleStreamInput(req, res);
  if (method === 'CloseStdin' && !versionAtLeast(envdVersion, '0.5.2')) {
    // envd before 0.5.2 has no such route: its mux answers a plain 404.
    req.resume();
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
    return res.end('404 page not found\n');
  }
  return handleUnary(req, res, method);
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    log.line('internal error', req.method, req.url, String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) {
      try { sendJson(res, 500, { code: 500, message: 'emulator internal error' }); } catch { /* closed */ }
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
  server = http2.createSecureServer({
    allowHTTP1: true,
    key: fs.readFileSync(certs.key),
    cert: fs.readFileSync(certs.chain),
  }, onRequest);
  server.on('sessionError', () => {});
  // Nagle's algorithm off, as on every connection of a Go server (envd is
  // one; Go sets TCP_NODELAY by default) and of Node's own http.Server: a
  // TLS server of Node leaves it on, and then a small write after the
  // response's head waited for the client's delayed ACK (~40 ms).
  server.on('secureConnection', (socket) => socket.setNoDelay(true));
} else {
  server = http.createServer(onRequest);
}
server.keepAliveTimeout = 60_000;
server.on('clientError', (_e, socket) => socket.destroy());
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  log.line('listening', `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`, `envd=${envdVersion}`, `faults=${faults.describe()}`, debugEnvd ? 'debug-envd' : '');
  announceAndWait(args.dir, {
    url: `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    ca,
    sandbox: SANDBOX_ID,
    api_key: API_KEY,
  }, (why) => {
    log.line('shutdown', why);
    sandbox.killAll();
  });
});
