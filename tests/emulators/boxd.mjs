#!/usr/bin/env node
// boxd emulator: the gRPC service boxd.api.v1.BoxdApi (Exec, UploadFileStream,
// GetVm) for one VM, and the API-key -> JWT exchange, backed by real local
// processes. Wire facts: /work/shared/BOXD.md (sections 1-3) and
// PROVIDERS.md (boxd); messages are encoded by hand in lib/boxd_wire.mjs.
// No boxd SDK is reachable, so boxd_facts.test.mjs is its only proof.
//
// Command line (tests/lib/boxd_emulator.sh and the C++ tests rely on it exactly):
//   node tests/emulators/boxd.mjs --dir DIR [--tls] [--faults SPEC] [--jwt-ttl-ms MS]
//     --dir DIR         scratch directory: requests.log, endpoint.json, the
//                       certificates (with --tls) and the VM DIR/vm-emu/
//                       (home/ is HOME and the cwd of every command, tmp/ is TMPDIR).
//     --tls             gRPC and the token exchange over TLS with a throwaway CA
//                       written to DIR/ca.pem (a cert for 127.0.0.1 and localhost);
//                       otherwise plaintext: h2c and HTTP/1.1.
//     --faults SPEC     seeded faults, see below.
//     --jwt-ttl-ms MS   lifetime of an issued JWT (default 3600000, as boxd's ~1 h).
//   Two servers on 127.0.0.1, port 0 each. When ready it prints ONE JSON line on
//   stdout (also DIR/endpoint.json):
//     {"url":"http(s)://127.0.0.1:P" (gRPC), "auth_url":"http(s)://127.0.0.1:Q/api/v1/auth/token",
//      "ca":"DIR/ca.pem"|null, "vm":"vm-emu", "api_key":"bxd_" + 43 base62}
//   and runs until SIGTERM/SIGINT or EOF on a piped stdin; it then SIGKILLs the
//   process groups it started and exits 0. Exit code 2: a bad command line.
//
// Token exchange (HTTP/1.1): POST /api/v1/auth/token {"api_key": KEY}
//   -> 200 {"token": JWT, "expires_at": unix s, "user_id": "usr-emu"};
//   401 {"message"} for a wrong or missing key, 400 for a body that is not a
//   JSON object, 413 above 64 KiB, 404 another path, 405 another method.
//   The JWT is HS256 (signed with a secret made at start), exp = expires_at.
//   Tokens are remembered here; every gRPC call needs metadata
//   `authorization: Bearer <JWT>` of an issued, unexpired one, else
//   UNAUTHENTICATED ("... expired" for an expired one). expires_at is rounded
//   down to the second, so a client that trusts it never holds a token this
//   server already counts as expired.
// Violations (each a " VIOLATION KIND ..." line in requests.log, counted in the
//   shutdown line; the tests fail on any): api-key-on-grpc (the API key in any
//   gRPC metadata name or value: it belongs to the token exchange only),
//   api-key-in-url (the key in the exchange's URL).
//
// gRPC (`/boxd.api.v1.BoxdApi/...`; messages capped at 4 MiB both ways, so a
// larger client message fails its call RESOURCE_EXHAUSTED; other methods
// UNIMPLEMENTED):
//   Exec (bidi stream of ExecChunk). The first client chunk must carry vm_id
//     and command (else INVALID_ARGUMENT); vm_id other than "vm-emu":
//     NOT_FOUND; tty=true: UNIMPLEMENTED "tty is not emulated". The command
//     runs as `/bin/sh -c COMMAND` in a process group of its own, stdin a pipe.
//     Later chunks {data, stdin: true} go to stdin in order (read no faster
//     than the child takes them); window_change chunks and chunks with neither
//     flag are ignored. The client's half-close closes stdin (EOF). Output:
//     {data} for stdout, {data, is_stderr: true} for stderr, at most 64 KiB a
//     chunk, in the order the child wrote them, read from the pipes only while
//     gRPC flow control lets the chunks out (a slow client stops the child).
//     When both pipes ended and the child exited: a final chunk {exit_code}
//     (an empty chunk for 0), then status OK. The call ending any other way
//     (the client cancels, its connection dies, a message above 4 MiB, a
//     deadline, a fault) kills the command's process group: SIGTERM, then
//     SIGKILL 2 s later [BOXD.md S17].
//   UploadFileStream (client stream of UploadFileChunk -> UploadFileResponse).
//     The first chunk carries vm_id, path and total_size (and may carry data),
//     later chunks data. Writes the file (created or truncated, mode 0644)
//     and answers {bytes_written}. A path that is not absolute, or bytes
//     received != total_size: INVALID_ARGUMENT, and the file is removed (also
//     when the client cancels); unknown vm: NOT_FOUND; a missing parent
//     directory: FAILED_PRECONDITION.
//   GetVm {vm_id} -> {vm_id, name: "emu", status: "running"}; unknown: NOT_FOUND.
//
// Assumptions where BOXD.md leaves a gap (the C++ adapter is written to the same):
//   - A signal death is exit_code 128+N (BOXD.md: "not established").
//   - tty is refused (UNIMPLEMENTED): the PTY path is unverified upstream and
//     tether brings its own pty; window_change is accepted and ignored.
//   - A command that exits normally leaves its process group alone: only a
//     call that ends otherwise kills it. Processes that left the group
//     (setsid) are never killed by a cancel. (Real boxd runs each exec in its
//     own process namespace [S3], where everything may die with the command.)
//   - The call ends after both pipes reached EOF, so a background process
//     that keeps stdout open keeps the call open.
//   - Token expiry is checked when a call starts; an open call outlives its token.
//   - Exec and GetVm take the VM id only, not its name ("emu").
//   - UploadFileStream: a real local path (the "VM" is this machine, as in the
//     other emulators); parents are NOT created (an upload into a directory
//     that does not exist is FAILED_PRECONDITION: mkdir it with an Exec); the
//     file is 0644 whatever it was before (chmod +x needs an Exec); a failed
//     upload leaves no file at the path, even one that was there before.
//     Uploads above 1 GiB (total_size) are RESOURCE_EXHAUSTED.
//   - At most 256 Exec calls run at once; more: RESOURCE_EXHAUSTED.
//   - The exchange's rate limit (429) is not emulated.
//
// Faults (--faults SPEC, comma-separated; lib/faults.mjs; each one logged as a
// "FAULT KIND" line and counted in the shutdown line):
//   seed=N         PRNG seed (default 1).
//   unavailable=P  per gRPC call (any method): UNAVAILABLE before anything is done.
//   expire=P       per Exec call with a valid token: that token expires now, so
//                  this call and every later one with it are UNAUTHENTICATED
//                  ("expired") until the client exchanges its key again.
//   lost=P         per Exec call: the command starts, then, at its first
//                  output (withheld), its exit, or 500 ms after the start,
//                  whichever comes first, the call ends UNAVAILABLE with no
//                  output sent (the answer lost after the call took effect);
//                  as any call that ends so, its process group is killed.
//   cut=P          per Exec call: once output chunk K was sent (K 1..5, from
//                  the seed), half of a further message is written and the
//                  call's HTTP/2 stream is reset (RST_STREAM INTERNAL_ERROR;
//                  grpc-js clients see INTERNAL); a command that ends before
//                  chunk K gets the reset instead of its exit chunk. The process group is killed as
//                  for a cancel. Only that call ends: other calls on the same
//                  connection go on (a real cut would end them too; resetting
//                  one stream keeps the schedule per call).
//   stall=P        per output chunk: hold it 2-4 s before sending it.
// Roll order per Exec call: unavailable, expire, lost, cut; stall per chunk.
import grpc from '@grpc/grpc-js';
import { createHmac, randomBytes, randomInt } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import * as W from './lib/boxd_wire.mjs';
import { makeCerts } from './lib/certs.mjs';
import { Faults } from './lib/faults.mjs';
import { Sandbox } from './lib/sandbox.mjs';
import { announceAndWait, parseArgs, readBody, RequestLog, sleep } from './lib/server.mjs';

const USAGE = 'node boxd.mjs --dir DIR [--tls] [--faults SPEC] [--jwt-ttl-ms MS]';
const VM_ID = 'vm-emu';
const VM_NAME = 'emu';
const USER_ID = 'usr-emu';
const AUTH_PATH = '/api/v1/auth/token';
const SERVICE = 'boxd.api.v1.BoxdApi';
const kMaxMessageBytes = 4 << 20;       // gRPC's default cap, which boxd keeps [BOXD.md section 3]
const kMaxChunkBytes = 64 << 10;        // output bytes per ExecChunk
const kQueueHigh = 4;                   // output chunks waiting to go out before the pipes pause
const kKillGraceMs = 2000;              // SIGTERM -> SIGKILL on a cancelled exec [S17]
const kStallMinMs = 2000;               // stall fault: 2-4 s
const kLostMaxWaitMs = 500;             // lost fault: the latest it fires after the start
const kMaxAuthBody = 64 << 10;
const kMaxUploadBytes = 1 << 30;
const kMaxExecs = 256;
const kLogCommandChars = 200;

const args = parseArgs(process.argv.slice(2), { usage: USAGE, valued: ['jwt-ttl-ms'] });
const usageError = (msg) => {
  process.stderr.write(`${msg}\nusage: ${USAGE}\n`);
  process.exit(2);
};
let faults;
try {
  faults = new Faults(args.faults, { kinds: ['unavailable', 'cut', 'stall', 'expire', 'lost'], flags: [] });
} catch (e) {
  usageError(e.message);
}
const jwtTtlMs = args['jwt-ttl-ms'] === undefined ? 3_600_000 : Number(args['jwt-ttl-ms']);
if (!/^\d+$/.test(args['jwt-ttl-ms'] ?? '0') || !Number.isSafeInteger(jwtTtlMs) || jwtTtlMs <= 0) {
  usageError(`--jwt-ttl-ms must be a positive integer, got '${args['jwt-ttl-ms']}'`);
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const apiKey = 'bxd_' + Array.from({ length: 43 }, () => BASE62[randomInt(62)]).join('');
const jwtSecret = randomBytes(32);
const log = new RequestLog(args.dir);
const vm = new Sandbox(path.join(args.dir, VM_ID), { hostname: VM_ID });
const S = grpc.status;
const counts = { exchanges: 0, exchanges_refused: 0, Exec: 0, UploadFileStream: 0, GetVm: 0 };
const violations = { 'api-key-on-grpc': 0, 'api-key-in-url': 0 };
const groups = new Set();   // process groups started and maybe still alive
let runningExecs = 0;

class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}
const statusName = (code) => Object.keys(S).find((k) => S[k] === code) ?? String(code);

function violation(kind, what) {
  violations[kind]++;
  log.line('VIOLATION', kind, what);
  process.stderr.write(`boxd emulator: VIOLATION ${kind}: ${what}\n`);
}

// ---- tokens ----------------------------------------------------------------------

const tokens = new Map();   // jwt -> expiry (ms)

function issueJwt() {
  const expMs = Date.now() + jwtTtlMs;
  const exp = Math.floor(expMs / 1000);
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({
    sub: USER_ID, iat: Math.floor(Date.now() / 1000), exp, jti: randomBytes(8).toString('hex') })}`;
  const jwt = `${head}.${createHmac('sha256', jwtSecret).update(head).digest('base64url')}`;
  tokens.set(jwt, expMs);
  return { jwt, exp };
}

// The API key must never travel on gRPC: any metadata name or value holding it.
function checkNoApiKey(call, method) {
  for (const [name, values] of Object.entries(call.metadata.toJSON())) {
    const all = [name, ...values.map((v) => (Buffer.isBuffer(v) ? v.toString('latin1') : String(v)))];
    if (all.some((v) => v.includes(apiKey))) violation('api-key-on-grpc', `${method}: the API key in metadata '${name}'`);
  }
}
// The caller's token, or an RpcError.
function checkToken(call) {
  const h = call.metadata.get('authorization');
  const v = h.length ? String(h[0]) : '';
  if (!v) throw new RpcError(S.UNAUTHENTICATED, 'missing authorization metadata');
  if (!v.startsWith('Bearer ')) throw new RpcError(S.UNAUTHENTICATED, 'authorization is not a Bearer token');
  const jwt = v.slice(7);
  const exp = tokens.get(jwt);
  if (exp === undefined) throw new RpcError(S.UNAUTHENTICATED, 'invalid token');
  if (Date.now() >= exp) throw new RpcError(S.UNAUTHENTICATED, 'token expired');
  return jwt;
}
// What every call does first: the key check, the unavailable fault, the token.
function admit(call, method) {
  counts[method]++;
  checkNoApiKey(call, method);
  if (faults.roll('unavailable')) {
    log.line(method, 'FAULT unavailable');
    throw new RpcError(S.UNAVAILABLE, 'emulated: unavailable');
  }
  return checkToken(call);
}

// ---- process groups ----------------------------------------------------------------

function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}
// SIGTERM the group, SIGKILL what is left of it kKillGraceMs later.
function killGroup(pgid, label) {
  try { process.kill(-pgid, 'SIGTERM'); } catch { return; }
  log.line(label, 'SIGTERM pgid', pgid);
  setTimeout(() => {
    if (!groupAlive(pgid)) return groups.delete(pgid);
    log.line(label, 'SIGKILL pgid', pgid);  // (first: a reader of the log sees the line before the effect)
    try { process.kill(-pgid, 'SIGKILL'); } catch { /* gone */ }
    groups.delete(pgid);
  }, kKillGraceMs).unref();
}

// ---- Exec ----------------------------------------------------------------------------

// The HTTP/2 stream under a grpc-js server call (for the cut fault).
function h2Stream(call) {
  let c = call.call;
  for (let i = 0; c && i < 4; i++, c = c.nextCall) {
    if (c.stream && typeof c.stream.close === 'function' && typeof c.stream.write === 'function') return c.stream;
  }
  return null;
}

let execSeq = 0;

function exec(call) {
  const label = `exec#${++execSeq}`;
  let vmId = '';
  let command = '';
  let done = false;       // the call's end was decided (status sent, cut or cancelled)
  let child = null;
  let pgid = 0;
  let counted = false;
  let lostTimer = null;
  let lose = false;       // lost fault: withhold all output, then UNAVAILABLE
  let cut = false;        // cut fault: reset the stream after output chunk number cutAfter
  let cutAfter = 1;
  let chunksSent = 0;
  let sentData = false;
  const queue = [];       // {data, isStderr} | {exit}
  let pumping = false;
  let pipesPaused = false;

  const summary = (status) => log.line('Exec', vmId || '-', JSON.stringify(command.slice(0, kLogCommandChars)), status);
  const release = () => {
    if (counted) runningExecs--;
    counted = false;
    if (lostTimer) clearTimeout(lostTimer);
  };
  // Ends the call with a non-OK status; a started command's group is killed.
  const fail = (code, details) => {
    if (done) return;
    done = true;
    release();
    summary(`${statusName(code)} ${JSON.stringify(details)}`);
    call.emit('error', { code, details });
    if (child) killGroup(pgid, label);
    resumePipes();
  };
  const pausePipes = () => {
    if (pipesPaused || !child) return;
    pipesPaused = true;
    child.stdout.pause();
    child.stderr.pause();
  };
  function resumePipes() {
    if (!pipesPaused || !child) return;
    pipesPaused = false;
    child.stdout.resume();
    child.stderr.resume();
  }
  const enqueue = (item) => {
    if (done) return;
    queue.push(item);
    if (lose) {
      pausePipes();
      return fireLost('at its first output or exit');
    }
    if (queue.length >= kQueueHigh) pausePipes();
    pump();
  };
  // Resolves when the call can take more (or ended).
  const drained = () => new Promise((resolve) => {
    const ok = () => {
      call.off('drain', ok);
      call.off('cancelled', ok);
      call.off('close', ok);
      resolve();
    };
    call.on('drain', ok);
    call.on('cancelled', ok);
    call.on('close', ok);
  });
  const written = (msg) => new Promise((resolve) => {
    const ok = () => {
      call.off('cancelled', ok);
      resolve();
    };
    call.on('cancelled', ok);
    call.write(msg, ok);
  });
  function cutNow() {
    done = true;
    release();
    summary('CUT (emulated fault: stream reset)');
    const s = h2Stream(call);
    const head = Buffer.alloc(5);
    head.writeUInt32BE(64, 1);
    try {
      if (s) {
        // Half a message (when the response has begun), then the reset.
        if (sentData) s.write(Buffer.concat([head, Buffer.alloc(20)]));
        setTimeout(() => { try { s.close(http2.constants.NGHTTP2_INTERNAL_ERROR); } catch { /* gone */ } }, 20);
      } else {
        call.emit('error', { code: S.UNAVAILABLE, details: 'emulated: connection cut' });
      }
    } catch { /* gone */ }
    if (child) killGroup(pgid, label);
    resumePipes();
  }
  async function pump() {
    if (pumping) return;
    pumping = true;
    try {
      while (queue.length && !done) {
        const item = queue.shift();
        if (item.exit !== undefined) {
          if (cut) {
            log.line(label, `FAULT cut (before the exit chunk, after ${chunksSent} output chunks)`);
            cutNow();
            break;
          }
          done = true;
          release();
          summary(`OK exit_code=${item.exit}`);
          call.write(W.encodeExecChunk({ exitCode: item.exit }));
          call.end();
          break;
        }
        if (faults.roll('stall')) {
          const ms = kStallMinMs + faults.slowDelayMs() - 1000;
          log.line(label, 'FAULT stall', ms, 'ms');
          await sleep(ms);
          if (done) break;
        }
        const msg = W.encodeExecChunk(item);
        if (cut && chunksSent + 1 >= cutAfter) {
          await written(msg);
          sentData = true;
          chunksSent++;
          if (done) break;
          log.line(label, `FAULT cut (after output chunk ${chunksSent})`);
          cutNow();
          break;
        }
        sentData = true;
        chunksSent++;
        if (!call.write(msg)) await drained();
        if (queue.length < kQueueHigh) resumePipes();
      }
    } finally {
      pumping = false;
      if (queue.length < kQueueHigh || done) resumePipes();
    }
  }
  function fireLost(when) {
    if (done) return;
    log.line(label, 'FAULT lost', when, '(UNAVAILABLE, no output sent)');
    fail(S.UNAVAILABLE, 'emulated: unavailable (the call took effect, its answer was lost)');
  }

  function start(first) {
    if (!first.vmId || !first.command) {
      throw new RpcError(S.INVALID_ARGUMENT, 'the first ExecChunk must carry vm_id and command');
    }
    vmId = first.vmId;
    command = first.command;
    if (first.vmId !== VM_ID) throw new RpcError(S.NOT_FOUND, `vm '${first.vmId}' not found`);
    if (first.tty) throw new RpcError(S.UNIMPLEMENTED, 'tty is not emulated');
    if (runningExecs >= kMaxExecs) throw new RpcError(S.RESOURCE_EXHAUSTED, `more than ${kMaxExecs} execs at once`);
    lose = faults.roll('lost');
    cut = faults.roll('cut');
    // Where in the call: after output chunk 1..5 (seeded), so a cut lands
    // anywhere in a short session, not always right after its first answer.
    if (cut) cutAfter = 1 + Math.floor((faults.slowDelayMs() - 1000) / 400);
    const r = vm.spawn('/bin/sh', ['-c', command], { stdin: true });
    if (r.error) throw new RpcError(S.INTERNAL, r.error.message);
    child = r.child;
    pgid = child.pid;
    groups.add(pgid);
    runningExecs++;
    counted = true;
    log.line(label, 'exec started pgid=' + pgid);
    child.stdin.on('error', () => {});
    for (const [stream, isStderr] of [[child.stdout, false], [child.stderr, true]]) {
      stream.on('data', (b) => {
        if (done) return;
        for (let off = 0; off < b.length; off += kMaxChunkBytes) {
          enqueue({ data: b.subarray(off, off + kMaxChunkBytes), isStderr });
        }
      });
    }
    child.on('close', (code, signal) => {
      const exit = code ?? 128 + (os.constants.signals[signal] ?? 0);
      log.line(label, 'exec ended code=' + exit);
      if (!groupAlive(pgid)) groups.delete(pgid);
      enqueue({ exit });
    });
    if (lose) lostTimer = setTimeout(() => fireLost(`${kLostMaxWaitMs} ms after the start`), kLostMaxWaitMs);
  }

  // A call that ends without our status: cancelled, connection gone, a message
  // above the cap, a deadline. grpc-js also says 'cancelled' after a status it
  // sent for us; `done` tells them apart.
  call.on('cancelled', () => {
    if (done) return;
    done = true;
    release();
    summary('CANCELLED (the call ended before its status: cancel, lost connection or a refused message)');
    if (child) killGroup(pgid, label);
    resumePipes();
  });
  call.on('error', () => {});   // our own statuses come through here too; handled by grpc-js

  try {
    admit(call, 'Exec');
    if (faults.roll('expire')) {
      tokens.set(checkToken(call), Date.now());
      log.line('Exec', 'FAULT expire (the caller\'s token expired now)');
      throw new RpcError(S.UNAUTHENTICATED, 'token expired (emulated)');
    }
  } catch (e) {
    return fail(e.code ?? S.INTERNAL, e.message);
  }

  call.on('data', (buf) => {
    if (done) return;
    let m;
    try {
      m = W.decodeExecChunk(buf);
    } catch (e) {
      return fail(S.INVALID_ARGUMENT, `malformed ExecChunk: ${e.message}`);
    }
    if (!child) {
      try {
        start(m);
      } catch (e) {
        if (!(e instanceof RpcError)) log.line(label, 'internal error', String(e?.stack ?? e));
        return fail(e.code ?? S.INTERNAL, e.message);
      }
      if (!m.stdin || !m.data.length) return;   // (a first chunk may carry stdin too)
    } else if (!m.stdin || !m.data.length) {
      return;                                   // window_change, or neither flag: ignored
    }
    if (child.stdin.writableEnded || child.stdin.destroyed) return;
    if (!child.stdin.write(m.data)) {
      // The child reads slower than the client sends: stop reading the call.
      call.pause();
      const go = () => {
        child.stdin.off('drain', go);
        child.stdin.off('close', go);
        call.resume();
      };
      child.stdin.on('drain', go);
      child.stdin.on('close', go);
    }
  });
  call.on('end', () => {
    if (done) return;
    if (!child) return fail(S.INVALID_ARGUMENT, 'the stream ended before its first ExecChunk');
    child.stdin.end();
    log.line(label, 'stdin EOF (client half-close)');
  });
}

// ---- UploadFileStream ------------------------------------------------------------------

function uploadFileStream(call, callback) {
  let done = false;
  let fd = null;
  let target = '';
  let total = 0;
  let received = 0;
  let first = true;
  const label = 'UploadFileStream';
  const removePartial = () => {
    if (fd !== null) {
      try { fs.closeSync(fd); } catch { /* closed */ }
      fd = null;
      try { fs.rmSync(target, { force: true }); } catch { /* gone */ }
    }
  };
  const finish = (err, resp) => {
    if (done) return;
    done = true;
    if (err) {
      removePartial();
      log.line(label, VM_ID, JSON.stringify(target), statusName(err.code), JSON.stringify(err.message));
      callback({ code: err.code, details: err.message });
    } else {
      log.line(label, VM_ID, JSON.stringify(target), 'OK bytes_written=' + resp);
      callback(null, W.encodeUploadFileResponse(resp));
    }
  };
  call.on('cancelled', () => {
    if (done) return;
    done = true;
    removePartial();
    log.line(label, VM_ID, JSON.stringify(target), 'CANCELLED (the partial file was removed)');
  });
  call.on('error', () => {});
  try {
    admit(call, label);
  } catch (e) {
    return finish(e);
  }
  call.on('data', (buf) => {
    if (done) return;
    try {
      let m;
      try {
        m = W.decodeUploadFileChunk(buf);
      } catch (e) {
        throw new RpcError(S.INVALID_ARGUMENT, `malformed UploadFileChunk: ${e.message}`);
      }
      if (first) {
        first = false;
        if (!m.vmId) throw new RpcError(S.INVALID_ARGUMENT, 'the first UploadFileChunk must carry vm_id');
        if (m.vmId !== VM_ID) throw new RpcError(S.NOT_FOUND, `vm '${m.vmId}' not found`);
        if (!m.path.startsWith('/') || m.path.includes('\0')) {
          throw new RpcError(S.INVALID_ARGUMENT, `path must be absolute, got ${JSON.stringify(m.path)}`);
        }
        if (m.totalSize > kMaxUploadBytes) {
          throw new RpcError(S.RESOURCE_EXHAUSTED, `total_size above ${kMaxUploadBytes} bytes`);
        }
        target = m.path;
        total = m.totalSize;
        try {
          fd = fs.openSync(target, 'w', 0o644);
          fs.fchmodSync(fd, 0o644);
        } catch (e) {
          fd = null;
          if (e.code === 'ENOENT') throw new RpcError(S.FAILED_PRECONDITION, `the directory of ${target} does not exist`);
          if (e.code === 'EACCES' || e.code === 'EPERM') throw new RpcError(S.PERMISSION_DENIED, `cannot write ${target}`);
          throw new RpcError(S.FAILED_PRECONDITION, `cannot write ${target}: ${e.code ?? e.message}`);
        }
      }
      if (m.data.length) {
        received += m.data.length;
        if (received > total) {
          throw new RpcError(S.INVALID_ARGUMENT, `more than total_size ${total} bytes received`);
        }
        fs.writeSync(fd, m.data);
      }
    } catch (e) {
      finish(e instanceof RpcError ? e : new RpcError(S.INTERNAL, String(e?.message ?? e)));
    }
  });
  call.on('end', () => {
    if (done) return;
    if (first) return finish(new RpcError(S.INVALID_ARGUMENT, 'the stream ended before its first UploadFileChunk'));
    if (received !== total) {
      return finish(new RpcError(S.INVALID_ARGUMENT, `received ${received} bytes, total_size is ${total}`));
    }
    try {
      fs.closeSync(fd);
      fd = null;
    } catch (e) {
      return finish(new RpcError(S.INTERNAL, String(e.message)));
    }
    finish(null, received);
  });
}

// ---- GetVm -------------------------------------------------------------------------------

function getVm(call, callback) {
  try {
    admit(call, 'GetVm');
    let r;
    try {
      r = W.decodeGetVmRequest(call.request);
    } catch (e) {
      throw new RpcError(S.INVALID_ARGUMENT, `malformed GetVmRequest: ${e.message}`);
    }
    if (r.vmId !== VM_ID) throw new RpcError(S.NOT_FOUND, `vm '${r.vmId}' not found`);
    log.line('GetVm', r.vmId, 'OK');
    callback(null, W.encodeGetVmResponse({ vmId: VM_ID, name: VM_NAME, status: 'running' }));
  } catch (e) {
    log.line('GetVm', '-', statusName(e.code ?? S.INTERNAL), JSON.stringify(e.message));
    callback({ code: e.code ?? S.INTERNAL, details: e.message });
  }
}

// ---- token exchange (HTTP/1.1) -------------------------------------------------------------

function sendJson(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

async function onAuthRequest(req, res) {
  const url = new URL(req.url, 'http://emulator');
  const label = `${req.method} ${url.pathname}`;
  res.on('finish', () => log.line(label, '->', res.statusCode));
  if (req.url.includes(apiKey)) violation('api-key-in-url', `${label}: the API key in the URL`);
  if (url.pathname !== AUTH_PATH) {
    req.resume();
    return sendJson(res, 404, { message: `no route for ${url.pathname}` });
  }
  if (req.method !== 'POST') {
    req.resume();
    return sendJson(res, 405, { message: `${AUTH_PATH} takes POST` });
  }
  const buf = await readBody(req, kMaxAuthBody);
  if (buf === null) return sendJson(res, 413, { message: `body above ${kMaxAuthBody} bytes` });
  let v;
  try {
    v = JSON.parse(buf.toString('utf8'));
  } catch {
    return sendJson(res, 400, { message: 'body is not JSON' });
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    return sendJson(res, 400, { message: 'body is not a JSON object' });
  }
  if (v.api_key !== apiKey) {
    counts.exchanges_refused++;
    return sendJson(res, 401, { message: v.api_key === undefined ? 'api_key is required' : 'invalid API key' });
  }
  counts.exchanges++;
  const { jwt, exp } = issueJwt();
  sendJson(res, 200, { token: jwt, expires_at: exp, user_id: USER_ID });
}

// ---- start ---------------------------------------------------------------------------------

const raw = (b) => b;
const def = (name, requestStream, responseStream) => ({
  path: `/${SERVICE}/${name}`, requestStream, responseStream,
  requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw,
});
const grpcServer = new grpc.Server({
  'grpc.max_receive_message_length': kMaxMessageBytes,
  'grpc.max_send_message_length': kMaxMessageBytes,
});
grpcServer.addService({
  Exec: def('Exec', true, true),
  UploadFileStream: def('UploadFileStream', true, false),
  GetVm: def('GetVm', false, false),
}, { Exec: exec, UploadFileStream: uploadFileStream, GetVm: getVm });

let ca = null;
let grpcCreds = grpc.ServerCredentials.createInsecure();
let authServer;
const onRequest = (req, res) => {
  onAuthRequest(req, res).catch((e) => {
    log.line('auth internal error', String(e?.stack ?? e).split('\n')[0]);
    if (!res.headersSent) {
      try { sendJson(res, 500, { message: 'emulator internal error' }); } catch { /* closed */ }
    } else {
      res.destroy();
    }
  });
};
if (args.tls) {
  const c = makeCerts(args.dir);
  ca = c.ca;
  const key = fs.readFileSync(c.key);
  const chain = fs.readFileSync(c.chain);
  grpcCreds = grpc.ServerCredentials.createSsl(null, [{ private_key: key, cert_chain: chain }], false);
  authServer = https.createServer({ key, cert: chain }, onRequest);
} else {
  authServer = http.createServer(onRequest);
}
authServer.on('clientError', (_e, socket) => socket.destroy());

let grpcPort;
let authPort;
try {
  grpcPort = await new Promise((resolve, reject) => {
    grpcServer.bindAsync('127.0.0.1:0', grpcCreds, (err, port) => (err ? reject(err) : resolve(port)));
  });
  authPort = await new Promise((resolve, reject) => {
    authServer.once('error', reject);
    authServer.listen(0, '127.0.0.1', () => resolve(authServer.address().port));
  });
} catch (err) {
  process.stderr.write(`bind: ${err.message}\n`);
  process.exit(1);
}
{
  const scheme = args.tls ? 'https' : 'http';
  const url = `${scheme}://127.0.0.1:${grpcPort}`;
  const authUrl = `${scheme}://127.0.0.1:${authPort}${AUTH_PATH}`;
  log.line('listening', url, 'auth', authUrl, 'jwt_ttl_ms', jwtTtlMs, 'faults', faults.describe());
  announceAndWait(args.dir, { url, auth_url: authUrl, ca, vm: VM_ID, api_key: apiKey }, (why) => {
    log.line('shutdown', why, 'calls', JSON.stringify(counts), 'violations', JSON.stringify(violations),
             'faults', JSON.stringify(faults.count));
    for (const pgid of groups) {
      try { process.kill(-pgid, 'SIGKILL'); } catch { /* gone */ }
    }
    vm.killAll();
  });
}
