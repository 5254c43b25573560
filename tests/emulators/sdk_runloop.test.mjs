// Proves tests/emulators/runloop.mjs with the official Runloop SDK
// (@runloop/api-client 1.32.0), unmodified, over its DEFAULT transport: the
// SDK's own node:http2 pool speaking h2c with prior knowledge (the emulator
// serves h2c and HTTP/1.1 on one port); one case also runs with
// `http2: false` (HTTP/1.1, what tether's client speaks).
// Run: tests/emulators/setup.sh && node --test tests/emulators/sdk_runloop.test.mjs
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import Runloop from '@runloop/api-client';
import { RunloopSDK } from '@runloop/api-client/sdk';

import { startEmulator, sleep } from './lib/harness.mjs';

function client(info, extra = {}) {
  return new Runloop({ bearerToken: info.api_key, baseURL: info.url, maxRetries: 0, ...extra });
}

// Reads a whole SSE stream through the SDK (it reconnects on 408 itself).
async function collect(stream) {
  let text = '';
  const offsets = [];
  for await (const chunk of await stream) {
    text += chunk.output;
    offsets.push(chunk.offset);
  }
  return { text, offsets };
}

test('SDK (h2c): execute_async with stdin, SSE across 408 reconnects, EOF, exit status', async () => {
  const emu = await startEmulator('runloop', ['--sse-ms', '300', '--long-poll-ms', '400']);
  try {
    const rl = client(emu.info);
    const id = emu.info.devbox;
    const cmd = 'while IFS= read -r l; do printf "got:%s\\n" "$l"; sleep 0.2; done; echo err >&2; exit 5';
    const ex = await rl.devboxes.executeAsync(id, { command: cmd, attach_stdin: true });
    assert.match(ex.execution_id, /^exe_/);
    assert.ok(['queued', 'running'].includes(ex.status));
    const out = collect(rl.devboxes.executions.streamStdoutUpdates(id, ex.execution_id));
    const err = collect(rl.devboxes.executions.streamStderrUpdates(id, ex.execution_id));
    for (const w of ['hello', 'wörld', 'three', 'four']) {
      await rl.devboxes.executions.sendStdIn(id, ex.execution_id, { text: `${w}\n` });
      await sleep(250);
    }
    // The SDK's own pitfall: {signal: 'EOF'} alone is taken for request
    // options; {text: null, signal: 'EOF'} is what works.
    await rl.devboxes.executions.sendStdIn(id, ex.execution_id, { text: null, signal: 'EOF' });
    const done = await rl.devboxes.executions.awaitCompleted(id, ex.execution_id);
    assert.equal(done.status, 'completed');
    assert.equal(done.exit_status, 5);
    const o = await out;
    assert.equal(o.text, 'got:hello\ngot:wörld\ngot:three\ngot:four\n');
    // Offsets are the byte offset after each chunk: increasing, ending at the byte length.
    assert.equal(o.offsets.at(-1), Buffer.byteLength(o.text));
    assert.deepEqual(o.offsets, [...o.offsets].sort((a, b) => a - b));
    assert.equal((await err).text, 'err\n');
    const log = emu.log();
    assert.match(log, /stream ends with 408/, 'the streams ended with 408 at least once');
    assert.match(log, /stream_stdout_updates -> 200[\s\S]*stream_stdout_updates -> 200/, 'the SDK reconnected');
    assert.doesNotMatch(log, new RegExp(emu.info.api_key), 'the log must not hold credentials');
  } finally {
    await emu.stop();
  }
});

test('SDK: the text channel is lossy (invalid UTF-8 replaced both ways, NUL kept)', async () => {
  const emu = await startEmulator('runloop');
  try {
    const rl = client(emu.info);
    const id = emu.info.devbox;
    const ex = await rl.devboxes.executeAsync(id, {
      command: "printf 'a\\377b\\000c\\342\\202'; od -An -tx1 -v", attach_stdin: true });
    const out = collect(rl.devboxes.executions.streamStdoutUpdates(id, ex.execution_id));
    // A lone surrogate cannot be UTF-8: the service writes U+FFFD (ef bf bd).
    await rl.devboxes.executions.sendStdIn(id, ex.execution_id, { text: 'x\ud800y' });
    await rl.devboxes.executions.sendStdIn(id, ex.execution_id, { text: null, signal: 'EOF' });
    const done = await rl.devboxes.executions.awaitCompleted(id, ex.execution_id);
    assert.equal(done.exit_status, 0);
    const o = await out;
    assert.ok(o.text.startsWith('a\ufffdb\u0000c\ufffd'), JSON.stringify(o.text.slice(0, 12)));
    assert.match(o.text, /78 ef bf bd 79/);
    // The offset counts the bytes the process wrote, not the text's.
    const exLog = await rl.devboxes.executions.retrieve(id, ex.execution_id);
    assert.equal(exLog.status, 'completed');
  } finally {
    await emu.stop();
  }
});

test('SDK: kill, execute (sync) with command_id, long poll, upload, high-level cmd.exec', async () => {
  const emu = await startEmulator('runloop', ['--long-poll-ms', '300']);
  try {
    const rl = client(emu.info);
    const id = emu.info.devbox;
    const dv = await rl.devboxes.retrieve(id);
    assert.equal(dv.status, 'running');
    const sleeper = await rl.devboxes.executeAsync(id, { command: 'sleep 30' });
    const killed = await rl.devboxes.executions.kill(id, sleeper.execution_id, { kill_process_group: true });
    assert.equal(killed.status, 'completed');
    assert.equal(killed.exit_status, 137);

    const sync = await rl.devboxes.execute(id, { command: 'echo hi; echo e >&2; exit 3', command_id: 'cmd-1' });
    assert.equal(sync.status, 'completed');
    assert.equal(sync.exit_status, 3);
    assert.equal(sync.stdout, 'hi\n');
    assert.equal(sync.stderr, 'e\n');
    const again = await rl.devboxes.execute(id, { command: 'echo hi; echo e >&2; exit 3', command_id: 'cmd-1' });
    assert.equal(again.execution_id, sync.execution_id, 'idempotent per command_id');
    const lastLines = await rl.devboxes.execute(id, { command: 'seq 1 500', last_n: '2' });
    assert.equal(lastLines.stdout, '499\n500\n', 'last_n lines only');
    const slow = await rl.devboxes.execute(id, { command: 'sleep 1; echo late', optimistic_timeout: 0 });
    assert.equal(slow.status, 'running');
    const late = await rl.devboxes.executions.awaitCompleted(id, slow.execution_id);
    assert.equal(late.stdout, 'late\n');
    assert.match(emu.log(), /wait_for_status -> 408/);

    const all = Buffer.from([...Array(256).keys()]);
    await rl.devboxes.uploadFile(id, { path: 'up/all.bin', file: new File([all], 'all.bin') });
    assert.ok(fs.readFileSync(path.join(emu.dir, id, 'home', 'up', 'all.bin')).equals(all));

    const sdk = new RunloopSDK({ bearerToken: emu.info.api_key, baseURL: emu.info.url, maxRetries: 0 });
    let streamed = '';
    const r = await sdk.devbox.fromId(id).cmd.exec('echo hi', { stdout: (l) => { streamed += l; } });
    assert.equal(r.exitCode, 0);
    assert.equal(await r.stdout(), 'hi\n');
    assert.equal(streamed, 'hi\n');

    await assert.rejects(client({ ...emu.info, api_key: 'wrong' }).devboxes.retrieve(id), (e) => e.status === 401);
    await assert.rejects(rl.devboxes.retrieve('dbx_nope'), (e) => e.status === 404);
  } finally {
    await emu.stop();
  }
});

test('SDK over HTTP/1.1 (http2: false) and with --stdin-kills', async () => {
  const emu = await startEmulator('runloop', ['--stdin-kills']);
  try {
    const rl = client(emu.info, { http2: false });
    const id = emu.info.devbox;
    const ok = await rl.devboxes.execute(id, { command: 'echo h1' });
    assert.equal(ok.stdout, 'h1\n');
    const ex = await rl.devboxes.executeAsync(id, { command: 'cat; echo never', attach_stdin: true });
    const out = collect(rl.devboxes.executions.streamStdoutUpdates(id, ex.execution_id));
    const after = await rl.devboxes.executions.sendStdIn(id, ex.execution_id, { text: 'hello\n' });
    assert.equal(after.status, 'completed', 'the execution is killed when stdin is sent');
    assert.equal(after.exit_status, 137);
    assert.equal((await out).text, '');
  } finally {
    await emu.stop();
  }
});

test('emulator faults: 5xx, cut SSE events, stalls; the SDK still reads everything once', async () => {
  const emu = await startEmulator('runloop', ['--faults', 'seed=3,cut=0.2,stall=0.05', '--sse-ms', '800']);
  try {
    const rl = client(emu.info);
    const id = emu.info.devbox;
    const ex = await rl.devboxes.executeAsync(id, { command: 'for i in $(seq 1 40); do echo line$i; sleep 0.02; done' });
    let text = '';
    let offset = 0;
    // A cut is not a 408: the SDK gives up; a client resumes from its offset.
    for (let attempt = 0; attempt < 200; attempt++) {
      try {
        for await (const c of await rl.devboxes.executions.streamStdoutUpdates(id, ex.execution_id, { offset: String(offset) })) {
          text += c.output;
          offset = c.offset;
        }
        break;
      } catch { /* cut: resume */ }
    }
    assert.equal(text, Array.from({ length: 40 }, (_, i) => `line${i + 1}\n`).join(''));
    assert.match(emu.log(), /FAULT cut/);
  } finally {
    await emu.stop();
  }
  const e5 = await startEmulator('runloop', ['--faults', 'seed=1,http5xx=1']);
  try {
    await assert.rejects(client(e5.info).devboxes.retrieve(e5.info.devbox), (e) => e.status === 502);
  } finally {
    await e5.stop();
  }
});
