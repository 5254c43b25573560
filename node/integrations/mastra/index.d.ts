// Types of @tether/mastra (index.mjs): a Mastra workspace sandbox over tether.
import {
  MastraSandbox,
  ProcessHandle,
  SandboxProcessManager,
  type CommandResult,
  type MastraSandboxOptions,
  type ProcessInfo,
  type SandboxInfo,
  type SandboxStartResult,
  type SpawnProcessOptions,
} from "@mastra/core/workspace";
// (.js: how TypeScript reaches lib/index.d.ts; a type-only import, erased)
import type { Sandbox } from "../../lib/index.js";

/** tether's connect() options: the provider's CLI flags, camelCase ({ sandbox: "id" }). */
export type TetherOptions = Record<string, string | number | boolean>;

/** Which tether sandbox, plus Mastra's own sandbox options. */
export type TetherSandboxOptions = (
  | { /** "local", or a provider of tether.providers() ("e2b", "docker", ...). */ provider: string; command?: never }
  | { /** A command that runs a shell command line in the sandbox: "ssh -T host". */ command: string; provider?: never }
) & {
  options?: TetherOptions;
  /** Default: "tether-" and a random UUID. */
  id?: string;
} & Pick<MastraSandboxOptions, "env" | "workingDirectory" | "onStart" | "onStop" | "onDestroy">;

/** A process spawned through tether. Text output; exit by signal N is 128+N. */
export declare class TetherProcessHandle extends ProcessHandle {
  readonly pid: string;
  /** Set once the process ended and all its output was emitted. */
  get exitCode(): number | undefined;
  /** False once it ended, or once tether lost track of it. */
  get running(): boolean;
  /** SIGKILL to the process group: true if sent, false if it had already ended. */
  kill(): Promise<boolean>;
  /** A string is sent as UTF-8; a Uint8Array as is. In call order. */
  sendStdin(data: string | Uint8Array): Promise<void>;
  /** EOF after every earlier sendStdin. */
  closeStdin(): Promise<void>;
  wait(options?: {
    onStdout?: (data: string) => void;
    onStderr?: (data: string) => void;
    abortSignal?: AbortSignal;
  }): Promise<CommandResult>;
}

export declare class TetherProcessManager extends SandboxProcessManager<TetherSandbox> {
  spawn(command: string, options?: SpawnProcessOptions): Promise<TetherProcessHandle>;
  list(): Promise<ProcessInfo[]>;
  get(pid: string): Promise<TetherProcessHandle | undefined>;
}

export declare class TetherSandbox extends MastraSandbox {
  constructor(options: TetherSandboxOptions);
  readonly id: string;
  readonly name: "TetherSandbox";
  readonly provider: "tether";
  status: MastraSandbox["status"];
  readonly processes: TetherProcessManager;
  /** The tether provider underneath ("local", "e2b", "command", ...). */
  get tetherProvider(): string;
  /** The open @tether/node Sandbox; throws SandboxNotReadyError unless running. */
  get tether(): Sandbox;
  /** Opens the connection; tether attaches to a sandbox that exists: "connected". */
  start(): Promise<SandboxStartResult>;
  /** Kills what this sandbox spawned and closes the connection (no pause). */
  stop(): Promise<void>;
  /** As stop(); the sandbox itself is left alone (tether never deletes it). */
  destroy(): Promise<void>;
  getInfo(): Promise<SandboxInfo>;
  getInstructions(): string;
}
