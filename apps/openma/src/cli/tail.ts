/** `openma sessions tail <id>`: the session's log so far, then its events live (NDJSON with --json), across dropped streams. */
import type Anthropic from "@anthropic-ai/sdk";
import { followSession, type SessionEvent } from "./follow.ts";
import { renderEvent } from "./render.ts";
import type { Output } from "./resources.ts";

/** Events that change whose move it is: the newest of them says whether the session is waiting for its user. */
const TURN_EVENTS = new Set([
  "user.message",
  "user.tool_confirmation",
  "user.custom_tool_result",
  "session.status_running",
  "session.status_idle",
]);

/** True when `idle` is the session's newest turn event (an older idle in the log is not the end of anything). */
export async function isLatestIdle(client: Anthropic, sessionId: string, idle: SessionEvent): Promise<boolean> {
  for await (const e of client.beta.sessions.events.list(sessionId, { order: "desc", limit: 50 })) {
    if (TURN_EVENTS.has(e.type)) return e.id === idle.id;
  }
  return false;
}

export function printEvent(out: Output, e: SessionEvent): void {
  if (out.json) {
    out.io.stdout.write(`${JSON.stringify(e)}\n`);
    return;
  }
  const line = renderEvent(e, out.paint);
  if (line !== null) out.io.stdout.write(`${line}\n`);
}

export async function tailCommand(client: Anthropic, out: Output, sessionId: string, untilIdle: boolean): Promise<void> {
  const events = followSession(client, sessionId, {
    onReconnect: (attempt) => out.io.stderr.write(out.paint("dim", `stream dropped, reconnecting (${attempt})…\n`)),
  });
  for await (const e of events) {
    printEvent(out, e);
    if (untilIdle && e.type === "session.status_idle" && (await isLatestIdle(client, sessionId, e))) return;
  }
}
