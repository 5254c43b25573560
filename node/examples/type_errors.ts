// Misuse the types must refuse: each @ts-expect-error fails the compile if
// the line below it type-checks (tsc checks this file with the examples).
import * as tether from "@tether/node";

export async function misuse(sandbox: tether.Sandbox): Promise<void> {
  const text = await sandbox.processes.start({ command: { kind: "argv", argv: ["true"] }, output: { mode: "stream" } });
  for await (const chunk of text.output()) {
    // @ts-expect-error text output has no bytes
    chunk.bytes;
  }
  const bytes = await sandbox.processes.start({
    command: { kind: "argv", argv: ["true"] },
    output: { mode: "stream", format: "bytes" },
  });
  for await (const chunk of bytes.output()) {
    // @ts-expect-error byte output has no text
    chunk.text;
  }
  const term = await sandbox.terminals.start({ command: { kind: "shell", script: "true" } });
  // @ts-expect-error a terminal has no closeStdin
  await term.closeStdin();
  // @ts-expect-error deadlineSeconds is refused
  await sandbox.processes.start({ command: { kind: "argv", argv: ["true"] }, deadlineSeconds: 5 });
  // @ts-expect-error a command is an object, not a string
  await sandbox.processes.start({ command: "ls" });
  const status = await text.status();
  // @ts-expect-error the states are running, exited and unknown
  if (status.state === "stopped") return;
  const err = new tether.OutcomeUnknownError("x");
  // @ts-expect-error codes are a closed set
  if (err.code === "TIMEOUT") return;
}
