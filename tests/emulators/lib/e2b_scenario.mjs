// The E2B SDK proof: official `e2b` SDK calls against a running e2b emulator,
// with assertions. Used in-process by sdk_e2b.test.mjs and, for TLS (where
// NODE_EXTRA_CA_CERTS must be set before node starts), as a child:
//   node lib/e2b_scenario.mjs '<ready-line JSON>'   -> prints a JSON summary
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import { CommandExitError, Sandbox } from 'e2b';

import { pidAlive, sleep, waitFor } from './harness.mjs';

// All 256 byte values, forwards and backwards, then a run of NULs and 0xFF.
export function allBytes() {
  const b = Buffer.alloc(256 * 2 + 64);
  for (let i = 0; i < 256; i++) {
    b[i] = i;
    b[256 + i] = 255 - i;
  }
  b.fill(0xff, 512 + 32);
  return b;
}

export async function e2bScenario(info) {
  const summary = { checks: [] };
  const ok = (name) => summary.checks.push(name);
  const sbx = await Sandbox.connect(info.sandbox, { apiKey: info.api_key, apiUrl: info.url, sandboxUrl: info.url });
  ok('Sandbox.connect');

  const r = await sbx.commands.run('echo hi');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hi\n');
  assert.equal(r.stderr, '');
  ok('commands.run echo hi -> exit 0, stdout hi');

  await assert.rejects(sbx.commands.run('echo out; echo err >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `expected CommandExitError, got ${e?.constructor?.name}`);
    assert.equal(e.exitCode, 3);
    assert.equal(e.stdout, 'out\n');
    assert.equal(e.stderr, 'err\n');
    return true;
  });
  ok('non-zero exit -> CommandExitError(3)');

  // Background cat with stdin; a second handle through commands.connect.
  const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 });
  await sbx.commands.sendStdin(h.pid, 'abc\n');
  await waitFor(() => h.stdout === 'abc\n', { what: 'first handle to see abc' });
  const h2 = await sbx.commands.connect(h.pid);
  await sbx.commands.sendStdin(h.pid, 'def\n');
  await waitFor(() => h.stdout === 'abc\ndef\n' && h2.stdout === 'def\n', { what: 'both handles to see def' });
  await sbx.commands.closeStdin(h.pid);
  const [w1, w2] = await Promise.all([h.wait(), h2.wait()]);
  assert.equal(w1.exitCode, 0);
  assert.equal(w2.exitCode, 0);
  assert.equal(w1.stdout, 'abc\ndef\n');
  assert.equal(w2.stdout, 'def\n');
  ok('background cat: sendStdin, second handle via connect, closeStdin, both see output');

  const k = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 });
  assert.ok(pidAlive(k.pid));
  assert.equal(await k.kill(), true);
  await assert.rejects(k.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
  await waitFor(() => !pidAlive(k.pid), { what: 'killed process to be gone' });
  assert.equal(await sbx.commands.kill(k.pid), false);
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === k.pid));
  ok('kill -> true, process gone, exit -1, second kill -> false');

  // Output while nobody is attached is dropped; dropping a stream does not kill.
  const d = await sbx.commands.run('echo a; read x; echo b; read y; echo c', { background: true, stdin: true, timeoutMs: 0 });
  await waitFor(() => d.stdout === 'a\n', { what: 'a' });
  await d.disconnect();
  await sleep(100);
  await sbx.commands.sendStdin(d.pid, 'x\n');
  await sleep(300);
  assert.ok(pidAlive(d.pid), 'a dropped stream must not kill the process');
  const d2 = await sbx.commands.connect(d.pid);
  await sbx.commands.sendStdin(d.pid, 'y\n');
  const dr = await d2.wait();
  assert.equal(dr.stdout, 'c\n');
  ok('output while detached is dropped; detaching does not kill');

  // Connect-Timeout-Ms on Start is the process lifetime.
  const t = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 800 });
  await assert.rejects(t.wait());
  await waitFor(() => !pidAlive(t.pid), { what: 'timed-out process to be gone' });
  ok('Connect-Timeout-Ms kills the process');

  const bytes = allBytes();
  const wo = await sbx.files.write('up/octet/all.bin', bytes, { useOctetStream: true });
  assert.equal(wo.name, 'all.bin');
  const back = Buffer.from(await sbx.files.read('up/octet/all.bin', { format: 'bytes' }));
  assert.ok(back.equals(bytes), 'octet-stream round trip');
  const wm = await sbx.files.write('up/multi/all.bin', bytes);
  assert.equal(wm.name, 'all.bin');
  const back2 = Buffer.from(await sbx.files.read('up/multi/all.bin', { format: 'bytes' }));
  assert.ok(back2.equals(bytes), 'multipart round trip');
  const cat = await sbx.commands.run('od -An -tx1 -v up/octet/all.bin | tr -d " \\n" | head -c 8');
  assert.equal(cat.stdout, '00010203');
  await sbx.files.write('up/gz/all.bin', bytes, { gzip: true });
  const back3 = Buffer.from(await sbx.files.read('up/gz/all.bin', { format: 'bytes', gzip: true }));
  assert.ok(back3.equals(bytes), 'gzip round trip');
  ok('files.write/read round trip of all 256 byte values (octet-stream, multipart, gzip)');
  return summary;
}

// With --envd-version 0.5.6: uploads fall back to multipart, closeStdin still works.
export async function e2bOldEnvdScenario(info) {
  const sbx = await Sandbox.connect(info.sandbox, { apiKey: info.api_key, apiUrl: info.url, sandboxUrl: info.url });
  const bytes = allBytes();
  await sbx.files.write('old/all.bin', bytes, { useOctetStream: true });
  const back = Buffer.from(await sbx.files.read('old/all.bin', { format: 'bytes' }));
  assert.ok(back.equals(bytes));
  return { checks: ['envd 0.5.6: useOctetStream falls back to multipart, round trip ok'] };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const info = JSON.parse(process.argv[2]);
  const old = process.argv[3] === '--old-envd';
  const summary = await (old ? e2bOldEnvdScenario(info) : e2bScenario(info));
  process.stdout.write(JSON.stringify(summary) + '\n');
}
