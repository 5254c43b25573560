// The shipped types and seed 000's examples: tsc checks examples/*.ts (the
// examples as written, and misuse the types must refuse), then the compiled
// example runs against the local provider, and through a command channel.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = fs.mkdtempSync(path.join(os.tmpdir(), "tether-node-examples-"));

function compile() {
  const tsc = path.join(pkg, "node_modules", "typescript", "bin", "tsc");
  // (outDir inside the package: the examples import "@tether/node" by name)
  const outDir = path.join(pkg, "build", `examples-${process.pid}`);
  try {
    execFileSync(process.execPath, [tsc, "-p", path.join(pkg, "tsconfig.json"), "--outDir", outDir], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (e) {
    assert.fail(`tsc refused the examples:\n${e.stdout}${e.stderr}`);
  }
  return outDir;
}

test("the types accept seed 000's examples and refuse misuse; the examples run as written", () => {
  const outDir = compile();
  try {
    for (const channel of [[], ["sh -c 'exec sh -c \"$1\"' tether"]]) {
      const text = execFileSync(process.execPath, [path.join(outDir, "streaming.js"), ...channel], {
        encoding: "utf8",
        env: { ...process.env, TMPDIR: out },
      });
      const lines = text.trim().split("\n").map((l) => JSON.parse(l));
      assert.deepEqual(lines[1], { output: "fulfilled", exit: 0 });
      assert.deepEqual(lines[2], { exitCode: 0 });
      assert.deepEqual(lines[3], { lines: ["stderr:beta", "stdout:alpha", "stdout:gamma(partial)"], tail: 3 });
      assert.deepEqual(lines[4].rendered, { stdout: "got first request\ngot second request\n", stderr: "bye\n" });
      assert.deepEqual(lines[4].bytes, [0, 255, 128, 97, 98, 99]);
    }
  } finally {
    fs.rmSync(outDir, { recursive: true, force: true });
    fs.rmSync(out, { recursive: true, force: true });
  }
});

test("a misuse the types allowed would fail the compile (the check can fail)", () => {
  const probe = path.join(pkg, "examples", `probe_${process.pid}.ts`);
  // An expected error that does not happen is itself an error.
  fs.writeFileSync(probe, 'import * as t from "@tether/node";\n// @ts-expect-error\nt.providers();\n');
  try {
    assert.throws(() => compile(), /Unused '@ts-expect-error' directive/);
  } finally {
    fs.rmSync(probe, { force: true });
  }
});
