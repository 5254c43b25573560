// Protobuf encoding for the Modal emulator, written by hand from the field
// numbers in /work/shared/EMULATORS.md section 5 (read there from the SDK's
// encoders; no generated code is copied). Only the messages the emulator
// serves. Proto3: absent fields are their zero values.

// ---- wire primitives ---------------------------------------------------------

function varint(n) {
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n; // int32 negatives: ten bytes, two's complement
  const out = [];
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}

const key = (field, wt) => varint((field << 3) | wt);

export const enc = {
  varint: (f, n) => (n ? Buffer.concat([key(f, 0), varint(n)]) : Buffer.alloc(0)),
  bytes: (f, b) => {
    const buf = Buffer.isBuffer(b) ? b : Buffer.from(b ?? '');
    return buf.length ? Buffer.concat([key(f, 2), varint(buf.length), buf]) : Buffer.alloc(0);
  },
  // A sub-message that is present even when empty.
  message: (f, b) => Buffer.concat([key(f, 2), varint(b.length), b]),
};

// Decodes one message into {field: [values]}: varints as BigInt, fixed32 as
// a Buffer of 4, length-delimited as Buffer. Throws on malformed input.
export function decode(buf) {
  const out = new Map();
  let off = 0;
  const readVarint = () => {
    let v = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (off >= buf.length) throw new Error('truncated varint');
      const b = buf[off++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw new Error('varint too long');
  };
  while (off < buf.length) {
    const k = readVarint();
    const field = Number(k >> 3n);
    const wt = Number(k & 7n);
    if (field === 0) throw new Error('field number 0');
    let value;
    if (wt === 0) value = readVarint();
    else if (wt === 1) {
      if (off + 8 > buf.length) throw new Error('truncated fixed64');
      value = buf.subarray(off, off + 8);
      off += 8;
    } else if (wt === 2) {
      const len = Number(readVarint());
      if (len > buf.length - off) throw new Error('truncated length-delimited field');
      value = buf.subarray(off, off + len);
      off += len;
    } else if (wt === 5) {
      if (off + 4 > buf.length) throw new Error('truncated fixed32');
      value = buf.subarray(off, off + 4);
      off += 4;
    } else throw new Error(`wire type ${wt}`);
    if (!out.has(field)) out.set(field, []);
    out.get(field).push(value);
  }
  return out;
}

const last = (m, f) => {
  const v = m.get(f);
  return v ? v[v.length - 1] : undefined;
};
const str = (m, f) => (last(m, f) ?? Buffer.alloc(0)).toString('utf8');
const bytes = (m, f) => last(m, f) ?? Buffer.alloc(0);
const num = (m, f) => {
  const v = last(m, f);
  if (v === undefined) return 0;
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`field ${f} is too large`);
  return Number(v);
};
const bool = (m, f) => (last(m, f) ?? 0n) !== 0n;
const int32 = (m, f) => {
  const v = last(m, f) ?? 0n;
  return Number(BigInt.asIntN(32, v));
};

// ---- control plane (modal.client.ModalClient) ---------------------------------

export const empty = () => Buffer.alloc(0);
export const AuthTokenGetResponse = (token) => enc.bytes(1, token);
export function SandboxGetTaskIdRequest(b) {
  const m = decode(b);
  const t = last(m, 2);
  return { sandboxId: str(m, 1), timeout: t ? t.readFloatLE(0) : 0, waitUntilReady: bool(m, 3) };
}
export const SandboxGetTaskIdResponse = (taskId) => enc.bytes(1, taskId);
export const TaskGetCommandRouterAccessRequest = (b) => ({ taskId: str(decode(b), 1) });
export function SandboxGetCommandRouterAccessRequest(b) {
  const m = decode(b);
  return { sandboxId: str(m, 1), taskId: str(m, 2) };
}
// Both access responses: {jwt=1, url=2}.
export const RouterAccessResponse = (jwt, url) => Buffer.concat([enc.bytes(1, jwt), enc.bytes(2, url)]);

// ---- router (modal.task_command_router.TaskCommandRouter) ---------------------

export function TaskExecStartRequest(b) {
  const m = decode(b);
  const env = {};
  for (const e of m.get(12) ?? []) {
    const kv = decode(e);
    env[str(kv, 1)] = str(kv, 2);
  }
  const pty = last(m, 9);
  const ptyInfo = pty ? (() => {
    const p = decode(pty);
    return { enabled: bool(p, 1), rows: num(p, 2), cols: num(p, 3) };
  })() : null;
  return {
    taskId: str(m, 1),
    execId: str(m, 2),
    commandArgs: (m.get(3) ?? []).map((x) => x.toString('utf8')),
    stdoutConfig: int32(m, 4),
    stderrConfig: int32(m, 5),
    timeoutSecs: num(m, 6),
    workdir: m.has(7) ? str(m, 7) : null,
    ptyInfo,
    env,
  };
}
export function TaskExecStdinWriteRequest(b) {
  const m = decode(b);
  return { taskId: str(m, 1), execId: str(m, 2), offset: num(m, 3), data: bytes(m, 4), eof: bool(m, 5) };
}
export function TaskExecStdioReadRequest(b) {
  const m = decode(b);
  return { taskId: str(m, 1), execId: str(m, 2), offset: num(m, 3), fd: int32(m, 4) };
}
export const TaskExecStdioReadResponse = (data) => enc.bytes(1, data);
export function TaskExecIdRequest(b) {
  const m = decode(b);
  return { taskId: str(m, 1), execId: str(m, 2) };
}
// Wait/Poll: oneof {code=1, signal=2}; null: still running (Poll's empty message).
export function ExitResponse(exit) {
  if (exit === null) return Buffer.alloc(0);
  if (exit.signal) return Buffer.concat([key(2, 0), varint(exit.signal)]);
  return Buffer.concat([key(1, 0), varint(exit.code)]); // a oneof: present even when 0
}
