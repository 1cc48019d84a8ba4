/**
 * Helpers for end-to-end tests that run the unmodified official
 * `EnvironmentWorker` from `@anthropic-ai/sdk` against our server.
 *
 * The worker is built from an SDK client whose `fetch` is wrapped only to
 * observe the wire (a test awaits "the worker force-stopped its item" as a
 * promise instead of polling or sleeping); nothing the worker sends or
 * receives is changed.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";

type Fetch = typeof fetch;

export interface WireRecord {
  method: string;
  path: string;
  status: number;
  /** The request body as sent (JSON text or empty). */
  body: string;
}

/** Records every request the worker makes and lets a test await one. */
export class WireLog {
  readonly records: WireRecord[] = [];
  /**
   * Runs before a request is forwarded (the request itself is never changed):
   * lets a test act as a concurrent writer at an exact point of the worker's flow.
   */
  before: ((req: Omit<WireRecord, "status">) => Promise<void>) | null = null;
  private waiters: Array<{ test: (r: WireRecord) => boolean; resolve: (r: WireRecord) => void }> = [];

  /** Resolves with the first record (past or future) that passes `test`. */
  next(test: (r: WireRecord) => boolean): Promise<WireRecord> {
    const found = this.records.find(test);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.push({ test, resolve }));
  }

  add(record: WireRecord): void {
    this.records.push(record);
    this.waiters = this.waiters.filter((w) => {
      if (!w.test(record)) return true;
      w.resolve(record);
      return false;
    });
  }

  /** A `fetch` that forwards unchanged and records method, path, status and request body. */
  wrap(inner: Fetch = fetch): Fetch {
    return async (input, init) => {
      const request = new Request(input as RequestInfo, init);
      const body = init?.body;
      const text = typeof body === "string" ? body : "";
      const path = new URL(request.url).pathname;
      await this.before?.({ method: request.method, path, body: text });
      const response = await inner(input, init);
      this.add({ method: request.method, path, status: response.status, body: text });
      return response;
    };
  }
}

export interface WorkerHarness {
  wire: WireLog;
  workdir: string;
  /** Resolves when `run()` returned; rejects if it threw. */
  done: Promise<void>;
  /** Aborts `run()` and waits for it to return. */
  stop(): Promise<void>;
}

export interface WorkerStart {
  baseURL: string;
  apiKey: string;
  environmentId: string;
  environmentKey: string;
  /** Forwarded to the worker (e.g. a short `maxIdleMs` so it lets go soon after the final idle). */
  maxIdleMs?: number;
  memorySyncIntervalMs?: number | null;
  workdir?: string;
}

/** Starts `client.beta.environments.work.worker({...}).run(signal)` in a fresh temp workdir. */
export function startOfficialWorker(opts: WorkerStart): WorkerHarness {
  const wire = new WireLog();
  const workdir = opts.workdir ?? mkdtempSync(join(tmpdir(), "openma-worker-"));
  const client = new Anthropic({ baseURL: opts.baseURL, apiKey: opts.apiKey, fetch: wire.wrap() });
  const abort = new AbortController();
  const worker = client.beta.environments.work.worker({
    environmentId: opts.environmentId,
    environmentKey: opts.environmentKey,
    workdir,
    ...(opts.maxIdleMs !== undefined ? { maxIdleMs: opts.maxIdleMs } : {}),
    ...(opts.memorySyncIntervalMs !== undefined ? { memorySyncIntervalMs: opts.memorySyncIntervalMs } : {}),
  });
  const done = worker.run(abort.signal);
  return {
    wire,
    workdir,
    done,
    async stop() {
      abort.abort();
      await done;
      if (!opts.workdir) rmSync(workdir, { recursive: true, force: true });
    },
  };
}

/** The work item's force-stop the worker sends at the end of an item, with its response status. */
export const isForceStop = (r: WireRecord) => r.method === "POST" && /\/work\/[^/]+\/stop$/.test(r.path) && r.body.includes('"force":true');

/** Creates a self-hosted environment through the SDK; `environment_key` is an OpenMA response field the SDK's type does not name. */
export async function createSelfHostedEnvironment(client: Anthropic, name: string): Promise<{ id: string; key: string }> {
  const env = (await client.beta.environments.create({ name, config: { type: "self_hosted" } } as never)) as unknown as {
    id: string;
    environment_key: string;
  };
  return { id: env.id, key: env.environment_key };
}

export type LoggedEvent = { id: string; type: string; [k: string]: unknown };

/** Every event of a session, in order, through the SDK's auto-paginating list. */
export async function allEvents(client: Anthropic, sessionId: string): Promise<LoggedEvent[]> {
  const out: LoggedEvent[] = [];
  for await (const e of client.beta.sessions.events.list(sessionId, { limit: 1000 } as never)) out.push(e as unknown as LoggedEvent);
  return out;
}

/** Opens the SSE stream, sends `events`, and collects until `done` holds. */
export async function sendAndWait(
  client: Anthropic,
  sessionId: string,
  events: unknown[],
  done: (e: LoggedEvent) => boolean,
): Promise<LoggedEvent[]> {
  const stream = await client.beta.sessions.events.stream(sessionId);
  await client.beta.sessions.events.send(sessionId, { events: events as never });
  const seen: LoggedEvent[] = [];
  for await (const event of stream) {
    const e = event as unknown as LoggedEvent;
    seen.push(e);
    if (done(e)) break;
  }
  stream.controller.abort();
  return seen;
}

export const endTurnIdle = (e: LoggedEvent) =>
  e.type === "session.status_idle" && (e.stop_reason as { type?: string } | undefined)?.type === "end_turn";

/** Text of a tool result's content blocks, joined. */
export function resultText(e: LoggedEvent): string {
  const content = e.content as Array<{ type: string; text?: string }> | undefined;
  return (content ?? []).map((b) => b.text ?? "").join("");
}
