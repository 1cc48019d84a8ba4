/**
 * The sandboxes a Blaxel stand-in holds: name, labels, status and a real
 * local box each, plus the box's sandbox-api processes. Archive is the
 * platform's: the filesystem is kept and the sandbox is shut down, so
 * memory and running processes are lost (the box is stopped); unarchive
 * starts it again over the same filesystem (the box is started).
 */
import { type Box, KeyedLocks, type LocalBoxes } from "@openma/standin-kit";
import { ProcessTable } from "./processes.ts";

export type SandboxStatus = "DEPLOYED" | "ARCHIVED";

export interface SandboxRecord {
  name: string;
  labels: Record<string, string>;
  spec: Record<string, unknown>;
  status: SandboxStatus;
  box: Box;
  processes: ProcessTable;
  createdAt: Date;
  updatedAt: Date;
}

export class SandboxTable {
  readonly #sandboxes = new Map<string, SandboxRecord>();
  /** Serializes lifecycle changes per sandbox (an archive racing an unarchive). */
  readonly #locks = new KeyedLocks();

  constructor(private readonly boxes: LocalBoxes) {}

  get(name: string): SandboxRecord | undefined {
    return this.#sandboxes.get(name);
  }

  all(): SandboxRecord[] {
    return [...this.#sandboxes.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  async create(name: string, labels: Record<string, string>, spec: Record<string, unknown>): Promise<SandboxRecord> {
    const box = await this.boxes.create("bl-");
    const now = new Date();
    const record: SandboxRecord = {
      name,
      labels,
      spec,
      status: "DEPLOYED",
      box,
      processes: new ProcessTable(),
      createdAt: now,
      updatedAt: now,
    };
    this.#sandboxes.set(name, record);
    return record;
  }

  #locked<T>(record: SandboxRecord, work: () => Promise<T>): Promise<T> {
    return this.#locks.run(record.name, work);
  }

  archive(record: SandboxRecord): Promise<void> {
    return this.#locked(record, async () => {
      if (record.status === "ARCHIVED") return;
      await record.processes.killAll();
      await this.boxes.stop(record.box);
      record.processes.clear();
      record.status = "ARCHIVED";
      record.updatedAt = new Date();
    });
  }

  unarchive(record: SandboxRecord): Promise<void> {
    return this.#locked(record, async () => {
      if (record.status === "DEPLOYED") return;
      await this.boxes.start(record.box);
      record.status = "DEPLOYED";
      record.updatedAt = new Date();
    });
  }

  async destroy(record: SandboxRecord): Promise<void> {
    this.#sandboxes.delete(record.name);
    await record.processes.killAll();
    await this.boxes.destroy(record.box);
  }
}

export function sandboxJson(record: SandboxRecord, options: { runUrl: string; workspace: string }): Record<string, unknown> {
  return {
    metadata: {
      name: record.name,
      labels: record.labels,
      url: `${options.runUrl}/${options.workspace}/sandboxes/${record.name}`,
      workspace: options.workspace,
      createdAt: record.createdAt.toISOString(),
      updatedAt: record.updatedAt.toISOString(),
      createdBy: "standin",
      updatedBy: "standin",
    },
    spec: record.spec,
    status: record.status,
    state: "RUNNING",
    lastUsedAt: record.updatedAt.toISOString(),
  };
}
