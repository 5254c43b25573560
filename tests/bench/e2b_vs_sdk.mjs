// The measuring half of e2b_vs_sdk.sh: the same jobs through `tether run
// --provider e2b` and through the official e2b SDK, against one emulator.
//
//   node e2b_vs_sdk.mjs TETHER EMULATOR_DIR URL SANDBOX CA RUNS
//
// (E2B_API_KEY in the environment; NODE_EXTRA_CA_CERTS=CA for the SDK.)
// Prints one JSON object: medians in ms and MB/s, and the ratios.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const [tether, emuDir, url, sandbox, ca, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 5);
const require = createRequire(`${emuDir}/package.json`);
const { Sandbox } = require('e2b');

const kBytes = 20000000;
const kBig = `head -c ${kBytes} /dev/zero | base64`;
const kBigRandom = `head -c ${kBytes} /dev/urandom | base64`;  // compresses to ~75%, not ~1%
const kSmall = 'echo hi';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// One `tether run`: ms to the first stdout byte, ms to exit, bytes seen.
function tetherRun(cmd) {
  const flags = ['--provider', 'e2b', '--sandbox', sandbox, '--endpoint', url, '--sandbox-url', url];
  if (ca) flags.push('--ca-file', ca);
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

// The SDK: connect (the control plane, as tether does once per run), then
// commands.run.
async function sdkRun(cmd) {
  const t0 = performance.now();
  let first = null;
  let bytes = 0;
  const sbx = await Sandbox.connect(sandbox, { apiUrl: url, sandboxUrl: url });
  const r = await sbx.commands.run(cmd, {
    timeoutMs: 0,
    onStdout: (d) => {
      if (first === null) first = performance.now() - t0;
      bytes += d.length;
    },
  });
  if (r.exitCode !== 0) throw new Error(`SDK: exit ${r.exitCode}`);
  return { first, total: performance.now() - t0, bytes };
}

async function measure(fn, cmd, n) {
  const rs = [];
  for (let i = 0; i < n; i++) rs.push(await fn(cmd));
  return rs;
}

const coldTether = await tetherRun(kSmall);  // installs the supervisor once
await sdkRun(kSmall);
const small = { tether: await measure(tetherRun, kSmall, runs), sdk: await measure(sdkRun, kSmall, runs) };
const big = { tether: await measure(tetherRun, kBig, Math.max(1, Math.ceil(runs / 2))),
              sdk: await measure(sdkRun, kBig, Math.max(1, Math.ceil(runs / 2))) };
const bigRandom = { tether: await measure(tetherRun, kBigRandom, Math.max(1, Math.ceil(runs / 2))),
                    sdk: await measure(sdkRun, kBigRandom, Math.max(1, Math.ceil(runs / 2))) };
for (const r of [...big.tether, ...big.sdk, ...bigRandom.tether, ...bigRandom.sdk]) {
  if (r.bytes < kBytes) throw new Error(`only ${r.bytes} bytes of output`);
}
const ttfb = { tether: median(small.tether.map((r) => r.first)), sdk: median(small.sdk.map((r) => r.first)) };
const total = { tether: median(small.tether.map((r) => r.total)), sdk: median(small.sdk.map((r) => r.total)) };
const mbps = (rs) => median(rs.map((r) => r.bytes / 1e6 / (r.total / 1000)));
const thr = { tether: mbps(big.tether), sdk: mbps(big.sdk) };
// The stream alone: from the first byte to the end (setup excluded).
const smbps = (rs) => median(rs.map((r) => r.bytes / 1e6 / ((r.total - r.first) / 1000)));
const sthr = { tether: smbps(big.tether), sdk: smbps(big.sdk) };
const rthr = { tether: mbps(bigRandom.tether), sdk: mbps(bigRandom.sdk) };
const rsthr = { tether: smbps(bigRandom.tether), sdk: smbps(bigRandom.sdk) };
const round = (x) => Math.round(x * 100) / 100;
console.log(JSON.stringify({
  runs,
  cold_tether_first_byte_ms: round(coldTether.first),
  first_byte_ms: { tether: round(ttfb.tether), sdk: round(ttfb.sdk), ratio_tether_over_sdk: round(ttfb.tether / ttfb.sdk) },
  echo_total_ms: { tether: round(total.tether), sdk: round(total.sdk), ratio_tether_over_sdk: round(total.tether / total.sdk) },
  throughput_MBps: { bytes: big.tether[0].bytes, tether: round(thr.tether), sdk: round(thr.sdk),
                     ratio_tether_over_sdk: round(thr.tether / thr.sdk) },
  stream_only_MBps: { tether: round(sthr.tether), sdk: round(sthr.sdk), ratio_tether_over_sdk: round(sthr.tether / sthr.sdk) },
  random_throughput_MBps: { tether: round(rthr.tether), sdk: round(rthr.sdk), ratio_tether_over_sdk: round(rthr.tether / rthr.sdk) },
  random_stream_only_MBps: { tether: round(rsthr.tether), sdk: round(rsthr.sdk),
                             ratio_tether_over_sdk: round(rsthr.tether / rsthr.sdk) },
}));
