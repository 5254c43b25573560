// Bounded diagnostic text from process output (seed 000, "Bounded diagnostic
// lines and tails"): readProcessLines and createProcessTail.
//
// Both work on bytes, one line assembler per stream, so a UTF-8 character
// split across chunks is joined and a CRLF split across chunks is one line
// end. A line longer than maxLineBytes keeps its first maxLineBytes (cut at a
// character boundary), is marked truncated, and the rest up to the newline is
// discarded without being kept. Neither stores a transcript.
import { makeError } from "./errors.mjs";

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: false });

function positiveInt(name, value, fallback) {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw makeError("INVALID_ARGUMENT", `${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

// The bytes and stream of one chunk of process or terminal output.
function chunkBytes(chunk) {
  if (chunk instanceof Uint8Array) return ["pty", chunk];
  if (chunk && typeof chunk === "object") {
    if (chunk.bytes instanceof Uint8Array) return [chunk.stream ?? "stdout", chunk.bytes];
    if (typeof chunk.text === "string") return [chunk.stream ?? "stdout", encoder.encode(chunk.text)];
  }
  throw makeError("INVALID_ARGUMENT", "not a chunk of process output ({ stream, text }, { stream, bytes } or bytes)");
}

// The longest prefix of `bytes` of at most `max` bytes that does not end in
// the middle of a UTF-8 character.
function cutAtCharacter(bytes, max) {
  if (bytes.length <= max) return bytes;
  let end = max;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) --end;
  return bytes.subarray(0, end);
}

class LineAssembler {
  constructor(maxLineBytes) {
    this.max = maxLineBytes;
    this.parts = []; // kept bytes of the current line (at most max + 1 for a CR)
    this.kept = 0;
    this.truncated = false;
  }

  // Lines completed by `bytes`, as { text, partial: false, truncated }.
  push(bytes, out, stream) {
    let from = 0;
    while (from < bytes.length) {
      const nl = bytes.indexOf(0x0a, from);
      const end = nl < 0 ? bytes.length : nl;
      this.keep(bytes.subarray(from, end));
      if (nl < 0) break;
      out.push(this.take(stream, false));
      from = nl + 1;
    }
  }

  keep(piece) {
    // One byte past the limit is kept so that a CR just before the newline
    // can still be dropped; more is discarded and marks the line truncated.
    const room = this.max + 1 - this.kept;
    if (piece.length > room) {
      this.truncated = true;
      piece = piece.subarray(0, Math.max(0, room));
    }
    if (piece.length > 0) {
      this.parts.push(piece.slice());
      this.kept += piece.length;
    }
  }

  take(stream, partial) {
    let bytes = new Uint8Array(this.kept);
    let at = 0;
    for (const p of this.parts) {
      bytes.set(p, at);
      at += p.length;
    }
    let truncated = this.truncated;
    if (!partial && !truncated && bytes.length > 0 && bytes[bytes.length - 1] === 0x0d) {
      bytes = bytes.subarray(0, bytes.length - 1); // CRLF
    }
    if (bytes.length > this.max) {
      truncated = true;
      bytes = cutAtCharacter(bytes, this.max);
    }
    this.parts = [];
    this.kept = 0;
    this.truncated = false;
    return { stream, text: decoder.decode(bytes), partial, truncated };
  }

  pending() {
    return this.kept > 0 || this.truncated;
  }
}

function abortError(signal) {
  return makeError("WAIT_ABORTED", "the wait was aborted", { cause: signal.reason });
}

// Yields { stream, text, partial, truncated } for each line of `output` (an
// async iterable of process chunks, such as child.output()). Aborting
// `signal` ends the iteration with WAIT_ABORTED and releases the output
// iterator (in stream mode only output observation ends).
export async function* readProcessLines(output, options = {}) {
  const { maxLineBytes: maxOpt, signal, ...rest } = options ?? {};
  const unknown = Object.keys(rest);
  if (unknown.length) throw makeError("INVALID_ARGUMENT", `readProcessLines: unknown option ${unknown[0]}`);
  const maxLineBytes = positiveInt("maxLineBytes", maxOpt, 16_384);
  if (signal?.aborted) throw abortError(signal);
  const it = output[Symbol.asyncIterator]();
  const assemblers = new Map();
  // An abort settles the wait for the next chunk at once (a quiet process
  // may never produce one) and releases the output iterator.
  let onAbort;
  const aborted = new Promise((_, reject) => {
    onAbort = () => reject(abortError(signal));
  });
  aborted.catch(() => {});
  signal?.addEventListener("abort", onAbort, { once: true });
  let released = false;
  try {
    while (true) {
      const step = await (signal ? Promise.race([it.next(), aborted]) : it.next());
      if (step.done) {
        released = true;
        break;
      }
      const [stream, bytes] = chunkBytes(step.value);
      let a = assemblers.get(stream);
      if (!a) assemblers.set(stream, (a = new LineAssembler(maxLineBytes)));
      const lines = [];
      a.push(bytes, lines, stream);
      for (const line of lines) yield line;
    }
    for (const [stream, a] of assemblers) {
      if (a.pending()) yield a.take(stream, true);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    // (not awaited when a next() is still pending: an async generator's
    // return() would wait for it)
    if (!released) Promise.resolve(it.return?.()).catch(() => {});
  }
}

// A rolling window of recent output: push(chunk) each chunk, snapshot() at
// any time gives { lines, truncated } (the last maxLines lines, the last one
// of each stream possibly partial; truncated once anything was discarded).
export function createProcessTail(options = {}) {
  const { maxBytes: mb, maxChunks: mc, maxLines: ml, maxLineBytes: mlb, ...rest } = options ?? {};
  const unknown = Object.keys(rest);
  if (unknown.length) throw makeError("INVALID_ARGUMENT", `createProcessTail: unknown option ${unknown[0]}`);
  const maxBytes = positiveInt("maxBytes", mb, 65_536);
  const maxChunks = positiveInt("maxChunks", mc, 256);
  const maxLines = positiveInt("maxLines", ml, 200);
  const maxLineBytes = positiveInt("maxLineBytes", mlb, 16_384);
  const chunks = []; // [stream, bytes (owned)]
  let bytes = 0;
  let dropped = false;
  return {
    push(chunk) {
      let [stream, b] = chunkBytes(chunk);
      if (b.length > maxBytes) {
        b = b.subarray(b.length - maxBytes);
        dropped = true;
      }
      chunks.push([stream, b.slice()]);
      bytes += b.length;
      while (bytes > maxBytes || chunks.length > maxChunks) {
        const [, old] = chunks.shift();
        bytes -= old.length;
        dropped = true;
      }
    },
    snapshot() {
      const assemblers = new Map();
      let lines = [];
      for (const [stream, b] of chunks) {
        let a = assemblers.get(stream);
        if (!a) assemblers.set(stream, (a = new LineAssembler(maxLineBytes)));
        a.push(b, lines, stream);
      }
      for (const [stream, a] of assemblers) if (a.pending()) lines.push(a.take(stream, true));
      let truncated = dropped;
      if (lines.length > maxLines) {
        lines = lines.slice(lines.length - maxLines);
        truncated = true;
      }
      return { lines, truncated };
    },
  };
}
