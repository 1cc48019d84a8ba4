/**
 * The test-only sandbox driver: one directory per session under a root,
 * served by `SubprocessToolSandbox`. It refuses to construct unless
 * `NODE_ENV=test`, so a production server can never fall back to running
 * agent tools unisolated on its own host.
 */
import { mkdirSync, mkdtempSync, realpathSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SandboxRequest, SandboxResolution, SandboxResolver } from "@openma/contract";
import { SubprocessToolSandbox } from "./sandbox.ts";

export const SUBPROCESS_DRIVER_REFUSAL =
  "the subprocess sandbox driver runs agent tools as plain host processes with no isolation and is for tests only: " +
  "it refuses to load unless NODE_ENV=test";

export interface SubprocessDriverOptions {
  /** Parent of the per-session directories (default: a fresh temp directory). */
  rootDir?: string;
  /** Extra variables for every process (the host environment is never inherited). */
  env?: Readonly<Record<string, string>>;
}

export class SubprocessSandboxDriver implements SandboxResolver {
  readonly rootDir: string;
  private readonly ports = new Map<string, SubprocessToolSandbox>();
  private readonly env: Readonly<Record<string, string>>;

  constructor(opts: SubprocessDriverOptions = {}) {
    if (process.env.NODE_ENV !== "test") throw new Error(SUBPROCESS_DRIVER_REFUSAL);
    const root = opts.rootDir ?? mkdtempSync(join(tmpdir(), "openma-subprocess-"));
    mkdirSync(root, { recursive: true, mode: 0o700 });
    // Canonical, so paths the tools see never differ from what realpath reports (macOS /tmp is a symlink).
    this.rootDir = realpathSync(root);
    this.env = opts.env ?? {};
  }

  /** The session's directory is derived from its id, so a restarted driver on the same root finds the same files. */
  async resolve(request: SandboxRequest): Promise<SandboxResolution> {
    return { type: "ready", port: this.portFor(request.sessionId) };
  }

  portFor(sessionId: string): SubprocessToolSandbox {
    const known = this.ports.get(sessionId);
    if (known) return known;
    const created = join(this.rootDir, sessionId.replace(/[^A-Za-z0-9_-]/g, "_"));
    mkdirSync(created, { recursive: true, mode: 0o700 });
    const dir = realpathSync(created);
    const port = new SubprocessToolSandbox(dir, {
      PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
      HOME: dir,
      TERM: "dumb",
      LANG: "C.UTF-8",
      ...this.env,
    });
    this.ports.set(sessionId, port);
    return port;
  }

  /**
   * Replaces the session's sandbox: its processes are killed and the next
   * resolve hands out a new port over the same directory (what a real driver
   * does after an idle termination or a crash).
   */
  replace(sessionId: string): void {
    this.ports.get(sessionId)?.close();
    this.ports.delete(sessionId);
  }

  /** Kills every long-lived process and removes every session directory. */
  async close(): Promise<void> {
    for (const port of this.ports.values()) port.close();
    this.ports.clear();
    await rm(this.rootDir, { recursive: true, force: true });
  }
}
