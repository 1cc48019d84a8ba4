/**
 * What a Vercel Sandbox stand-in holds: persistent named sandboxes, each
 * with its sessions (one running at a time) and the commands of each
 * session, over one real local box per sandbox. A stop ends the session:
 * its commands are killed and the box is stopped, so memory and processes
 * are gone while the filesystem stays (the platform's snapshot); a resume
 * starts a new session over the same filesystem (the snapshot restored).
 * Commands keep their output as the platform's log lines so the NDJSON
 * log stream can replay it to a late reader.
 */
import { randomBytes } from "node:crypto";
import type { OutputStream } from "@openma/contract";
import { type Box, KeyedLocks, type LocalBoxes } from "@openma/standin-kit";

export type SessionStatus = "pending" | "running" | "stopping" | "stopped" | "failed" | "aborted" | "snapshotting";

export interface LogLine {
  stream: OutputStream;
  data: string;
}

export type LogListener = (line: LogLine | null) => void;

export interface CommandRecord {
  id: string;
  name: string;
  args: string[];
  cwd: string;
  sessionId: string;
  exitCode: number | null;
  startedAt: number;
  durationMs?: number;
  readonly logs: LogLine[];
  readonly listeners: Set<LogListener>;
  /** Settles once the command has ended and `exitCode` is final. */
  readonly ended: Promise<void>;
  kill(): Promise<void>;
  /** A cut fault for this command's log stream: drop the connection after this many bytes. */
  cutAfterBytes?: number;
}

export interface SessionRecord {
  id: string;
  sandbox: string;
  status: SessionStatus;
  timeout: number;
  requestedAt: number;
  startedAt: number;
  stoppedAt?: number;
  sourceSnapshotId?: string;
  readonly commands: Map<string, CommandRecord>;
}

export interface SnapshotRecord {
  id: string;
  sourceSessionId: string;
  createdAt: number;
}

export interface SandboxRecord {
  name: string;
  projectId: string;
  tags: Record<string, string>;
  timeout: number;
  image?: string;
  createdAt: number;
  updatedAt: number;
  box: Box;
  session: SessionRecord;
  sessions: SessionRecord[];
  snapshot?: SnapshotRecord;
}

const newId = (prefix: string) => `${prefix}_${randomBytes(12).toString("base64url")}`;

export class SandboxTable {
  readonly #sandboxes = new Map<string, SandboxRecord>();
  readonly #sessions = new Map<string, SessionRecord>();
  readonly #locks = new KeyedLocks();

  constructor(private readonly boxes: LocalBoxes) {}

  get(name: string): SandboxRecord | undefined {
    return this.#sandboxes.get(name);
  }

  session(id: string): { sandbox: SandboxRecord | undefined; session: SessionRecord } | undefined {
    const session = this.#sessions.get(id);
    return session ? { sandbox: this.#sandboxes.get(session.sandbox), session } : undefined;
  }

  all(): SandboxRecord[] {
    return [...this.#sandboxes.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  #newSession(name: string, timeout: number, sourceSnapshotId?: string): SessionRecord {
    const now = Date.now();
    const session: SessionRecord = {
      id: newId("sbx"),
      sandbox: name,
      status: "running",
      timeout,
      requestedAt: now,
      startedAt: now,
      ...(sourceSnapshotId ? { sourceSnapshotId } : {}),
      commands: new Map(),
    };
    this.#sessions.set(session.id, session);
    return session;
  }

  async create(input: {
    name: string;
    projectId: string;
    tags: Record<string, string>;
    timeout: number;
    image?: string;
  }): Promise<SandboxRecord> {
    const box = await this.boxes.create("vc-");
    const session = this.#newSession(input.name, input.timeout);
    const now = Date.now();
    const record: SandboxRecord = { ...input, createdAt: now, updatedAt: now, box, session, sessions: [session] };
    this.#sandboxes.set(input.name, record);
    return record;
  }

  /** Ends the running session: commands killed, the box stopped, the filesystem kept as the sandbox's snapshot. */
  stop(record: SandboxRecord): Promise<void> {
    return this.#locks.run(record.name, async () => {
      const session = record.session;
      if (session.status === "stopped") return;
      session.status = "stopping";
      await Promise.all([...session.commands.values()].map((c) => (c.exitCode === null ? c.kill().catch(() => {}) : undefined)));
      await this.boxes.stop(record.box);
      const now = Date.now();
      session.status = "stopped";
      session.stoppedAt = now;
      record.snapshot = { id: newId("snap"), sourceSessionId: session.id, createdAt: now };
      record.updatedAt = now;
    });
  }

  /** A new session over the kept filesystem; false when one was running already. */
  resume(record: SandboxRecord): Promise<boolean> {
    return this.#locks.run(record.name, async () => {
      if (record.session.status === "running") return false;
      await this.boxes.start(record.box);
      record.session = this.#newSession(record.name, record.timeout, record.snapshot?.id);
      record.sessions.push(record.session);
      record.updatedAt = Date.now();
      return true;
    });
  }

  async destroy(record: SandboxRecord): Promise<void> {
    this.#sandboxes.delete(record.name);
    for (const session of record.sessions) {
      session.status = "stopped";
      session.stoppedAt ??= Date.now();
    }
    await Promise.all([...record.session.commands.values()].map((c) => (c.exitCode === null ? c.kill().catch(() => {}) : undefined)));
    await this.boxes.destroy(record.box);
  }

  /** Starts `cmd args...` in the session's box (no stdin: the platform has none for commands). */
  async run(
    record: SandboxRecord,
    input: { cmd: string; args: string[]; cwd: string; env: Record<string, string> },
  ): Promise<CommandRecord> {
    const session = record.session;
    const logs: LogLine[] = [];
    const listeners = new Set<LogListener>();
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const emit = (line: LogLine | null) => {
      if (line) logs.push(line);
      for (const listener of listeners) listener(line);
    };
    const stop = new AbortController();
    const proc = await record.box.tools.spawn({
      command: [input.cmd, ...input.args],
      cwd: input.cwd,
      env: input.env,
      signal: stop.signal,
      onOutput: (stream, chunk) => {
        const data = decoders[stream].decode(chunk, { stream: true });
        if (data) emit({ stream, data });
      },
    });
    proc.closeStdin();
    let killed = false;
    const command: CommandRecord = {
      id: newId("cmd"),
      name: input.cmd,
      args: input.args,
      cwd: input.cwd,
      sessionId: session.id,
      exitCode: null,
      startedAt: Date.now(),
      logs,
      listeners,
      ended: proc.done.then((result) => {
        command.exitCode = killed ? 137 : result.type === "exited" ? result.exitCode : result.type === "error" ? 127 : 137;
        if (result.type === "error") emit({ stream: "stderr", data: `${result.message}\n` });
        command.durationMs = Date.now() - command.startedAt;
        emit(null);
      }),
      kill: async () => {
        killed = true;
        await proc.kill();
      },
    };
    session.commands.set(command.id, command);
    return command;
  }
}

export function sessionJson(session: SessionRecord, record: SandboxRecord | undefined): Record<string, unknown> {
  return {
    id: session.id,
    memory: 2048,
    vcpus: 1,
    region: "iad1",
    timeout: session.timeout,
    status: session.status,
    requestedAt: session.requestedAt,
    startedAt: session.startedAt,
    ...(session.stoppedAt ? { stoppedAt: session.stoppedAt, duration: session.stoppedAt - session.startedAt } : {}),
    ...(session.sourceSnapshotId ? { sourceSnapshotId: session.sourceSnapshotId } : {}),
    createdAt: session.requestedAt,
    cwd: "/vercel/sandbox",
    updatedAt: session.stoppedAt ?? session.startedAt,
    ...(record?.image ? { runtime: record.image } : {}),
  };
}

export function sandboxJson(record: SandboxRecord): Record<string, unknown> {
  return {
    name: record.name,
    persistent: true,
    region: "iad1",
    vcpus: 1,
    memory: 2048,
    timeout: record.timeout,
    ...(record.image ? { image: record.image } : {}),
    createdAt: record.createdAt,
    updatedAt: record.updatedAt,
    currentSessionId: record.session.id,
    ...(record.snapshot ? { currentSnapshotId: record.snapshot.id } : {}),
    status: record.session.status,
    statusUpdatedAt: record.updatedAt,
    cwd: "/vercel/sandbox",
    tags: record.tags,
  };
}

export function commandJson(command: CommandRecord): Record<string, unknown> {
  return {
    id: command.id,
    name: command.name,
    args: command.args,
    cwd: command.cwd,
    sessionId: command.sessionId,
    exitCode: command.exitCode,
    startedAt: command.startedAt,
    ...(command.durationMs !== undefined ? { durationMs: command.durationMs } : {}),
  };
}

export function snapshotJson(record: SandboxRecord): Record<string, unknown> | undefined {
  const snapshot = record.snapshot;
  if (!snapshot) return undefined;
  return {
    id: snapshot.id,
    sourceSessionId: snapshot.sourceSessionId,
    region: "iad1",
    status: "created",
    sizeBytes: 0,
    createdAt: snapshot.createdAt,
    updatedAt: snapshot.createdAt,
  };
}
