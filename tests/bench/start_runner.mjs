// The Node package's half of the start-latency benchmark (start_latency.py):
// `echo hi` through @tether/node on one provider, one job per "run" line
// on stdin, one JSON line per job (ms to the first stdout byte and to the
// exit status). TETHER_NODE_ADDON names the addon (node/build.sh).
//
//   node start_runner.mjs warm|cold PROVIDER [--flag value]...
//     warm  one Sandbox made before the first job and kept (the first job
//           is its cold start); cold  a new Sandbox for every job
import readline from "node:readline";

import * as tether from "../../node/lib/index.mjs";

const [mode, provider, ...flags] = process.argv.slice(2);
if ((mode !== "warm" && mode !== "cold") || !provider || flags.length % 2 !== 0) {
  process.stderr.write("usage: node start_runner.mjs warm|cold PROVIDER [--flag value]...\n");
  process.exit(2);
}

async function job(sandbox) {
  const t0 = performance.now();
  let first = null;
  const child = await sandbox.processes.start({
    command: { kind: "argv", argv: ["echo", "hi"] },
    output: { mode: "stream", format: "bytes" },
  });
  for await (const c of child.output()) {
    if (first === null && c.stream === "stdout" && c.bytes.length > 0) first = performance.now();
  }
  const exit = await child.wait();
  const end = performance.now();
  await child.detach();
  if (exit.exitCode !== 0) return { error: `echo hi: ${JSON.stringify(exit)}` };
  if (first === null) return { error: "echo hi printed nothing" };
  return { first: first - t0, total: end - t0 };
}

let sandbox = new tether.Sandbox(provider, flags);
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line.trim() !== "run") continue;
  let out;
  try {
    if (mode === "cold") {
      sandbox.close();
      sandbox = new tether.Sandbox(provider, flags);
    }
    out = await job(sandbox);
  } catch (e) {
    out = { error: `${e?.name}: ${e?.message}` };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
sandbox.close();
