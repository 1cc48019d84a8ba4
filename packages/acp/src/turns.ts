/**
 * Which input the session's next turn runs, read from its canonical log:
 * the one rule for both placements (the server's `acp-sessions.ts` and the
 * runtime host's in-sandbox harness).
 *
 * A finished turn took the `user.message`s before its
 * `session.status_running`; a message sent while it ran lands after that
 * event (before or after the turn's `session.status_idle`) and is still
 * pending, so it gets a turn of its own. A crashed turn (its running, no
 * idle) took nothing: its input is pending again for the next placement.
 * A placement that keeps the log in memory passes the index of the last
 * input it served, so a turn it ran is not run again before its idle has
 * come back on the stream.
 */
import type { CanonicalEvent } from "./recovery-prompt.ts";

export interface PendingTurn {
  /** The canonical input event that names the turn (its last message). */
  turnId: string;
  inputs: CanonicalEvent[];
  /** The turn's prompt: the inputs' text, in order. */
  prompt: string;
  /** Log index of the first and last input. */
  fromIndex: number;
  lastIndex: number;
  /** The log without this turn's inputs: what a placement starting with this turn resumes from or recovers. */
  history: CanonicalEvent[];
}

export function pendingTurn<E extends CanonicalEvent>(events: readonly E[], servedIndex = -1): PendingTurn | null {
  const from = servedIndex >= 0 ? servedIndex + 1 : firstUntaken(events);
  const taken = new Set<number>();
  for (let i = from; i < events.length; i++) if (events[i]?.type === "user.message") taken.add(i);
  if (taken.size === 0) return null;
  const indices = [...taken];
  const inputs = indices.map((i) => events[i] as E);
  return {
    turnId: (inputs.at(-1) as E).id,
    inputs,
    prompt: inputs.map(inputText).join("\n\n"),
    fromIndex: indices[0] as number,
    lastIndex: indices.at(-1) as number,
    history: events.filter((_, i) => !taken.has(i)),
  };
}

/** The index after the `session.status_running` that opened the last finished turn (0 when no turn finished). */
function firstUntaken(events: readonly CanonicalEvent[]): number {
  let lastIdle = -1;
  events.forEach((e, i) => {
    if (e.type === "session.status_idle") lastIdle = i;
  });
  if (lastIdle < 0) return 0;
  for (let i = lastIdle - 1; i >= 0; i--) if (events[i]?.type === "session.status_running") return i + 1;
  return lastIdle + 1;
}

/** A `user.message`'s text blocks, joined. */
export function inputText(e: CanonicalEvent): string {
  return ((e.content as { type: string; text?: string }[] | undefined) ?? [])
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("\n");
}
