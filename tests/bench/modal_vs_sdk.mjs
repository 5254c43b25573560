// The measuring half of modal_vs_sdk.sh: the same jobs through `tether run
// --provider modal` and through the official modal SDK's own exec
// (modal@0.11.1: TaskExecStart + TaskExecStdioRead + TaskExecWait), against
// one emulator.
//
//   node modal_vs_sdk.mjs TETHER EMULATOR_DIR URL SANDBOX RUNS
//
// (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET and MODAL_SERVER_URL in the
// environment.) Prints one JSON object: medians in ms and MB/s, and the
// ratios (tether / SDK).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const [tether, emuDir, url, sandbox, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 5);
const require = createRequire(`${emuDir}/package.json`);
const { ModalClient } = require('modal');

const kBytes = 64 << 20;  // 64 MiB, binary (the router's stdio is bytes)
const kBigRandom = `head -c ${kBytes} /dev/urandom`;
const kBigZero = `head -c ${kBytes} /dev/zero`;
const kSmall = 'echo hi';
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// One `tether run`: ms to the first stdout byte, ms to exit, bytes seen.
function tetherRun(cmd) {
  const flags = ['--provider', 'modal', '--sandbox', sandbox, '--endpoint', url];
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = null;
    let bytes = 0;
    const p = spawn(tether, ['run', ...flags, '--no-stdin', '--', 'sh', '-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stdout.on('data', (d) => {
      if (first === null) first = performance.now() - t0;
      bytes += d.length;
    });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`tether exited ${code}: ${err.slice(0, 500)}`));
      resolve({ first, total: performance.now() - t0, bytes });
    });
  });
}

// The SDK: a new client per run (the control plane, as tether does once per
// run), sandboxes.fromId, exec in binary mode, read stdout, wait.
async function sdkRun(cmd) {
  const t0 = performance.now();
  let first = null;
  let bytes = 0;
  const client = new ModalClient({ logger: quiet });
  try {
    const sb = await client.sandboxes.fromId(sandbox);
    const p = await sb.exec(['sh', '-c', cmd], { mode: 'binary', stdout: 'pipe', stderr: 'ignore' });
    for await (const chunk of p.stdout) {
      if (first === null) first = performance.now() - t0;
      bytes += chunk.length;
    }
    const code = await p.wait();
    if (code !== 0) throw new Error(`SDK: exit ${code}`);
  } finally {
    client.close();
  }
  return { first, total: performance.now() - t0, bytes };
}

async function measure(fn, cmd, n) {
  const rs = [];
  for (let i = 0; i < n; i++) rs.push(await fn(cmd));
  return rs;
}

const coldTether = await tetherRun(kSmall);  // installs the supervisor once
await sdkRun(kSmall);
const bigRuns = Math.max(1, Math.ceil(runs / 2));
const small = { tether: await measure(tetherRun, kSmall, runs), sdk: await measure(sdkRun, kSmall, runs) };
const big = { tether: await measure(tetherRun, kBigRandom, bigRuns), sdk: await measure(sdkRun, kBigRandom, bigRuns) };
const zero = { tether: await measure(tetherRun, kBigZero, bigRuns), sdk: await measure(sdkRun, kBigZero, bigRuns) };
for (const r of [...big.tether, ...big.sdk, ...zero.tether, ...zero.sdk]) {
  if (r.bytes !== kBytes) throw new Error(`${r.bytes} bytes of output, not ${kBytes}`);
}
const ttfb = { tether: median(small.tether.map((r) => r.first)), sdk: median(small.sdk.map((r) => r.first)) };
const total = { tether: median(small.tether.map((r) => r.total)), sdk: median(small.sdk.map((r) => r.total)) };
const mbps = (rs) => median(rs.map((r) => r.bytes / 1e6 / (r.total / 1000)));
// The stream alone: from the first byte to the end (setup excluded).
const smbps = (rs) => median(rs.map((r) => r.bytes / 1e6 / ((r.total - r.first) / 1000)));
const round = (x) => Math.round(x * 100) / 100;
const pair = (t, s) => ({ tether: round(t), sdk: round(s), ratio_tether_over_sdk: round(t / s) });
console.log(JSON.stringify({
  runs,
  cold_tether_first_byte_ms: round(coldTether.first),
  first_byte_ms: pair(ttfb.tether, ttfb.sdk),
  echo_total_ms: pair(total.tether, total.sdk),
  random_64MiB_MBps: { bytes: kBytes, ...pair(mbps(big.tether), mbps(big.sdk)) },
  random_64MiB_stream_only_MBps: pair(smbps(big.tether), smbps(big.sdk)),
  zero_64MiB_MBps: pair(mbps(zero.tether), mbps(zero.sdk)),
  zero_64MiB_stream_only_MBps: pair(smbps(zero.tether), smbps(zero.sdk)),
}));
