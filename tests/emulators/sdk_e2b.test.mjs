// Proves tests/emulators/e2b.mjs with the official E2B SDK (e2b@2.51.0), plus
// raw-client checks of the native limits and of every fault kind.
// Run: tests/emulators/setup.sh && node --test tests/emulators/sdk_e2b.test.mjs
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { AuthenticationError, Sandbox, SandboxNotFoundError } from 'e2b';

import { e2bScenario } from './lib/e2b_scenario.mjs';
import { Faults } from './lib/faults.mjs';
import { EMULATORS_DIR, pidAlive, startEmulator, waitFor } from './lib/harness.mjs';

// Whether `pid` runs untouched by a fatal signal: not a zombie, and neither
// SIGTERM (bit 14) nor SIGKILL (bit 8; what a fatal signal becomes for
// each thread) pending. False if it is gone.
function untouchedBySignal(pid) {
  let status;
  try {
    status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return false;
  }
  const field = (k) => status.match(new RegExp(`^${k}:\\s*(\\S+)`, 'm'))?.[1];
  if (['Z', 'X'].includes(field('State'))) return false;
  const pending = BigInt(`0x${field('SigPnd')}`) | BigInt(`0x${field('ShdPnd')}`);
  return (pending & ((1n << 14n) | (1n << 8n))) === 0n;
}

// The pids of `pid`'s children (every thread's), zombies included.
function childrenOf(pid) {
  const out = [];
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const list = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
    if (list) out.push(...list.split(/\s+/).map(Number));
  }
  return out;
}

const execFileP = promisify(execFile);

function envelope(flags, obj) {
  const json = Buffer.from(JSON.stringify(obj));
  const h = Buffer.alloc(5);
  h[0] = flags;
  h.writeUInt32BE(json.length, 1);
  return Buffer.concat([h, json]);
}

function parseEnvelopes(buf) {
  const out = [];
  let off = 0;
  while (buf.length - off >= 5) {
    const len = buf.readUInt32BE(off + 1);
    if (buf.length - off - 5 < len) break;
    out.push({ flags: buf[off], msg: JSON.parse(buf.subarray(off + 5, off + 5 + len).toString()) });
    off += 5 + len;
  }
  return { messages: out, rest: buf.length - off };
}

// The headers the edge proxy routes envd calls by (EMULATORS.md section 1).
const ROUTE = { 'e2b-sandbox-id': 'sbx-test', 'e2b-sandbox-port': '49983' };

// A raw HTTP/1.1 request, with ROUTE unless `headers` says otherwise.
// Resolves {status, headers, body, error} where error is set when the
// connection broke before the response ended.
function raw(url, { method = 'POST', path: p, headers = {}, body, onData } = {}) {
  return new Promise((resolve) => {
    const req = http.request(new URL(p, url), { method, headers: { ...ROUTE, ...headers }, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => { chunks.push(c); onData?.(Buffer.concat(chunks)); });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', (error) => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), error }));
      res.on('aborted', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), error: new Error('aborted') }));
    });
    req.on('error', (error) => resolve({ error }));
    req.end(body);
  });
}

async function connectToken(info) {
  const r = await raw(info.url, { path: `/v2/sandboxes/${info.sandbox}/connect`, headers: { 'x-api-key': info.api_key, 'content-type': 'application/json' }, body: '{}' });
  assert.equal(r.status, 200);
  return JSON.parse(r.body).envdAccessToken;
}

function startBody(cmd, extra = {}) {
  return envelope(0, { process: { cmd: '/bin/sh', args: ['-c', cmd] }, stdin: false, ...extra });
}

test('SDK over plain http: run, exit codes, stdin, reattach, kill, files', async () => {
  const emu = await startEmulator('e2b');
  try {
    assert.match(emu.info.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(emu.info.ca, null);
    const summary = await e2bScenario(emu.info);
    assert.equal(summary.checks.length, 8);
    assert.match(emu.log(), /files wrote up\/octet\/all.bin octet-stream/);
    assert.match(emu.log(), /files wrote up\/multi\/all.bin multipart/);
    assert.match(emu.log(), /files wrote up\/gz\/all.bin octet-stream gzip/);
    assert.doesNotMatch(emu.log(), /e2b_test|envd_[0-9a-f]{8}/, 'the log must not hold credentials');
  } finally {
    await emu.stop();
  }
});

test('SDK over TLS (h2) with NODE_EXTRA_CA_CERTS, in a child node', async () => {
  const emu = await startEmulator('e2b', ['--tls']);
  try {
    assert.match(emu.info.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.ok(fs.existsSync(emu.info.ca));
    const { stdout } = await execFileP(process.execPath, [path.join(EMULATORS_DIR, 'lib/e2b_scenario.mjs'), JSON.stringify(emu.info)], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: emu.info.ca }, timeout: 120_000,
    });
    const summary = JSON.parse(stdout.trim().split('\n').pop());
    assert.equal(summary.checks.length, 8);
    assert.match(emu.log(), /h2 POST \/process.Process\/Start/, 'undici should have negotiated h2');
  } finally {
    await emu.stop();
  }
});

test('SDK with --envd-version 0.5.6: multipart upload, closeStdin still supported', async () => {
  const emu = await startEmulator('e2b', ['--envd-version', '0.5.6']);
  try {
    const { stdout } = await execFileP(process.execPath, [path.join(EMULATORS_DIR, 'lib/e2b_scenario.mjs'), JSON.stringify(emu.info), '--old-envd'], { timeout: 60_000 });
    assert.equal(JSON.parse(stdout).checks.length, 1);
    assert.match(emu.log(), /files wrote old\/all.bin multipart/);
    const token = await connectToken(emu.info);
    const oct = await raw(emu.info.url, { path: '/files?path=x.bin', headers: { 'x-access-token': token, 'content-type': 'application/octet-stream' }, body: 'abc' });
    assert.equal(oct.status, 400, 'envd < 0.5.7 rejects octet-stream uploads');
  } finally {
    await emu.stop();
  }
});

test('envd < 0.5.2 has no CloseStdin; the SDK refuses it too', async () => {
  const emu = await startEmulator('e2b', ['--envd-version', '0.5.1']);
  try {
    const sbx = await Sandbox.connect(emu.info.sandbox, { apiKey: emu.info.api_key, apiUrl: emu.info.url, sandboxUrl: emu.info.url });
    const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 });
    await assert.rejects(sbx.commands.closeStdin(h.pid), /doesn't support closeStdin/);
    const token = await connectToken(emu.info);
    const r = await raw(emu.info.url, { path: '/process.Process/CloseStdin', headers: { 'x-access-token': token, 'content-type': 'application/json' }, body: JSON.stringify({ process: { pid: h.pid } }) });
    assert.equal(r.status, 404);
    assert.equal(await h.kill(), true);
  } finally {
    await emu.stop();
  }
});

test('auth: wrong API key, wrong access token, unknown sandbox', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    await assert.rejects(Sandbox.connect(info.sandbox, { apiKey: 'e2b_wrong', apiUrl: info.url, sandboxUrl: info.url }), AuthenticationError);
    await assert.rejects(Sandbox.connect('sbx-nope', { apiKey: info.api_key, apiUrl: info.url, sandboxUrl: info.url }), SandboxNotFoundError);
    const bad = await raw(info.url, { path: '/process.Process/Start', headers: { 'x-access-token': 'nope', 'content-type': 'application/connect+json' }, body: startBody('echo hi') });
    assert.equal(bad.status, 401);
    const none = await raw(info.url, { path: '/files?path=x', method: 'GET' });
    assert.equal(none.status, 401);
    const health = await raw(info.url, { path: '/health', method: 'GET' });
    assert.equal(health.status, 204);
  } finally {
    await emu.stop();
  }
});

test('proxy routing: envd calls need E2b-Sandbox-Id and E2b-Sandbox-Port 49983', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    const token = await connectToken(info);
    const hdr = { 'x-access-token': token, 'content-type': 'application/connect+json' };
    const cases = [
      [{ 'e2b-sandbox-id': undefined }, 'The sandbox was not found'],
      [{ 'e2b-sandbox-id': 'sbx-other' }, 'The sandbox was not found'],
      [{ 'e2b-sandbox-port': undefined }, 'The sandbox is running but port is not open'],
      [{ 'e2b-sandbox-port': '8080' }, 'The sandbox is running but port is not open'],
    ];
    for (const [route, message] of cases) {
      const headers = { ...ROUTE, ...hdr, ...route };
      for (const k of Object.keys(headers)) if (headers[k] === undefined) delete headers[k];
      // (undefined: this case leaves the header out.)
      const r = await new Promise((resolve) => {
        const req = http.request(new URL('/process.Process/Start', info.url), { method: 'POST', headers, agent: false }, (res) => {
          let body = '';
          res.on('data', (d) => { body += d; });
          res.on('end', () => resolve({ status: res.statusCode, body }));
        });
        req.end(startBody('touch started'));
      });
      assert.equal(r.status, 502, JSON.stringify(route));
      assert.equal(JSON.parse(r.body).message, message);
    }
    const health = await new Promise((resolve) => http.get(new URL('/health', info.url), (res) => { res.resume(); resolve(res.statusCode); }));
    assert.equal(health, 502, '/health goes through the proxy too');
    assert.deepEqual(childrenOf(emu.child.pid), [], 'nothing was started');
    assert.ok(!fs.existsSync(path.join(emu.dir, 'sbx-test', 'home', 'started')));
    // The SDK sends both headers on every call (the scenario tests prove the rest).
    const sbx = await Sandbox.connect(info.sandbox, { apiKey: info.api_key, apiUrl: info.url, sandboxUrl: info.url });
    assert.equal((await sbx.commands.run('echo routed')).stdout, 'routed\n');
  } finally {
    await emu.stop();
  }
});

test('SDK debug mode (E2B_DEBUG=true, no access token) against --debug-envd', async () => {
  const emu = await startEmulator('e2b', ['--debug-envd']);
  const strict = await startEmulator('e2b');
  const saved = process.env.E2B_DEBUG;
  process.env.E2B_DEBUG = 'true';
  try {
    // Debug mode makes no control-plane call and sends no X-Access-Token.
    const sbx = await Sandbox.connect(emu.info.sandbox, { sandboxUrl: emu.info.url });
    const r = await sbx.commands.run('echo debug; echo err >&2');
    assert.equal(r.stdout, 'debug\n');
    assert.equal(r.stderr, 'err\n');
    const made = await Sandbox.create({ sandboxUrl: emu.info.url }); // id "debug_sandbox_id": no proxy reads it
    const h = await made.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 });
    await made.commands.sendStdin(h.pid, 'in\n');
    await made.commands.closeStdin(h.pid);
    assert.equal((await h.wait()).stdout, 'in\n');
    assert.doesNotMatch(emu.log(), /\/v2\/sandboxes|\/connect/, 'no control-plane call');
    // The same calls without --debug-envd: refused, as a real sandbox refuses them.
    const s2 = await Sandbox.connect(strict.info.sandbox, { sandboxUrl: strict.info.url });
    await assert.rejects(s2.commands.run('echo no'), AuthenticationError);
  } finally {
    if (saved === undefined) delete process.env.E2B_DEBUG;
    else process.env.E2B_DEBUG = saved;
    await emu.stop();
    await strict.stop();
  }
});

test('every connected stream gets the output: Start, and two Connect streams from another client', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    const opts = { apiKey: info.api_key, apiUrl: info.url, sandboxUrl: info.url };
    const a = await Sandbox.connect(info.sandbox, opts);
    const h = await a.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 });
    const b = await Sandbox.connect(info.sandbox, opts);
    const h2 = await b.commands.connect(h.pid, { timeoutMs: 0 });
    const h3 = await b.commands.connect(h.pid, { timeoutMs: 0 });
    await a.commands.sendStdin(h.pid, 'one\n');
    await waitFor(() => h.stdout === 'one\n' && h2.stdout === 'one\n' && h3.stdout === 'one\n', { what: 'all three to see one' });
    await h.disconnect(); // the Start stream leaves; the Connect streams stay
    await b.commands.sendStdin(h.pid, 'two\n');
    await b.commands.closeStdin(h.pid);
    const [w2, w3] = await Promise.all([h2.wait(), h3.wait()]);
    assert.equal(w2.stdout, 'one\ntwo\n');
    assert.equal(w3.stdout, 'one\ntwo\n');
    assert.equal(h.stdout, 'one\n');
  } finally {
    await emu.stop();
  }
});

test('wire: start event first, keepalive honoured, end event, end-stream; signals', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    const token = await connectToken(info);
    const hdr = { 'x-access-token': token, 'content-type': 'application/connect+json', 'connect-protocol-version': '1', 'keepalive-ping-interval': '1' };
    const r = await raw(info.url, { path: '/process.Process/Start', headers: hdr, body: startBody('printf "\\000\\377"; sleep 1.5; exit 7') });
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/connect+json');
    const { messages, rest } = parseEnvelopes(r.body);
    assert.equal(rest, 0);
    assert.ok(messages[0].msg.event.start.pid > 0, 'start first');
    const data = messages.filter((m) => m.msg.event?.data).map((m) => Buffer.from(m.msg.event.data.stdout, 'base64'));
    assert.deepEqual(Buffer.concat(data), Buffer.from([0, 255]), 'binary-safe base64 data');
    assert.ok(messages.some((m) => m.msg.event?.keepalive), 'keepalive after 1 s');
    const end = messages.at(-2).msg.event.end;
    assert.deepEqual(end, { exitCode: 7, exited: true, status: 'exit status 7', error: 'exit status 7' });
    assert.equal(messages.at(-1).flags, 2);
    assert.deepEqual(messages.at(-1).msg, {});

    // envs, cwd, HOME/TMPDIR inside the sandbox, stdin /dev/null unless asked.
    fs.mkdirSync(path.join(emu.dir, 'sbx-test', 'home', 'sub'));
    const e = await raw(info.url, {
      path: '/process.Process/Start', headers: hdr,
      body: envelope(0, { process: { cmd: '/bin/sh', args: ['-c', 'echo "$FOO|$(pwd)|$HOME|$TMPDIR|$(readlink /proc/self/fd/0)"'], envs: { FOO: 'bar' }, cwd: 'sub' } }),
    });
    const eOut = parseEnvelopes(e.body).messages.filter((m) => m.msg.event?.data).map((m) => Buffer.from(m.msg.event.data.stdout, 'base64')).join('');
    const home = path.join(emu.dir, 'sbx-test', 'home');
    assert.equal(eOut, `bar|${home}/sub|${home}|${path.join(emu.dir, 'sbx-test', 'tmp')}|/dev/null\n`);

    // Unknown pid on Connect: 200 and an end-stream error.
    const c = await raw(info.url, { path: '/process.Process/Connect', headers: hdr, body: envelope(0, { process: { pid: 999999999 } }) });
    const cm = parseEnvelopes(c.body).messages;
    assert.equal(cm.length, 1);
    assert.equal(cm[0].flags, 2);
    assert.equal(cm[0].msg.error.code, 'not_found');

    // SendSignal hits the one pid, not its group; only SIGTERM/SIGKILL.
    let sleepPid = 0;
    const sig = raw(info.url, {
      path: '/process.Process/Start', headers: hdr, body: startBody('sleep 30 & echo $!; wait'),
      onData: (b) => {
        const d = parseEnvelopes(b).messages.find((m) => m.msg.event?.data);
        if (d) sleepPid = Number(Buffer.from(d.msg.event.data.stdout, 'base64').toString().trim());
      },
    });
    await waitFor(() => sleepPid > 0, { what: 'grandchild pid' });
    const shPid = await waitFor(async () => {
      const l = await raw(info.url, { path: '/process.Process/List', headers: { ...hdr, 'content-type': 'application/json' }, body: '{}' });
      return JSON.parse(l.body).processes.find((p) => p.config.args?.[1]?.startsWith('sleep 30 &'))?.pid;
    }, { what: 'List to show the shell' });
    const unary = { ...hdr, 'content-type': 'application/json' };
    const badSig = await raw(info.url, { path: '/process.Process/SendSignal', headers: unary, body: JSON.stringify({ process: { pid: shPid }, signal: 'SIGNAL_UNSPECIFIED' }) });
    assert.equal(badSig.status, 400);
    assert.equal(JSON.parse(badSig.body).code, 'invalid_argument');
    const term = await raw(info.url, { path: '/process.Process/SendSignal', headers: unary, body: JSON.stringify({ process: { pid: shPid }, signal: 'SIGNAL_SIGTERM' }) });
    assert.equal(term.status, 200);
    await waitFor(() => !pidAlive(shPid), { what: 'the shell to die' });
    // No pause: a kill of the group signals every member inside the one
    // kill(2) that the shell, now dead, got too, so a grandchild it reached
    // already shows it (pending, exiting or a zombie).
    assert.ok(untouchedBySignal(sleepPid), 'the signal must not reach the process group');
    // The stream ends once the output pipes reach EOF, i.e. when the
    // grandchild that inherited them is gone too.
    process.kill(sleepPid, 'SIGKILL');
    const sr = await sig;
    const sEnd = parseEnvelopes(sr.body).messages.find((m) => m.msg.event?.end).msg.event.end;
    assert.deepEqual(sEnd, { exitCode: -1, exited: false, status: 'signal: terminated', error: 'signal: terminated' });
  } finally {
    await emu.stop();
  }
});

// A child that writes `total` bytes of a known pattern in 64 KiB writes and,
// after each, records how many it wrote in `progressFile`; and the pattern.
const kPatternBase = Buffer.from(Array.from({ length: 251 * 264 }, (_, i) => i % 251));
function patternWriter(total, progressFile) {
  return ['python3', ['-c', [
    'import sys',
    `total, prog = ${total}, ${JSON.stringify(progressFile)}`,
    'base = bytes(range(251)) * 264',
    'n = i = 0',
    'out = sys.stdout.buffer',
    'while n < total:',
    '    k = min(65536, total - n)',
    '    out.write(base[i % 251:i % 251 + k]); out.flush()',
    '    n += k; i += 1',
    '    open(prog, "w").write(str(n))',
  ].join('\n')]];
}
function patternOk(buf, total) {
  if (buf.length !== total) return false;
  for (let i = 0, off = 0; off < total; i++, off += 65536) {
    const k = Math.min(65536, total - off);
    if (!buf.subarray(off, off + k).equals(kPatternBase.subarray(i % 251, i % 251 + k))) return false;
  }
  return true;
}
// Reads the number in `file` until it has not changed for `quietMs`.
async function progressWhenStalled(file, quietMs) {
  const read = () => { try { return Number(fs.readFileSync(file, 'utf8')) || 0; } catch { return 0; } };
  let last = read();
  let since = Date.now();
  for (;;) {
    await new Promise((r) => setTimeout(r, 100));
    const now = read();
    if (now !== last) { last = now; since = Date.now(); } else if (Date.now() - since >= quietMs) return now;
  }
}
function rssBytes(pid) {
  return Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m)[1]) * 1024;
}

test('backpressure: an unread stream blocks the process; memory bounded; every byte arrives', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    const token = await connectToken(info);
    const total = 64 << 20;
    const progress = path.join(emu.dir, 'progress');
    const [cmd, args] = patternWriter(total, progress);
    const rss0 = rssBytes(emu.child.pid);
    let res;
    const chunks = [];
    const done = new Promise((resolve, reject) => {
      const req = http.request(new URL('/process.Process/Start', info.url), {
        method: 'POST', agent: false,
        headers: { ...ROUTE, 'x-access-token': token, 'content-type': 'application/connect+json' },
      }, (r) => {
        res = r;
        r.pause(); // the slow reader: nothing is read until resumed below
        r.on('data', (c) => chunks.push(c));
        r.on('end', resolve);
        r.on('error', reject);
      });
      req.on('error', reject);
      req.end(envelope(0, { process: { cmd, args }, stdin: false }));
    });
    await waitFor(() => res, { what: 'the response headers' });
    // The emulator stops reading the writer's output (its own log says so:
    // waited for, not inferred from a quiet writer, which a loaded machine
    // also gives before the writer has even started), and then the writer
    // stalls, its pipe full, well before its end: loopback socket buffers,
    // one pipe and kMaxUnflushedBytes hold a few MiB, not 64.
    await waitFor(() => /output paused/.test(emu.log()), { timeoutMs: 30_000, what: 'the emulator to pause the output' });
    const stalled = await progressWhenStalled(progress, 1000);
    const rss = rssBytes(emu.child.pid);
    assert.ok(stalled < total / 2, `the writer should block while nobody reads: it wrote ${stalled} of ${total} bytes`);
    assert.ok(rss - rss0 < 48 << 20, `the emulator grew by ${rss - rss0} bytes while holding the output`);
    res.resume();
    await done;
    const { messages, rest } = parseEnvelopes(Buffer.concat(chunks));
    assert.equal(rest, 0);
    const out = Buffer.concat(messages.filter((m) => m.msg.event?.data).map((m) => Buffer.from(m.msg.event.data.stdout, 'base64')));
    assert.ok(patternOk(out, total), `every byte, in order: got ${out.length} of ${total}`);
    assert.equal(messages.at(-2).msg.event.end.exitCode, 0);
    assert.match(emu.log(), /backpressure_pauses=[1-9]/);
  } finally {
    await emu.stop();
  }
});

test('fault cut: partial envelope then a dropped connection; the process survives', async () => {
  const emu = await startEmulator('e2b', ['--faults', 'seed=3,cut=1']);
  try {
    const { info } = emu;
    const token = await connectToken(info);
    const marker = path.join(emu.dir, 'sbx-test', 'home', 'survived');
    const r = await raw(info.url, {
      path: '/process.Process/Start',
      headers: { 'x-access-token': token, 'content-type': 'application/connect+json' },
      body: startBody('echo hello; sleep 1; touch survived'),
    });
    assert.ok(r.error, 'the response must break off');
    const { messages, rest } = parseEnvelopes(r.body);
    assert.equal(messages.length, 1);
    assert.ok(messages[0].msg.event.start.pid > 0);
    assert.ok(rest > 0, 'a partial envelope follows the start event');
    await waitFor(() => fs.existsSync(marker), { what: 'the cut process to finish its work' });
    assert.match(emu.log(), /FAULT cut/);
  } finally {
    await emu.stop();
  }
});

test('fault http5xx: 502 then 503, nothing started', async () => {
  const emu = await startEmulator('e2b', ['--faults', 'http5xx=1']);
  try {
    const { info } = emu;
    const a = await raw(info.url, { path: `/v2/sandboxes/${info.sandbox}/connect`, headers: { 'x-api-key': info.api_key, 'content-type': 'application/json' }, body: '{}' });
    const b = await raw(info.url, { path: '/process.Process/Start', headers: { 'content-type': 'application/connect+json' }, body: startBody('touch started') });
    assert.equal(a.status, 502);
    assert.equal(b.status, 503);
    // No pause: a process the emulator spawned before answering would be its
    // child now, or, once reaped, would have run `touch` to its end. So no
    // child, then no file, proves nothing started (in this order).
    assert.deepEqual(childrenOf(emu.child.pid), [], 'the emulator started a process');
    assert.ok(!fs.existsSync(path.join(emu.dir, 'sbx-test', 'home', 'started')));
  } finally {
    await emu.stop();
  }
});

test('fault slow: responses delayed 1-3 s', async () => {
  const emu = await startEmulator('e2b', ['--faults', 'seed=9,slow=1']);
  try {
    const t0 = Date.now();
    const r = await raw(emu.info.url, { path: '/health', method: 'GET' });
    const ms = Date.now() - t0;
    assert.equal(r.status, 204);
    // What the emulator chose (1-3 s), and that the answer waited for it:
    // only a lower bound on our side, which load can only make longer.
    const delay = Number(emu.log().match(/FAULT slow (\d+) ms/)?.[1]);
    assert.ok(delay >= 1000 && delay <= 3000, `chosen delay ${delay} ms`);
    assert.ok(ms >= delay, `answered after ${ms} ms, before the ${delay} ms delay`);
  } finally {
    await emu.stop();
  }
});

test('faults: seeded schedules are reproducible; bad specs are refused', async () => {
  const seq = (spec) => {
    const f = new Faults(spec, { kinds: ['cut', 'slow'], flags: ['v4only'] });
    return Array.from({ length: 64 }, () => f.roll('cut'));
  };
  assert.deepEqual(seq('seed=7,cut=0.3'), seq('seed=7,cut=0.3'));
  assert.deepEqual(seq('seed=7,cut=0.3'), seq('seed=7,cut=0.3,slow=0.5'), 'kinds draw independently');
  assert.notDeepEqual(seq('seed=7,cut=0.3'), seq('seed=8,cut=0.3'));
  for (const bad of ['cut=2', 'cut=', 'bogus=1', 'seed=x', 'v4only=1']) {
    assert.throws(() => new Faults(bad, { kinds: ['cut'], flags: ['v4only'] }), /--faults/);
  }
  await assert.rejects(execFileP(process.execPath, [path.join(EMULATORS_DIR, 'e2b.mjs'), '--dir', '/tmp', '--faults', 'noclose=1']), (e) => e.code === 2);
});

test('bad requests get Connect errors, and a Connect stream deadline spares the process', async () => {
  const emu = await startEmulator('e2b');
  try {
    const { info } = emu;
    const token = await connectToken(info);
    const stream = { 'x-access-token': token, 'content-type': 'application/connect+json' };
    const unary = { 'x-access-token': token, 'content-type': 'application/json' };
    const endError = async (body, headers = stream) => {
      const r = await raw(info.url, { path: '/process.Process/Start', headers, body });
      assert.equal(r.status, 200);
      const m = parseEnvelopes(r.body).messages;
      assert.equal(m.at(-1).flags, 2);
      return m.at(-1).msg.error;
    };
    assert.equal((await raw(info.url, { path: '/process.Process/Start', headers: unary, body: startBody('true') })).status, 415);
    assert.equal((await endError(Buffer.from([0, 0, 0, 0, 9, 0x7b]))).code, 'invalid_argument', 'short envelope');
    assert.equal((await endError(Buffer.concat([Buffer.from([0, 0, 0, 0, 3]), Buffer.from('{x}')]))).code, 'invalid_argument', 'bad JSON');
    assert.equal((await endError(envelope(0, { process: {} }))).code, 'invalid_argument', 'no cmd');
    assert.equal((await endError(envelope(0, { process: { cmd: 'true', cwd: 'no/such/dir' } }))).code, 'invalid_argument', 'missing cwd');
    assert.equal((await endError(envelope(0, { process: { cmd: 'no-such-binary-xyz' } }))).code, 'internal', 'cannot exec');
    assert.equal((await endError(startBody('true'), { ...stream, 'connect-timeout-ms': 'soon' })).code, 'invalid_argument', 'bad timeout');

    const badJson = await raw(info.url, { path: '/process.Process/SendInput', headers: unary, body: '{' });
    assert.equal(badJson.status, 400);
    assert.equal(JSON.parse(badJson.body).code, 'invalid_argument');
    const unknown = await raw(info.url, { path: '/process.Process/SendInput', headers: unary, body: JSON.stringify({ process: { pid: 999999999 }, input: { stdin: '' } }) });
    assert.equal(unknown.status, 404);
    assert.equal(JSON.parse(unknown.body).code, 'not_found');

    // A process without stdin, and a Connect stream with its own deadline.
    let pid = 0;
    const started = raw(info.url, {
      path: '/process.Process/Start', headers: stream, body: startBody('sleep 3'),
      onData: (b) => { pid = pid || parseEnvelopes(b).messages[0]?.msg.event.start.pid; },
    });
    await waitFor(() => pid > 0, { what: 'start event' });
    const noStdin = await raw(info.url, { path: '/process.Process/SendInput', headers: unary, body: JSON.stringify({ process: { pid }, input: { stdin: 'YQ==' } }) });
    assert.equal(JSON.parse(noStdin.body).code, 'failed_precondition');
    const c = await raw(info.url, { path: '/process.Process/Connect', headers: { ...stream, 'connect-timeout-ms': '300' }, body: envelope(0, { process: { pid } }) });
    const cm = parseEnvelopes(c.body).messages;
    assert.equal(cm[0].msg.event.start.pid, pid);
    assert.equal(cm.at(-1).msg.error.code, 'deadline_exceeded');
    assert.ok(pidAlive(pid), 'a Connect deadline does not kill the process');
    const s = parseEnvelopes((await started).body).messages;
    assert.equal(s.at(-2).msg.event.end.exitCode, 0);
  } finally {
    await emu.stop();
  }
});

test('fault cut over TLS h2 drops the connection; the emulator keeps serving', async () => {
  const emu = await startEmulator('e2b', ['--tls', '--faults', 'cut=1']);
  try {
    const { info } = emu;
    const http2 = await import('node:http2');
    const ca = fs.readFileSync(info.ca);
    const call = (p, headers, body) => new Promise((resolve) => {
      const session = http2.connect(info.url, { ca });
      session.on('error', () => {});
      const req = session.request({ ':method': 'POST', ':path': p, ...headers });
      const chunks = [];
      let status = 0;
      req.on('response', (h) => { status = h[':status']; });
      req.on('data', (d) => chunks.push(d));
      req.on('error', (error) => resolve({ status, body: Buffer.concat(chunks), error }));
      req.on('close', () => { resolve({ status, body: Buffer.concat(chunks), rstCode: req.rstCode }); session.close(); });
      req.end(body);
    });
    const conn = await call(`/v2/sandboxes/${info.sandbox}/connect`, { 'x-api-key': info.api_key, 'content-type': 'application/json' }, '{}');
    assert.equal(conn.status, 200);
    const token = JSON.parse(conn.body).envdAccessToken;
    const r = await call('/process.Process/Start', { ...ROUTE, 'x-access-token': token, 'content-type': 'application/connect+json' }, startBody('echo hello'));
    assert.equal(r.status, 200);
    const { messages, rest } = parseEnvelopes(r.body);
    assert.equal(messages.length, 1);
    assert.ok(rest > 0, 'partial envelope');
    assert.ok(r.error || r.rstCode, 'the stream must not end cleanly');
    const again = await call(`/v2/sandboxes/${info.sandbox}/connect`, { 'x-api-key': info.api_key, 'content-type': 'application/json' }, '{}');
    assert.equal(again.status, 200);
  } finally {
    await emu.stop();
  }
});
