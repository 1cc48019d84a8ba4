/**
 * What the Modal stand-in's control plane knows: apps and the environment
 * by name, images (every image is the local base sandbox image: the stand-in
 * builds nothing, it records the Dockerfile commands), Volumes (a host
 * directory each, a mount's `subPath` a directory under it), and V2
 * sandboxes, each a real local box whose `/workspace` is the mounted
 * volume directory. A sandbox ends at its timeout (status TIMEOUT), when
 * terminated (TERMINATED) or when its box vanishes; ended sandboxes are
 * remembered (without a box) so a wait or a name lookup that includes
 * terminated ones still answers.
 */
import { randomBytes } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";
import type { Box, LocalBoxes } from "@openma/standin-kit";
import type { Scheduler } from "@openma/time";
import type { ExecRecord } from "./execs.ts";

/** `GenericResult.status` values the SDK reads. */
export const GENERIC_STATUS = { success: 1, failure: 2, terminated: 3, timeout: 4 } as const;

export interface GenericResult {
  status: number;
  exitcode?: number;
  exception?: string;
}

export interface VolumeRecord {
  volumeId: string;
  name: string;
  environment: string;
  version: number;
  dir: string;
}

export interface SandboxRecord {
  sandboxId: string;
  taskId: string;
  appId: string;
  name: string;
  tags: Map<string, string>;
  /** Seconds since the epoch, as `SandboxInfo.createdAt`. */
  createdAt: number;
  /** The host directory at `/workspace`, or null. */
  volume: { volumeId: string; subPath: string } | null;
  box: Box | null;
  result: GenericResult | null;
  routerJwt: string;
  execs: Map<string, ExecRecord>;
  lifetime: AbortController;
  /** Set by the first `end`. */
  ending?: Promise<void>;
}

const id = (prefix: string) => `${prefix}-${randomBytes(11).toString("hex")}`;

/** A volume subpath from a client: relative, normalized, never leaving the volume. */
export function safeSubPath(subPath: string | undefined): string | null {
  if (subPath === undefined || subPath === "" || subPath === "/") return "";
  if (subPath.includes("\0")) return null;
  const trimmed = subPath.replace(/^\/+/, "");
  const normal = normalize(trimmed);
  if (isAbsolute(normal) || normal === ".." || normal.startsWith(`..${sep}`)) return null;
  return normal === "." ? "" : normal.replace(/\/+$/, "");
}

export class ModalTable {
  readonly apps = new Map<string, string>();
  readonly images = new Map<string, string[]>();
  readonly volumes = new Map<string, VolumeRecord>();
  readonly #sandboxes = new Map<string, SandboxRecord>();
  readonly #byTask = new Map<string, SandboxRecord>();

  constructor(
    private readonly boxes: LocalBoxes,
    private readonly scheduler: Scheduler,
    private readonly root: string,
  ) {}

  appId(name: string, environment: string, create: boolean): string | null {
    const key = `${environment}/${name}`;
    let found = this.apps.get(key);
    if (found === undefined && create) {
      found = id("ap");
      this.apps.set(key, found);
    }
    return found ?? null;
  }

  hasApp(appId: string): boolean {
    return [...this.apps.values()].includes(appId);
  }

  volumeByName(name: string, environment: string): VolumeRecord | undefined {
    return [...this.volumes.values()].find((v) => v.name === name && v.environment === environment);
  }

  async createVolume(name: string, environment: string, version: number): Promise<VolumeRecord> {
    const volumeId = id("vo");
    const volume: VolumeRecord = { volumeId, name, environment, version, dir: join(this.root, "volumes", volumeId) };
    await mkdir(volume.dir, { recursive: true });
    this.volumes.set(volumeId, volume);
    return volume;
  }

  async deleteVolume(volume: VolumeRecord): Promise<void> {
    this.volumes.delete(volume.volumeId);
    await rm(volume.dir, { recursive: true, force: true });
  }

  get(sandboxId: string): SandboxRecord | undefined {
    return this.#sandboxes.get(sandboxId);
  }

  byTask(taskId: string): SandboxRecord | undefined {
    return this.#byTask.get(taskId);
  }

  /** Sandboxes that have not ended. */
  running(): SandboxRecord[] {
    return [...this.#sandboxes.values()].filter((s) => s.result === null).sort((a, b) => a.createdAt - b.createdAt);
  }

  /** The running sandbox of `name` in `appId`, else (with `includeTerminated`) the newest ended one. */
  byName(appId: string, name: string, includeTerminated: boolean): SandboxRecord | undefined {
    const named = [...this.#sandboxes.values()].filter((s) => s.appId === appId && s.name === name);
    const live = named.find((s) => s.result === null);
    if (live || !includeTerminated) return live;
    return named.sort((a, b) => b.createdAt - a.createdAt)[0];
  }

  async create(input: {
    appId: string;
    name: string;
    tags: Map<string, string>;
    timeoutSecs: number;
    volume: { volume: VolumeRecord; subPath: string } | null;
  }): Promise<SandboxRecord> {
    let hostPath: string | undefined;
    if (input.volume !== null) {
      hostPath = input.volume.subPath === "" ? input.volume.volume.dir : join(input.volume.volume.dir, input.volume.subPath);
      await mkdir(hostPath, { recursive: true });
    }
    const box = await this.boxes.create("sb-", hostPath === undefined ? {} : { workspaceHostPath: hostPath });
    const sandbox: SandboxRecord = {
      sandboxId: box.id,
      taskId: id("ta"),
      appId: input.appId,
      name: input.name,
      tags: input.tags,
      createdAt: this.scheduler.now() / 1000,
      volume: input.volume === null ? null : { volumeId: input.volume.volume.volumeId, subPath: input.volume.subPath },
      box,
      result: null,
      routerJwt: jwt({ sub: box.id, exp: Math.floor(this.scheduler.now() / 1000) + 3600 }),
      execs: new Map(),
      lifetime: new AbortController(),
    };
    this.#sandboxes.set(sandbox.sandboxId, sandbox);
    this.#byTask.set(sandbox.taskId, sandbox);
    const lifetime = sandbox.lifetime;
    void this.scheduler
      .sleep(input.timeoutSecs * 1000, lifetime.signal)
      .then(
        () => this.end(sandbox, { status: GENERIC_STATUS.timeout, exception: "Sandbox timed out" }),
        () => {}, // ended first
      )
      .catch(() => {});
    return sandbox;
  }

  /**
   * Ends a sandbox: its processes and box go, then its result is set (so a wait answers once the container
   * is really gone); its record stays. Idempotent: a second end awaits the first.
   */
  end(sandbox: SandboxRecord, result: GenericResult): Promise<void> {
    sandbox.ending ??= (async () => {
      sandbox.lifetime.abort();
      for (const exec of sandbox.execs.values()) {
        exec.kill.abort();
        exec.finish({ signal: 9 });
      }
      const box = sandbox.box;
      sandbox.box = null;
      try {
        if (box !== null) await this.boxes.destroy(box);
      } finally {
        sandbox.result = result;
      }
    })();
    return sandbox.ending;
  }

  close(): void {
    for (const sandbox of this.#sandboxes.values()) sandbox.lifetime.abort();
  }
}

/** A JWT-shaped token (the SDK reads `exp` to schedule its refresh); the signature is a random nonce. */
export function jwt(payload: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${part({ alg: "HS256", typ: "JWT" })}.${part({ ...payload, jti: randomBytes(8).toString("hex") })}.${randomBytes(32).toString("base64url")}`;
}
