// The Boat emulator (boat.mjs) keeps the facts of PROVIDERS.md and the
// assumptions of include/tether/providers/boat.h. There is no Boat SDK to
// prove it with, so these checks are the only proof: the bearer key, 404 for
// an unknown sandbox, {exitCode, stdout, stderr, timedOut}, the 600 s cap, a
// kill at the timeout, lossy UTF-8 output, commands the caller cannot kill,
// base64 files, and the seeded faults.
//   node --test tests/emulators/boat_facts.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';

import { startEmulator, waitFor } from './lib/harness.mjs';

// One request; resolves {status, json}. `abortAfterMs` drops the connection.
function call(info, method, target, body, { key = info.api_key, abortAfterMs } = {}) {
  return new Promise((resolve, reject) => {
    const url = new URL(target, info.url);
    const data = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) };
    if (key !== null) headers.authorization = `Bearer ${key}`;
    const req = http.request(url, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, json, text });
      });
    });
    req.on('error', (e) => (abortAfterMs ? resolve({ status: 0 }) : reject(e)));
    if (abortAfterMs) setTimeout(() => req.destroy(), abortAfterMs);
    req.end(data);
  });
}
const run = (emu, command, timeoutSeconds = 10, opts) =>
  call(emu.info, 'POST', `/sandboxes/${emu.info.sandbox}/commands`, { command, timeoutSeconds }, opts);

test('boat emulator', async (t) => {
  const emu = await startEmulator('boat');
  try {
    await t.test('answers {exitCode, stdout, stderr, timedOut}', async () => {
      const r = await run(emu, 'printf out; echo err >&2; exit 7');
      assert.equal(r.status, 200);
      assert.deepEqual(r.json, { exitCode: 7, stdout: 'out', stderr: 'err\n', timedOut: false });
    });
    await t.test('decodes output as UTF-8, invalid bytes as U+FFFD', async () => {
      const r = await run(emu, "printf 'a\\377b\\303\\251'");
      assert.equal(r.json.stdout, 'a\ufffdb\u00e9');
    });
    await t.test('runs in the sandbox home with TMPDIR inside the sandbox', async () => {
      const r = await run(emu, 'pwd; echo "$HOME"; echo "$TMPDIR"');
      const [cwd, home, tmp] = r.json.stdout.trim().split('\n');
      assert.equal(cwd, home);
      assert.ok(home.startsWith(emu.dir) && tmp.startsWith(emu.dir));
    });
    await t.test('refuses a missing or wrong key with 401, without echoing it', async () => {
      const none = await run(emu, 'true', 10, { key: null });
      assert.equal(none.status, 401);
      const wrong = await run(emu, 'true', 10, { key: 'wrong-key-123' });
      assert.equal(wrong.status, 401);
      assert.ok(!wrong.text.includes('wrong-key-123'));
      assert.equal(typeof wrong.json.message, 'string');
    });
    await t.test('answers 404 for an unknown sandbox', async () => {
      const r = await call(emu.info, 'POST', '/sandboxes/nope/commands', { command: 'true', timeoutSeconds: 5 });
      assert.equal(r.status, 404);
      assert.match(r.json.message, /not found/);
    });
    await t.test('refuses bad bodies with 400', async () => {
      const p = `/sandboxes/${emu.info.sandbox}/commands`;
      assert.equal((await call(emu.info, 'POST', p, 'not json')).status, 400);
      assert.equal((await call(emu.info, 'POST', p, { command: 5 })).status, 400);
      assert.equal((await call(emu.info, 'POST', p, { command: 'true', timeoutSeconds: 0 })).status, 400);
      assert.equal((await call(emu.info, 'POST', p, { command: 'true', timeoutSeconds: 1.5 })).status, 400);
    });
    await t.test('kills a command at its timeout and says timedOut', async () => {
      const start = Date.now();
      const r = await run(emu, 'echo started; sleep 30', 1);
      // A promised deadline (timeoutSeconds: 1), so a bound: it must tell the
      // 1 s timeout from the command's own 30 s; 20 s leaves the margin a
      // loaded machine needs.
      assert.ok(Date.now() - start < 20_000, `answered after ${Date.now() - start} ms`);
      assert.equal(r.json.timedOut, true);
      assert.equal(r.json.exitCode, null);
    });
    await t.test('caps timeoutSeconds at 600', async () => {
      const r = await run(emu, 'true', 100000);
      assert.equal(r.status, 200);
      assert.match(emu.log(), /timeout 600 s/);
    });
    await t.test('a caller that goes away does not kill the command', async () => {
      const marker = path.join(emu.dir, 'survived');
      const r = await run(emu, `sleep 1; echo yes > '${marker}'`, 10, { abortAfterMs: 200 });
      assert.equal(r.status, 0);
      // Waited for, not slept on (30 s: only how long a killed command is
      // waited for); the command then did all of its work.
      await waitFor(() => fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === 'yes\n',
        { timeoutMs: 30_000, what: 'the command the caller left to finish' });
      assert.equal(fs.readFileSync(marker, 'utf8'), 'yes\n');
    });
    await t.test('PUT files writes base64 content, parents created; bad base64 is 400', async () => {
      const file = path.join(emu.dir, 'up', 'dir', 'f.bin');
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const p = `/sandboxes/${emu.info.sandbox}/files`;
      const r = await call(emu.info, 'PUT', p, { path: file, content: bytes.toString('base64') });
      assert.equal(r.status, 200);
      assert.deepEqual(fs.readFileSync(file), bytes);
      assert.equal((await call(emu.info, 'PUT', p, { path: file, content: '!!' })).status, 400);
      assert.equal((await call(emu.info, 'PUT', p, { path: 'relative', content: '' })).status, 400);
      assert.equal((await call(emu.info, 'POST', p, { path: file, content: '' })).status, 405);
    });
  } finally {
    await emu.stop();
  }
});

test('boat emulator faults: http5xx=1 answers 502 then 503 without running anything', async () => {
  const emu = await startEmulator('boat', ['--faults', 'seed=3,http5xx=1']);
  try {
    const marker = path.join(emu.dir, 'ran');
    const a = await run(emu, `touch '${marker}'`);
    const b = await run(emu, `touch '${marker}'`);
    assert.deepEqual([a.status, b.status], [502, 503]);
    assert.ok(!fs.existsSync(marker));
  } finally {
    await emu.stop();
  }
});

test('boat emulator faults: lost5xx=1 runs the command, then loses the answer; the same call again is a VIOLATION', async () => {
  const emu = await startEmulator('boat', ['--faults', 'seed=3,lost5xx=1']);
  try {
    const marker = path.join(emu.dir, 'ran');
    const a = await run(emu, `echo x >> '${marker}'`);
    assert.equal(a.status, 502);
    assert.equal(fs.readFileSync(marker, 'utf8'), 'x\n');  // it ran
    const log = () => fs.readFileSync(path.join(emu.dir, 'requests.log'), 'utf8');
    assert.match(log(), / FAULT lost5xx 502 /);
    assert.doesNotMatch(log(), / VIOLATION /);
    // Another command is another call; the same body again is the command run twice.
    assert.equal((await run(emu, 'true')).status, 503);
    assert.doesNotMatch(log(), / VIOLATION /);
    await run(emu, `echo x >> '${marker}'`);
    assert.equal(fs.readFileSync(marker, 'utf8'), 'x\nx\n');
    assert.match(log(), / VIOLATION duplicate /);
  } finally {
    await emu.stop();
  }
});

test('boat emulator faults: http429=1 answers 429 with Retry-After: 1 without running anything; a resend before it is a VIOLATION', async () => {
  const emu = await startEmulator('boat', ['--faults', 'seed=3,http429=1']);
  try {
    const marker = path.join(emu.dir, 'ran');
    const a = await new Promise((resolve, reject) => {
      const body = JSON.stringify({ command: `touch '${marker}'`, timeoutSeconds: 10 });
      const req = http.request(new URL(`/sandboxes/${emu.info.sandbox}/commands`, emu.info.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${emu.info.api_key}` },
      }, (res) => { res.resume(); res.on('end', () => resolve(res)); });
      req.on('error', reject);
      req.end(body);
    });
    assert.equal(a.statusCode, 429);
    assert.equal(a.headers['retry-after'], '1');
    assert.ok(!fs.existsSync(marker));
    await run(emu, `touch '${marker}'`);  // at once: too early
    assert.match(fs.readFileSync(path.join(emu.dir, 'requests.log'), 'utf8'), / VIOLATION retry-after /);
  } finally {
    await emu.stop();
  }
});
