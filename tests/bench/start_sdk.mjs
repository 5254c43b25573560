// The provider SDK's half of the start-latency benchmark (start_latency.py):
// `echo hi` through the provider's official SDK, one job per line read on
// stdin, one JSON line of times per job on stdout. Driven step by step so
// that the driver can read the delay proxy's counts between jobs.
//
//   node start_sdk.mjs PROVIDER MODE CONFIG_JSON
//     MODE  warm: one client object made on the first job and reused, as an
//                 agent runtime keeps its sandbox handle
//           cold: a new client (the control plane's connect) on every job
//     stdin "run\n" per job; stdout {"first": ms, "total": ms} per job
//
// Each provider is one entry of ADAPTERS: connect(config) makes the client,
// run(client, onFirst) runs `echo hi` and resolves with its exit code.
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

const [provider, mode, configJson] = process.argv.slice(2);
const config = JSON.parse(configJson || '{}');
const require = createRequire(`${config.emulatorDir}/package.json`);

const ADAPTERS = {
  // e2b: Sandbox.connect is a control-plane call; commands.run a Connect
  // stream to envd in the sandbox.
  e2b: {
    async connect() {
      const { Sandbox } = require('e2b');
      return Sandbox.connect(config.sandbox, { apiUrl: config.url, sandboxUrl: config.url });
    },
    async run(sbx, onFirst) {
      const r = await sbx.commands.run('echo hi', { timeoutMs: 0, onStdout: onFirst });
      return r.exitCode;
    },
  },
  // runloop: the client makes no call until used; executeAsync, then the
  // stdout stream, then awaitCompleted (the SDK's streaming path; its
  // RUNLOOP_API_KEY from the environment).
  runloop: {
    async connect() {
      const Runloop = require('@runloop/api-client').default;
      return new Runloop({ bearerToken: process.env.RUNLOOP_API_KEY, baseURL: config.url, maxRetries: 0 });
    },
    async run(rl, onFirst) {
      const ex = await rl.devboxes.executeAsync(config.devbox, { command: 'echo hi' });
      for await (const c of await rl.devboxes.executions.streamStdoutUpdates(config.devbox, ex.execution_id)) {
        if (c.output) onFirst();
      }
      const done = await rl.devboxes.executions.awaitCompleted(config.devbox, ex.execution_id);
      return done.exit_status;
    },
  },
  // kubernetes: KubeConfig + Exec made once; each job one exec WebSocket.
  kubernetes: {
    async connect() {
      const k8s = require('@kubernetes/client-node');
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(config.kubeconfig);
      return new k8s.Exec(kc);
    },
    async run(exec, onFirst) {
      const { Writable } = await import('node:stream');
      const out = new Writable({ write(c, _e, cb) { if (c.length) onFirst(); cb(); } });
      const err = new Writable({ write(_c, _e, cb) { cb(); } });
      const status = await new Promise((resolve, reject) => {
        exec.exec(config.namespace, config.pod, config.container, ['echo', 'hi'], out, err, null, false,
                  (s) => resolve(s)).catch(reject);
      });
      return status?.status === 'Success' ? 0 : 1;
    },
  },
};

const adapter = ADAPTERS[provider];
if (!adapter) {
  console.error(`start_sdk: no adapter for '${provider}' (have ${Object.keys(ADAPTERS).join(', ')})`);
  process.exit(2);
}

let client = null;
async function job() {
  const t0 = performance.now();
  let first = null;
  if (mode === 'cold' || client === null) client = await adapter.connect();
  const code = await adapter.run(client, () => {
    if (first === null) first = performance.now() - t0;
  });
  const total = performance.now() - t0;
  if (code !== 0) throw new Error(`${provider} SDK: echo hi exited ${code}`);
  if (first === null) throw new Error(`${provider} SDK: echo hi printed nothing`);
  return { first, total };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim() !== 'run') continue;
  try {
    console.log(JSON.stringify(await job()));
  } catch (e) {
    console.log(JSON.stringify({ error: String(e && e.stack || e) }));
  }
}
