/**
 * The sandboxes an E2B stand-in holds: each is a real local box plus what
 * the platform knows about it (template, metadata, envd token, end of life)
 * and the processes envd has started in it. A sandbox lives until its
 * timeout (`endAt`) and is then killed, or paused when it was created with
 * `autoPause`; `pause` freezes the box (memory kept, as E2B's snapshot
 * does) and `connect` resumes it.
 */
import { randomBytes } from "node:crypto";
import type { Box, LocalBoxes } from "@openma/standin-kit";
import type { Scheduler } from "@openma/time";

/** What envd advertises: closeStdin needs 0.5.2, octet-stream uploads 0.5.7. */
export const ENVD_VERSION = "0.5.7";

export interface EnvdProcess {
  pid: number;
  tag: string | undefined;
  cmd: string;
  args: string[];
  cwd: string | undefined;
  write(chunk: Uint8Array): Promise<void>;
  closeStdin(): void;
  kill(): void;
}

export interface SandboxRecord {
  sandboxID: string;
  templateID: string;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  envdAccessToken: string;
  box: Box;
  startedAt: Date;
  endAt: Date;
  autoPause: boolean;
  processes: Map<number, EnvdProcess>;
  nextPid: number;
  lifetime: AbortController;
}

export class SandboxTable {
  readonly #sandboxes = new Map<string, SandboxRecord>();

  constructor(
    private readonly boxes: LocalBoxes,
    private readonly scheduler: Scheduler,
  ) {}

  get(id: string): SandboxRecord | undefined {
    return this.#sandboxes.get(id);
  }

  all(): SandboxRecord[] {
    return [...this.#sandboxes.values()].sort(
      (a, b) => a.startedAt.getTime() - b.startedAt.getTime() || (a.sandboxID < b.sandboxID ? -1 : 1),
    );
  }

  state(sandbox: SandboxRecord): "running" | "paused" {
    return sandbox.box.state === "running" ? "running" : "paused";
  }

  async create(input: {
    templateID: string;
    metadata: Record<string, string>;
    envVars: Record<string, string>;
    timeoutSeconds: number;
    autoPause: boolean;
  }): Promise<SandboxRecord> {
    const box = await this.boxes.create("i");
    // The user's home, as E2B templates have it: envd resolves relative paths and runs commands there.
    const home = await box.tools.exec({ command: ["mkdir", "-p", "/home/user"], timeoutMs: 60_000, signal: AbortSignal.timeout(60_000) });
    if (home.type !== "exited" || home.exitCode !== 0) {
      await this.boxes.destroy(box).catch(() => {});
      throw new Error("could not prepare the sandbox's home directory");
    }
    const now = this.scheduler.now();
    const sandbox: SandboxRecord = {
      sandboxID: box.id,
      templateID: input.templateID,
      metadata: input.metadata,
      envVars: input.envVars,
      envdAccessToken: randomBytes(24).toString("base64url"),
      box,
      startedAt: new Date(now),
      endAt: new Date(now + input.timeoutSeconds * 1000),
      autoPause: input.autoPause,
      processes: new Map(),
      nextPid: 1000,
      lifetime: new AbortController(),
    };
    this.#sandboxes.set(sandbox.sandboxID, sandbox);
    this.#arm(sandbox);
    return sandbox;
  }

  /** A new end of life, `seconds` from now. */
  setTimeout(sandbox: SandboxRecord, seconds: number): void {
    sandbox.endAt = new Date(this.scheduler.now() + seconds * 1000);
    this.#arm(sandbox);
  }

  async pause(sandbox: SandboxRecord): Promise<void> {
    await this.boxes.pause(sandbox.box);
  }

  async resume(sandbox: SandboxRecord, timeoutSeconds: number): Promise<void> {
    await this.boxes.unpause(sandbox.box);
    this.setTimeout(sandbox, timeoutSeconds);
  }

  async kill(sandbox: SandboxRecord): Promise<void> {
    this.#sandboxes.delete(sandbox.sandboxID);
    sandbox.lifetime.abort();
    for (const process of sandbox.processes.values()) process.kill();
    sandbox.processes.clear();
    await this.boxes.destroy(sandbox.box);
  }

  /** At the end of life: killed, or paused when the sandbox was made with `autoPause`. */
  #arm(sandbox: SandboxRecord): void {
    sandbox.lifetime.abort();
    const lifetime = new AbortController();
    sandbox.lifetime = lifetime;
    const wait = Math.max(0, sandbox.endAt.getTime() - this.scheduler.now());
    void this.scheduler
      .sleep(wait, lifetime.signal)
      .then(
        () => (sandbox.autoPause ? this.pause(sandbox) : this.kill(sandbox)),
        () => {}, // renewed or killed first
      )
      .catch(() => {});
  }

  close(): void {
    for (const sandbox of this.#sandboxes.values()) sandbox.lifetime.abort();
  }
}

export function sandboxJson(sandbox: SandboxRecord): Record<string, unknown> {
  return {
    sandboxID: sandbox.sandboxID,
    templateID: sandbox.templateID,
    clientID: "standin",
    envdVersion: ENVD_VERSION,
    envdAccessToken: sandbox.envdAccessToken,
    trafficAccessToken: null,
    domain: null,
  };
}

export function listedJson(table: SandboxTable, sandbox: SandboxRecord): Record<string, unknown> {
  return {
    sandboxID: sandbox.sandboxID,
    templateID: sandbox.templateID,
    clientID: "standin",
    cpuCount: 1,
    memoryMB: 1024,
    diskSizeMB: 10_240,
    envdVersion: ENVD_VERSION,
    metadata: sandbox.metadata,
    startedAt: sandbox.startedAt.toISOString(),
    endAt: sandbox.endAt.toISOString(),
    state: table.state(sandbox),
  };
}

export function detailJson(table: SandboxTable, sandbox: SandboxRecord): Record<string, unknown> {
  return { ...listedJson(table, sandbox), envdAccessToken: sandbox.envdAccessToken, domain: null };
}
