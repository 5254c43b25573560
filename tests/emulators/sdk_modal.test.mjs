// Proves tests/emulators/modal.mjs with Modal's official JS SDK (modal@0.11.1,
// libmodal), unmodified: AuthTokenGet, SandboxGetTaskId(V2), the command
// router's access, TaskExecStart, TaskExecStdinWrite (data, then EOF),
// TaskExecStdioRead (stdout and stderr) and TaskExecWait, over plaintext h2c
// and over TLS with GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (grpc-js ignores
// NODE_EXTRA_CA_CERTS). Also checks what the SDK relies on: a retried start
// and a repeated stdin write do nothing twice, stdio re-read from an offset,
// a router JWT refreshed after it expired, no kill RPC, and that control-plane
// calls need the client identity metadata the SDK sends.
// Run: bash tests/emulators/run_sdk_test.sh sdk_modal.test.mjs
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import grpc from '@grpc/grpc-js';
import { ModalClient } from 'modal';

import { EMULATORS_DIR, startEmulator } from './lib/harness.mjs';
import * as W from './lib/modal_wire.mjs';

const run = promisify(execFile);
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

function sdk(info) {
  process.env.MODAL_SERVER_URL = info.url;
  return new ModalClient({ tokenId: info.token_id, tokenSecret: info.token_secret, logger: quiet });
}

async function catAndExit(client, sandboxId) {
  const sb = await client.sandboxes.fromId(sandboxId);
  const p = await sb.exec(['sh', '-c', 'cat; echo e >&2; exit 3'], { stdout: 'pipe', stderr: 'pipe' });
  await p.stdin.writeText('abc\n');
  await p.stdin.writeText('déf\n');
  await p.stdin.close();
  const [out, err, code] = await Promise.all([p.stdout.readText(), p.stderr.readText(), p.wait()]);
  return { out, err, code };
}

test('SDK (h2c, V1 id): exec, stdin, EOF, stdout/stderr, wait', async () => {
  const emu = await startEmulator('modal');
  try {
    const client = sdk(emu.info);
    const r = await catAndExit(client, emu.info.sandbox);
    assert.deepEqual(r, { out: 'abc\ndéf\n', err: 'e\n', code: 3 });
    const sb = await client.sandboxes.fromId(emu.info.sandbox);
    const p = await sb.exec(['sh', '-c', 'echo hi'], { stdout: 'pipe' });
    assert.equal(await p.stdout.readText(), 'hi\n');
    assert.equal(await p.wait(), 0);
    // Binary: every byte value, through the SDK's byte mode.
    const all = Buffer.from([...Array(256).keys()]);
    const b = await sb.exec(['cat'], { mode: 'binary', stdout: 'pipe' });
    await b.stdin.writeBytes(new Uint8Array(all));
    await b.stdin.close();
    assert.deepEqual(Buffer.from(await b.stdout.readBytes()), all);
    assert.equal(await b.wait(), 0);
    client.close();
    const log = emu.log();
    for (const call of ['AuthTokenGet', 'SandboxGetTaskId ', 'TaskGetCommandRouterAccess', 'TaskExecStart',
                        'eof at', 'TaskExecStdioRead']) {
      assert.ok(log.includes(call), `the SDK made ${call}`);
    }
    // The SDK keeps its control-plane credentials off the router too.
    assert.doesNotMatch(log, / VIOLATION /);
  } finally {
    await emu.stop();
  }
});

test('SDK (h2c, V2 id): SandboxGetTaskIdV2 and SandboxGetCommandRouterAccess', async () => {
  const emu = await startEmulator('modal');
  try {
    const client = sdk(emu.info);
    const r = await catAndExit(client, emu.info.sandbox_v2);
    assert.deepEqual(r, { out: 'abc\ndéf\n', err: 'e\n', code: 3 });
    client.close();
    const log = emu.log();
    assert.ok(log.includes('SandboxGetTaskIdV2'));
    assert.ok(log.includes('SandboxGetCommandRouterAccess'));
  } finally {
    await emu.stop();
  }
});

test('SDK (h2c, faults): UNAVAILABLE, streams reset mid-message and expiring router JWTs are survived', async () => {
  const emu = await startEmulator('modal', ['--faults', 'seed=3,unavailable=0.3,cut=0.3,expire']);
  try {
    const client = sdk(emu.info);
    const sb = await client.sandboxes.fromId(emu.info.sandbox);
    // Outlives the 3 s router JWT: the SDK refreshes it on UNAUTHENTICATED.
    const p = await sb.exec(['sh', '-c', 'read a; sleep 4; read b; echo "$a-$b"'], { stdout: 'pipe' });
    await p.stdin.writeText('one\n');
    await new Promise((r) => setTimeout(r, 4500));
    await p.stdin.writeText('two\n');
    await p.stdin.close();
    assert.equal(await p.stdout.readText(), 'one-two\n');
    assert.equal(await p.wait(), 0);
    // Streams reset mid-message: the SDK reads again from the next offset.
    const big = await sb.exec(['seq', '1', '300000'], { stdout: 'pipe' });
    const want = Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join('');
    assert.ok((await big.stdout.readText()) === want, 'every byte once, in order');
    assert.equal(await big.wait(), 0);
    client.close();
    const log = emu.log();
    assert.match(log, /FAULT cut/);
    assert.match(log, /FAULT unavailable/);
    assert.ok((log.match(/TaskGetCommandRouterAccess/g) ?? []).length >= 2, 'the router JWT was refreshed');
    const started = [...log.matchAll(/TaskExecStart (\S+) pid /g)].map((m) => m[1]);
    assert.equal(started.length, 2);
    assert.equal(new Set(started).size, 2, 'one process per exec id, whatever the retries');
  } finally {
    await emu.stop();
  }
});

// Raw gRPC (the emulator's own limits, which the SDK's retries rely on).
function rawClient(info, jwt) {
  const host = new URL(info.url).host;
  const c = new grpc.Client(host, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (jwt) md.set('authorization', `Bearer ${jwt}`);
  const call = (svc, name, req) => new Promise((resolve, reject) => {
    c.makeUnaryRequest(`/${svc}/${name}`, (b) => b, (b) => b, req, md, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
  const stream = (req) => new Promise((resolve, reject) => {
    const chunks = [];
    const s = c.makeServerStreamRequest('/modal.task_command_router.TaskCommandRouter/TaskExecStdioRead',
                                        (b) => b, (b) => b, req, md);
    s.on('data', (b) => chunks.push(W.decode(b).get(1)?.[0] ?? Buffer.alloc(0)));
    s.on('error', reject);
    s.on('end', () => resolve(Buffer.concat(chunks)));
  });
  return { c, md, call, stream };
}

test('emulator limits: idempotent start and stdin, stdio from an offset, no kill', async () => {
  const emu = await startEmulator('modal');
  try {
    const CP = 'modal.client.ModalClient';
    const RT = 'modal.task_command_router.TaskCommandRouter';
    const a = rawClient(emu.info);
    a.md.set('x-modal-token-id', emu.info.token_id);
    a.md.set('x-modal-token-secret', emu.info.token_secret);
    // The SDK's client identity is required on every control-plane call.
    await assert.rejects(a.call(CP, 'AuthTokenGet', Buffer.alloc(0)), (e) => e.code === grpc.status.FAILED_PRECONDITION);
    a.md.set('x-modal-client-type', '8');
    a.md.set('x-modal-client-version', '1.0.0');
    const tok = W.decode(await a.call(CP, 'AuthTokenGet', Buffer.alloc(0))).get(1)[0].toString();
    const payload = JSON.parse(Buffer.from(tok.split('.')[1], 'base64url').toString());
    assert.ok(payload.exp > Date.now() / 1000, 'the token has an exp');
    a.md.set('x-modal-auth-token', tok);
    const task = W.decode(await a.call(CP, 'SandboxGetTaskId', W.enc.bytes(1, emu.info.sandbox))).get(1)[0].toString();
    const acc = W.decode(await a.call(CP, 'TaskGetCommandRouterAccess', W.enc.bytes(1, task)));
    assert.match(acc.get(2)[0].toString(), /^https:\/\/127\.0\.0\.1:\d+$/);
    const r = rawClient(emu.info, acc.get(1)[0].toString());
    const ids = Buffer.concat([W.enc.bytes(1, task), W.enc.bytes(2, 'exec-1')]);
    const start = Buffer.concat([ids, W.enc.bytes(3, 'sh'), W.enc.bytes(3, '-c'), W.enc.bytes(3, 'cat; exit 7'),
                                 W.enc.varint(4, 1), W.enc.varint(5, 1)]);
    await r.call(RT, 'TaskExecStart', start);
    await r.call(RT, 'TaskExecStart', start); // a retry: nothing new
    const write = (off, data, eof) => r.call(RT, 'TaskExecStdinWrite', Buffer.concat([
      ids, W.enc.varint(3, off), W.enc.bytes(4, data), W.enc.varint(5, eof ? 1 : 0)]));
    await write(0, 'hello ');
    await write(0, 'hello ');        // again: skipped
    await write(3, 'lo world');      // overlapping: only "world" is new
    await assert.rejects(write(100, 'x'), (e) => e.code === grpc.status.OUT_OF_RANGE);
    await write(11, '', true);
    const all = await r.stream(Buffer.concat([ids, W.enc.varint(3, 0), W.enc.varint(4, 0)]));
    assert.equal(all.toString(), 'hello world');
    const tail = await r.stream(Buffer.concat([ids, W.enc.varint(3, 6), W.enc.varint(4, 0)]));
    assert.equal(tail.toString(), 'world');
    const wait = W.decode(await r.call(RT, 'TaskExecWait', ids));
    assert.equal(Number(wait.get(1)[0]), 7);
    await assert.rejects(r.call(RT, 'TaskExecKill', ids), (e) => e.code === grpc.status.UNIMPLEMENTED);
    await assert.rejects(rawClient(emu.info, 'bogus').call(RT, 'TaskExecPoll', ids),
                         (e) => e.code === grpc.status.UNAUTHENTICATED);
    assert.equal((emu.log().match(/TaskExecStart exec-1 pid/g) ?? []).length, 1);
    // Control-plane credentials never belong on the router: the emulator
    // flags one that arrives there (what tether sends is checked by every
    // conformance and chaos run over this emulator).
    assert.doesNotMatch(emu.log(), / VIOLATION /);
    const leaky = rawClient(emu.info, acc.get(1)[0].toString());
    leaky.md.set('x-modal-auth-token', tok);
    await leaky.call(RT, 'TaskExecPoll', ids);
    assert.match(emu.log(), / VIOLATION credential .*x-modal-auth-token/);
    a.c.close();
    r.c.close();
    leaky.c.close();
  } finally {
    await emu.stop();
  }
});

// grpc-js reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when it is loaded: the TLS
// case runs the SDK in a child process that has it from the start.
test('SDK (TLS, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH): exec, stdin, EOF, output, wait', async () => {
  const emu = await startEmulator('modal', ['--tls']);
  try {
    // 127.0.0.2, a server the SDK does not take for localhost: it dials the
    // router (https://127.0.0.2:P) with TLS too, as in production.
    const script = `
      import { ModalClient } from 'modal';
      const quiet = { debug() {}, info() {}, warn() {}, error() {} };
      const c = new ModalClient({ tokenId: process.argv[1], tokenSecret: process.argv[2], logger: quiet });
      const sb = await c.sandboxes.fromId(process.argv[3]);
      const p = await sb.exec(['sh', '-c', 'cat; echo e >&2; exit 3'], { stdout: 'pipe', stderr: 'pipe' });
      await p.stdin.writeText('abc\\n');
      await p.stdin.close();
      const [out, err, code] = await Promise.all([p.stdout.readText(), p.stderr.readText(), p.wait()]);
      c.close();
      process.stdout.write(JSON.stringify({ out, err, code }));`;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script,
                                                    emu.info.token_id, emu.info.token_secret, emu.info.sandbox], {
      cwd: EMULATORS_DIR,
      env: { ...process.env, MODAL_SERVER_URL: emu.info.url_alt, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: emu.info.ca },
      timeout: 60_000,
    });
    assert.deepEqual(JSON.parse(stdout), { out: 'abc\n', err: 'e\n', code: 3 });
    assert.match(emu.log(), /TaskExecStart/);
  } finally {
    await emu.stop();
  }
});
