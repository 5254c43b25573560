// Types of @tether/node (lib/index.mjs): seed 000's process API over tether.

export type ErrorCode =
  | "INVALID_ARGUMENT"
  | "UNSUPPORTED"
  | "UNAVAILABLE"
  | "BUSY"
  | "EXPIRED"
  | "INPUT_CLOSED"
  | "OUTCOME_UNKNOWN"
  | "NOT_FOUND"
  | "PERMISSION_DENIED"
  | "PROTOCOL"
  | "CANCELLED"
  | "OUTPUT_CAPACITY"
  | "WAIT_ABORTED"
  | "RESOURCE_EXHAUSTED"
  | "INTERNAL";

export class TetherError extends Error {
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown });
  readonly code: ErrorCode;
}
/** The per-code classes take only the message (their code is fixed). */
declare class CodedError extends TetherError {
  constructor(message: string, options?: { cause?: unknown });
}
export class InvalidArgumentError extends CodedError {}
export class UnsupportedError extends CodedError {}
export class UnavailableError extends CodedError {}
export class BusyError extends CodedError {}
export class ExpiredError extends CodedError {}
export class InputClosedError extends CodedError {}
export class OutcomeUnknownError extends CodedError {}
export class NotFoundError extends CodedError {}
export class PermissionDeniedError extends CodedError {}
export class ProtocolError extends CodedError {}
export class CancelledError extends CodedError {}
export class OutputCapacityError extends CodedError {}
export class WaitAbortedError extends CodedError {}
export class ResourceExhaustedError extends CodedError {}
export class InternalError extends CodedError {}

export declare const limits: Readonly<{
  maxChunkBytes: 16384;
  maxUnreadBytes: 65536;
  maxWriteBytes: 65536;
  maxQueuedInputBytes: 262144;
  maxQueuedWrites: 256;
  maxFiniteOutputBytes: 1048576;
  setupTimeoutMs: 30000;
}>;

export type Command = { kind: "argv"; argv: string[] } | { kind: "shell"; script: string };
export type StreamName = "stdout" | "stderr";

export interface StartInput {
  command: Command;
  /** "closed" (default): stdin is /dev/null; "pipe": write() and closeStdin(). */
  stdin?: "pipe" | "closed";
  /** mode "finite" (default: at most maxOutputBytes in all) or "stream"; format "text" (default) or "bytes". */
  output?: { mode?: "stream" | "finite"; format?: "text" | "bytes" };
  /** Finite mode only: 1..1048576 (default 1048576). */
  maxOutputBytes?: number;
  cwd?: string;
  env?: Record<string, string>;
  /** Aborts the start: WAIT_ABORTED before dispatch, OUTCOME_UNKNOWN after (never run twice). */
  signal?: AbortSignal;
  /** Default 30000. */
  setupTimeoutMs?: number;
  /** Refused: a portable runtime deadline cannot be guaranteed. */
  deadlineSeconds?: never;
}

export interface TextChunk {
  stream: StreamName;
  text: string;
}
export interface BytesChunk {
  stream: StreamName;
  bytes: Uint8Array;
}

export interface ExitInfo {
  /** The exit status when it exited; null when a signal ended it. */
  exitCode: number | null;
  /** "SIGKILL", ... when a signal ended it; null otherwise. */
  signal: string | null;
  signalNumber: number | null;
  coreDumped: boolean;
  /** Background descendants held the output open past the exit. */
  outputCut: boolean;
  cpu: { userMs: number; systemMs: number };
  maxRssKiB: number;
}
export interface WaitResult extends ExitInfo {
  /** The output stream ended and every chunk was delivered through this handle, without a gap. */
  outputComplete: boolean;
}
export interface StatusResult {
  state: "running" | "exited" | "unknown";
  exit?: ExitInfo;
  observedAt: Date;
}
export interface TerminateResult {
  status: "requested" | "not-found" | "exited";
}
export interface CallOptions {
  signal?: AbortSignal;
}

declare class BaseProcess<Chunk> {
  readonly pid: number;
  /** True once the supervisor reported output lost while nobody was attached. */
  outputGap: boolean;
  /** The one consumer of the output; chunks of at most 16 KiB. */
  output(options?: CallOptions): AsyncIterableIterator<Chunk>;
  /** At most 64 KiB per write; 256 KiB and 256 writes queued. */
  write(data: string | Uint8Array, options?: CallOptions): Promise<void>;
  status(options?: CallOptions): Promise<StatusResult>;
  wait(options?: CallOptions): Promise<WaitResult>;
  /** "SIGTERM", "TERM" or 15, to the process group. */
  signal(name: string | number, options?: CallOptions): Promise<void>;
  /** SIGTERM then SIGKILL after graceMs (default 0). */
  terminate(options?: CallOptions & { graceMs?: number }): Promise<TerminateResult>;
  /** Private text for reopen, here or in another program; expires within 24 h. */
  reference(): string;
  disconnect(options?: CallOptions): Promise<void>;
  detach(): Promise<void>;
}

export declare class ChildProcess<Chunk extends TextChunk | BytesChunk = TextChunk | BytesChunk> extends BaseProcess<Chunk> {
  closeStdin(options?: CallOptions): Promise<void>;
}
export declare class Terminal extends BaseProcess<Uint8Array> {
  resize(size: { columns: number; rows: number }, options?: CallOptions): Promise<void>;
}

export interface ReopenOptions extends CallOptions {
  /** A control-only handle (status, signal, terminate, resize). */
  control?: boolean;
  timeoutMs?: number;
}

export interface ExecInput {
  command: Command;
  cwd?: string;
  env?: Record<string, string>;
  /** Written, then EOF. */
  stdin?: string | Uint8Array;
  /** What is kept of both streams together: 1..1048576 (default 1048576). */
  maxOutputBytes?: number;
  setupTimeoutMs?: number;
  deadlineSeconds?: never;
}
export interface ExecOutput extends WaitResult {
  stdout: string;
  stderr: string;
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  truncated: boolean;
}

export declare class Sandbox {
  readonly provider: string;
  readonly processes: {
    start(input: StartInput & { output: { mode?: "stream" | "finite"; format: "bytes" } }): Promise<ChildProcess<BytesChunk>>;
    start(input: StartInput & { output?: { mode?: "stream" | "finite"; format?: "text" } }): Promise<ChildProcess<TextChunk>>;
    reopen(reference: string, options?: ReopenOptions): Promise<ChildProcess>;
  };
  readonly terminals: {
    start(input: {
      command: Command;
      columns?: number;
      rows?: number;
      cwd?: string;
      env?: Record<string, string>;
      signal?: AbortSignal;
      setupTimeoutMs?: number;
    }): Promise<Terminal>;
    reopen(reference: string, options?: ReopenOptions): Promise<Terminal>;
  };
  exec(
    input: ExecInput,
    options?: { onOutput?: (chunk: TextChunk) => unknown | Promise<unknown>; signal?: AbortSignal },
  ): Promise<ExecOutput>;
  /** Frees every handle (the processes go on in the sandbox). */
  close(): void;
}

/** This machine. */
export function local(options?: Record<string, string | number | boolean>): Sandbox;
/** Any command channel: command("ssh -T host"). */
export function command(prefix: string, options?: Record<string, string | number | boolean>): Sandbox;
/** A provider by name with its CLI flags: connect("e2b", { sandbox: "id" }). */
export function connect(provider: string, options?: Record<string, string | number | boolean>): Sandbox;
export function providers(): string[];

export interface ProcessLine {
  stream: StreamName | "pty";
  text: string;
  /** The last line, without a newline. */
  partial: boolean;
  /** Longer than maxLineBytes: the rest up to the newline was dropped. */
  truncated: boolean;
}
export function readProcessLines(
  output: AsyncIterable<TextChunk | BytesChunk | Uint8Array>,
  options?: { maxLineBytes?: number; signal?: AbortSignal },
): AsyncGenerator<ProcessLine>;
export function createProcessTail(options?: {
  maxBytes?: number;
  maxChunks?: number;
  maxLines?: number;
  maxLineBytes?: number;
}): {
  push(chunk: TextChunk | BytesChunk | Uint8Array): void;
  snapshot(): { lines: ProcessLine[]; truncated: boolean };
};
