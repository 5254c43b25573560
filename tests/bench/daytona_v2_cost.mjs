// The measuring half of daytona_v2_cost.sh: the same jobs through `tether
// run --provider daytona` over the process API v2 and over the session API
// (v1), alternating, against one emulator that serves both and counts what
// crossed the native channel (/_emulator/stats).
//
//   node daytona_v2_cost.mjs TETHER API_URL SANDBOX CA RUNS MIB
//
// (DAYTONA_API_KEY in the environment.) Prints one JSON object: medians per
// API and the ratios v2 / v1.
import { spawn } from 'node:child_process';

const [tether, apiUrl, sandbox, ca, runsArg, mibArg] = process.argv.slice(2);
const runs = Number(runsArg || 3);
const bytes = Number(mibArg || 64) * 1048576;
const statsUrl = new URL('/_emulator/stats', apiUrl).href;
const kRandom = `head -c ${bytes} /dev/urandom`;
const kText = `yes "$(head -c 1023 /dev/zero | tr '\\0' t)" | head -c ${bytes}`;
const kStream = 'i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); sleep 0.02; done';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const round = (x) => Math.round(x * 1000) / 1000;

async function stats() {
  return (await fetch(statsUrl)).json();
}

function run(api, cmd) {
  const flags = ['--provider', 'daytona', '--sandbox', sandbox, '--endpoint', apiUrl, '--process-api', api];
  if (ca) flags.push('--ca-file', ca);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let n = 0;
    const p = spawn(tether, ['run', ...flags, '--no-stdin', '--', 'sh', '-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stdout.on('data', (d) => { n += d.length; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`tether (${api}) exited ${code}: ${err.slice(0, 500)}`));
      resolve({ total: performance.now() - t0, bytes: n });
    });
  });
}

async function counted(api, cmd) {
  const a = await stats();
  const r = await run(api, cmd);
  const b = await stats();
  for (const k of Object.keys(a)) if (typeof a[k] === 'number') r[k] = b[k] - a[k];
  // What crossed the channel: v1's log WebSocket (replays included) and
  // input strings; v2's SSE log events and stdin data.
  r.channel_bytes = r.ws_bytes + r.input_bytes + r.v2_sse_bytes + r.v2_stdin_bytes;
  return r;
}

function summary(rs, outBytes) {
  return {
    MBps: round(median(rs.map((r) => r.bytes / 1e6 / (r.total / 1000)))),
    requests: median(rs.map((r) => r.requests)),
    requests_per_s: round(median(rs.map((r) => r.requests / (r.total / 1000)))),
    channel_bytes_per_output_byte: round(median(rs.map((r) => r.channel_bytes / outBytes))),
  };
}

async function job(name, cmd, outBytes) {
  const got = { v1: [], v2: [] };
  for (let i = 0; i < runs; i++) {
    for (const api of i % 2 ? ['v2', 'v1'] : ['v1', 'v2']) {
      const r = await counted(api, cmd);
      if (outBytes && r.bytes !== outBytes) throw new Error(`${name} (${api}): ${r.bytes} bytes, not ${outBytes}`);
      got[api].push(r);
      process.stderr.write(`${name} ${api}: ${JSON.stringify({ ms: Math.round(r.total), bytes: r.bytes, requests: r.requests })}\n`);
    }
  }
  const v1 = summary(got.v1, outBytes || streamOut);
  const v2 = summary(got.v2, outBytes || streamOut);
  const ratio = {};
  for (const k of Object.keys(v1)) ratio[k] = round(v2[k] / v1[k]);
  return { v1, v2, ratio_v2_over_v1: ratio };
}

const streamOut = Array.from({ length: 200 }, (_, i) => `line ${i}\n`.length).reduce((a, b) => a + b, 0);
await run('v1', 'true');  // installs the supervisor once
console.log(JSON.stringify({
  runs,
  output_bytes: bytes,
  line_every_20ms: await job('stream', kStream, 0),
  random: await job('random', kRandom, bytes),
  compressible_text: await job('text', kText, bytes),
}, null, 1));
