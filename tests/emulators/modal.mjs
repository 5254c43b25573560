#!/usr/bin/env node
// Modal emulator: the control plane (modal.client.ModalClient) and a task
// command router (modal.task_command_router.TaskCommandRouter) on ONE local
// gRPC port, backed by real local processes. Wire facts:
// /work/shared/EMULATORS.md section 5 and PROVIDERS.md (Modal); messages are
// encoded by hand in lib/modal_wire.mjs.
//
// Command line (the C++ tests rely on it exactly):
//   node tests/emulators/modal.mjs --dir DIR [--tls] [--faults SPEC]
//     --dir DIR      scratch directory: requests.log, endpoint.json, the
//                    certificates (with --tls) and the sandbox DIR/sandbox/
//                    (home/ is HOME and the default cwd, tmp/ is TMPDIR).
//     --tls          gRPC over TLS with a throwaway CA written to DIR/ca.pem;
//                    otherwise plaintext h2c.
//     --faults SPEC  seeded fault injection, see below.
//   Listens on 127.0.0.1, port 0. When ready it prints ONE JSON line on stdout
//   (also DIR/endpoint.json):
//     {"url":"http(s)://127.0.0.1:P","url_alt":"http(s)://127.0.0.2:P" (served
//      with --tls only),"ca":"DIR/ca.pem"|null,"sandbox":"sb-...",
//      "sandbox_v2":"sbx-v2-test","token_id":"ak-test","token_secret":"as-test"}
//   and runs until SIGTERM/SIGINT or EOF on a piped stdin; it then SIGKILLs
//   the process groups it started and exits 0. Exit code 2: bad command line.
//
// Control plane: every call needs x-modal-client-type (digits) and
// x-modal-client-version (x.y.z), as the SDK sends them (else
// FAILED_PRECONDITION). AuthTokenGet checks x-modal-token-id / x-modal-token-secret
// and returns a JWT (exp one hour ahead); every other call needs it as
// x-modal-auth-token. SandboxGetTaskId (for "sb-" + 22 base62 ids) and
// SandboxGetTaskIdV2 (any other id) give the task; TaskGetCommandRouterAccess
// {task_id} / SandboxGetCommandRouterAccess {sandbox_id} give the router's
// URL, https://<the host:port the call was addressed to> (the SDK dials it
// in plaintext when the server URL is 127.0.0.1/localhost, as this emulator
// serves it without --tls; with --tls it also listens on 127.0.0.2, which the
// SDK does not take for localhost, so its router calls use TLS), and a router
// JWT. Unknown sandbox or task: NOT_FOUND.
//
// Router (metadata authorization: Bearer <router JWT>; UNAUTHENTICATED when
// missing, unknown or expired):
//   TaskExecStart       starts command_args for real (env, workdir); idempotent
//                       per exec_id: a second start with that id starts nothing.
//   TaskExecStdinWrite  data at an exact offset: bytes already written are
//                       skipped (idempotent), a gap is OUT_OF_RANGE; eof closes
//                       stdin (data after it: FAILED_PRECONDITION). Answered
//                       once the bytes reached the process's pipe.
//   TaskExecStdioRead   server streaming: fd 0 stdout, 1 stderr, from any
//                       offset; every byte ever written is kept, so a reader
//                       can come back from where it was cut. Ends at EOF.
//   TaskExecWait        {code} or {signal} once the process exited.
//   TaskExecPoll        the same, or an empty message while it runs.
// Faithful limits: no kill, no signal, no resize RPC (UNIMPLEMENTED, as for
// any method not listed); a pty_info with enabled=true is refused
// (INVALID_ARGUMENT: this emulator has no pty), dropping a stream never
// touches the process.
//
// Faults (--faults SPEC, comma-separated; lib/faults.mjs):
//   seed=N         PRNG seed (default 1).
//   cut=P          per stdio message: write half of it, then reset the HTTP/2
//                  stream (RST_STREAM INTERNAL_ERROR). The process keeps running.
//   unavailable=P  per unary call: UNAVAILABLE, alternately before doing
//                  anything and after doing it (the answer lost).
//   slow=P         per unary call and per stdio message: stall 1-3 s.
//   expire         router JWTs expire 3 s after they are issued: calls with an
//                  expired one, and streams open when it expires, get
//                  UNAUTHENTICATED until the client fetches a new one.
import grpc from '@grpc/grpc-js';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';

import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import * as W from './lib/modal_wire.mjs';
import { Sandbox } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node modal.mjs --dir DIR [--tls] [--faults SPEC]';
const SANDBOX_V1 = 'sb-Tether0Emulator0Test01'; // "sb-" + 22 base62: the V1 calls
const SANDBOX_V2 = 'sbx-v2-test';                // anything else: the V2 calls
const TASK_ID = 'ta-Tether0Emulator0Task01';
const TOKEN_ID = 'ak-test';
const TOKEN_SECRET = 'as-test';
const kChunk = 256 << 10;          // stdio bytes per message (gRPC's default limit is 4 MiB)
const kAuthTokenSeconds = 3600;
const kRouterJwtSeconds = 3600;
const kExpiringJwtSeconds = 3;     // with the `expire` fault
const kMaxExecs = 4096;

const args = parseArgs(process.argv.slice(2), { usage: USAGE });
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['cut', 'unavailable', 'slow'], flags: ['expire'] });
} catch (e) {
  process.stderr.write(`${e.message}\nusage: ${USAGE}\n`);
  process.exit(2);
}
const log = new RequestLog(args.dir);
const sandbox = new Sandbox(path.join(args.dir, 'sandbox'), { hostname: 'modal-sandbox' });
const S = grpc.status;

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// ---- tokens --------------------------------------------------------------------

const b64url = (b) => Buffer.from(b).toString('base64url');
function makeJwt(ttlSeconds, sub) {
  const exp = Math.floor(Date.now() / 1000) + ttlSeconds;
  const jwt = [b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' })), b64url(JSON.stringify({ sub, exp })),
               b64url(randomBytes(32))].join('.');
  return { jwt, expMs: exp * 1000 };
}
const authTokens = new Map();   // token -> expiry (ms)
const routerJwts = new Map();   // jwt -> expiry (ms)
let routerJwtsIssued = 0;

function metaValue(call, name) {
  const v = call.metadata.get(name);
  return v.length ? String(v[0]) : '';
}
// The client identity on every control-plane call: the SDK sends
// x-modal-client-type 8 and x-modal-client-version 1.0.0 (EMULATORS.md
// section 5), and so does tether. What the real service answers without them
// is not documented; here FAILED_PRECONDITION, so a client that stops
// sending them is seen.
function checkClient(call) {
  const type = metaValue(call, 'x-modal-client-type');
  const version = metaValue(call, 'x-modal-client-version');
  if (!/^\d+$/.test(type) || !/^\d+\.\d+\.\d+$/.test(version)) {
    throw new RpcError(S.FAILED_PRECONDITION, 'missing or malformed x-modal-client-type / x-modal-client-version metadata');
  }
}
function checkAuthToken(call) {
  checkClient(call);
  const exp = authTokens.get(metaValue(call, 'x-modal-auth-token'));
  if (exp === undefined) throw new RpcError(S.UNAUTHENTICATED, 'missing or unknown x-modal-auth-token');
  if (Date.now() >= exp) throw new RpcError(S.UNAUTHENTICATED, 'the auth token expired');
}
// The task's command router is not the control plane: the account's token
// (id and secret) and the control plane's auth token must never reach it;
// it gets its own JWT. Logged as a VIOLATION line, which fails the
// conformance and chaos runs.
function checkRouterCredentials(call) {
  for (const [name, value] of Object.entries(call.metadata.getMap())) {
    const v = String(value);
    if (name.startsWith('x-modal-token') || name === 'x-modal-auth-token' || v.includes(TOKEN_ID) ||
        v.includes(TOKEN_SECRET) || authTokens.has(v)) {
      log.line('router', 'VIOLATION', 'credential', `a control-plane credential reached the router in ${name}`);
      process.stderr.write(`modal emulator: VIOLATION credential: a control-plane credential in router metadata ${name}\n`);
    }
  }
}
// The router JWT of a call; its expiry (ms).
function checkRouterJwt(call) {
  checkRouterCredentials(call);
  const h = metaValue(call, 'authorization');
  const exp = h.startsWith('Bearer ') ? routerJwts.get(h.slice(7)) : undefined;
  if (exp === undefined) throw new RpcError(S.UNAUTHENTICATED, 'missing or unknown router JWT');
  if (Date.now() >= exp) throw new RpcError(S.UNAUTHENTICATED, 'the router JWT expired');
  return exp;
}
function issueRouterJwt() {
  const { jwt, expMs } = makeJwt(faults.flag('expire') ? kExpiringJwtSeconds : kRouterJwtSeconds, TASK_ID);
  routerJwts.set(jwt, expMs);
  routerJwtsIssued++;
  return jwt;
}

// ---- execs ---------------------------------------------------------------------

// One fd's output: every byte kept (readers resume from any offset).
class Output {
  constructor() {
    this.buf = Buffer.alloc(0);
    this.len = 0;
    this.ended = false;
    this.waiters = new Set();
  }
  append(b) {
    if (this.len + b.length > this.buf.length) {
      const bigger = Buffer.alloc(Math.max(this.buf.length * 2, this.len + b.length, 64 << 10));
      this.buf.copy(bigger, 0, 0, this.len);
      this.buf = bigger;
    }
    b.copy(this.buf, this.len);
    this.len += b.length;
    this.wake();
  }
  end() {
    this.ended = true;
    this.wake();
  }
  wake() {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }
  changed() { return new Promise((r) => this.waiters.add(r)); }
}

const execs = new Map(); // exec_id -> Exec

class Exec {
  constructor(id, req, child) {
    this.id = id;
    this.args = JSON.stringify(req.commandArgs);
    this.child = child;
    this.out = [new Output(), new Output()];
    this.stdinWritten = 0;
    this.stdinClosed = false;
    this.stdinChain = Promise.resolve();
    this.exit = null;
    this.exitWaiters = new Set();
    const pipe = (stream, o, keep) => {
      if (!stream) return o.end();
      stream.on('data', (b) => { if (keep) o.append(b); });
      stream.on('end', () => o.end());
      stream.on('error', () => o.end());
    };
    pipe(child.stdout, this.out[0], req.stdoutConfig !== 0);
    pipe(child.stderr, this.out[1], req.stderrConfig !== 0);
    child.on('exit', (code, signal) => {
      this.exit = signal ? { signal: os.constants.signals[signal] ?? 9 } : { code: code ?? 0 };
      log.line('exec', id, 'exited', JSON.stringify(this.exit));
      for (const w of this.exitWaiters) w();
      this.exitWaiters.clear();
    });
    if (req.timeoutSecs > 0) {
      setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } },
                 req.timeoutSecs * 1000).unref();
    }
  }
  exited() { return this.exit ? Promise.resolve() : new Promise((r) => this.exitWaiters.add(r)); }
}

function findExec(req) {
  if (req.taskId !== TASK_ID) throw new RpcError(S.NOT_FOUND, `task '${req.taskId}' not found`);
  const e = execs.get(req.execId);
  if (!e) throw new RpcError(S.NOT_FOUND, `exec '${req.execId}' not found`);
  return e;
}

function execStart(req) {
  if (req.taskId !== TASK_ID) throw new RpcError(S.NOT_FOUND, `task '${req.taskId}' not found`);
  if (!req.execId) throw new RpcError(S.INVALID_ARGUMENT, 'exec_id is required');
  const seen = execs.get(req.execId);
  if (seen) {
    if (seen.args !== JSON.stringify(req.commandArgs)) {
      throw new RpcError(S.ALREADY_EXISTS, `exec '${req.execId}' exists with other arguments`);
    }
    log.line('TaskExecStart', req.execId, 'again: already started');
    return;
  }
  if (!req.commandArgs.length) throw new RpcError(S.INVALID_ARGUMENT, 'command_args is empty');
  if (req.ptyInfo?.enabled) throw new RpcError(S.INVALID_ARGUMENT, 'this emulator has no pty (pty_info.enabled)');
  if (execs.size >= kMaxExecs) throw new RpcError(S.RESOURCE_EXHAUSTED, 'too many execs');
  const r = sandbox.spawn(req.commandArgs[0], req.commandArgs.slice(1),
                          { envs: req.env, cwd: req.workdir ?? undefined, stdin: true });
  if (r.error) throw new RpcError(S.FAILED_PRECONDITION, r.error.message);
  execs.set(req.execId, new Exec(req.execId, req, r.child));
  log.line('TaskExecStart', req.execId, 'pid', r.child.pid, req.commandArgs[0]);
}

// Writes in order, each answered once its bytes reached the pipe.
function stdinWrite(req) {
  const e = findExec(req);
  const run = async () => {
    const end = req.offset + req.data.length;
    if (req.offset > e.stdinWritten) {
      throw new RpcError(S.OUT_OF_RANGE, `stdin offset ${req.offset} is past the ${e.stdinWritten} bytes written`);
    }
    if (end > e.stdinWritten) {
      if (e.stdinClosed) throw new RpcError(S.FAILED_PRECONDITION, 'stdin is closed');
      const fresh = req.data.subarray(e.stdinWritten - req.offset);
      e.stdinWritten = end;
      await new Promise((resolve) => e.child.stdin.write(fresh, () => resolve()));
    }
    if (req.eof && !e.stdinClosed) {
      e.stdinClosed = true;
      e.child.stdin.end();
      log.line('TaskExecStdinWrite', e.id, 'eof at', e.stdinWritten);
    }
  };
  const p = e.stdinChain.then(run);
  e.stdinChain = p.catch(() => {});
  return p;
}

// ---- the gRPC services ---------------------------------------------------------

const raw = (b) => b;
function method(service, name, responseStream = false) {
  return { path: `/${service}/${name}`, requestStream: false, responseStream,
           requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw };
}

function decodeOr(fn, buf) {
  try {
    return fn(buf);
  } catch (e) {
    throw new RpcError(S.INVALID_ARGUMENT, `malformed request: ${e.message}`);
  }
}

let unavailableAfter = false; // alternates: before doing anything / after doing it

// A unary handler: fault injection, errors as statuses.
function unary(name, fn) {
  return async (call, callback) => {
    try {
      if (faults.roll('slow')) await sleep(faults.slowDelayMs());
      const fault = faults.roll('unavailable');
      unavailableAfter = fault ? !unavailableAfter : unavailableAfter;
      if (fault && !unavailableAfter) {
        log.line(name, 'FAULT unavailable (before)');
        return callback({ code: S.UNAVAILABLE, details: 'emulated: unavailable' });
      }
      const resp = await fn(call.request, call);
      if (fault) {
        log.line(name, 'FAULT unavailable (after, answer lost)');
        return callback({ code: S.UNAVAILABLE, details: 'emulated: unavailable after the call' });
      }
      callback(null, resp ?? W.empty());
    } catch (e) {
      if (!(e instanceof RpcError)) log.line(name, 'internal error', String(e?.stack ?? e));
      log.line(name, 'error', e.code ?? S.INTERNAL, e.message);
      callback({ code: e instanceof RpcError ? e.code : S.INTERNAL, details: e.message });
    }
  };
}

const CP = 'modal.client.ModalClient';
const RT = 'modal.task_command_router.TaskCommandRouter';

const control = {
  AuthTokenGet: unary('AuthTokenGet', (_b, call) => {
    checkClient(call);
    if (metaValue(call, 'x-modal-token-id') !== TOKEN_ID || metaValue(call, 'x-modal-token-secret') !== TOKEN_SECRET) {
      throw new RpcError(S.UNAUTHENTICATED, 'token id or secret refused');
    }
    const { jwt, expMs } = makeJwt(kAuthTokenSeconds, 'client');
    authTokens.set(jwt, expMs);
    log.line('AuthTokenGet', 'ok');
    return W.AuthTokenGetResponse(jwt);
  }),
  SandboxGetTaskId: unary('SandboxGetTaskId', (b, call) => {
    checkAuthToken(call);
    const r = decodeOr(W.SandboxGetTaskIdRequest, b);
    if (r.sandboxId !== SANDBOX_V1) throw new RpcError(S.NOT_FOUND, `sandbox '${r.sandboxId}' not found`);
    log.line('SandboxGetTaskId', r.sandboxId);
    return W.SandboxGetTaskIdResponse(TASK_ID);
  }),
  SandboxGetTaskIdV2: unary('SandboxGetTaskIdV2', (b, call) => {
    checkAuthToken(call);
    const r = decodeOr(W.SandboxGetTaskIdRequest, b);
    if (r.sandboxId !== SANDBOX_V2) throw new RpcError(S.NOT_FOUND, `sandbox '${r.sandboxId}' not found`);
    log.line('SandboxGetTaskIdV2', r.sandboxId);
    return W.SandboxGetTaskIdResponse(TASK_ID);
  }),
  TaskGetCommandRouterAccess: unary('TaskGetCommandRouterAccess', (b, call) => {
    checkAuthToken(call);
    const r = decodeOr(W.TaskGetCommandRouterAccessRequest, b);
    if (r.taskId !== TASK_ID) throw new RpcError(S.NOT_FOUND, `task '${r.taskId}' not found`);
    log.line('TaskGetCommandRouterAccess', r.taskId);
    return W.RouterAccessResponse(issueRouterJwt(), routerUrl(call));
  }),
  SandboxGetCommandRouterAccess: unary('SandboxGetCommandRouterAccess', (b, call) => {
    checkAuthToken(call);
    const r = decodeOr(W.SandboxGetCommandRouterAccessRequest, b);
    if (r.sandboxId !== SANDBOX_V2) throw new RpcError(S.NOT_FOUND, `sandbox '${r.sandboxId}' not found`);
    log.line('SandboxGetCommandRouterAccess', r.sandboxId);
    return W.RouterAccessResponse(issueRouterJwt(), routerUrl(call));
  }),
};

// The router is where the client reached the control plane (its :authority).
function routerUrl(call) {
  const host = call.getHost?.() || `127.0.0.1:${port}`;
  return `https://${host}`;
}

// The HTTP/2 stream under a grpc-js server call (for the cut fault).
function h2Stream(call) {
  let c = call.call;
  for (let i = 0; c && i < 4; i++, c = c.nextCall) {
    if (c.stream && typeof c.stream.close === 'function' && typeof c.stream.write === 'function') return c.stream;
  }
  return null;
}

async function stdioRead(call) {
  let req;
  let exp;
  try {
    exp = checkRouterJwt(call);
    req = decodeOr(W.TaskExecStdioReadRequest, call.request);
    if (req.fd !== 0 && req.fd !== 1) throw new RpcError(S.INVALID_ARGUMENT, `file_descriptor ${req.fd}`);
  } catch (e) {
    call.emit('error', { code: e.code ?? S.INTERNAL, details: e.message });
    return;
  }
  let e;
  try {
    e = findExec(req);
  } catch (err) {
    call.emit('error', { code: err.code, details: err.message });
    return;
  }
  const out = e.out[req.fd];
  let offset = req.offset;
  let gone = false;
  call.on('cancelled', () => { gone = true; out.wake(); });
  call.on('close', () => { gone = true; out.wake(); });
  let expiry = null;
  if (faults.flag('expire')) {
    expiry = setTimeout(() => {
      if (gone) return;
      gone = true;
      log.line('TaskExecStdioRead', e.id, 'FAULT router JWT expired on an open stream at', offset);
      call.emit('error', { code: S.UNAUTHENTICATED, details: 'emulated: the router JWT expired' });
    }, Math.max(0, exp - Date.now()));
  }
  log.line('TaskExecStdioRead', e.id, 'fd', req.fd, 'from', offset);
  let lastWrite = Promise.resolve();
  try {
    while (!gone) {
      if (offset < out.len) {
        const n = Math.min(kChunk, out.len - offset);
        const data = Buffer.from(out.buf.subarray(offset, offset + n));
        if (faults.roll('slow')) await sleep(faults.slowDelayMs());
        if (gone) break;
        if (faults.roll('cut')) {
          const s = h2Stream(call);
          if (s) {
            await lastWrite; // grpc-js frames asynchronously: its bytes go first
            const msg = W.TaskExecStdioReadResponse(data);
            const head = Buffer.alloc(5);
            head.writeUInt32BE(msg.length, 1);
            s.write(Buffer.concat([head, msg.subarray(0, msg.length >> 1)]));
            log.line('TaskExecStdioRead', e.id, 'FAULT cut at', offset);
            gone = true;
            setTimeout(() => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR), 20);
            break;
          }
        }
        offset += n;
        let ok;
        lastWrite = new Promise((r) => { ok = call.write(W.TaskExecStdioReadResponse(data), () => r()); });
        if (!ok) {
          await new Promise((r) => { call.once('drain', r); call.once('close', r); });
        }
      } else if (out.ended) {
        call.end();
        log.line('TaskExecStdioRead', e.id, 'fd', req.fd, 'EOF at', offset);
        break;
      } else {
        await out.changed();
      }
    }
  } finally {
    if (expiry) clearTimeout(expiry);
  }
}

const router = {
  TaskExecStart: unary('TaskExecStart', (b, call) => {
    checkRouterJwt(call);
    execStart(decodeOr(W.TaskExecStartRequest, b));
  }),
  TaskExecStdinWrite: unary('TaskExecStdinWrite', async (b, call) => {
    checkRouterJwt(call);
    await stdinWrite(decodeOr(W.TaskExecStdinWriteRequest, b));
  }),
  TaskExecPoll: unary('TaskExecPoll', (b, call) => {
    checkRouterJwt(call);
    return W.ExitResponse(findExec(decodeOr(W.TaskExecIdRequest, b)).exit);
  }),
  TaskExecWait: unary('TaskExecWait', async (b, call) => {
    checkRouterJwt(call);
    const e = findExec(decodeOr(W.TaskExecIdRequest, b));
    await e.exited();
    return W.ExitResponse(e.exit);
  }),
  TaskExecStdioRead: stdioRead,
};

function definition(service, impl, streaming = []) {
  const d = {};
  for (const name of Object.keys(impl)) d[name] = method(service, name, streaming.includes(name));
  return d;
}

// ---- start -----------------------------------------------------------------------

const server = new grpc.Server({ 'grpc.max_receive_message_length': 100 << 20 });
server.addService(definition(CP, control), control);
server.addService(definition(RT, router, ['TaskExecStdioRead']), router);

let creds;
let ca = null;
if (args.tls) {
  const c = makeCerts(args.dir);
  ca = c.ca;
  creds = grpc.ServerCredentials.createSsl(null, [{ private_key: fs.readFileSync(c.key),
                                                    cert_chain: fs.readFileSync(c.chain) }], false);
} else {
  creds = grpc.ServerCredentials.createInsecure();
}
const bind = (addr) => new Promise((resolve, reject) => {
  server.bindAsync(addr, creds, (err, port) => (err ? reject(err) : resolve(port)));
});
let port;
try {
  port = await bind('127.0.0.1:0');
  // Also 127.0.0.2 (same port): a loopback address that the SDK does not take
  // for localhost, so it dials the router with TLS as it would in production.
  if (args.tls) await bind(`127.0.0.2:${port}`);
} catch (err) {
  process.stderr.write(`bind: ${err.message}\n`);
  process.exit(1);
}
{
  const url = `${args.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  log.line('listening', url, 'faults', faults.describe());
  announceAndWait(args.dir, { url, url_alt: `${args.tls ? 'https' : 'http'}://127.0.0.2:${port}`, ca,
                              sandbox: SANDBOX_V1, sandbox_v2: SANDBOX_V2,
                              token_id: TOKEN_ID, token_secret: TOKEN_SECRET }, (why) => {
    log.line('shutdown', why, 'router_jwts_issued', routerJwtsIssued, 'faults', JSON.stringify(faults.count));
    sandbox.killAll();
  });
}
