// The shipped types and seed 000's examples: tsc checks examples/*.ts (the
// examples as written, its three recipes, and misuse the types must refuse),
// then the compiled examples run against the local provider and through a
// command channel, or through the native provider run_native_test.sh names.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { provider } from "./fixtures/sandbox.mjs";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = fs.mkdtempSync(path.join(os.tmpdir(), "tether-node-examples-"));

// tsc over a project (default: the package's, examples/*.ts), into outDir.
function compile(project = path.join(pkg, "tsconfig.json")) {
  const tsc = path.join(pkg, "node_modules", "typescript", "bin", "tsc");
  // (outDir inside the package: the examples import "@tether/node" by name)
  const outDir = path.join(pkg, "build", `examples-${process.pid}`);
  try {
    execFileSync(process.execPath, [tsc, "-p", project, "--outDir", outDir], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (e) {
    assert.fail(`tsc refused the examples:\n${e.stdout}${e.stderr}`);
  }
  return outDir;
}

// Where the examples run: the local provider and a command channel, or the
// provider the native runner (run_native_test.sh) names.
const channels =
  provider === "local"
    ? [["local"], ["command", "sh -c 'exec sh -c \"$1\"' tether"]]
    : [[provider, process.env.TETHER_NODE_TEST_OPTIONS || "{}"]];

function run(outDir, example, channel) {
  const text = execFileSync(process.execPath, [path.join(outDir, example), ...channel], {
    encoding: "utf8",
    env: { ...process.env, TMPDIR: out },
    timeout: 120_000,
  });
  return text.trim().split("\n").map((l) => JSON.parse(l));
}

test("the types accept seed 000's examples and refuse misuse; the examples and the recipes run as written", () => {
  const outDir = compile();
  try {
    for (const channel of channels) {
      const lines = run(outDir, "streaming.js", channel);
      assert.deepEqual(lines[1], { output: "fulfilled", exit: 0 });
      assert.deepEqual(lines[2], { exitCode: 0 });
      assert.deepEqual(lines[3], { lines: ["stderr:beta", "stdout:alpha", "stdout:gamma(partial)"], tail: 3 });
      assert.deepEqual(lines[4].rendered, { stdout: "got first request\ngot second request\n", stderr: "bye\n" });
      assert.deepEqual(lines[4].bytes, [0, 255, 128, 97, 98, 99]);

      const [build, worker, server] = run(outDir, "recipes.js", channel);
      // buildWithProgress: every line, in order per stream, then the exit.
      assert.equal(build.recipe, "buildWithProgress");
      assert.deepEqual(
        build.progress.filter((l) => l.startsWith("stdout: ")),
        [1, 2, 3, 4, 5].map((i) => `stdout: [${i}/5] compiling unit${i}.c`).concat(["stdout: build finished"]),
      );
      assert.deepEqual(build.progress.filter((l) => l.startsWith("stderr: ")), ["stderr: unit3.c: warning: unused variable"]);
      assert.equal(build.exitCode, 0);
      assert.equal(build.outputComplete, true);
      // interactiveWorker: one answer per request, then EOF ended the worker.
      assert.deepEqual(worker, {
        recipe: "interactiveWorker",
        results: ["result: ALPHA", "result: BETA", "result: GAMMA"],
        log: ["worker: end of input"],
        exitCode: 0,
      });
      // serverWorkspace: served the page, logged both requests, ended by the termination.
      assert.deepEqual(server, {
        recipe: "serverWorkspace",
        page: "hello from the sandbox\n",
        terminated: "requested",
        signal: "SIGTERM",
        requests: 2,
      });
    }
  } finally {
    fs.rmSync(outDir, { recursive: true, force: true });
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("a misuse the types allowed would fail the compile (the check can fail)", () => {
  // A project of its own (inside the package, so that "@tether/node"
  // resolves), never in examples/: the ctests that run this file at the
  // same time (node, node.e2b, node.runloop) compile examples/*.ts.
  const dir = path.join(pkg, "build", `probe-${process.pid}`);
  fs.mkdirSync(dir, { recursive: true });
  // An expected error that does not happen is itself an error.
  fs.writeFileSync(path.join(dir, "probe.ts"), 'import * as t from "@tether/node";\n// @ts-expect-error\nt.providers();\n');
  fs.writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({ extends: "../../tsconfig.json", compilerOptions: { rootDir: "." }, include: ["probe.ts"] }),
  );
  try {
    assert.throws(() => compile(path.join(dir, "tsconfig.json")), /Unused '@ts-expect-error' directive/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
