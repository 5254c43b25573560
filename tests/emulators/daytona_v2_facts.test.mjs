// The Daytona emulator's process API v2 (daytona.mjs --process-api, the facts
// of /work/shared/DAYTONA_V2.md and the emulator's header). No released SDK
// has this API, so these checks are its only proof: they drive it with plain
// fetch and parse the SSE stream with their own few lines. Cursors are used
// as opaque strings (only taken from the emulator's answers).
// The test itself needs no node modules; the emulator needs `ws` (setup.sh).
//   tests/emulators/setup.sh && node --test tests/emulators/daytona_v2_facts.test.mjs
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';

import { EMULATORS_DIR, pidAlive, sleep, startEmulator, waitFor } from './lib/harness.mjs';

const execFileP = promisify(execFile);
const ALL_BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

// A process that has not ended: alive and not a zombie.
function running(pid) {
  if (!pidAlive(pid)) return false;
  try {
    const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st[st.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

// ---- a plain-fetch client ------------------------------------------------------------------

function client(info, prefix = '/processes') {
  const base = `${info.toolbox}/${info.sandbox}${prefix}`;
  const auth = { authorization: `Bearer ${info.api_key}` };
  // -> {status, body (JSON or undefined), text, headers}
  async function call(method, p = '', body, { headers = auth } = {}) {
    const h = { ...headers };
    if (body !== undefined) h['content-type'] = 'application/json';
    const r = await fetch(base + p, {
      method, headers: h, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await r.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status: r.status, body: json, text, headers: r.headers };
  }
  async function create(req) {
    const r = await call('POST', '', req);
    assert.equal(r.status, 201, `create ${JSON.stringify(req)}: ${r.text}`);
    return r.body;
  }
  async function wait(id, timeoutMs = 20_000) {
    const r = await call('GET', `/${id}/wait?timeoutMs=${timeoutMs}`);
    assert.equal(r.status, 200, r.text);
    return r.body;
  }
  // Every retained frame from `cursor` on, by pages of `limit`.
  async function pages(id, { cursor = 'start', encoding = 'base64', limit = 1000 } = {}) {
    const frames = [];
    const seen = [];
    for (;;) {
      const r = await call('GET', `/${id}/logs?cursor=${encodeURIComponent(cursor)}&encoding=${encoding}&limit=${limit}`);
      assert.equal(r.status, 200, r.text);
      seen.push(r.body);
      frames.push(...r.body.frames);
      if (r.body.eof || r.body.frames.length === 0) return { frames, pages: seen, last: r.body };
      cursor = r.body.nextCursor;
    }
  }
  // Opens follow=true and reads events until the end, an error, or onEvent
  // returning 'stop' (the connection is then dropped). -> {status,
  // contentType, events [{event, data}], comments, rest (an unfinished
  // event's text), error, json (a non-SSE answer)}
  async function follow(id, query, { onEvent, beforeRead } = {}) {
    const ac = new AbortController();
    const r = await fetch(`${base}/${id}/logs?follow=true&${query}`, {
      headers: { ...auth, accept: 'application/json,text/event-stream' }, signal: ac.signal,
    });
    const out = { status: r.status, contentType: r.headers.get('content-type'), events: [], comments: 0, rest: '', error: null };
    if (!/^text\/event-stream/.test(out.contentType ?? '')) {
      out.json = await r.json().catch(() => undefined);
      return out;
    }
    if (beforeRead) await beforeRead();
    const dec = new TextDecoder();
    try {
      for await (const chunk of r.body) {
        out.rest += dec.decode(chunk, { stream: true });
        for (let i = out.rest.indexOf('\n\n'); i >= 0; i = out.rest.indexOf('\n\n')) {
          const block = out.rest.slice(0, i);
          out.rest = out.rest.slice(i + 2);
          const ev = { event: 'message', data: undefined };
          let comment = false;
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) comment = true;
            else if (line.startsWith('event: ')) ev.event = line.slice(7);
            else if (line.startsWith('data: ')) ev.data = JSON.parse(line.slice(6));
            else throw new Error(`unexpected SSE line ${JSON.stringify(line)}`);
          }
          if (comment && ev.data === undefined) {
            out.comments++;
            continue;
          }
          out.events.push(ev);
          if (onEvent && (await onEvent(ev, out.events)) === 'stop') {
            ac.abort();
            return out;
          }
        }
      }
    } catch (e) {
      out.error = e;
    }
    return out;
  }
  return { base, call, create, wait, pages, follow };
}

const dataOf = (frames, channel) =>
  Buffer.concat(frames.filter((f) => !channel || f.channel === channel).map((f) => Buffer.from(f.data, f.encoding === 'base64' ? 'base64' : 'utf8')));
const logsOf = (events) => events.filter((e) => e.event === 'log').map((e) => e.data);

// Seqs go 1, 2, 3... with no gap and no duplicate (from `first`).
function assertContiguous(frames, first = 1) {
  frames.forEach((f, i) => assert.equal(f.seq, first + i, `frame ${i}: seq ${f.seq}, expected ${first + i}`));
  assert.equal(new Set(frames.map((f) => f.cursor)).size, frames.length, 'cursors are distinct');
}

function assertProcessShape(p) {
  assert.deepEqual(Object.keys(p).sort(), [
    'createdAt', 'exitCode', 'exitedAt', 'firstAvailableCursor', 'id', 'keepLogs', 'kind', 'lastCursor', 'name', 'pid',
    'reason', 'signal', 'startedAt', 'state', 'stdin', 'truncatedHead',
  ]);
  assert.match(p.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  assert.equal(p.kind, 'exec');
  assert.ok(Number.isInteger(p.pid) && p.pid > 0);
  for (const k of ['createdAt', 'startedAt']) assert.ok(!Number.isNaN(Date.parse(p[k])), k);
  assert.equal(typeof p.truncatedHead, 'boolean');
  assert.equal(typeof p.firstAvailableCursor, 'string');
}

// ---- the main emulator: --process-api both -------------------------------------------------

test('daytona v2 (--process-api both)', async (t) => {
  const emu = await startEmulator('daytona', ['--process-api', 'both']);
  const c = client(emu.info);
  try {
    await t.test('prints the ready line; v1 sessions are still served next to v2', async () => {
      assert.match(emu.info.toolbox, /^http:\/\/127\.0\.0\.1:\d+\/toolbox$/);
      assert.equal(emu.info.sandbox, 'sbx-daytona');
      assert.match(emu.info.api_key, /^dtn_/);
      const r = await fetch(`${emu.info.toolbox}/${emu.info.sandbox}/process/session`, {
        method: 'POST', headers: { authorization: `Bearer ${emu.info.api_key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ sessionId: 'v1-still' }),
      });
      assert.equal(r.status, 201);
      assert.deepEqual((await c.call('GET')).body, []);
    });

    await t.test('401 without the key or with a wrong one; nothing starts', async () => {
      assert.equal((await c.call('GET', '', undefined, { headers: {} })).status, 401);
      assert.equal((await c.call('GET', '', undefined, { headers: { authorization: 'Bearer nope' } })).status, 401);
      assert.equal((await c.call('POST', '', { argv: ['true'] }, { headers: {} })).status, 401);
      assert.deepEqual((await c.call('GET')).body, [], 'the refused create started nothing');
    });

    await t.test('cat: stdin UTF-8 of U+0000..U+00FF comes back exact over SSE (base64) and pages; eof ends cat', async () => {
      const p = await c.create({ argv: ['cat'], stdin: 'pipe' });
      assertProcessShape(p);
      assert.equal(p.state, 'running');
      assert.equal(p.stdin, 'pipe');
      assert.equal(p.name, null);
      assert.equal(p.keepLogs, 'on_exit_ttl');
      assert.equal(p.exitCode, null);
      assert.equal(p.signal, null);
      assert.equal(p.reason, null);
      assert.equal(p.exitedAt, null);
      assert.equal(p.lastCursor, null);
      const text = String.fromCharCode(...ALL_BYTES);
      const stream = c.follow(p.id, 'cursor=start&encoding=base64');
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { data: text.slice(0, 100) })).status, 204);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { data: text.slice(100), eof: true })).status, 204);
      const s = await stream;
      assert.equal(s.status, 200);
      assert.match(s.contentType, /^text\/event-stream/);
      assert.equal(s.error, null);
      assert.equal(s.rest, '');
      const names = s.events.map((e) => e.event);
      assert.deepEqual(names.slice(-2), ['state', 'eof']);
      assert.ok(names.slice(0, -2).every((n) => n === 'log') && names.length > 2, names.join(' '));
      const frames = logsOf(s.events);
      assertContiguous(frames);
      for (const f of frames) {
        assert.deepEqual(Object.keys(f).sort(), ['channel', 'cursor', 'data', 'encoding', 'seq', 'timestamp']);
        assert.equal(f.channel, 'stdout');
        assert.equal(f.encoding, 'base64');
        assert.equal(typeof f.cursor, 'string');
        assert.ok(!Number.isNaN(Date.parse(f.timestamp)));
      }
      assert.deepEqual(dataOf(frames), Buffer.from(text, 'utf8'), 'the exact UTF-8 bytes of the data strings');
      const state = s.events.at(-2).data;
      assertProcessShape(state);
      assert.equal(state.id, p.id);
      assert.equal(state.state, 'terminal');
      assert.equal(state.reason, 'exited');
      assert.equal(state.exitCode, 0);
      assert.equal(state.lastCursor, frames.at(-1).cursor);
      assert.deepEqual(s.events.at(-1).data, { cursor: frames.at(-1).cursor });
      // The same log as a page (follow=false), base64 and text.
      const page = (await c.call('GET', `/${p.id}/logs?encoding=base64`)).body;
      assert.deepEqual(Object.keys(page).sort(), ['eof', 'firstAvailableCursor', 'frames', 'nextCursor', 'truncatedHead']);
      assert.deepEqual(page.frames, frames);
      assert.equal(page.eof, true);
      assert.equal(page.truncatedHead, false);
      assert.equal(page.nextCursor, frames.at(-1).cursor);
      const tpage = (await c.call('GET', `/${p.id}/logs?cursor=start&encoding=text`)).body;
      assert.equal(tpage.frames.map((f) => f.data).join(''), text);
      assert.ok(tpage.frames.every((f) => f.encoding === 'text'));
      assert.deepEqual(await c.wait(p.id), { reason: 'exited', exitCode: 0, signal: null });
    });

    await t.test('all 256 byte values out: base64 text in through stdin, `base64 -d` writes them, base64 logs exact; text is lossy', async () => {
      const p = await c.create({ argv: ['base64', '-d'], stdin: 'open' });
      assert.equal(p.stdin, 'pipe', 'open is a pipe');
      const b64 = ALL_BYTES.toString('base64');
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { data: b64.slice(0, 50) })).status, 204);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { data: b64.slice(50) + '\n' })).status, 204);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { eof: true })).status, 204);
      assert.deepEqual(await c.wait(p.id), { reason: 'exited', exitCode: 0, signal: null });
      const { frames, last } = await c.pages(p.id);
      assert.equal(last.eof, true);
      assert.deepEqual(dataOf(frames, 'stdout'), ALL_BYTES);
      const text = (await c.pages(p.id, { encoding: 'text' })).frames.map((f) => f.data).join('');
      assert.ok(text.includes('\ufffd'), 'invalid UTF-8 replaced');
    });

    await t.test('exit 7 with stdout and stderr frames; a KILL is signal "KILL"; SIGTERM escalates to KILL', async () => {
      const p = await c.create({ argv: ['sh', '-c', 'echo out; echo err >&2; exit 7'] });
      assert.equal(p.stdin, 'none');
      assert.deepEqual(await c.wait(p.id), { reason: 'exited', exitCode: 7, signal: null });
      const rec = (await c.call('GET', `/${p.id}`)).body;
      assert.equal(rec.state, 'terminal');
      assert.equal(rec.exitCode, 7);
      assert.ok(Date.parse(rec.exitedAt) >= Date.parse(rec.startedAt));
      const { frames } = await c.pages(p.id, { encoding: 'text' });
      assert.equal(dataOf(frames, 'stdout').toString(), 'out\n');
      assert.equal(dataOf(frames, 'stderr').toString(), 'err\n');

      const k = await c.create({ argv: ['sleep', '30'] });
      assert.equal((await c.call('POST', `/${k.id}/signals`, { signal: 'KILL' })).status, 204);
      assert.deepEqual(await c.wait(k.id), { reason: 'signaled', exitCode: null, signal: 'KILL' });
      assert.equal((await c.call('GET', `/${k.id}`)).body.signal, 'KILL');
      assert.equal((await c.call('POST', `/${k.id}/signals`, { signal: 'TERM' })).status, 204, 'terminal: nothing to do');
      assert.equal((await c.call('POST', `/${k.id}/signals`, { signal: 'BOGUS' })).body.code, 'INVALID_ARGUMENT');

      // TERM is ignored by the whole group (sh and sleep); KILL follows 300 ms later.
      const e = await c.create({ argv: ['sh', '-c', 'trap "" TERM; echo ready; sleep 30'] });
      await waitFor(async () => (await c.call('GET', `/${e.id}`)).body.lastCursor !== null, { what: 'ready' });
      const t0 = Date.now();
      assert.equal((await c.call('POST', `/${e.id}/signals`, { signal: 'SIGTERM', escalateAfterMs: 300 })).status, 204);
      await sleep(100);
      assert.equal((await c.call('GET', `/${e.id}`)).body.state, 'running', 'TERM ignored');
      assert.deepEqual(await c.wait(e.id), { reason: 'signaled', exitCode: null, signal: 'KILL' });
      assert.ok(Date.now() - t0 >= 300, 'not before escalateAfterMs');
    });

    await t.test('resume after a cursor: strictly later frames, no gap, no duplicate (pages and SSE)', async () => {
      const lines = Array.from({ length: 40 }, (_, i) => `line-${i}\n`).join('');
      const p = await c.create({ argv: ['sh', '-c', 'for i in $(seq 0 39); do echo line-$i; sleep 0.01; done'] });
      await c.wait(p.id);
      const all = await c.pages(p.id, { limit: 3 });
      assert.ok(all.pages.length > 1, 'several pages');
      assert.ok(all.pages.slice(0, -1).every((pg) => pg.frames.length === 3 && pg.eof === false));
      assertContiguous(all.frames);
      assert.equal(dataOf(all.frames).toString(), lines);
      const k = Math.floor(all.frames.length / 2);
      const rest = await c.pages(p.id, { cursor: all.frames[k].cursor });
      assert.equal(rest.frames[0].seq, all.frames[k].seq + 1, 'strictly after the cursor');
      assert.deepEqual([...all.frames.slice(0, k + 1), ...rest.frames], all.frames);
      const atEnd = (await c.call('GET', `/${p.id}/logs?cursor=${all.frames.at(-1).cursor}`)).body;
      assert.deepEqual(atEnd.frames, []);
      assert.equal(atEnd.nextCursor, all.frames.at(-1).cursor, 'an empty page keeps the cursor');
      assert.equal(atEnd.eof, true);

      // Live: drop an SSE stream after 3 frames, resume from its last cursor.
      const q = await c.create({ argv: ['sh', '-c', 'for i in $(seq 0 29); do echo tick-$i; sleep 0.03; done'] });
      const first = await c.follow(q.id, 'encoding=base64', { onEvent: (_e, evs) => (evs.length === 3 ? 'stop' : undefined) });
      const got = logsOf(first.events);
      assert.equal(got.length, 3);
      const second = await c.follow(q.id, `encoding=base64&cursor=${encodeURIComponent(got.at(-1).cursor)}`);
      assert.deepEqual(second.events.map((e) => e.event).slice(-2), ['state', 'eof']);
      const frames = [...got, ...logsOf(second.events)];
      assertContiguous(frames);
      assert.equal(dataOf(frames).toString(), Array.from({ length: 30 }, (_, i) => `tick-${i}\n`).join(''));
      // A stream that starts after the end: no log, just state and eof with the request's cursor.
      const late = await c.follow(q.id, `cursor=${encodeURIComponent(frames.at(-1).cursor)}`);
      assert.deepEqual(late.events.map((e) => e.event), ['state', 'eof']);
      assert.deepEqual(late.events[1].data, { cursor: frames.at(-1).cursor });
    });

    await t.test('stdin: STDIN_CLOSED after eof (a repeated eof is 204), STDIN_UNAVAILABLE, PROCESS_TERMINAL, 400s', async () => {
      const p = await c.create({ argv: ['sleep', '30'], stdin: 'pipe' });
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { data: 'x' })).status, 204);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { eof: true })).status, 204);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { eof: true })).status, 204, 'a repeated eof');
      const closed = await c.call('POST', `/${p.id}/stdin`, { data: 'more' });
      assert.equal(closed.status, 409);
      assert.equal(closed.body.code, 'STDIN_CLOSED');
      assert.equal(typeof closed.body.message, 'string');
      const bad = await c.call('POST', `/${p.id}/stdin`, { data: 5 });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.code, 'INVALID_ARGUMENT');
      assert.equal((await c.call('POST', `/${p.id}/stdin`, 'not json')).status, 400);
      await c.call('POST', `/${p.id}/signals`, { signal: 'KILL' });
      await c.wait(p.id);
      assert.equal((await c.call('POST', `/${p.id}/stdin`, { eof: true })).status, 204, 'eof again, even once terminal');

      const n = await c.create({ argv: ['sleep', '30'], stdin: 'none' });
      const un = await c.call('POST', `/${n.id}/stdin`, { data: 'x' });
      assert.equal(un.status, 409);
      assert.equal(un.body.code, 'STDIN_UNAVAILABLE');
      await c.call('DELETE', `/${n.id}`);

      const q = await c.create({ argv: ['true'], stdin: 'pipe' });
      await c.wait(q.id);
      const term = await c.call('POST', `/${q.id}/stdin`, { data: 'late' });
      assert.equal(term.status, 409);
      assert.equal(term.body.code, 'PROCESS_TERMINAL');
    });

    await t.test('a body above 8 MiB is 400', async () => {
      const p = await c.create({ argv: ['sleep', '30'], stdin: 'pipe' });
      const r = await c.call('POST', `/${p.id}/stdin`, { data: 'x'.repeat((8 << 20) + 10) });
      assert.equal(r.status, 400);
      assert.equal(r.body.code, 'INVALID_ARGUMENT');
      await c.call('DELETE', `/${p.id}`);
    });

    await t.test('404 PROCESS_NOT_FOUND for an unknown id on every route; an unknown sub-path is a plain 404', async () => {
      for (const [m, p, body] of [['GET', '/nope'], ['DELETE', '/nope'], ['GET', '/nope/logs'], ['GET', '/nope/wait'],
        ['POST', '/nope/stdin', { data: 'x' }], ['POST', '/nope/signals', { signal: 'KILL' }]]) {
        const r = await c.call(m, p, body);
        assert.equal(r.status, 404, `${m} ${p}`);
        assert.equal(r.body.code, 'PROCESS_NOT_FOUND', `${m} ${p}`);
        assert.equal(typeof r.body.message, 'string');
      }
      const r = await c.call('POST', '/nope/resize', { cols: 80, rows: 24 });
      assert.equal(r.status, 404);
      assert.equal(r.body.code, undefined, 'no daemon code: an unknown path');
    });

    await t.test('wait: 408 WAIT_TIMEOUT while running after timeoutMs', async () => {
      const p = await c.create({ argv: ['sleep', '30'] });
      const t0 = Date.now();
      const r = await c.call('GET', `/${p.id}/wait?timeoutMs=200`);
      assert.ok(Date.now() - t0 >= 200);
      assert.equal(r.status, 408);
      assert.equal(r.body.code, 'WAIT_TIMEOUT');
      assert.equal((await c.call('GET', `/${p.id}/wait?timeoutMs=abc`)).status, 400);
      await c.call('DELETE', `/${p.id}`);
    });

    await t.test('DELETE: a running process group is killed; record and logs are gone; a terminal one too', async () => {
      const p = await c.create({ argv: ['sh', '-c', 'sleep 30 & echo $!; wait'] });
      const page = await waitFor(async () => {
        const pg = (await c.call('GET', `/${p.id}/logs`)).body;
        return pg.frames.length ? pg : null;
      }, { what: 'the grandchild pid' });
      const grandchild = Number(page.frames.map((f) => f.data).join('').trim());
      assert.ok(running(grandchild));
      assert.equal((await c.call('DELETE', `/${p.id}`)).status, 204);
      assert.equal((await c.call('GET', `/${p.id}`)).status, 404);
      assert.equal((await c.call('GET', `/${p.id}/logs`)).body.code, 'PROCESS_NOT_FOUND');
      await waitFor(() => !running(p.pid) && !running(grandchild), { timeoutMs: 3000, what: 'the group killed' });
      const q = await c.create({ argv: ['true'] });
      await c.wait(q.id);
      assert.equal((await c.call('DELETE', `/${q.id}`)).status, 204);
      assert.ok(!(await c.call('GET')).body.some((x) => x.id === q.id || x.id === p.id));
    });

    await t.test('names: NAME_IN_USE while running, ?name= lists, reusable once terminal', async () => {
      const a = await c.create({ argv: ['sleep', '30'], name: 'svc' });
      assert.equal(a.name, 'svc');
      assert.equal(a.keepLogs, 'until_cleanup', 'named: kept until cleanup');
      const dup = await c.call('POST', '', { argv: ['true'], name: 'svc' });
      assert.equal(dup.status, 409);
      assert.equal(dup.body.code, 'NAME_IN_USE');
      assert.deepEqual((await c.call('GET', '?name=svc')).body.map((x) => x.id), [a.id]);
      assert.deepEqual((await c.call('GET', '?name=other')).body, []);
      await c.call('POST', `/${a.id}/signals`, { signal: 'TERM' });
      assert.deepEqual(await c.wait(a.id), { reason: 'signaled', exitCode: null, signal: 'TERM' });
      const b = await c.create({ argv: ['true'], name: 'svc', keepLogs: 'none' });
      assert.equal(b.keepLogs, 'none');
      assert.equal((await c.call('GET', '?name=svc')).body.length, 2);
    });

    await t.test('bad creates: 400 INVALID_ARGUMENT; a missing program is PROCESS_START_FAILED', async () => {
      for (const body of [{}, { argv: [] }, { argv: 'true' }, { argv: [1] }, { argv: ['true'], kind: 'pty' },
        { argv: ['true'], stdin: 'weird' }, { argv: ['true'], env: { A: 1 } }, { argv: ['true'], keepLogs: 'forever' },
        { argv: ['true'], name: '' }, '[1]', 'not json']) {
        const r = await c.call('POST', '', body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.body.code, 'INVALID_ARGUMENT', JSON.stringify(body));
      }
      const r = await c.call('POST', '', { argv: ['/no/such/program'] });
      assert.equal(r.status, 400);
      assert.equal(r.body.code, 'PROCESS_START_FAILED');
      assert.equal((await c.call('PUT', '')).status, 405);
    });

    await t.test('argv runs without a shell, in the sandbox home with its HOME and TMPDIR, env and cwd applied', async () => {
      const home = path.join(emu.dir, 'sbx-daytona', 'home');
      const p = await c.create({ argv: ['sh', '-c', 'pwd; echo "$HOME|$TMPDIR|$FOO"', 'ignored'], env: { FOO: 'b a r' } });
      await c.wait(p.id);
      const out = dataOf((await c.pages(p.id)).frames).toString();
      assert.equal(out, `${home}\n${home}|${path.join(emu.dir, 'sbx-daytona', 'tmp')}|b a r\n`);
      const q = await c.create({ argv: ['echo', '$HOME', '*'], cwd: emu.dir });
      await c.wait(q.id);
      assert.equal(dataOf((await c.pages(q.id)).frames).toString(), '$HOME *\n', 'no shell expansion');
      const w = await c.create({ argv: ['pwd'], cwd: emu.dir });
      await c.wait(w.id);
      assert.equal(dataOf((await c.pages(w.id)).frames).toString(), `${emu.dir}\n`);
    });

    await t.test('logs query: bad encoding, limit, follow are 400; bad cursors are INVALID_CURSOR', async () => {
      const p = await c.create({ argv: ['echo', 'x'] });
      await c.wait(p.id);
      for (const q of ['encoding=hex', 'limit=0', 'limit=x', 'follow=maybe']) {
        assert.equal((await c.call('GET', `/${p.id}/logs?${q}`)).body.code, 'INVALID_ARGUMENT', q);
      }
      for (const cur of ['bogus', 'c-1', '12']) {
        const r = await c.call('GET', `/${p.id}/logs?cursor=${cur}`);
        assert.equal(r.status, 400, cur);
        assert.equal(r.body.code, 'INVALID_CURSOR', cur);
      }
      const s = await c.follow(p.id, 'cursor=bogus');
      assert.equal(s.status, 400);
      assert.equal(s.json.code, 'INVALID_CURSOR', 'refused before the stream starts');
    });

    await t.test('stats count v2 requests, stdin posts, log events and bytes', async () => {
      const before = await (await fetch(new URL('/_emulator/stats', emu.info.toolbox))).json();
      const p = await c.create({ argv: ['cat'], stdin: 'pipe' });
      await c.call('POST', `/${p.id}/stdin`, { data: 'hello', eof: true });
      await c.wait(p.id);
      await c.call('GET', `/${p.id}/logs`);
      const after = await (await fetch(new URL('/_emulator/stats', emu.info.toolbox))).json();
      assert.equal(after.v2_requests - before.v2_requests, 4);
      assert.equal(after.v2_stdin_posts - before.v2_stdin_posts, 1);
      assert.ok(after.v2_log_events - before.v2_log_events >= 1);
      assert.equal(after.v2_log_bytes - before.v2_log_bytes, 5);
      assert.deepEqual(after.violations, { duplicate: 0, 'retry-after': 0 });
      assert.doesNotMatch(emu.log(), / VIOLATION | FAULT /);
      assert.doesNotMatch(emu.log(), new RegExp(emu.info.api_key), 'the log holds no credentials');
    });

    await t.test('shutdown SIGKILLs the v2 process groups still running', async () => {
      const p = await c.create({ argv: ['sh', '-c', 'sleep 30 & echo $!; wait'] });
      const page = await waitFor(async () => {
        const pg = (await c.call('GET', `/${p.id}/logs`)).body;
        return pg.frames.length ? pg : null;
      }, { what: 'the grandchild pid' });
      const grandchild = Number(page.frames.map((f) => f.data).join('').trim());
      const q = await c.create({ argv: ['sleep', '30'], stdin: 'pipe' });
      await emu.stop();
      await waitFor(() => !running(p.pid) && !running(grandchild) && !running(q.pid), { timeoutMs: 3000, what: 'the groups killed' });
    });
  } finally {
    await emu.stop();
  }
});

// ---- the flags ---------------------------------------------------------------------------------

test('--process-api v1 (the default): P is a plain 404; v1 sessions work', async () => {
  for (const extra of [[], ['--process-api', 'v1']]) {
    const emu = await startEmulator('daytona', extra);
    try {
      for (const prefix of ['/processes', '/process/v2/processes']) {
        const c = client(emu.info, prefix);
        for (const [m, p, body] of [['GET', ''], ['POST', '', { argv: ['true'] }], ['GET', '/x/logs']]) {
          const r = await c.call(m, p, body);
          assert.equal(r.status, 404, `${m} ${prefix}${p}`);
          assert.equal(r.body.code, undefined, 'not a daemon error: an unknown path');
        }
      }
      const r = await fetch(`${emu.info.toolbox}/${emu.info.sandbox}/process/session`, { headers: { authorization: `Bearer ${emu.info.api_key}` } });
      assert.equal(r.status, 200);
      assert.doesNotMatch(emu.log(), /process \S+ started/);
    } finally {
      await emu.stop();
    }
  }
});

test('--process-api v2 --v2-prefix /process/v2/processes: served there only; /processes and v1 sessions are 404', async () => {
  const emu = await startEmulator('daytona', ['--process-api', 'v2', '--v2-prefix', '/process/v2/processes']);
  try {
    const c = client(emu.info, '/process/v2/processes');
    const p = await c.create({ argv: ['sh', '-c', 'echo hi; exit 3'] });
    assert.deepEqual(await c.wait(p.id), { reason: 'exited', exitCode: 3, signal: null });
    assert.equal(dataOf((await c.pages(p.id)).frames).toString(), 'hi\n');
    assert.equal((await c.call('GET', `/${p.id}`)).body.id, p.id);
    const other = client(emu.info, '/processes');
    assert.equal((await other.call('GET')).status, 404);
    assert.equal((await other.call('GET', `/${p.id}`)).status, 404);
    const h = { authorization: `Bearer ${emu.info.api_key}`, 'content-type': 'application/json' };
    const base = `${emu.info.toolbox}/${emu.info.sandbox}`;
    assert.equal((await fetch(`${base}/process/session`, { headers: h })).status, 404);
    assert.equal((await fetch(`${base}/process/session`, { method: 'POST', headers: h, body: '{"sessionId":"s"}' })).status, 404);
  } finally {
    await emu.stop();
  }
});

test('--v2-log-cap: eviction sets truncatedHead; a cursor before a gap is CURSOR_EXPIRED; start and firstAvailableCursor resume', async () => {
  const emu = await startEmulator('daytona', ['--process-api', 'both', '--v2-log-cap', '600']);
  try {
    const c = client(emu.info);
    const script = 'echo first; read go; i=0; while [ $i -lt 40 ]; do ' +
      'echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); sleep 0.02; done';
    const p = await c.create({ argv: ['sh', '-c', script], stdin: 'pipe' });
    const early = await waitFor(async () => {
      const pg = (await c.call('GET', `/${p.id}/logs?encoding=text`)).body;
      return pg.frames.length ? pg : null;
    }, { what: 'the first frame' });
    assert.equal(early.frames[0].data, 'first\n');
    assert.equal(early.truncatedHead, false);
    const old = early.nextCursor;
    await c.call('POST', `/${p.id}/stdin`, { data: 'go\n', eof: true });
    await c.wait(p.id);
    const rec = (await c.call('GET', `/${p.id}`)).body;
    assert.equal(rec.truncatedHead, true);

    const expired = await c.call('GET', `/${p.id}/logs?cursor=${encodeURIComponent(old)}`);
    assert.equal(expired.status, 409);
    assert.equal(expired.body.code, 'CURSOR_EXPIRED');
    assert.equal(typeof expired.body.message, 'string');
    assert.deepEqual(expired.body.details, { firstAvailableCursor: rec.firstAvailableCursor });
    const sse = await c.follow(p.id, `cursor=${encodeURIComponent(old)}`);
    assert.equal(sse.status, 409);
    assert.equal(sse.json.code, 'CURSOR_EXPIRED', 'refused before the stream starts');

    // "start" still serves, from the oldest retained frame, with truncatedHead.
    const fromStart = await c.pages(p.id, { encoding: 'text' });
    assert.equal(fromStart.pages[0].truncatedHead, true);
    assert.equal(fromStart.pages[0].firstAvailableCursor, rec.firstAvailableCursor);
    assert.ok(fromStart.frames[0].seq > 2, 'the head was evicted');
    assertContiguous(fromStart.frames, fromStart.frames[0].seq);
    assert.equal(fromStart.frames.at(-1).cursor, rec.lastCursor);
    const text = fromStart.frames.map((f) => f.data).join('');
    assert.ok(text.endsWith('line-39-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n'));
    assert.ok(!text.includes('first'));
    assert.ok(Buffer.byteLength(text) <= 600 + 100, `retained ${Buffer.byteLength(text)} bytes`);
    // Resuming from firstAvailableCursor loses nothing more: the same frames.
    const fromFirst = await c.pages(p.id, { encoding: 'text', cursor: rec.firstAvailableCursor });
    assert.deepEqual(fromFirst.frames, fromStart.frames);
    const s = await c.follow(p.id, 'cursor=start&encoding=text');
    assert.deepEqual(logsOf(s.events), fromStart.frames);
    assert.equal(s.events.at(-2).data.truncatedHead, true);
  } finally {
    await emu.stop();
  }
});

test('a reader that does not read holds nobody back: the child ends, the stream warns of evicted frames and goes on', async () => {
  const emu = await startEmulator('daytona', ['--process-api', 'v2', '--v2-log-cap', '65536']);
  try {
    const c = client(emu.info);
    const total = 32 << 20;
    const p = await c.create({ argv: ['head', '-c', String(total), '/dev/zero'], stdin: 'pipe' });
    const s = await c.follow(p.id, 'cursor=start&encoding=base64', {
      // Not a byte read until the child is terminal.
      beforeRead: () => waitFor(async () => (await c.call('GET', `/${p.id}`)).body.state === 'terminal', { timeoutMs: 20_000, what: 'the child done' }),
    });
    assert.equal(s.error, null);
    const names = s.events.map((e) => e.event);
    assert.deepEqual(names.slice(-2), ['state', 'eof']);
    const w = names.indexOf('warning');
    assert.ok(w > 0, `a warning: ${[...new Set(names)].join(',')}`);
    const warning = s.events[w].data;
    assert.equal(warning.truncatedHead, true);
    const before = logsOf(s.events.slice(0, w));
    const after = logsOf(s.events.slice(w));
    assert.equal(warning.cursor, before.at(-1).cursor);
    assertContiguous(before, before[0].seq);  // ("start": the child may have had frames evicted already)
    assertContiguous(after, after[0].seq);
    assert.ok(after[0].seq > before.at(-1).seq + 1, 'a gap, announced');
    const got = dataOf([...before, ...after]).length;
    assert.ok(got < total, `${got} of ${total} bytes: the evicted ones were not sent`);
    assert.deepEqual(s.events.at(-1).data, { cursor: after.at(-1).cursor });
  } finally {
    await emu.stop();
  }
});

// ---- faults --------------------------------------------------------------------------------

test('faults on v2: lost5xx on create and stdin (resends are VIOLATIONs), cut per SSE log event, http5xx, http429, slow', async () => {
  const emu = await startEmulator('daytona', ['--process-api', 'v2', '--faults', 'seed=1,lost5xx=1']);
  try {
    const c = client(emu.info);
    // A lost create took effect; a resend while it runs is refused NAME_IN_USE: no duplicate.
    assert.ok((await c.call('POST', '', { argv: ['sleep', '30'], name: 'long' })).status >= 502);
    assert.equal((await c.call('POST', '', { argv: ['sleep', '30'], name: 'long' })).body.code, 'NAME_IN_USE');
    assert.doesNotMatch(emu.log(), / VIOLATION /);
    // Once it ended, a blind resend (no listing) starts it again: a VIOLATION.
    assert.ok((await c.call('POST', '', { argv: ['true'], name: 'short' })).status >= 502);
    await waitFor(() => /process \S+ terminal exited 0/.test(emu.log()), { what: 'short ended' });
    assert.ok((await c.call('POST', '', { argv: ['true'], name: 'short' })).status >= 502);
    assert.match(emu.log(), / VIOLATION duplicate process \S+ named "short" started and lost its answer/);
    // Listing first clears the watch: a deliberate restart is no violation.
    assert.equal((await c.call('GET', '?name=short')).body.length, 2);
    await waitFor(async () => (await c.call('GET', '?name=short')).body.every((x) => x.state === 'terminal'));
    assert.ok((await c.call('POST', '', { argv: ['true'], name: 'short' })).status >= 502);
    assert.equal(emu.log().match(/ VIOLATION /g).length, 1);

    assert.ok((await c.call('POST', '', { argv: ['cat'], stdin: 'pipe', name: 'cat' })).status >= 502);
    const [cat] = (await c.call('GET', '?name=cat')).body;
    assert.ok((await c.call('POST', `/${cat.id}/stdin`, { data: 'a' })).status >= 502);
    assert.ok((await c.call('POST', `/${cat.id}/stdin`, { data: 'b' })).status >= 502);
    assert.equal(emu.log().match(/ VIOLATION /g).length, 1, 'other data is other input');
    assert.ok((await c.call('POST', `/${cat.id}/stdin`, { data: 'b', eof: true })).status >= 502);
    assert.match(emu.log(), / VIOLATION duplicate the stdin data applied at byte 1, whose answer was lost, was sent again/);
    await c.wait(cat.id);
    assert.equal(dataOf((await c.pages(cat.id)).frames).toString(), 'abb', 'every lost write took effect');
    assert.equal(emu.log().match(/ FAULT lost5xx /g).length, 8);
    const stats = await (await fetch(new URL('/_emulator/stats', emu.info.toolbox))).json();
    assert.equal(stats.violations.duplicate, 2);
  } finally {
    await emu.stop();
  }

  const emu2 = await startEmulator('daytona', ['--process-api', 'v2', '--faults', 'seed=3,cut=1']);
  try {
    const c = client(emu2.info);
    const p = await c.create({ argv: ['echo', 'abcdefgh'] });
    await c.wait(p.id);
    const s = await c.follow(p.id, 'encoding=text');
    assert.equal(s.status, 200);
    assert.deepEqual(s.events, [], 'no whole event');
    assert.ok(s.error, 'the stream was cut (no chunked terminator)');
    assert.match(s.rest, /^event: log\ndata: \{"channel":"stdout"/);
    const whole = `event: log\ndata: ${JSON.stringify((await c.call('GET', `/${p.id}/logs`)).body.frames[0])}\n\n`;
    assert.equal(s.rest.length, Math.floor(whole.length / 2), 'half of the event');
    assert.match(emu2.log(), / FAULT cut after \d+ bytes \(in the log event of seq 1\)/);
    assert.equal((await c.call('GET', `/${p.id}/logs`)).status, 200, 'pages are not cut');
  } finally {
    await emu2.stop();
  }

  const emu3 = await startEmulator('daytona', ['--process-api', 'v2', '--faults', 'seed=1,http5xx=1']);
  try {
    const c = client(emu3.info);
    assert.equal((await c.call('POST', '', { argv: ['sleep', '30'] })).status, 502);
    assert.equal((await c.call('GET')).status, 503, '502 and 503 alternate');
    assert.doesNotMatch(emu3.log(), /process \S+ started/, 'nothing was done');
    assert.equal(emu3.log().match(/ FAULT http5xx /g).length, 2);
    const stats = await (await fetch(new URL('/_emulator/stats', emu3.info.toolbox))).json();
    assert.equal(stats.v2_requests, 2, 'faulted requests are counted');
  } finally {
    await emu3.stop();
  }

  const emu4 = await startEmulator('daytona', ['--process-api', 'v2', '--faults', 'seed=1,http429=1']);
  try {
    const c = client(emu4.info);
    const r = await c.call('POST', '', { argv: ['true'] });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.doesNotMatch(emu4.log(), /process \S+ started/);
    assert.doesNotMatch(emu4.log(), / VIOLATION /);
    await c.call('POST', '', { argv: ['true'] });  // at once: before its Retry-After
    assert.match(emu4.log(), / VIOLATION retry-after /);
  } finally {
    await emu4.stop();
  }

  const emu5 = await startEmulator('daytona', ['--process-api', 'v2', '--faults', 'seed=1,slow=1']);
  try {
    const t0 = Date.now();
    assert.equal((await client(emu5.info).call('GET')).status, 200);
    const delay = Number(emu5.log().match(/FAULT slow (\d+) ms/)?.[1]);
    assert.ok(delay >= 1000 && delay <= 3000);
    assert.ok(Date.now() - t0 >= delay);
  } finally {
    await emu5.stop();
  }
});

test('bad v2 flags exit 2', async () => {
  for (const bad of [['--process-api', 'v3'], ['--v2-prefix', '/x'], ['--v2-log-cap', '0'], ['--v2-log-cap', 'abc'], ['--process-api']]) {
    const dir = fs.mkdtempSync('/tmp/emu-bad-');
    const r = await execFileP(process.execPath, [path.join(EMULATORS_DIR, 'daytona.mjs'), '--dir', dir, ...bad]).catch((e) => e);
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(r.code, 2, bad.join(' '));
  }
});
