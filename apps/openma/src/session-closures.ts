/**
 * Releases the serve sandboxes of sessions that another process archived or
 * deleted. The API publishes `SESSIONS_CLOSED_TOPIC` (no payload) after
 * every archive or delete; on each wake-up (and after a bus reconnect) this
 * process looks up only the sessions it holds a sandbox for and releases
 * those that are archived or gone. Checks never overlap: wake-ups during a
 * check coalesce into one more check.
 */
import { type Logger, SESSIONS_CLOSED_TOPIC } from "@openma/api";
import type { Storage } from "@openma/storage";
import type { ServeSandboxes } from "./sandbox.ts";

export interface SessionClosures {
  /** Resolves when the check in flight (if any) is done; used by tests and shutdown. */
  settled(): Promise<void>;
  stop(): void;
}

export function followSessionClosures(options: {
  storage: Pick<Storage, "db" | "bus">;
  sandboxes: Pick<ServeSandboxes, "active" | "release">;
  logger: Logger;
}): SessionClosures {
  const { storage, sandboxes, logger } = options;
  let running: Promise<void> | null = null;
  let again = false;

  const check = async (): Promise<void> => {
    const held = sandboxes.active();
    if (held.length === 0) return;
    const open = await storage.db.selectFrom("sessions").select("id").where("id", "in", held).where("archived_at", "is", null).execute();
    const stillOpen = new Set(open.map((row) => row.id));
    await Promise.all(held.filter((id) => !stillOpen.has(id)).map((id) => sandboxes.release(id)));
  };

  const wake = () => {
    if (running) {
      again = true;
      return;
    }
    running = (async () => {
      do {
        again = false;
        await check().catch((err: unknown) =>
          logger.warn({ err: err instanceof Error ? err.message : String(err) }, "checking for closed sessions failed"),
        );
      } while (again);
    })().finally(() => {
      running = null;
    });
  };

  const unsubscribe = storage.bus.subscribe(SESSIONS_CLOSED_TOPIC, wake);
  return {
    settled: async () => {
      while (running) await running;
    },
    stop: unsubscribe,
  };
}
