// Seed 000's examples as written, with a sandbox handle from tether: the
// interactive worker (text output, input, EOF, status, wait, detach) and the
// original-bytes example. Compiled by tsc (types checked) and run by the
// package's tests (node/test/examples.test.mjs).
import * as tether from "@tether/node";
import { sandboxFromArgs } from "./sandbox_from_args.js";

const sandbox = sandboxFromArgs();
const rendered: Record<string, string> = { stdout: "", stderr: "" };
async function render(stream: string, text: string): Promise<void> {
  rendered[stream] += text;
}
const stored: Uint8Array[] = [];
async function storeBytes(stream: string, bytes: Uint8Array): Promise<void> {
  if (stream === "stdout") stored.push(bytes);
}

try {
  // --- Streaming and interactive processes
  {
    const child = await sandbox.processes.start({
      command: { kind: "argv", argv: ["sh", "-c", "while read -r line; do echo \"got $line\"; done; echo bye >&2"] },
      stdin: "pipe",
      output: { mode: "stream" },
    });
    const output = (async () => {
      for await (const chunk of child.output()) {
        await render(chunk.stream, chunk.text);
      }
    })();
    const completion = Promise.allSettled([output, child.wait()]);
    try {
      await child.write("first request\n");
      await child.write(new TextEncoder().encode("second request\n"));
      await child.closeStdin();
      console.log(JSON.stringify((await child.status()).state !== undefined));
      const [out, exit] = await completion;
      console.log(JSON.stringify({ output: out.status, exit: exit.status === "fulfilled" ? exit.value.exitCode : null }));
    } finally {
      await child.detach();
    }
  }

  // --- Original output bytes
  {
    const child = await sandbox.processes.start({
      command: { kind: "argv", argv: ["sh", "-c", "printf '\\000\\377\\200abc'"] },
      output: { mode: "stream", format: "bytes" },
    });
    try {
      for await (const chunk of child.output()) {
        await storeBytes(chunk.stream, chunk.bytes);
      }
      console.log(JSON.stringify({ exitCode: (await child.wait()).exitCode }));
    } finally {
      await child.detach();
    }
  }

  // --- Bounded diagnostic lines and tails
  {
    const child = await sandbox.processes.start({
      command: { kind: "shell", script: "echo alpha; echo beta >&2; printf gamma" },
      output: { mode: "stream" },
    });
    const tail = tether.createProcessTail({ maxBytes: 65_536, maxChunks: 256, maxLines: 200, maxLineBytes: 16_384 });
    const lines: string[] = [];
    for await (const line of tether.readProcessLines(child.output(), { maxLineBytes: 16_384 })) {
      lines.push(`${line.stream}:${line.text}${line.partial ? "(partial)" : ""}`);
      tail.push({ stream: line.stream === "stderr" ? "stderr" : "stdout", text: line.text + "\n" });
    }
    await child.wait();
    console.log(JSON.stringify({ lines: lines.sort(), tail: tail.snapshot().lines.length }));
  }
  console.log(JSON.stringify({ rendered, bytes: Array.from(stored.flatMap((b) => Array.from(b))) }));
} finally {
  sandbox.close();
}
