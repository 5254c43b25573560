// Proves tests/emulators/daytona.mjs with the official Daytona SDK
// (@daytonaio/sdk@0.218.0, useDeprecatedPolling), including the SDK's own
// lossy behaviour (marker bytes switch streams, invalid UTF-8 replaced, NUL
// dropped), plus raw-client checks of the limits and of every fault kind.
// Run: tests/emulators/setup.sh && node --test tests/emulators/sdk_daytona.test.mjs
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import WebSocket from 'ws';

import { daytonaScenario, followLogs, sdkClient } from './lib/daytona_scenario.mjs';
import { EMULATORS_DIR, sleep, startEmulator, waitFor } from './lib/harness.mjs';

const execFileP = promisify(execFile);

async function call(info, method, p, body) {
  const r = await fetch(info.toolbox + '/' + info.sandbox + p, {
    method,
    headers: { authorization: `Bearer ${info.api_key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined };
}

// Opens the follow-logs WebSocket raw; resolves {bytes, code} at its end.
function rawFollow(info, sid, cid) {
  return new Promise((resolve) => {
    const url = `${info.toolbox.replace(/^http/, 'ws')}/${info.sandbox}/process/session/${sid}/command/${cid}/logs?follow=true`;
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${info.api_key}` } });
    const parts = [];
    ws.on('message', (d) => parts.push(Buffer.from(d)));
    ws.on('close', (code) => resolve({ bytes: Buffer.concat(parts), code }));
    ws.on('error', () => {});
  });
}

test('SDK over plain http: sessions, sync and async exec, input, logs, lossy demux, files', async () => {
  const emu = await startEmulator('daytona');
  try {
    assert.match(emu.info.url, /^http:\/\/127\.0\.0\.1:\d+\/api$/);
    const summary = await daytonaScenario(emu.info);
    assert.equal(summary.checks.length, 10);
    assert.match(emu.log(), /GET \/api\/sandbox\/sbx-daytona -> 200/);
    assert.doesNotMatch(emu.log(), /socket\.io/, 'useDeprecatedPolling: no event stream');
    assert.doesNotMatch(emu.log(), new RegExp(emu.info.api_key), 'the log must not hold credentials');
  } finally {
    await emu.stop();
  }
});

test('SDK over TLS (https + wss) with NODE_EXTRA_CA_CERTS, in a child node', async () => {
  const emu = await startEmulator('daytona', ['--tls']);
  try {
    assert.match(emu.info.url, /^https:\/\/127\.0\.0\.1:\d+\/api$/);
    const { stdout } = await execFileP(process.execPath, [path.join(EMULATORS_DIR, 'lib/daytona_scenario.mjs'), JSON.stringify(emu.info)], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: emu.info.ca }, timeout: 120_000,
    });
    assert.equal(JSON.parse(stdout.trim().split('\n').pop()).checks.length, 10);
  } finally {
    await emu.stop();
  }
});

test('without toolboxProxyUrl the SDK asks /sandbox/{id}/toolbox-proxy-url', async () => {
  const emu = await startEmulator('daytona', ['--no-proxy-url']);
  try {
    const sbx = await sdkClient(emu.info).get(emu.info.sandbox);
    assert.equal(sbx.toolboxProxyUrl, emu.info.toolbox);
    await sbx.process.createSession('p');
    const r = await sbx.process.executeSessionCommand('p', { command: 'echo via-proxy-url' });
    assert.equal(r.stdout, 'via-proxy-url\n');
    assert.match(emu.log(), /GET \/api\/sandbox\/sbx-daytona\/toolbox-proxy-url -> 200/);
  } finally {
    await emu.stop();
  }
});

test('SDK errors: a wrong key, an unknown sandbox, an unknown session', async () => {
  const emu = await startEmulator('daytona');
  try {
    await assert.rejects(sdkClient({ ...emu.info, api_key: 'wrong' }).get(emu.info.sandbox), (e) => {
      assert.match(e.constructor.name, /Authentication|Daytona/);
      assert.equal(e.statusCode, 401);
      return true;
    });
    await assert.rejects(sdkClient(emu.info).get('nope'), (e) => e.statusCode === 404);
    const sbx = await sdkClient(emu.info).get(emu.info.sandbox);
    await assert.rejects(sbx.process.executeSessionCommand('none', { command: 'true' }), (e) => e.statusCode === 404);
    await sbx.process.createSession('dup');
    await assert.rejects(sbx.process.createSession('dup'), (e) => e.statusCode === 409);
  } finally {
    await emu.stop();
  }
});

test('limits: input after exit is refused; echo forced by --force-echo; replay byte for byte', async () => {
  const emu = await startEmulator('daytona', ['--force-echo']);
  try {
    const sbx = await sdkClient(emu.info).get(emu.info.sandbox);
    await sbx.process.createSession('e');
    const c = await sbx.process.executeSessionCommand('e', { command: 'read l; echo "got:$l"', runAsync: true, suppressInputEcho: true });
    await sbx.process.sendSessionCommandInput('e', c.cmdId, 'x');
    const l = await followLogs(sbx, 'e', c.cmdId);
    assert.equal(l.stdout, 'x\ngot:x\n', 'a daemon that ignores suppressInputEcho echoes');
    await assert.rejects(sbx.process.sendSessionCommandInput('e', c.cmdId, 'late'), (e) => e.statusCode === 400);
    const a = await rawFollow(emu.info, 'e', c.cmdId);
    const b = await rawFollow(emu.info, 'e', c.cmdId);
    assert.equal(a.code, 1000);
    assert.deepEqual(a.bytes, b.bytes);
    assert.deepEqual(a.bytes, Buffer.from('\x01\x01\x01x\n\x01\x01\x01got:x\n'));
    // A signal ends the command with 128+N.
    const k = await sbx.process.executeSessionCommand('e', { command: 'kill -TERM $$', runAsync: true });
    await waitFor(async () => (await sbx.process.getSessionCommand('e', k.cmdId)).exitCode === 143, { what: 'exit 143' });
  } finally {
    await emu.stop();
  }
});

test('faults: cut (a log stream dropped mid-line, no close frame), http5xx, slow', async () => {
  const emu = await startEmulator('daytona', ['--faults', 'seed=3,cut=1']);
  try {
    await call(emu.info, 'POST', '/process/session', { sessionId: 'f' });
    const r = await call(emu.info, 'POST', '/process/session/f/exec', { command: 'printf "abcdefgh\\n"', runAsync: true });
    assert.equal(r.status, 202);
    await waitFor(async () => (await call(emu.info, 'GET', `/process/session/f/command/${r.body.cmdId}`)).body.exitCode === 0);
    const cut = await rawFollow(emu.info, 'f', r.body.cmdId);
    assert.equal(cut.code, 1006, 'no close frame');
    assert.deepEqual(cut.bytes, Buffer.from('\x01\x01\x01abc'), 'half of the message, cut mid-line');
    assert.match(emu.log(), /FAULT cut after 6 bytes/);
  } finally {
    await emu.stop();
  }
  const emu2 = await startEmulator('daytona', ['--faults', 'seed=1,http5xx=1']);
  try {
    const r = await call(emu2.info, 'POST', '/process/session', { sessionId: 'g' }).catch(() => null);
    const resp = await fetch(emu2.info.url + '/sandbox/' + emu2.info.sandbox, { headers: { authorization: `Bearer ${emu2.info.api_key}` } });
    assert.equal(resp.status, 503, 'the second request: 502 and 503 alternate');
    assert.equal(r, null, 'the first answer is not JSON (a gateway page)');
    assert.match(emu2.log(), /FAULT http5xx 502/);
  } finally {
    await emu2.stop();
  }
  const emu3 = await startEmulator('daytona', ['--faults', 'seed=1,slow=1']);
  try {
    const t0 = Date.now();
    const resp = await fetch(emu3.info.url + '/sandbox/' + emu3.info.sandbox, { headers: { authorization: `Bearer ${emu3.info.api_key}` } });
    const ms = Date.now() - t0;
    assert.equal(resp.status, 200);
    // What the emulator chose (1-3 s), and that the answer waited for it:
    // only a lower bound on our side, which load can only make longer.
    const delay = Number(emu3.log().match(/FAULT slow (\d+) ms/)?.[1]);
    assert.ok(delay >= 1000 && delay <= 3000, `chosen delay ${delay} ms`);
    assert.ok(ms >= delay, `answered after ${ms} ms, before the ${delay} ms delay`);
  } finally {
    await emu3.stop();
  }
});

test('faults: lost5xx (the call takes effect, the answer is lost) and http429; a resend of what took effect is a VIOLATION', async () => {
  const raw = async (info, method, p, body) => {
    const r = await fetch(info.toolbox + '/' + info.sandbox + p, {
      method,
      headers: { authorization: `Bearer ${info.api_key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, text: await r.text(), retryAfter: r.headers.get('retry-after') };
  };
  const emu = await startEmulator('daytona', ['--faults', 'seed=1,lost5xx=1']);
  try {
    assert.ok((await raw(emu.info, 'POST', '/process/session', { sessionId: 'l' })).status >= 502);
    assert.equal((await raw(emu.info, 'POST', '/process/session', { sessionId: 'l' })).status, 409, 'the lost one made it');
    const out = path.join(emu.dir, 'in.txt');
    const exec = { command: `cat > '${out}'`, runAsync: true, suppressInputEcho: true };
    assert.ok((await raw(emu.info, 'POST', '/process/session/l/exec', exec)).status >= 502);
    const listed = JSON.parse((await raw(emu.info, 'GET', '/process/session/l')).text);
    assert.equal(listed.commands.length, 1, 'the exec whose answer was lost started');
    const cid = listed.commands[0].id;
    assert.doesNotMatch(emu.log(), / VIOLATION /);
    assert.ok((await raw(emu.info, 'POST', `/process/session/l/command/${cid}/input`, { data: 'a' })).status >= 502);
    await waitFor(async () => fs.existsSync(out) && fs.readFileSync(out, 'utf8') === 'a\n');
    assert.ok((await raw(emu.info, 'POST', `/process/session/l/command/${cid}/input`, { data: 'b' })).status >= 502);
    assert.doesNotMatch(emu.log(), / VIOLATION /, 'other data is other input');
    await raw(emu.info, 'POST', `/process/session/l/command/${cid}/input`, { data: 'b' });
    await waitFor(async () => fs.readFileSync(out, 'utf8') === 'a\nb\nb\n');
    assert.match(emu.log(), / VIOLATION duplicate the input applied at byte 1, whose answer was lost, was sent again/);
    await raw(emu.info, 'POST', '/process/session/l/exec', exec);
    assert.match(emu.log(), / VIOLATION duplicate the command of exec /);
    assert.equal(JSON.parse((await raw(emu.info, 'GET', '/process/session/l')).text).commands.length, 2);
  } finally {
    await emu.stop();
  }
  const emu2 = await startEmulator('daytona', ['--faults', 'seed=1,http429=1']);
  try {
    const a = await raw(emu2.info, 'POST', '/process/session', { sessionId: 'r' });
    assert.equal(a.status, 429);
    assert.equal(a.retryAfter, '1');
    assert.equal((await raw(emu2.info, 'GET', '/process/session')).status, 429);
    assert.doesNotMatch(emu2.log(), / VIOLATION /);
    await raw(emu2.info, 'POST', '/process/session', { sessionId: 'r' });  // at once: before its Retry-After
    assert.match(emu2.log(), / VIOLATION retry-after /);
  } finally {
    await emu2.stop();
  }
});

test('bad command lines exit 2', async () => {
  for (const bad of [['--faults', 'cut=2'], ['--faults', 'nope=1'], ['--bogus']]) {
    const r = await execFileP(process.execPath, [path.join(EMULATORS_DIR, 'daytona.mjs'), '--dir', fs.mkdtempSync('/tmp/emu-bad-'), ...bad]).catch((e) => e);
    assert.equal(r.code, 2, bad.join(' '));
  }
  await sleep(0);
});
