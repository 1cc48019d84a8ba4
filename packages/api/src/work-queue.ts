/**
 * Work items of self-hosted environments, as seen by the rest of the API.
 * (Placeholder signatures; the Work API change implements them.)
 */
import type { Database } from "@openma/storage";
import type { Transaction } from "kysely";
import type { ApiDeps } from "./context.ts";

export function workTopic(environmentId: string): string {
  return `work:${environmentId}`;
}

/** Ensures one live (non-stopped) work item exists for the session, inside the caller's transaction. */
export async function ensureSessionWork(
  _trx: Transaction<Database>,
  _deps: ApiDeps,
  _environmentId: string,
  _sessionId: string,
): Promise<{ workId: string; created: boolean }> {
  throw new Error("not implemented");
}

/** Moves the session's live work item to `stopping` (graceful) or `stopped` (force). */
export async function stopSessionWork(
  _trx: Transaction<Database>,
  _deps: ApiDeps,
  _sessionId: string,
  _opts: { force: boolean },
): Promise<void> {
  throw new Error("not implemented");
}
