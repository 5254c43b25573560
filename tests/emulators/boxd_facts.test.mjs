// The boxd emulator (boxd.mjs) keeps the facts of /work/shared/BOXD.md and the
// assumptions in its header. No boxd SDK can be installed here, so these checks
// are its only proof. They drive it with @grpc/grpc-js as a raw client and
// encode the messages with their own few lines (not lib/boxd_wire.mjs), so a
// misread field number cannot hide in both; BOXD.md's wire example is checked
// byte for byte.
//   bash tests/emulators/run_sdk_test.sh boxd_facts.test.mjs   (installs grpc-js)
//   node --test tests/emulators/boxd_facts.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { test } from 'node:test';
import grpc from '@grpc/grpc-js';

import { pidAlive, sleep, startEmulator, waitFor } from './lib/harness.mjs';

// A process that has not ended: alive and not a zombie (an orphan waits for
// this container's init to reap it, which took up to 2 s here).
function running(pid) {
  if (!pidAlive(pid)) return false;
  try {
    const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st[st.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

const SVC = '/boxd.api.v1.BoxdApi/';
const MiB = 1 << 20;

// ---- protobuf, written apart from the emulator's codec ----------------------------------

function varint(n) {
  const out = [];
  let v = BigInt(n);
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}
const lenField = (num, b) => Buffer.concat([varint((num << 3) | 2), varint(Buffer.byteLength(b)), Buffer.from(b)]);
const boolField = (num) => Buffer.from([(num << 3) | 0, 1]);
const uintField = (num, n) => Buffer.concat([varint(num << 3), varint(n)]);
// ExecChunk: data=1 stdin=2 tty=3 command=4 vm_id=5 exit_code=6 ... window_change=9 is_stderr=10
const firstChunk = (vm, cmd, extra = Buffer.alloc(0)) => Buffer.concat([lenField(4, cmd), lenField(5, vm), extra]);
const stdinChunk = (data) => Buffer.concat([lenField(1, data), boolField(2)]);
// UploadFileChunk: vm_id=1 path=2 total_size=3 data=4
const uploadFirst = (vm, p, total, data) =>
  Buffer.concat([lenField(1, vm), lenField(2, p), uintField(3, total), data ? lenField(4, data) : Buffer.alloc(0)]);
const uploadData = (data) => lenField(4, data);

// Fields of a server message: {num: [Buffer | bigint]}.
function parse(buf) {
  const out = {};
  let off = 0;
  const rv = () => {
    let v = 0n;
    for (let s = 0n; ; s += 7n) {
      const b = buf[off++];
      v |= BigInt(b & 0x7f) << s;
      if (!(b & 0x80)) return v;
    }
  };
  while (off < buf.length) {
    const k = Number(rv());
    const [num, wt] = [k >> 3, k & 7];
    let v;
    if (wt === 0) v = rv();
    else if (wt === 2) {
      const n = Number(rv());
      v = buf.subarray(off, off + n);
      off += n;
    } else throw new Error(`wire type ${wt}`);
    (out[num] ??= []).push(v);
  }
  return out;
}

// ---- clients ---------------------------------------------------------------------------------

const raw = (b) => b;
function grpcClient(info, { ca = info.ca } = {}) {
  const creds = ca ? grpc.credentials.createSsl(fs.readFileSync(ca)) : grpc.credentials.createInsecure();
  return new grpc.Client(new URL(info.url).host, creds);
}
function meta(token, extra = {}) {
  const m = new grpc.Metadata();
  if (token) m.set('authorization', `Bearer ${token}`);
  for (const [k, v] of Object.entries(extra)) m.set(k, v);
  return m;
}

// POST to the token exchange; resolves {status, json}.
function post(info, body, { method = 'POST', url = info.auth_url } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const data = typeof body === 'string' ? body : JSON.stringify(body);
    const mod = u.protocol === 'https:' ? https : http;
    const req = mod.request(u, {
      method, ca: info.ca ? fs.readFileSync(info.ca) : undefined,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, json });
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}
async function token(info) {
  const r = await post(info, { api_key: info.api_key });
  assert.equal(r.status, 200);
  return r.json.token;
}

function getVm(c, tok, vmId, extraMeta) {
  return new Promise((resolve) => {
    c.makeUnaryRequest(`${SVC}GetVm`, raw, raw, lenField(1, vmId), meta(tok, extraMeta), (err, resp) => {
      resolve(err ? { code: err.code, details: err.details } : { code: 0, msg: parse(resp) });
    });
  });
}

// Opens an Exec call; `first` (a Buffer) is sent at once unless null.
// r.done resolves {code, details, out, err, chunks} when the status arrives.
function openExec(c, tok, first, { metadata } = {}) {
  const call = c.makeBidiStreamRequest(`${SVC}Exec`, raw, raw, metadata ?? meta(tok));
  const r = { call, out: [], err: [], chunks: [] };
  call.on('data', (b) => {
    const m = parse(b);
    r.chunks.push({ bytes: b, m });
    if (m[1]) (m[10]?.[0] ? r.err : r.out).push(m[1][0]);
  });
  call.on('error', () => {});
  r.done = new Promise((resolve) => call.on('status', (s) => resolve({
    code: s.code, details: s.details, out: Buffer.concat(r.out), err: Buffer.concat(r.err), chunks: r.chunks })));
  if (first) call.write(first);
  return r;
}
async function run(c, tok, vm, cmd, stdin) {
  const r = openExec(c, tok, firstChunk(vm, cmd));
  if (stdin) r.call.write(stdinChunk(stdin));
  r.call.end();
  return r.done;
}
// The exit code the final chunk reports (0 for an empty final chunk), and that
// it is the last one and carries nothing else.
function exitOf(res) {
  const last = res.chunks.at(-1);
  assert.ok(last, 'a final chunk');
  assert.equal(last.m[1], undefined, 'the final chunk carries no data');
  return last.m[6] ? Number(BigInt.asIntN(32, last.m[6][0])) : 0;
}
// The first line of stdout as a pid, once it has arrived.
const firstPid = (r) => waitFor(() => {
  const s = Buffer.concat(r.out).toString();
  return s.includes('\n') ? Number(s.split('\n')[0]) : 0;
}, { what: 'the pid the command printed' });

function upload(c, tok, chunks) {
  return new Promise((resolve) => {
    const call = c.makeClientStreamRequest(`${SVC}UploadFileStream`, raw, raw, meta(tok), (err, resp) => {
      resolve(err ? { code: err.code, details: err.details } : { code: 0, msg: parse(resp) });
    });
    for (const ch of chunks) call.write(ch);
    call.end();
  });
}

// ---- the facts ----------------------------------------------------------------------------------

test('boxd emulator', async (t) => {
  const emu = await startEmulator('boxd');
  const { info } = emu;
  const c = grpcClient(info);
  try {
    await t.test('prints the ready line: gRPC url, auth url, no CA, vm, a bxd_ key', () => {
      assert.match(info.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.match(info.auth_url, /^http:\/\/127\.0\.0\.1:\d+\/api\/v1\/auth\/token$/);
      assert.equal(info.ca, null);
      assert.equal(info.vm, 'vm-emu');
      assert.match(info.api_key, /^bxd_[A-Za-z0-9]{43}$/);
      assert.deepEqual(JSON.parse(fs.readFileSync(path.join(emu.dir, 'endpoint.json'), 'utf8')), info);
    });

    await t.test('exchanges the key for an HS256 JWT with exp = expires_at; refuses a bad key and bad JSON', async () => {
      const r = await post(info, { api_key: info.api_key });
      assert.equal(r.status, 200);
      assert.equal(r.json.user_id, 'usr-emu');
      const parts = r.json.token.split('.');
      assert.equal(parts.length, 3);
      assert.deepEqual(JSON.parse(Buffer.from(parts[0], 'base64url')), { alg: 'HS256', typ: 'JWT' });
      const claims = JSON.parse(Buffer.from(parts[1], 'base64url'));
      assert.equal(claims.exp, r.json.expires_at);
      const ttl = r.json.expires_at - Date.now() / 1000;
      assert.ok(ttl > 3500 && ttl <= 3600, `lives about an hour: ${ttl} s`);
      const wrong = await post(info, { api_key: 'bxd_' + 'x'.repeat(43) });
      assert.equal(wrong.status, 401);
      assert.equal(typeof wrong.json.message, 'string');
      assert.equal((await post(info, {})).status, 401);
      assert.equal((await post(info, 'not json')).status, 400);
      assert.equal((await post(info, '', { method: 'GET' })).status, 405);
      assert.equal((await post(info, {}, { url: info.auth_url.replace('/token', '/nope') })).status, 404);
    });

    const tok = await token(info);

    await t.test('a call with no, a garbage or a non-Bearer token is UNAUTHENTICATED', async () => {
      assert.equal((await getVm(c, null, 'vm-emu')).code, grpc.status.UNAUTHENTICATED);
      assert.equal((await getVm(c, 'not.a.jwt', 'vm-emu')).code, grpc.status.UNAUTHENTICATED);
      const basic = new grpc.Metadata();
      basic.set('authorization', `Basic ${tok}`);
      const r = await new Promise((resolve) => c.makeUnaryRequest(`${SVC}GetVm`, raw, raw, lenField(1, 'vm-emu'),
        basic, (err) => resolve(err)));
      assert.equal(r.code, grpc.status.UNAUTHENTICATED);
      const e = await run(c, null, 'vm-emu', `touch '${emu.dir}/ran-unauth'`);
      assert.equal(e.code, grpc.status.UNAUTHENTICATED);
      assert.ok(!fs.existsSync(path.join(emu.dir, 'ran-unauth')));
    });

    await t.test('GetVm answers {vm_id, name, status=running}; an unknown vm is NOT_FOUND', async () => {
      const r = await getVm(c, tok, 'vm-emu');
      assert.equal(r.code, 0);
      assert.equal(r.msg[1][0].toString(), 'vm-emu');
      assert.equal(r.msg[2][0].toString(), 'emu');
      assert.equal(r.msg[5][0].toString(), 'running');
      assert.equal((await getVm(c, tok, 'vm-other')).code, grpc.status.NOT_FOUND);
    });

    await t.test('the API key in gRPC metadata is logged as a VIOLATION (and never in clear in the log)', async () => {
      assert.doesNotMatch(emu.log(), / VIOLATION /);
      const r = await getVm(c, tok, 'vm-emu', { 'x-api-key': info.api_key });
      assert.equal(r.code, 0);
      assert.match(emu.log(), / VIOLATION api-key-on-grpc GetVm: the API key in metadata 'x-api-key'/);
      assert.ok(!emu.log().includes(info.api_key));
    });

    await t.test("BOXD.md's wire example is accepted as is: 22 04 'true' 2a 03 'abc' names vm abc", async () => {
      const golden = Buffer.from('2204747275652a03616263', 'hex');
      assert.deepEqual(firstChunk('abc', 'true'), golden);
      const r = openExec(c, tok, golden);
      r.call.end();
      const res = await r.done;
      assert.equal(res.code, grpc.status.NOT_FOUND);
      assert.match(res.details, /'abc'/);
      // A stdin chunk is 0a <len> <bytes> 10 01.
      assert.deepEqual(stdinChunk(Buffer.from('hi')), Buffer.from('0a0268691001', 'hex'));
    });

    await t.test('all 256 byte values through stdin to cat come back exact; half-close is EOF; exit 0 is an empty final chunk', async () => {
      const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const res = await run(c, tok, 'vm-emu', 'cat; printf after-eof', all);
      assert.equal(res.code, grpc.status.OK);
      assert.deepEqual(res.out, Buffer.concat([all, Buffer.from('after-eof')]));
      assert.equal(res.chunks.at(-1).bytes.length, 0, 'exit 0: an empty final chunk');
      assert.equal(exitOf(res), 0);
    });

    await t.test('stdin chunks arrive in order; window_change and flagless chunks are ignored', async () => {
      const r = openExec(c, tok, firstChunk('vm-emu', 'cat'));
      r.call.write(stdinChunk('one,'));
      r.call.write(Buffer.concat([uintField(7, 80), uintField(8, 24), boolField(9)]));
      r.call.write(lenField(1, 'IGNORED'));
      r.call.write(stdinChunk('two'));
      r.call.end();
      const res = await r.done;
      assert.equal(res.out.toString(), 'one,two');
      assert.equal(exitOf(res), 0);
    });

    await t.test('stderr is flagged is_stderr; exit 3 is exit_code 3; SIGTERM is 143', async () => {
      const res = await run(c, tok, 'vm-emu', 'printf out; printf err >&2; exit 3');
      assert.equal(res.out.toString(), 'out');
      assert.equal(res.err.toString(), 'err');
      assert.ok(res.chunks.some((ch) => ch.m[10]?.[0] === 1n && ch.m[1][0].toString() === 'err'));
      assert.equal(exitOf(res), 3);
      assert.equal(res.code, grpc.status.OK);
      const killed = await run(c, tok, 'vm-emu', 'kill -TERM $$');
      assert.equal(exitOf(killed), 143);
    });

    await t.test('runs in the VM home with HOME and TMPDIR under DIR/vm-emu', async () => {
      const res = await run(c, tok, 'vm-emu', 'pwd; echo "$HOME"; echo "$TMPDIR"');
      const [cwd, home, tmp] = res.out.toString().trim().split('\n');
      assert.equal(cwd, path.join(emu.dir, 'vm-emu', 'home'));
      assert.equal(home, cwd);
      assert.equal(tmp, path.join(emu.dir, 'vm-emu', 'tmp'));
    });

    await t.test('refuses a first chunk without command, an unknown vm, tty, and a stream with no chunk', async () => {
      const noCmd = openExec(c, tok, lenField(5, 'vm-emu'));
      noCmd.call.end();
      assert.equal((await noCmd.done).code, grpc.status.INVALID_ARGUMENT);
      assert.equal((await run(c, tok, 'vm-nope', 'true')).code, grpc.status.NOT_FOUND);
      const tty = openExec(c, tok, firstChunk('vm-emu', 'true', boolField(3)));
      tty.call.end();
      const t3 = await tty.done;
      assert.equal(t3.code, grpc.status.UNIMPLEMENTED);
      assert.match(t3.details, /tty is not emulated/);
      const none = openExec(c, tok, null);
      none.call.end();
      assert.equal((await none.done).code, grpc.status.INVALID_ARGUMENT);
    });

    await t.test('cancelling the call kills the process group (a sleep grandchild is gone within 3 s)', async () => {
      const r = openExec(c, tok, firstChunk('vm-emu', 'sleep 30 & echo $!; wait'));
      const pid = await firstPid(r);
      assert.ok(running(pid));
      r.call.cancel();
      assert.equal((await r.done).code, grpc.status.CANCELLED);
      await waitFor(() => !running(pid), { timeoutMs: 3000, what: 'the grandchild killed by the cancel' });
    });

    await t.test('a group that ignores SIGTERM gets SIGKILL 2 s later', async () => {
      const r = openExec(c, tok, firstChunk('vm-emu', "trap '' TERM; sleep 30 & echo $!; wait"));
      const pid = await firstPid(r);
      r.call.cancel();
      await waitFor(() => / SIGTERM pgid /.test(emu.log()), { what: 'the SIGTERM' });
      assert.ok(running(pid), 'SIGTERM is ignored');
      await waitFor(() => !running(pid), { timeoutMs: 6000, what: 'the SIGKILL' });
      await waitFor(() => / SIGKILL pgid /.test(emu.log()), { what: 'the SIGKILL logged' });
    });

    await t.test('a message above 4 MiB is RESOURCE_EXHAUSTED and ends the command', async () => {
      const r = openExec(c, tok, firstChunk('vm-emu', 'sleep 30 & echo $!; cat >/dev/null; wait'));
      const pid = await firstPid(r);
      r.call.write(stdinChunk(Buffer.alloc(5 * MiB, 1)));
      const res = await r.done;
      assert.equal(res.code, grpc.status.RESOURCE_EXHAUSTED);
      await waitFor(() => !running(pid), { timeoutMs: 3000, what: 'the command of the refused call killed' });
      // Up to the cap is fine.
      const ok = await run(c, tok, 'vm-emu', 'wc -c', Buffer.alloc(4 * MiB - 64, 2));
      assert.equal(ok.out.toString().trim(), String(4 * MiB - 64));
    });

    await t.test('a client that does not read holds the child back (flow control), then gets every byte', async () => {
      const marker = path.join(emu.dir, 'wrote-all');
      const total = 32 * MiB;
      const r = openExec(c, tok, firstChunk('vm-emu', `head -c ${total} /dev/zero; echo done > '${marker}'`));
      r.call.end();
      r.call.pause();
      await sleep(1500);
      assert.ok(!fs.existsSync(marker), 'the child could write 32 MiB to a client that reads nothing');
      r.call.resume();
      const res = await r.done;
      assert.equal(res.out.length, total);
      assert.ok(res.chunks.every((ch) => (ch.m[1]?.[0].length ?? 0) <= 64 << 10), 'chunks of at most 64 KiB');
      assert.ok(fs.existsSync(marker));
      assert.equal(exitOf(res), 0);
    });

    await t.test('UploadFileStream writes exact bytes (0644) and answers bytes_written', async () => {
      const file = path.join(emu.dir, 'up.bin');
      const bytes = Buffer.alloc(3 * MiB + 7);
      for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + (i >> 8)) & 0xff;
      const chunks = [uploadFirst('vm-emu', file, bytes.length, bytes.subarray(0, 1000))];
      for (let off = 1000; off < bytes.length; off += MiB) chunks.push(uploadData(bytes.subarray(off, off + MiB)));
      const r = await upload(c, tok, chunks);
      assert.equal(r.code, 0, r.details);
      assert.equal(Number(r.msg[1][0]), bytes.length);
      assert.deepEqual(fs.readFileSync(file), bytes);
      assert.equal(fs.statSync(file).mode & 0o777, 0o644);
      const empty = path.join(emu.dir, 'empty');
      assert.equal((await upload(c, tok, [uploadFirst('vm-emu', empty, 0)])).code, 0);
      assert.equal(fs.statSync(empty).size, 0);
    });

    await t.test('UploadFileStream refuses a size mismatch leaving no file, a relative path, an unknown vm, a missing directory', async () => {
      const file = path.join(emu.dir, 'short.bin');
      const short = await upload(c, tok, [uploadFirst('vm-emu', file, 100), uploadData(Buffer.alloc(60))]);
      assert.equal(short.code, grpc.status.INVALID_ARGUMENT);
      assert.ok(!fs.existsSync(file));
      const long = await upload(c, tok, [uploadFirst('vm-emu', file, 10), uploadData(Buffer.alloc(60))]);
      assert.equal(long.code, grpc.status.INVALID_ARGUMENT);
      assert.ok(!fs.existsSync(file));
      assert.equal((await upload(c, tok, [uploadFirst('vm-emu', 'rel/x', 1, 'x')])).code, grpc.status.INVALID_ARGUMENT);
      assert.equal((await upload(c, tok, [uploadFirst('vm-nope', file, 1, 'x')])).code, grpc.status.NOT_FOUND);
      assert.ok(!fs.existsSync(file));
      const deep = path.join(emu.dir, 'no', 'such', 'dir', 'f');
      assert.equal((await upload(c, tok, [uploadFirst('vm-emu', deep, 1, 'x')])).code, grpc.status.FAILED_PRECONDITION);
    });

    await t.test('logs each call with its vm, command and status, and the exec start and end', () => {
      const log = emu.log();
      assert.match(log, / Exec vm-emu "printf out; printf err >&2; exit 3" OK exit_code=3\n/);
      assert.match(log, / exec started pgid=\d+\n/);
      assert.match(log, / exec ended code=143\n/);
      assert.match(log, / Exec vm-nope "true" NOT_FOUND /);
      assert.match(log, / UploadFileStream vm-emu ".*up\.bin" OK bytes_written=/);
    });

    await t.test('shutdown SIGKILLs the process groups still running', async () => {
      const r = openExec(c, tok, firstChunk('vm-emu', 'sleep 30 & echo $!; wait'));
      const pid = await firstPid(r);
      c.close();
      await emu.stop();
      await waitFor(() => !running(pid), { timeoutMs: 3000, what: 'the group killed at shutdown' });
    });
  } finally {
    c.close();
    await emu.stop();
  }
});

test('boxd emulator: a JWT expires after --jwt-ttl-ms; a new exchange works again', async () => {
  const emu = await startEmulator('boxd', ['--jwt-ttl-ms', '1000']);
  const c = grpcClient(emu.info);
  try {
    const r = await post(emu.info, { api_key: emu.info.api_key });
    assert.ok(r.json.expires_at <= Date.now() / 1000 + 1);
    assert.equal((await getVm(c, r.json.token, 'vm-emu')).code, 0);
    await sleep(1100);
    const late = await getVm(c, r.json.token, 'vm-emu');
    assert.equal(late.code, grpc.status.UNAUTHENTICATED);
    assert.match(late.details, /expired/);
    assert.equal((await getVm(c, await token(emu.info), 'vm-emu')).code, 0);
  } finally {
    c.close();
    await emu.stop();
  }
});

test('boxd emulator --tls: serves gRPC and the exchange with the CA, refuses plaintext', async () => {
  const emu = await startEmulator('boxd', ['--tls']);
  const { info } = emu;
  const c = grpcClient(info);
  try {
    assert.match(info.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.match(info.auth_url, /^https:\/\/127\.0\.0\.1:\d+\/api\/v1\/auth\/token$/);
    assert.equal(info.ca, path.join(emu.dir, 'ca.pem'));
    const tok = await token(info);
    const res = await run(c, tok, 'vm-emu', 'cat', 'over tls');
    assert.equal(res.out.toString(), 'over tls');
    assert.equal(exitOf(res), 0);
    const plain = grpcClient(info, { ca: null });
    const p = await getVm(plain, tok, 'vm-emu');
    plain.close();
    assert.equal(p.code, grpc.status.UNAVAILABLE);
    await assert.rejects(post({ ...info, ca: null }, { api_key: info.api_key }));
  } finally {
    c.close();
    await emu.stop();
  }
});

// One emulator per fault kind at probability 1: each must show its effect.
async function withFault(spec, fn) {
  const emu = await startEmulator('boxd', ['--faults', `seed=5,${spec}`]);
  const c = grpcClient(emu.info);
  try {
    await fn(emu, c, await token(emu.info));
  } finally {
    c.close();
    await emu.stop();
  }
}

test('boxd emulator faults: unavailable=1 answers UNAVAILABLE before doing anything', () =>
  withFault('unavailable=1', async (emu, c, tok) => {
    const marker = path.join(emu.dir, 'ran');
    const res = await run(c, tok, 'vm-emu', `touch '${marker}'`);
    assert.equal(res.code, grpc.status.UNAVAILABLE);
    assert.equal(res.chunks.length, 0);
    await sleep(200);
    assert.ok(!fs.existsSync(marker), 'nothing ran');
    assert.equal((await getVm(c, tok, 'vm-emu')).code, grpc.status.UNAVAILABLE);
    assert.match(emu.log(), / FAULT unavailable/);
  }));

test('boxd emulator faults: expire=1 expires the token: UNAUTHENTICATED "expired" until a new exchange', () =>
  withFault('expire=1', async (emu, c, tok) => {
    const marker = path.join(emu.dir, 'ran');
    const res = await run(c, tok, 'vm-emu', `touch '${marker}'`);
    assert.equal(res.code, grpc.status.UNAUTHENTICATED);
    assert.match(res.details, /expired/);
    const later = await getVm(c, tok, 'vm-emu');   // (GetVm does not roll expire)
    assert.equal(later.code, grpc.status.UNAUTHENTICATED);
    assert.match(later.details, /expired/);
    assert.equal((await getVm(c, await token(emu.info), 'vm-emu')).code, 0);
    assert.ok(!fs.existsSync(marker));
    assert.match(emu.log(), / FAULT expire/);
  }));

test('boxd emulator faults: lost=1 runs the command, sends no output, ends UNAVAILABLE and kills the group', () =>
  withFault('lost=1', async (emu, c, tok) => {
    const marker = path.join(emu.dir, 'ran');
    const pidFile = path.join(emu.dir, 'pid');
    const r = openExec(c, tok, firstChunk('vm-emu', `sleep 30 & echo $! > '${pidFile}'; echo ran > '${marker}'; echo out; wait`));
    r.call.end();
    const res = await r.done;
    assert.equal(res.code, grpc.status.UNAVAILABLE);
    assert.equal(res.chunks.length, 0, 'no output, no exit chunk');
    assert.equal(fs.readFileSync(marker, 'utf8'), 'ran\n', 'the call took effect');
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    await waitFor(() => !running(pid), { timeoutMs: 3000, what: 'the group of the lost call killed' });
    assert.match(emu.log(), / FAULT lost /);
  }));

test('boxd emulator faults: cut=1 resets the call after its first output and kills the group', () =>
  withFault('cut=1', async (emu, c, tok) => {
    const r = openExec(c, tok, firstChunk('vm-emu', 'sleep 30 & echo $!; wait'));
    r.call.end();
    const res = await r.done;
    assert.ok([grpc.status.INTERNAL, grpc.status.UNAVAILABLE].includes(res.code), `status ${res.code} ${res.details}`);
    assert.equal(res.chunks.length, 1, 'the first output only, no exit chunk');
    const pid = Number(res.out.toString().trim());
    assert.ok(pid > 0);
    await waitFor(() => !running(pid), { timeoutMs: 3000, what: 'the group of the cut call killed' });
    assert.match(emu.log(), / FAULT cut /);
    // A command with no output: the exit chunk is what is cut.
    const quiet = await run(c, tok, 'vm-emu', 'exit 4');
    assert.notEqual(quiet.code, grpc.status.OK);
    assert.equal(quiet.chunks.length, 0);
  }));

test('boxd emulator faults: stall=1 holds each output chunk 2-4 s', () =>
  withFault('stall=1', async (emu, c, tok) => {
    const start = Date.now();
    const res = await run(c, tok, 'vm-emu', 'printf x');
    const ms = Date.now() - start;
    assert.equal(res.out.toString(), 'x');
    assert.equal(exitOf(res), 0);
    assert.ok(ms >= 1900, `answered after ${ms} ms`);
    assert.match(emu.log(), / FAULT stall \d+ ms/);
  }));
