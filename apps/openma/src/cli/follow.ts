/**
 * A session's events, live, across dropped connections: open the SSE stream,
 * then read the log for whatever it holds that was not yet seen (what was
 * logged before the stream opened, or while it was down), then the stream.
 * Every event is yielded once, by id, in log order within each catch-up.
 */
import type Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSessionEvent } from "@anthropic-ai/sdk/resources/beta/sessions/events";

export type SessionEvent = BetaManagedAgentsSessionEvent;

export interface FollowOptions {
  /** Ids not to yield (the events a caller has already shown); the rest of the log comes first. */
  skip?: Iterable<string>;
  /** Told about each reconnect (for a status line). */
  onReconnect?: (attempt: number, err: unknown) => void;
  /** Consecutive failed connections before giving up. */
  maxAttempts?: number;
  /** Wait between reconnects. */
  retryMs?: number;
  signal?: AbortSignal;
}

/** Events after which the session has nothing more to say. */
export const isFinal = (e: { type: string }) => e.type === "session.status_terminated" || e.type === "session.deleted";

export async function* followSession(client: Anthropic, sessionId: string, opts: FollowOptions = {}): AsyncGenerator<SessionEvent> {
  const seen = new Set<string>(opts.skip ?? []);
  const maxAttempts = opts.maxAttempts ?? 60;
  let failures = 0;
  for (;;) {
    try {
      // Stream first, log second: an event logged in between is in both, and the ids keep it single.
      const stream = await client.beta.sessions.events.stream(sessionId, {}, opts.signal ? { signal: opts.signal } : {});
      for await (const e of client.beta.sessions.events.list(sessionId, { limit: 1000 })) {
        if (seen.has(e.id)) continue;
        seen.add(e.id);
        yield e;
        if (isFinal(e)) return;
      }
      failures = 0;
      for await (const e of stream) {
        const id = (e as { id?: string }).id;
        if (id !== undefined) {
          if (seen.has(id)) continue;
          seen.add(id);
        }
        yield e as SessionEvent;
        if (isFinal(e)) return;
      }
    } catch (err) {
      if (opts.signal?.aborted) return;
      if (isClientError(err)) throw err;
      failures += 1;
      if (failures >= maxAttempts) throw err;
      opts.onReconnect?.(failures, err);
    }
    await new Promise((resolve) => setTimeout(resolve, opts.retryMs ?? 1000));
  }
}

/** A 4xx (bad key, unknown session) will not get better by retrying. */
function isClientError(err: unknown): boolean {
  const status = (err as { status?: unknown }).status;
  return typeof status === "number" && status >= 400 && status < 500 && status !== 408 && status !== 429;
}
