/**
 * The sandboxes a Daytona stand-in holds: a real local box each, plus what
 * the platform keeps (name, labels, state, intervals) and the toolbox's
 * process sessions. `stop` ends every process and keeps the filesystem
 * (Daytona's stop/start); a sandbox left without activity for its
 * `autoStopInterval` minutes is stopped on its own, which is the lease the
 * SDK's `refreshActivity` renews.
 */
import { randomUUID } from "node:crypto";
import type { Box, LocalBoxes } from "@openma/standin-kit";
import type { Scheduler } from "@openma/time";

export type DaytonaState = "started" | "stopped";

export interface SessionCommand {
  id: string;
  command: string;
  exitCode: number | undefined;
  /** Every output chunk with its stream, as the log endpoint replays it. */
  output: { stream: "stdout" | "stderr"; chunk: Uint8Array }[];
  listeners: Set<(event: { stream: "stdout" | "stderr"; chunk: Uint8Array } | "end") => void>;
  write(chunk: Uint8Array): Promise<void>;
  kill(): void;
}

export interface Session {
  id: string;
  commands: Map<string, SessionCommand>;
}

export interface SandboxRecord {
  id: string;
  name: string;
  labels: Record<string, string>;
  env: Record<string, string>;
  snapshot: string;
  box: Box;
  createdAt: Date;
  updatedAt: Date;
  lastActivityAt: Date;
  /** Minutes without activity before the platform stops it; 0 never. */
  autoStopInterval: number;
  sessions: Map<string, Session>;
  idle: AbortController;
}

export class SandboxTable {
  readonly #byId = new Map<string, SandboxRecord>();

  constructor(
    private readonly boxes: LocalBoxes,
    private readonly scheduler: Scheduler,
  ) {}

  /** By id or by name, as every `/sandbox/{sandboxIdOrName}` route resolves it. */
  find(idOrName: string): SandboxRecord | undefined {
    return this.#byId.get(idOrName) ?? [...this.#byId.values()].find((s) => s.name === idOrName);
  }

  all(): SandboxRecord[] {
    return [...this.#byId.values()].sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1));
  }

  state(sandbox: SandboxRecord): DaytonaState {
    return sandbox.box.state === "running" ? "started" : "stopped";
  }

  async create(input: {
    name: string;
    labels: Record<string, string>;
    env: Record<string, string>;
    snapshot: string;
    autoStopInterval: number;
  }): Promise<SandboxRecord> {
    const box = await this.boxes.create("d");
    // The sandbox user's home, where the toolbox resolves relative paths and runs commands.
    const home = await box.tools.exec({
      command: ["mkdir", "-p", "/home/daytona"],
      timeoutMs: 60_000,
      signal: AbortSignal.timeout(60_000),
    });
    if (home.type !== "exited" || home.exitCode !== 0) {
      await this.boxes.destroy(box).catch(() => {});
      throw new Error("could not prepare the sandbox's home directory");
    }
    const now = new Date(this.scheduler.now());
    const sandbox: SandboxRecord = {
      id: randomUUID(),
      name: input.name,
      labels: input.labels,
      env: input.env,
      snapshot: input.snapshot,
      box,
      createdAt: now,
      updatedAt: now,
      lastActivityAt: now,
      autoStopInterval: input.autoStopInterval,
      sessions: new Map(),
      idle: new AbortController(),
    };
    this.#byId.set(sandbox.id, sandbox);
    this.touch(sandbox);
    return sandbox;
  }

  /** Activity: the auto-stop clock starts again. */
  touch(sandbox: SandboxRecord): void {
    sandbox.lastActivityAt = new Date(this.scheduler.now());
    sandbox.idle.abort();
    const idle = new AbortController();
    sandbox.idle = idle;
    if (sandbox.autoStopInterval <= 0 || this.state(sandbox) !== "started") return;
    void this.scheduler
      .sleep(sandbox.autoStopInterval * 60_000, idle.signal)
      .then(
        () => this.stop(sandbox),
        () => {},
      )
      .catch(() => {});
  }

  async start(sandbox: SandboxRecord): Promise<void> {
    await this.boxes.start(sandbox.box);
    sandbox.updatedAt = new Date(this.scheduler.now());
    this.touch(sandbox);
  }

  /** Every process ends (their sessions with them); the filesystem stays. */
  async stop(sandbox: SandboxRecord): Promise<void> {
    sandbox.idle.abort();
    this.#endSessions(sandbox);
    await this.boxes.stop(sandbox.box);
    sandbox.updatedAt = new Date(this.scheduler.now());
  }

  async destroy(sandbox: SandboxRecord): Promise<void> {
    this.#byId.delete(sandbox.id);
    sandbox.idle.abort();
    this.#endSessions(sandbox);
    await this.boxes.destroy(sandbox.box);
  }

  #endSessions(sandbox: SandboxRecord): void {
    for (const session of sandbox.sessions.values()) for (const command of session.commands.values()) command.kill();
    sandbox.sessions.clear();
  }

  close(): void {
    for (const sandbox of this.#byId.values()) sandbox.idle.abort();
  }
}

export function sandboxDto(table: SandboxTable, sandbox: SandboxRecord, toolboxBase: string): Record<string, unknown> {
  const state = table.state(sandbox);
  return {
    id: sandbox.id,
    organizationId: "standin-organization",
    name: sandbox.name,
    snapshot: sandbox.snapshot,
    user: "daytona",
    env: sandbox.env,
    labels: sandbox.labels,
    public: false,
    networkBlockAll: false,
    target: "standin",
    cpu: 1,
    gpu: 0,
    memory: 1,
    disk: 10,
    state,
    desiredState: state,
    autoStopInterval: sandbox.autoStopInterval,
    autoArchiveInterval: 0,
    autoDeleteInterval: -1,
    createdAt: sandbox.createdAt.toISOString(),
    updatedAt: sandbox.updatedAt.toISOString(),
    lastActivityAt: sandbox.lastActivityAt.toISOString(),
    daemonVersion: "standin",
    toolboxProxyUrl: toolboxBase,
  };
}
