// The measuring half of daytona_vs_sdk.sh: the same jobs through `tether run
// --provider daytona` and through the official @daytonaio/sdk (a session,
// an async exec, the follow-logs WebSocket, the exit code), against one
// emulator whose /_emulator/stats counts what crossed the native channel.
//
//   node daytona_vs_sdk.mjs TETHER EMULATOR_DIR API_URL SANDBOX CA RUNS MIB
//
// (DAYTONA_API_KEY in the environment; NODE_EXTRA_CA_CERTS=CA for the SDK.)
// Prints one JSON object: medians, and the ratios tether / SDK.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const [tether, emuDir, apiUrl, sandbox, ca, runsArg, mibArg] = process.argv.slice(2);
const runs = Number(runsArg || 3);
const bytes = Number(mibArg || 64) * 1048576;
const require = createRequire(`${emuDir}/package.json`);
const { Daytona } = require('@daytonaio/sdk');
const statsUrl = new URL('/_emulator/stats', apiUrl).href;

const kRandom = `head -c ${bytes} /dev/urandom`;
// 1 KiB lines: the SDK's demultiplexer copies its buffer per marker, so
// short lines would measure that alone (48-byte lines: 0.2 MB/s).
const kText = `yes "$(head -c 1023 /dev/zero | tr '\\0' t)" | head -c ${bytes}`;
const kStream = 'i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); sleep 0.02; done';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (x) => Math.round(x * 1000) / 1000;

async function stats() {
  const r = await fetch(statsUrl);
  return r.json();
}

function tetherRun(cmd) {
  const flags = ['--provider', 'daytona', '--sandbox', sandbox, '--endpoint', apiUrl];
  if (ca) flags.push('--ca-file', ca);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = null;
    let n = 0;
    const p = spawn(tether, ['run', ...flags, '--no-stdin', '--', 'sh', '-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stdout.on('data', (d) => {
      if (first === null) first = performance.now() - t0;
      n += d.length;
    });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`tether exited ${code}: ${err.slice(0, 500)}`));
      resolve({ first, total: performance.now() - t0, bytes: n });
    });
  });
}

let sessionNo = 0;
async function sdkRun(cmd) {
  const t0 = performance.now();
  let first = null;
  let n = 0;
  const daytona = new Daytona({ apiUrl, target: 'us', useDeprecatedPolling: true });
  const sbx = await daytona.get(sandbox);
  const sid = `bench-${process.pid}-${sessionNo++}`;
  await sbx.process.createSession(sid);
  const c = await sbx.process.executeSessionCommand(sid, { command: cmd, runAsync: true });
  const on = (s) => {
    if (first === null) first = performance.now() - t0;
    n += Buffer.byteLength(s);
  };
  await sbx.process.getSessionCommandLogs(sid, c.cmdId, on, on);
  const done = await sbx.process.getSessionCommand(sid, c.cmdId);
  if (done.exitCode !== 0) throw new Error(`SDK: exit ${done.exitCode}`);
  await sbx.process.deleteSession(sid);
  return { first, total: performance.now() - t0, bytes: n };
}

// Runs `fn(cmd)` and what the emulator counted meanwhile.
async function counted(fn, cmd) {
  const a = await stats();
  const r = await fn(cmd);
  const b = await stats();
  for (const k of Object.keys(a)) r[k] = b[k] - a[k];
  return r;
}

async function side(fn, cmd, n) {
  const rs = [];
  for (let i = 0; i < n; i++) {
    rs.push(await counted(fn, cmd));
    process.stderr.write(`${fn.name} ${cmd.slice(0, 40)}: ${JSON.stringify(rs[rs.length - 1])}\n`);
  }
  return rs;
}

function summary(rs, outBytes) {
  return {
    MBps: round(median(rs.map((r) => r.bytes / 1e6 / (r.total / 1000)))),
    received_bytes: median(rs.map((r) => r.bytes)),
    channel_bytes_per_output_byte: round(median(rs.map((r) => (r.ws_bytes + r.input_bytes) / outBytes))),
    requests: median(rs.map((r) => r.requests)),
    input_posts: median(rs.map((r) => r.input_posts)),
  };
}

function pair(t, s) {
  const out = { tether: t, sdk: s };
  out.ratio_tether_over_sdk = {
    MBps: round(t.MBps / s.MBps),
    channel_bytes_per_output_byte: round(t.channel_bytes_per_output_byte / s.channel_bytes_per_output_byte),
    requests: round(t.requests / s.requests),
  };
  return out;
}

await tetherRun('true');  // installs the supervisor once
await sdkRun('true');
const stream = { tether: await side(tetherRun, kStream, runs), sdk: await side(sdkRun, kStream, runs) };
const rps = (rs) => round(median(rs.map((r) => r.requests / (r.total / 1000))));
const streamOut = Array.from({ length: 200 }, (_, i) => `line ${i}\n`.length).reduce((a, b) => a + b, 0);
const random = { tether: await side(tetherRun, kRandom, runs), sdk: await side(sdkRun, kRandom, runs) };
const text = { tether: await side(tetherRun, kText, runs), sdk: await side(sdkRun, kText, runs) };
for (const r of [...random.tether, ...text.tether]) {  // (the SDK gets what the log makes of it)
  if (r.bytes !== bytes) throw new Error(`got ${r.bytes} bytes of output, not ${bytes}`);
}
console.log(JSON.stringify({
  runs,
  output_bytes: bytes,
  streaming_process: {
    tether: { requests_per_s: rps(stream.tether), ...summary(stream.tether, streamOut) },
    sdk: { requests_per_s: rps(stream.sdk), ...summary(stream.sdk, streamOut) },
    ratio_requests_per_s: round(rps(stream.tether) / rps(stream.sdk)),
  },
  random: pair(summary(random.tether, bytes), summary(random.sdk, bytes)),
  compressible_text: pair(summary(text.tether, bytes), summary(text.sdk, bytes)),
}));
