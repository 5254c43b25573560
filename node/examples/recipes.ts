// Seed 000's three recipes ("Build, worker and server recipes"), runnable:
//
//   buildWithProgress  read build output as it arrives, and wait for exit;
//   interactiveWorker  send requests while reading output, then close stdin;
//   serverWorkspace    read a server's logs, get its preview URL, check its
//                      readiness for up to 15 s, do the application's work,
//                      request termination and wait for the exit within a
//                      10 s cleanup budget; then detach and close the client.
//
// Run as `node recipes.js [PROVIDER [OPTIONS]]` (sandbox_from_args.ts). Each
// recipe prints one JSON line; node/test/examples.test.mjs checks them on the
// local provider, through a command channel and through the emulators.
//
// What the seed does that tether does not: a preview URL and destroying the
// sandbox are lifecycle operations of the provider's own SDK (tether runs
// processes in a sandbox it is given). previewUrl() below stands in for the
// adapter's preview access: loopback, which is where the local provider and
// the emulators run their processes.
import { pathToFileURL } from "node:url";
import * as tether from "@tether/node";
import { sandboxFromArgs } from "./sandbox_from_args.js";

type Line = tether.ProcessLine;

export async function buildWithProgress(sandbox: tether.Sandbox, onProgress: (line: Line) => void) {
  const child = await sandbox.processes.start({
    command: {
      kind: "shell",
      script:
        'for i in 1 2 3 4 5; do echo "[$i/5] compiling unit$i.c"; done; ' +
        'echo "unit3.c: warning: unused variable" >&2; echo "build finished"; exit 0',
    },
    output: { mode: "stream" },
  });
  try {
    for await (const line of tether.readProcessLines(child.output(), { maxLineBytes: 16_384 })) {
      onProgress(line);
    }
    return await child.wait();
  } finally {
    await child.detach();
  }
}

export async function interactiveWorker(sandbox: tether.Sandbox, requests: string[]) {
  const child = await sandbox.processes.start({
    command: {
      kind: "shell",
      script:
        'while IFS= read -r req; do printf "result: %s\\n" "$(printf %s "$req" | tr a-z A-Z)"; done; ' +
        'echo "worker: end of input" >&2',
    },
    stdin: "pipe",
    output: { mode: "stream" },
  });
  const lines = tether.readProcessLines(child.output(), { maxLineBytes: 16_384 })[Symbol.asyncIterator]();
  const log: string[] = [];
  const nextResult = async (): Promise<string> => {
    for (;;) {
      const next = await lines.next();
      if (next.done) throw new Error("the worker's output ended before its answer");
      if (next.value.stream === "stdout") return next.value.text;
      log.push(next.value.text);
    }
  };
  try {
    const results: string[] = [];
    for (const request of requests) {
      // One request at a time: each answer is read before the next is sent.
      await child.write(request + "\n");
      results.push(await nextResult());
    }
    await child.closeStdin();
    const rest = (async () => {
      for (let next = await lines.next(); !next.done; next = await lines.next()) log.push(next.value.text);
    })();
    const [output, exit] = await Promise.allSettled([rest, child.wait()]);
    if (output.status === "rejected") throw output.reason;
    if (exit.status === "rejected") throw exit.reason;
    return { results, log, exit: exit.value };
  } finally {
    await child.detach();
  }
}

// The adapter's preview access (see the header): loopback here.
export function previewUrl(port: number): string {
  return `http://127.0.0.1:${port}`;
}

export async function serverWorkspace(sandbox: tether.Sandbox) {
  const child = await sandbox.processes.start({
    command: {
      kind: "shell",
      script:
        'site=$(mktemp -d) && printf "ok\\n" > "$site/health" && printf "hello from the sandbox\\n" > "$site/index.txt" && ' +
        'exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$site"',
    },
    output: { mode: "stream" },
  });
  try {
    // Read the server's logs for as long as it runs; its first line names its port.
    const logs: string[] = [];
    let portFound: (port: number) => void = () => {};
    const port = new Promise<number>((resolve) => (portFound = resolve));
    const reader = (async () => {
      for await (const line of tether.readProcessLines(child.output(), { maxLineBytes: 16_384 })) {
        logs.push(`${line.stream}: ${line.text}`);
        const m = /port (\d+)/.exec(line.text);
        if (m) portFound(Number(m[1]));
      }
    })();
    const url = previewUrl(
      await Promise.race([
        port,
        reader.then(() => Promise.reject(new Error("the server ended before it named its port"))),
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error("no port within 15 s")), 15_000).unref()),
      ]),
    );

    // Readiness: up to 15 s, never following a redirect.
    const readyBy = Date.now() + 15_000;
    let ready = false;
    while (!ready && Date.now() < readyBy) {
      try {
        const res = await fetch(`${url}/health`, { redirect: "error", signal: AbortSignal.timeout(2_000) });
        ready = res.ok && (await res.text()) === "ok\n";
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    if (!ready) throw new Error(`${url} was not ready within 15 s`);

    // The application's work.
    const page = await (await fetch(`${url}/index.txt`, { redirect: "error" })).text();

    // Cleanup within a 10 s budget: request termination, then wait for the exit.
    const budget = AbortSignal.timeout(10_000);
    const terminated = await child.terminate({ signal: budget });
    const exit = await child.wait({ signal: budget });
    await reader;
    return { page, terminated: terminated.status, exit, logs };
  } finally {
    await child.detach();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const sandbox = sandboxFromArgs();
  try {
    const progress: string[] = [];
    const build = await buildWithProgress(sandbox, (line) => progress.push(`${line.stream}: ${line.text}`));
    console.log(JSON.stringify({ recipe: "buildWithProgress", progress, exitCode: build.exitCode, outputComplete: build.outputComplete }));

    const worker = await interactiveWorker(sandbox, ["alpha", "beta", "gamma"]);
    console.log(JSON.stringify({ recipe: "interactiveWorker", results: worker.results, log: worker.log, exitCode: worker.exit.exitCode }));

    const server = await serverWorkspace(sandbox);
    console.log(
      JSON.stringify({
        recipe: "serverWorkspace",
        page: server.page,
        terminated: server.terminated,
        signal: server.exit.signal,
        requests: server.logs.filter((l) => /"GET \/(health|index\.txt) HTTP/.test(l)).length,
      }),
    );
  } finally {
    sandbox.close();
  }
}
