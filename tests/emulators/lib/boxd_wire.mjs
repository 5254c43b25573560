// Protobuf messages of boxd.api.v1 for the boxd emulator, written by hand from
// the field numbers in /work/shared/BOXD.md sections 1.2 and 2 (decoded there
// from two third-party clients' embedded descriptors; no generated code is
// copied). Only what the emulator serves. Proto3: absent fields are their zero
// values and are not encoded; unknown fields are skipped.
import { decode, enc } from './modal_wire.mjs';

const last = (m, f) => {
  const v = m.get(f);
  return v ? v[v.length - 1] : undefined;
};
const str = (m, f) => (last(m, f) ?? Buffer.alloc(0)).toString('utf8');
const bytes = (m, f) => {
  const v = last(m, f);
  return Buffer.isBuffer(v) ? v : Buffer.alloc(0);
};
const bool = (m, f) => (last(m, f) ?? 0n) !== 0n;
const uint = (m, f) => {
  const v = last(m, f);
  if (v === undefined) return 0;
  if (typeof v !== 'bigint') throw new Error(`field ${f} is not a varint`);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`field ${f} is too large`);
  return Number(v);
};
const int32 = (m, f) => {
  const v = last(m, f);
  return typeof v === 'bigint' ? Number(BigInt.asIntN(32, v)) : 0;
};
// A length-delimited field must be one (a varint where a string belongs is malformed).
function checkLen(m, fields) {
  for (const f of fields) {
    for (const v of m.get(f) ?? []) if (!Buffer.isBuffer(v)) throw new Error(`field ${f} is not length-delimited`);
  }
}

// ExecChunk {data=1 bytes, stdin=2 bool, tty=3 bool, command=4 string,
// vm_id=5 string, exit_code=6 int32, cols=7 uint32, rows=8 uint32,
// window_change=9 bool, is_stderr=10 bool}: one message both ways.
export function decodeExecChunk(buf) {
  const m = decode(buf);
  checkLen(m, [1, 4, 5]);
  return {
    data: bytes(m, 1), stdin: bool(m, 2), tty: bool(m, 3), command: str(m, 4), vmId: str(m, 5),
    exitCode: int32(m, 6), cols: uint(m, 7), rows: uint(m, 8), windowChange: bool(m, 9), isStderr: bool(m, 10),
  };
}
export function encodeExecChunk({ data, isStderr = false, exitCode = 0 } = {}) {
  return Buffer.concat([enc.bytes(1, data), enc.varint(6, exitCode), enc.varint(10, isStderr ? 1 : 0)]);
}

// UploadFileChunk {vm_id=1, path=2, total_size=3 uint64, data=4 bytes}.
export function decodeUploadFileChunk(buf) {
  const m = decode(buf);
  checkLen(m, [1, 2, 4]);
  return { vmId: str(m, 1), path: str(m, 2), totalSize: uint(m, 3), hasTotalSize: m.has(3), data: bytes(m, 4) };
}
// UploadFileResponse {bytes_written=1 uint64}.
export const encodeUploadFileResponse = (n) => enc.varint(1, n);

// GetVmRequest {vm_id=1} -> GetVmResponse {vm_id=1, name=2, status=5}.
export function decodeGetVmRequest(buf) {
  const m = decode(buf);
  checkLen(m, [1]);
  return { vmId: str(m, 1) };
}
export const encodeGetVmResponse = ({ vmId, name, status }) =>
  Buffer.concat([enc.bytes(1, vmId), enc.bytes(2, name), enc.bytes(5, status)]);
