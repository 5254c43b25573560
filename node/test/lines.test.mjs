// readProcessLines and createProcessTail (seed 000's semantics), on made-up
// chunks and on a real process.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import * as tether from "../lib/index.mjs";
import { openSandbox } from "./fixtures/sandbox.mjs";
const { readProcessLines, createProcessTail } = tether;

const enc = new TextEncoder();
const bytes = (s) => enc.encode(s);
async function* chunks(list) {
  for (const c of list) yield c;
}
async function lines(list, options) {
  const out = [];
  for await (const l of readProcessLines(chunks(list), options)) out.push(l);
  return out;
}
const L = (stream, text, partial = false, truncated = false) => ({ stream, text, partial, truncated });

describe("readProcessLines", () => {
  test("a UTF-8 character and a CRLF split across chunks, streams apart, a partial last line", async () => {
    const euro = bytes("€"); // e2 82 ac
    const got = await lines([
      { stream: "stdout", bytes: new Uint8Array([0x61, euro[0]]) },
      { stream: "stderr", bytes: bytes("e1\r") },
      { stream: "stdout", bytes: new Uint8Array([euro[1], euro[2], 0x0d]) },
      { stream: "stdout", bytes: bytes("\nnext") },
      { stream: "stderr", bytes: bytes("\n") },
    ]);
    assert.deepEqual(got, [L("stdout", "a€"), L("stderr", "e1"), L("stdout", "next", true)]);
  });

  test("an oversized line keeps its first maxLineBytes at a character boundary, the rest is dropped", async () => {
    const got = await lines(
      [{ stream: "stdout", text: "ab€€€cd" }, { stream: "stdout", text: "efg\nshort\n" }],
      { maxLineBytes: 6 },
    );
    // "ab€" is 5 bytes; the second € would end at 8.
    assert.deepEqual(got, [L("stdout", "ab€", false, true), L("stdout", "short")]);
  });

  test("a line of exactly maxLineBytes plus CRLF is not truncated", async () => {
    assert.deepEqual(await lines([{ stream: "stdout", text: "abcd\r\n" }], { maxLineBytes: 4 }), [L("stdout", "abcd")]);
  });

  test("invalid UTF-8 in byte chunks becomes U+FFFD; terminal chunks (bytes) are stream pty", async () => {
    const got = await lines([{ stream: "stdout", bytes: new Uint8Array([0x66, 0xff, 0x0a]) }, new Uint8Array([0x74, 0x0a])]);
    assert.deepEqual(got, [L("stdout", "f\uFFFD"), L("pty", "t")]);
  });

  test("bad options and bad chunks are INVALID_ARGUMENT", async () => {
    await assert.rejects(lines([], { maxLineBytes: 0 }), (e) => e.code === "INVALID_ARGUMENT");
    await assert.rejects(lines([], { colour: 1 }), (e) => e.code === "INVALID_ARGUMENT");
    await assert.rejects(lines([42]), (e) => e.code === "INVALID_ARGUMENT");
  });

  test("an abort ends a quiet iteration with WAIT_ABORTED and releases the output", async () => {
    let released = false;
    const quiet = {
      [Symbol.asyncIterator]() {
        return {
          next: () => new Promise(() => {}),
          return: async () => {
            released = true;
            return { done: true };
          },
        };
      },
    };
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    const it = readProcessLines(quiet, { signal: ac.signal });
    await assert.rejects(
      (async () => {
        for await (const _ of it);
      })(),
      (e) => e.code === "WAIT_ABORTED",
    );
    assert.equal(released, true);
  });
});

describe("createProcessTail", () => {
  test("keeps the last lines within its bounds and says when it dropped output", () => {
    const tail = createProcessTail({ maxBytes: 16, maxChunks: 4, maxLines: 2, maxLineBytes: 8 });
    assert.deepEqual(tail.snapshot(), { lines: [], truncated: false });
    tail.push({ stream: "stdout", text: "one\ntwo\n" });
    assert.deepEqual(tail.snapshot(), { lines: [L("stdout", "one"), L("stdout", "two")], truncated: false });
    tail.push({ stream: "stdout", text: "three\nfo" });
    // 16 bytes kept: "one\ntwo\n" + "three\nfo"; three lines, two kept.
    assert.deepEqual(tail.snapshot(), { lines: [L("stdout", "three"), L("stdout", "fo", true)], truncated: true });
    tail.push({ stream: "stdout", text: "ur\n" });
    const s = tail.snapshot();
    assert.equal(s.truncated, true); // "one\n" was dropped
    assert.deepEqual(s.lines.at(-1), L("stdout", "four"));
  });

  test("chunk count bound and a chunk larger than the window", () => {
    const tail = createProcessTail({ maxBytes: 8, maxChunks: 2 });
    tail.push({ stream: "stdout", text: "a\n" });
    tail.push({ stream: "stdout", text: "b\n" });
    assert.equal(tail.snapshot().truncated, false);
    tail.push({ stream: "stdout", text: "c\n" });
    assert.deepEqual(tail.snapshot(), { lines: [L("stdout", "b"), L("stdout", "c")], truncated: true });
    const big = createProcessTail({ maxBytes: 4 });
    big.push({ stream: "stderr", text: "0123456789\n" });
    assert.deepEqual(big.snapshot(), { lines: [L("stderr", "789")], truncated: true });
  });
});

describe("on a real process", () => {
  let sb;
  before(() => (sb = openSandbox()));
  after(() => sb.close());

  test("lines of stdout and stderr, CRLF and a partial last line", async () => {
    const child = await sb.processes.start({
      command: { kind: "shell", script: "printf 'one\\r\\ntwo\\n'; printf 'err\\n' >&2; printf 'last'" },
      output: { mode: "stream" },
    });
    const got = [];
    for await (const l of readProcessLines(child.output())) got.push(l);
    got.sort((a, b) => a.stream.localeCompare(b.stream));
    assert.deepEqual(got, [L("stderr", "err"), L("stdout", "one"), L("stdout", "two"), L("stdout", "last", true)]);
    await child.wait();
  });

  test("an abort stops observing a quiet process and leaves it running", async () => {
    const child = await sb.processes.start({ command: { kind: "argv", argv: ["sleep", "30"] }, output: { mode: "stream" } });
    await assert.rejects(
      (async () => {
        for await (const _ of readProcessLines(child.output(), { signal: AbortSignal.timeout(100) }));
      })(),
      (e) => e.code === "WAIT_ABORTED",
    );
    assert.equal((await child.status()).state, "running");
    await child.terminate();
    await child.wait();
  });
});
