// The Daytona SDK proof: official `@daytonaio/sdk` calls against a running
// daytona emulator, with assertions, including the SDK's own lossy
// behaviour. Used in-process by sdk_daytona.test.mjs and, for TLS (where
// NODE_EXTRA_CA_CERTS must be set before node starts), as a child:
//   node lib/daytona_scenario.mjs '<ready-line JSON>'   -> prints a JSON summary
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { Daytona } from '@daytonaio/sdk';

import { sleep, waitFor } from './harness.mjs';

// All 256 byte values.
export function allBytes() {
  const b = Buffer.alloc(256);
  for (let i = 0; i < 256; i++) b[i] = i;
  return b;
}

export function sdkClient(info, extra = {}) {
  return new Daytona({ apiKey: info.api_key, apiUrl: info.url, target: 'us', useDeprecatedPolling: true, ...extra });
}

// Follows a command's logs through the SDK's WebSocket demultiplexer.
export async function followLogs(sbx, sid, cid) {
  let stdout = '';
  let stderr = '';
  await sbx.process.getSessionCommandLogs(sid, cid, (s) => { stdout += s; }, (s) => { stderr += s; });
  return { stdout, stderr };
}

export async function daytonaScenario(info) {
  const summary = { checks: [] };
  const ok = (name) => summary.checks.push(name);
  const daytona = sdkClient(info);
  const sbx = await daytona.get(info.sandbox);
  assert.equal(sbx.id, info.sandbox);
  assert.equal(sbx.state, 'started');
  assert.equal(sbx.toolboxProxyUrl, info.toolbox);
  ok('daytona.get -> SandboxDto with toolboxProxyUrl');

  await sbx.process.createSession('s1');
  const hi = await sbx.process.executeSessionCommand('s1', { command: 'echo hi' });
  assert.equal(hi.exitCode, 0);
  assert.equal(hi.stdout, 'hi\n');
  assert.equal(hi.stderr, '');
  ok('sync exec echo hi -> exit 0, stdout hi');

  // Async with input: stdout, stderr and the exit code come separately.
  const a = await sbx.process.executeSessionCommand('s1', {
    command: 'read l; echo "got:$l"; echo err >&2; exit 4', runAsync: true, suppressInputEcho: true,
  });
  assert.ok(a.cmdId);
  await sbx.process.sendSessionCommandInput('s1', a.cmdId, 'hello');
  const la = await followLogs(sbx, 's1', a.cmdId);
  assert.equal(la.stdout, 'got:hello\n');
  assert.equal(la.stderr, 'err\n');
  assert.equal((await sbx.process.getSessionCommand('s1', a.cmdId)).exitCode, 4);
  ok('async exec + input + follow logs -> got:hello, err, exit 4');

  // The log replays from byte 0 on every connect.
  const again = await followLogs(sbx, 's1', a.cmdId);
  assert.deepEqual(again, la);
  const plain = await sbx.process.getSessionCommandLogs('s1', a.cmdId);
  assert.equal(plain.stdout, 'got:hello\n');
  assert.equal(plain.stderr, 'err\n');
  ok('a second follow replays the whole log; plain logs agree');

  // Lossy: a marker-like byte run switches streams; invalid UTF-8 is replaced.
  const lossy = await sbx.process.executeSessionCommand('s1', {
    command: "printf 'a\\002\\002\\002b\\377c\\n'", runAsync: true,
  });
  const ll = await followLogs(sbx, 's1', lossy.cmdId);
  assert.equal(ll.stdout, 'a');
  assert.equal(ll.stderr, 'b\ufffdc\n');
  ok('SDK: payload 02 02 02 switched to stderr, 0xff became U+FFFD');

  // NUL dropped, a newline added to the last line.
  const nul = await sbx.process.executeSessionCommand('s1', { command: "printf 'x\\000y'", runAsync: true });
  const ln = await followLogs(sbx, 's1', nul.cmdId);
  assert.equal(ln.stdout, 'xy\n');
  ok('SDK: NUL dropped, newline appended');

  // Input is echoed unless suppressed.
  const echo = await sbx.process.executeSessionCommand('s1', { command: 'read l; echo "got:$l"', runAsync: true });
  await sbx.process.sendSessionCommandInput('s1', echo.cmdId, 'ping\n');
  const le = await followLogs(sbx, 's1', echo.cmdId);
  assert.equal(le.stdout, 'ping\ngot:ping\n');
  ok('input echoed into stdout without suppressInputEcho');

  // No EOF for async commands: cat never ends; deleting the session kills it.
  await sbx.process.createSession('s2');
  const cat = await sbx.process.executeSessionCommand('s2', { command: 'cat; echo never', runAsync: true, suppressInputEcho: true });
  await sbx.process.sendSessionCommandInput('s2', cat.cmdId, 'one');
  await sleep(500);
  assert.equal((await sbx.process.getSessionCommand('s2', cat.cmdId)).exitCode, undefined);
  const logs = await sbx.process.getSessionCommandLogs('s2', cat.cmdId);
  assert.equal(logs.stdout, 'one\n');
  await sbx.process.deleteSession('s2');
  await assert.rejects(sbx.process.getSessionCommand('s2', cat.cmdId));
  ok('async cat sees no EOF; deleteSession ends it');

  // Files through bulk-upload, exact bytes.
  await sbx.fs.uploadFile(allBytes(), 'up/all.bin');
  const st = await sbx.process.executeSessionCommand('s1', { command: 'od -An -tx1 -v up/all.bin | tr -d " \\n" | head -c 24' });
  assert.equal(st.stdout, '000102030405060708090a0b\n', 'the log adds a newline to a last line without one');
  const sum = await sbx.process.executeSessionCommand('s1', { command: 'sha256sum up/all.bin | cut -c1-64' });
  assert.equal(sum.stdout.trim(), createHash('sha256').update(allBytes()).digest('hex'));
  ok('uploadFile all 256 bytes (checked in the sandbox)');

  await sbx.process.deleteSession('s1');
  await waitFor(async () => (await sbx.process.listSessions()).length === 0, { what: 'no sessions' });
  ok('deleteSession, listSessions');
  return summary;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const info = JSON.parse(process.argv[2]);
  daytonaScenario(info).then((s) => {
    process.stdout.write(JSON.stringify(s) + '\n');
    process.exit(0);
  }, (e) => {
    process.stderr.write(String(e?.stack ?? e) + '\n');
    process.exit(1);
  });
}
