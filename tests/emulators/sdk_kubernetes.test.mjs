// Proves tests/emulators/kubernetes.mjs with the official Kubernetes SDK
// (@kubernetes/client-node@1.4.0) and, when installed, kubectl; plus raw
// WebSocket checks of the wire and of every fault kind.
// Run: tests/emulators/setup.sh && node --test tests/emulators/sdk_kubernetes.test.mjs
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import WebSocket from 'ws';

import { pidAlive, startEmulator, waitFor } from './lib/harness.mjs';

function sink() {
  const chunks = [];
  const w = new Writable({ write(d, _e, cb) { chunks.push(Buffer.from(d)); cb(); } });
  w.bytes = () => Buffer.concat(chunks);
  w.text = () => Buffer.concat(chunks).toString();
  return w;
}

// Exec through the SDK; resolves {stdout, stderr, status} once the status
// callback fires.
async function sdkExec(kc, info, command, input) {
  const stdout = sink();
  const stderr = sink();
  const stdin = input === undefined ? null : new PassThrough();
  const status = await new Promise((resolve, reject) => {
    new k8s.Exec(kc).exec(info.namespace, info.pod, info.container, command, stdout, stderr, stdin, false, resolve)
      .then(() => { if (stdin) stdin.end(input); })
      .catch(reject);
  });
  return { stdout: stdout.text(), stderr: stderr.text(), status };
}

function kubeConfigFromOptions(info, extra) {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'emu', server: info.url, ...extra }],
    users: [{ name: 'emu', token: info.token }],
    contexts: [{ name: 'emu', cluster: 'emu', user: 'emu', namespace: info.namespace }],
    currentContext: 'emu',
  });
  return kc;
}

async function sdkChecks(kc, info) {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const pod = await core.readNamespacedPod({ name: info.pod, namespace: info.namespace });
  assert.equal(pod.metadata.name, info.pod);
  assert.equal(pod.status.phase, 'Running');
  assert.equal(pod.spec.containers[0].name, info.container);

  const hi = await sdkExec(kc, info, ['sh', '-c', 'echo hi']);
  assert.equal(hi.stdout, 'hi\n');
  assert.deepEqual(hi.status, { metadata: {}, status: 'Success' });

  const cat = await sdkExec(kc, info, ['sh', '-c', 'cat; echo e >&2; exit 3'], 'abc\n');
  assert.equal(cat.stdout, 'abc\n');
  assert.equal(cat.stderr, 'e\n');
  assert.equal(cat.status.status, 'Failure');
  assert.equal(cat.status.reason, 'NonZeroExitCode');
  assert.deepEqual(cat.status.details.causes, [{ reason: 'ExitCode', message: '3' }]);
  assert.match(cat.status.message, /^command terminated with non-zero exit code: /);
  return 3;
}

// A raw exec WebSocket; collects frames; resolves on close.
function rawExec(info, { query, protocols = ['v5.channel.k8s.io', 'v4.channel.k8s.io'], token = info.token, onOpen, onFrame } = {}) {
  const q = query ?? 'command=sh&command=-c&command=echo%20hi&stdout=true&stderr=true&stdin=false&tty=false&container=main';
  const base = info.url.replace(/^http/, 'ws');
  return new Promise((resolve) => {
    const frames = [];
    const ws = new WebSocket(`${base}/api/v1/namespaces/${info.namespace}/pods/${info.pod}/exec?${q}`, protocols, {
      headers: { Authorization: `Bearer ${token}` },
      ca: info.ca ? fs.readFileSync(info.ca) : undefined,
      perMessageDeflate: false,
    });
    let response = null;
    ws.on('unexpected-response', (_req, res) => {
      response = res.statusCode;
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ httpStatus: response, body }));
    });
    ws.on('open', () => onOpen?.(ws));
    ws.on('message', (data) => {
      frames.push(Buffer.from(data));
      onFrame?.(ws, Buffer.from(data), frames);
    });
    ws.on('error', () => {});
    ws.on('close', (code) => { if (response === null) resolve({ protocol: ws.protocol, frames, closeCode: code }); });
  });
}

function channelText(frames, ch) {
  return Buffer.concat(frames.filter((f) => f[0] === ch).map((f) => f.subarray(1))).toString();
}

function rawGet(info, p, token = info.token) {
  const mod = info.url.startsWith('https') ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.get(new URL(p, info.url), {
      headers: { Authorization: `Bearer ${token}` }, ca: info.ca ? fs.readFileSync(info.ca) : undefined, agent: false,
    }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
  });
}

test('SDK over TLS: kubeconfig file with certificate-authority-data, and caData options', async () => {
  const emu = await startEmulator('kubernetes', ['--tls']);
  try {
    const { info } = emu;
    assert.match(info.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(Object.keys(info).sort(), ['ca', 'container', 'forbidden_pod', 'kubeconfig', 'namespace', 'pod', 'token', 'url']);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(info.kubeconfig);
    assert.equal(kc.getCurrentCluster().server, info.url);
    assert.equal(kc.getCurrentCluster().skipTLSVerify, false);
    await sdkChecks(kc, info);
    const kc2 = kubeConfigFromOptions(info, { caData: fs.readFileSync(info.ca).toString('base64') });
    await sdkChecks(kc2, info);
    assert.ok(!emu.log().includes(info.token), 'the log must not hold the token');
  } finally {
    await emu.stop();
  }
});

test('SDK over plain http with skipTLSVerify (kubeconfig file and options)', async () => {
  const emu = await startEmulator('kubernetes');
  try {
    const { info } = emu;
    assert.match(info.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(info.ca, null);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(info.kubeconfig);
    assert.equal(kc.getCurrentCluster().skipTLSVerify, true);
    await sdkChecks(kc, info);
    await sdkChecks(kubeConfigFromOptions(info, { skipTLSVerify: true }), info);
  } finally {
    await emu.stop();
  }
});

// kubectl is in neither Debian 12 nor the npm registry, so packaging/setup.sh
// cannot install it and the suite does not use it: this check runs only when
// asked, TETHER_TEST_KUBECTL naming the kubectl to run, and then a kubectl
// that does not run is a failure, not a skip.
const kubectl = process.env.TETHER_TEST_KUBECTL;
test('kubectl (client-go, WebSocket exec) against the TLS emulator', { skip: !kubectl && 'opt-in: TETHER_TEST_KUBECTL=kubectl (not installable here)' }, async () => {
  const version = spawnSync(kubectl, ['version', '--client'], { stdio: 'ignore' });
  assert.equal(version.status, 0, `TETHER_TEST_KUBECTL=${kubectl} does not run`);
  const emu = await startEmulator('kubernetes', ['--tls']);
  try {
    const env = { ...process.env, KUBECONFIG: emu.info.kubeconfig };
    const run = (args, input) => new Promise((resolve) => {
      const c = execFile(kubectl, args, { env, timeout: 30_000 }, (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
      c.stdin.end(input ?? '');
    });
    const get = await run(['get', 'pod', emu.info.pod, '-o', 'jsonpath={.status.phase}']);
    assert.equal(get.stdout, 'Running', get.stderr);
    const ex = await run(['exec', '-i', emu.info.pod, '-c', 'main', '--', 'sh', '-c', 'cat; echo E >&2; exit 4'], 'xyz\n');
    assert.equal(ex.stdout, 'xyz\n');
    assert.match(ex.stderr, /^E\n/);
    assert.equal(ex.code, 4);
  } finally {
    await emu.stop();
  }
});

test('wire: auth, 404s, the announce frame, binary stdin/stdout, v5 stdin close', async () => {
  const emu = await startEmulator('kubernetes');
  try {
    const { info } = emu;
    assert.equal((await rawGet(info, `/api/v1/namespaces/default/pods/${info.pod}`, 'wrong')).status, 401);
    const missing = await rawGet(info, '/api/v1/namespaces/default/pods/nope');
    assert.equal(missing.status, 404);
    assert.equal(JSON.parse(missing.body).reason, 'NotFound');
    assert.equal((await rawExec(info, { token: 'wrong' })).httpStatus, 401);
    assert.equal((await rawExec(info, { protocols: ['v3.channel.k8s.io'] })).httpStatus, 400);

    const all = Buffer.alloc(256);
    for (let i = 0; i < 256; i++) all[i] = i;
    const r = await rawExec(info, {
      query: 'command=cat&stdin=true&stdout=true&stderr=true&tty=false',
      onOpen: (ws) => {
        ws.send(Buffer.concat([Buffer.from([0]), all]));
        ws.send(Buffer.from([255, 0]));
      },
    });
    assert.equal(r.protocol, 'v5.channel.k8s.io');
    assert.deepEqual(r.frames[0], Buffer.from([1]), 'empty frame on the lowest writable channel first');
    const out = Buffer.concat(r.frames.filter((f) => f[0] === 1).map((f) => f.subarray(1)));
    assert.ok(out.equals(all), 'binary-safe stdin -> stdout');
    assert.equal(r.frames.at(-1)[0], 3);
    assert.deepEqual(JSON.parse(r.frames.at(-1).subarray(1)), { metadata: {}, status: 'Success' });
    assert.equal(r.closeCode, 1000);

    const env = await rawExec(info, { query: `command=sh&command=-c&command=${encodeURIComponent('echo "$(pwd)|$HOME|$TMPDIR|$(readlink /proc/self/fd/0)"')}&stdout=true` });
    const home = path.join(emu.dir, 'pod-test', 'home');
    assert.equal(channelText(env.frames, 1), `${home}|${home}|${path.join(emu.dir, 'pod-test', 'tmp')}|/dev/null\n`);

    const nf = await rawExec(info, { query: 'command=no-such-binary&stdout=true&stderr=true' });
    const st = JSON.parse(nf.frames.at(-1).subarray(1));
    assert.equal(st.reason, 'InternalError');
    assert.equal(st.code, 500);
  } finally {
    await emu.stop();
  }
});

// A child that writes `total` bytes of a known pattern in 64 KiB writes and,
// after each, records how many it wrote in `progressFile`; and the pattern.
const kPatternBase = Buffer.from(Array.from({ length: 251 * 264 }, (_, i) => i % 251));
function patternWriter(total, progressFile) {
  return ['python3', '-c', [
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
  ].join('\n')];
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

test('backpressure: an unread exec blocks the process; memory bounded; every byte arrives', async () => {
  const emu = await startEmulator('kubernetes');
  try {
    const { info } = emu;
    const total = 64 << 20;
    const progress = path.join(emu.dir, 'progress');
    const query = patternWriter(total, progress).map((a) => `command=${encodeURIComponent(a)}`).join('&') +
      '&stdout=true&stderr=true&stdin=false&tty=false&container=main';
    const rss0 = rssBytes(emu.child.pid);
    let sock = null;
    const done = rawExec(info, { query, onOpen: (ws) => { ws.pause(); sock = ws; } });
    await waitFor(() => sock, { what: 'the exec to open' });
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
    sock.resume();
    const r = await done;
    const out = Buffer.concat(r.frames.filter((f) => f[0] === 1).map((f) => f.subarray(1)));
    assert.ok(patternOk(out, total), `every byte, in order: got ${out.length} of ${total}`);
    assert.deepEqual(JSON.parse(r.frames.at(-1).subarray(1)), { metadata: {}, status: 'Success' });
    assert.match(emu.log(), /backpressure_pauses=[1-9]/);
  } finally {
    await emu.stop();
  }
});

test('RBAC: the forbidden pod can be read but an exec into it is 403 Forbidden, for the SDK too', async () => {
  const emu = await startEmulator('kubernetes');
  try {
    const { info } = emu;
    assert.equal(info.forbidden_pod, 'pod-restricted');
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(info.kubeconfig);
    const pod = await kc.makeApiClient(k8s.CoreV1Api).readNamespacedPod({ name: info.forbidden_pod, namespace: info.namespace });
    assert.equal(pod.metadata.name, info.forbidden_pod);
    const r = await rawExec({ ...info, pod: info.forbidden_pod });
    assert.equal(r.httpStatus, 403);
    const st = JSON.parse(r.body);
    assert.equal(st.kind, 'Status');
    assert.equal(st.status, 'Failure');
    assert.equal(st.reason, 'Forbidden');
    assert.equal(st.code, 403);
    assert.match(st.message, /^pods "pod-restricted" is forbidden: User ".+" cannot create resource "pods\/exec" in API group "" in the namespace "default"$/);
    await assert.rejects(new k8s.Exec(kc).exec(info.namespace, info.forbidden_pod, info.container, ['true'],
      new PassThrough(), new PassThrough(), null, false), (e) => /403/.test(String(e?.message ?? e)));
    assert.doesNotMatch(emu.log(), /pod-restricted\/exec.*upgraded/, 'nothing ran');
  } finally {
    await emu.stop();
  }
});

test('fault v4only: v4 negotiated; the SDK closes the socket for stdin EOF', async () => {
  const emu = await startEmulator('kubernetes', ['--faults', 'v4only']);
  try {
    const { info } = emu;
    const r = await rawExec(info);
    assert.equal(r.protocol, 'v4.channel.k8s.io');
    assert.equal(channelText(r.frames, 1), 'hi\n');
    // v4 has no stdin close: the client closes the WebSocket; the process gets EOF.
    const marker = path.join(emu.dir, 'pod-test', 'home', 'eof-seen');
    const out = sink();
    const stdin = new PassThrough();
    await new k8s.Exec((() => { const kc = new k8s.KubeConfig(); kc.loadFromFile(info.kubeconfig); return kc; })())
      .exec(info.namespace, info.pod, info.container, ['sh', '-c', 'cat; touch eof-seen'], out, null, stdin, false, () => {});
    stdin.end('x\n');
    await waitFor(() => fs.existsSync(marker), { what: 'the process to see EOF' });
  } finally {
    await emu.stop();
  }
});

test('fault cut: a partial frame then a dead socket; stdin closed, the process runs on', async () => {
  const emu = await startEmulator('kubernetes', ['--faults', 'seed=5,cut=1']);
  try {
    const { info } = emu;
    const marker = path.join(emu.dir, 'pod-test', 'home', 'after-cut');
    const r = await rawExec(info, { query: 'command=sh&command=-c&command=echo%20hello%3B%20cat%3B%20touch%20after-cut&stdin=true&stdout=true&stderr=true' });
    assert.equal(r.closeCode, 1006, 'no close frame');
    assert.ok(!r.frames.some((f) => f[0] === 3), 'no status frame');
    assert.equal(channelText(r.frames, 1), '', 'the data frame was cut in the middle');
    await waitFor(() => fs.existsSync(marker), { what: 'cat to see EOF after the cut' });
    assert.match(emu.log(), /FAULT cut/);
  } finally {
    await emu.stop();
  }
});

test('fault noclose: output, then no status frame and no close frame', async () => {
  const emu = await startEmulator('kubernetes', ['--faults', 'noclose=1']);
  try {
    const r = await rawExec(emu.info);
    assert.equal(channelText(r.frames, 1), 'hi\n');
    assert.ok(!r.frames.some((f) => f[0] === 3 && f.length > 1), 'no status');
    assert.equal(r.closeCode, 1006);
  } finally {
    await emu.stop();
  }
});

test('fault http5xx: REST and exec answered 502 then 503', async () => {
  const emu = await startEmulator('kubernetes', ['--faults', 'http5xx=1']);
  try {
    const { info } = emu;
    assert.equal((await rawGet(info, `/api/v1/namespaces/default/pods/${info.pod}`)).status, 502);
    assert.equal((await rawExec(info)).httpStatus, 503);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(info.kubeconfig);
    await assert.rejects(kc.makeApiClient(k8s.CoreV1Api).readNamespacedPod({ name: info.pod, namespace: info.namespace }), (e) => e.code === 502);
  } finally {
    await emu.stop();
  }
});

test('fault slow: an exec is delayed 1-3 s and still works', async () => {
  const emu = await startEmulator('kubernetes', ['--faults', 'seed=2,slow=1']);
  try {
    const t0 = Date.now();
    const r = await rawExec(emu.info);
    const ms = Date.now() - t0;
    assert.equal(channelText(r.frames, 1), 'hi\n');
    // What the emulator chose (1-3 s), and that the exec waited for it:
    // only a lower bound on our side, which load can only make longer.
    const delay = Number(emu.log().match(/FAULT slow (\d+) ms/)?.[1]);
    assert.ok(delay >= 1000 && delay <= 3000, `chosen delay ${delay} ms`);
    assert.ok(ms >= delay, `answered after ${ms} ms, before the ${delay} ms delay`);
  } finally {
    await emu.stop();
  }
});

test('shutdown on stdin EOF reaps running execs', async () => {
  const emu = await startEmulator('kubernetes');
  let pid = 0;
  const done = rawExec(emu.info, {
    query: 'command=sh&command=-c&command=echo%20%24%24%3B%20exec%20sleep%2030&stdout=true',
    onFrame: (_ws, f) => { if (f[0] === 1 && f.length > 1) pid = Number(f.subarray(1).toString()); },
  });
  await waitFor(() => pid > 0, { what: 'the exec pid' });
  assert.ok(pidAlive(pid));
  const r = await emu.stop();
  assert.equal(r.code, 0);
  await done;
  await waitFor(() => !pidAlive(pid), { what: 'the exec to be reaped' });
});
