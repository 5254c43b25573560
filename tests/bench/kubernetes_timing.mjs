// Timing helper for tests/bench/kubernetes_vs_sdk.sh (a benchmark, not a test).
//
//   node kubernetes_timing.mjs spawn CMD ARGS...   runs CMD, prints
//       {"first_ms","total_ms","bytes","status"} measured from the spawn
//       (first_ms: its first stdout byte)
//   node kubernetes_timing.mjs sdk KUBECONFIG NS POD CONTAINER ARGV...
//       the official SDK's Exec (@kubernetes/client-node, from
//       tests/emulators/node_modules) runs ARGV, counting stdout; prints
//       {"first_ms","total_ms","bytes","status"} measured from the call
//       (this process's own start is not included; the spawn mode measures
//       the SDK the same way as tether when it runs this script).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const [mode, ...rest] = process.argv.slice(2);

function report(t0, first, bytes, status) {
  const now = performance.now();
  console.log(JSON.stringify({
    first_ms: first === null ? null : first - t0, total_ms: now - t0, bytes, status,
  }));
}

if (mode === 'spawn') {
  const t0 = performance.now();
  let first = null;
  let bytes = 0;
  const child = spawn(rest[0], rest.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  child.stdout.on('data', (b) => {
    if (first === null) first = performance.now();
    bytes += b.length;
  });
  child.on('close', (code) => report(t0, first, bytes, code));
} else if (mode === 'sdk') {
  const [kubeconfig, ns, pod, container, ...argv] = rest;
  const require = createRequire(path.join(here, '../emulators/package.json'));
  const k8s = require('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  const exec = new k8s.Exec(kc);
  let first = null;
  let bytes = 0;
  const out = new Writable({
    write(chunk, _enc, cb) {
      if (first === null) first = performance.now();
      bytes += chunk.length;
      cb();
    },
  });
  const err = new Writable({ write(_c, _e, cb) { cb(); } });
  const t0 = performance.now();
  const status = await new Promise((resolve, reject) => {
    exec.exec(ns, pod, container, argv, out, err, null, false, (s) => resolve(s)).catch(reject);
  });
  report(t0, first, bytes, status?.status ?? null);
  process.exit(0);
} else {
  console.error('usage: kubernetes_timing.mjs spawn CMD... | sdk KUBECONFIG NS POD CONTAINER ARGV...');
  process.exit(2);
}
