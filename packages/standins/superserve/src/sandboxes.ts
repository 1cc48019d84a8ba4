/**
 * The stand-in's books: one record per Superserve sandbox, each backed by a
 * real local container (`LocalBoxes`). Pause is the engine's freeze (`docker
 * pause`): memory and running processes survive it, as the platform's
 * pause keeps them. Each sandbox has one valid data-plane access token at a
 * time, a signed JWT; create, `/resume` and `/activate` issue a new one and
 * the old one is refused from then on (the SDK then re-activates and
 * retries with the fresh token).
 */
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { Box, LocalBoxes } from "@openma/standin-kit";

export type SandboxStatus = "active" | "paused" | "resuming" | "failed";

export interface SandboxRecord {
  id: string;
  name: string;
  status: SandboxStatus;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  timeoutSeconds: number | null;
  createdAt: Date;
  box: Box;
  /** The one access token the data plane accepts now. */
  token: string;
  /** Commands running on the data plane (exec, stream, connect). */
  running: number;
}

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

export class SandboxTable {
  readonly #records = new Map<string, SandboxRecord>();
  readonly #secret = randomBytes(32);

  constructor(readonly boxes: LocalBoxes) {}

  async create(input: {
    name: string;
    metadata: Record<string, string>;
    envVars: Record<string, string>;
    timeoutSeconds: number | null;
  }): Promise<SandboxRecord> {
    const box = await this.boxes.create("superserve-");
    const id = randomUUID();
    const record: SandboxRecord = { id, ...input, status: "active", createdAt: new Date(), box, token: "", running: 0 };
    this.rotate(record);
    this.#records.set(id, record);
    return record;
  }

  get(id: string): SandboxRecord | undefined {
    return this.#records.get(id);
  }

  all(): SandboxRecord[] {
    return [...this.#records.values()];
  }

  get size(): number {
    return this.#records.size;
  }

  /** A fresh HS256 JWT naming the sandbox; the previous one stops working. */
  rotate(record: SandboxRecord): string {
    const header = base64url({ alg: "HS256", typ: "JWT" });
    const payload = base64url({ sub: record.id, jti: randomBytes(8).toString("hex"), iat: Math.floor(Date.now() / 1000) });
    const signature = createHmac("sha256", this.#secret).update(`${header}.${payload}`).digest("base64url");
    record.token = `${header}.${payload}.${signature}`;
    return record.token;
  }

  /** Whether `token` is the sandbox's current access token. */
  accepts(record: SandboxRecord, token: string | null | undefined): boolean {
    if (!token) return false;
    const given = Buffer.from(token);
    const current = Buffer.from(record.token);
    return given.length === current.length && timingSafeEqual(given, current);
  }

  async pause(record: SandboxRecord): Promise<void> {
    await this.boxes.pause(record.box);
    record.status = "paused";
  }

  async resume(record: SandboxRecord): Promise<void> {
    record.status = "resuming";
    try {
      await this.boxes.unpause(record.box);
      record.status = "active";
    } catch (err) {
      record.status = "failed";
      throw err;
    }
  }

  async destroy(record: SandboxRecord): Promise<void> {
    this.#records.delete(record.id);
    await this.boxes.destroy(record.box);
  }
}

/** A sandbox as the control plane answers it (`toSandboxInfo` in the SDK reads these fields). */
export function sandboxJson(record: SandboxRecord): Record<string, unknown> {
  return {
    id: record.id,
    name: record.name,
    status: record.status,
    vcpu_count: 1,
    memory_mib: 1024,
    created_at: record.createdAt.toISOString(),
    timeout_seconds: record.timeoutSeconds,
    metadata: record.metadata,
    secrets: [],
  };
}
