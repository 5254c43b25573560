// The measuring half of runloop_vs_sdk.sh: the same jobs through `tether run
// --provider runloop` and through the official @runloop/api-client, against
// one emulator whose counters (GET /_emulator/stats) give the native bytes
// and requests of each run.
//
//   node runloop_vs_sdk.mjs TETHER EMULATOR_DIR URL DEVBOX MIB
//
// (RUNLOOP_API_KEY in the environment.) Prints one JSON object.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

const [tether, emuDir, url, devbox, mibArg] = process.argv.slice(2);
const key = process.env.RUNLOOP_API_KEY;
const require = createRequire(`${emuDir}/package.json`);
const Runloop = require('@runloop/api-client').default;
const kBytes = Number(mibArg || 64) * 1048576;

const jobs = {
  random: `f=$(mktemp) && head -c ${kBytes} /dev/urandom >"$f" && sha256sum "$f" >&2 && cat "$f"; rm -f "$f"`,
  text: `yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c ${kBytes}`,
  stream: 'i=0; while [ $i -lt 40 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done',
  true: 'true',
};

async function stats() {
  const r = await fetch(`${url}/_emulator/stats`, { headers: { authorization: `Bearer ${key}` } });
  return r.json();
}

// One `tether run`; resolves {ms, bytes, sha256, stderr}.
function tetherRun(cmd) {
  const flags = ['--provider', 'runloop', '--devbox', devbox, '--endpoint', url];
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const h = createHash('sha256');
    let bytes = 0;
    let err = '';
    const p = spawn(tether, ['run', ...flags, '--no-stdin', '--', 'sh', '-c', cmd], { stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout.on('data', (d) => { bytes += d.length; h.update(d); });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => {
      if (code !== 0) return reject(new Error(`tether exited ${code}: ${err.slice(0, 500)}`));
      resolve({ ms: performance.now() - t0, bytes, sha256: h.digest('hex'), stderr: err });
    });
  });
}

// The SDK: execute_async, the stdout stream (it reconnects on 408 itself),
// then awaitCompleted. Counts the UTF-8 bytes of the text it received.
async function sdkRun(cmd) {
  const rl = new Runloop({ bearerToken: key, baseURL: url, maxRetries: 0 });
  const t0 = performance.now();
  const ex = await rl.devboxes.executeAsync(devbox, { command: cmd });
  let bytes = 0;
  let replaced = 0;
  for await (const c of await rl.devboxes.executions.streamStdoutUpdates(devbox, ex.execution_id)) {
    bytes += Buffer.byteLength(c.output);
    for (const ch of c.output) if (ch === '\ufffd') replaced++;
  }
  const done = await rl.devboxes.executions.awaitCompleted(devbox, ex.execution_id);
  if (done.exit_status !== 0) throw new Error(`SDK: exit ${done.exit_status}`);
  return { ms: performance.now() - t0, bytes, replaced };
}

async function measured(fn, cmd) {
  const a = await stats();
  const r = await fn(cmd);
  const b = await stats();
  return { ...r, requests: b.requests - a.requests, wire: (b.body_bytes_in - a.body_bytes_in) + (b.body_bytes_out - a.body_bytes_out) };
}

const round = (x) => Math.round(x * 1000) / 1000;
await tetherRun(jobs.true);  // installs the supervisor once
const setup = await measured(tetherRun, jobs.true);
const out = { mib: kBytes / 1048576, tether_setup_requests: setup.requests, tether_setup_wire_bytes: setup.wire };
for (const name of ['random', 'text']) {
  const t = await measured(tetherRun, jobs[name]);
  if (t.bytes !== kBytes) throw new Error(`tether: ${t.bytes} bytes of ${name} output, want ${kBytes}`);
  if (name === 'random' && !t.stderr.includes(t.sha256)) throw new Error('tether: the random output differs (sha256)');
  const s = await measured(sdkRun, jobs[name]);
  out[name] = {
    tether: { MBps: round(kBytes / 1e6 / (t.ms / 1000)), wire_bytes_per_output_byte: round(t.wire / kBytes),
              requests: t.requests, exact: true },
    sdk: { MBps: round(kBytes / 1e6 / (s.ms / 1000)), wire_bytes_per_output_byte: round(s.wire / kBytes),
           requests: s.requests, received_bytes: s.bytes, replacement_chars: s.replaced, exact: s.bytes === kBytes && s.replaced === 0 },
  };
  out[name].ratio_tether_over_sdk = {
    MBps: round(out[name].tether.MBps / out[name].sdk.MBps),
    wire_bytes_per_output_byte: round(out[name].tether.wire_bytes_per_output_byte / out[name].sdk.wire_bytes_per_output_byte),
  };
}
{
  const t = await measured(tetherRun, jobs.stream);
  const s = await measured(sdkRun, jobs.stream);
  out.stream_4s = {
    tether: { requests: t.requests, requests_per_s: round(t.requests / (t.ms / 1000)), seconds: round(t.ms / 1000),
              requests_after_setup: t.requests - setup.requests },
    sdk: { requests: s.requests, requests_per_s: round(s.requests / (s.ms / 1000)), seconds: round(s.ms / 1000) },
  };
  out.stream_4s.ratio_tether_over_sdk = round(out.stream_4s.tether.requests_per_s / out.stream_4s.sdk.requests_per_s);
}
console.log(JSON.stringify(out));
