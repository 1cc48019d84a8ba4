/**
 * Which turn the session's log asks for. A placement's first turn: the
 * `user.message`s after the last `session.status_idle` (a crashed turn's
 * input included, so a replacement placement runs it again). Later turns:
 * the messages after the last one this placement served (a message sent
 * while a turn ran lands before that turn's idle and is still served).
 */
export interface SessionLogEvent {
  id: string;
  type: string;
  [field: string]: unknown;
}

export interface PendingTurn {
  /** The canonical input event that names the turn (its last message). */
  turnId: string;
  inputs: SessionLogEvent[];
  /** Log index of the first and last input. */
  fromIndex: number;
  lastIndex: number;
}

export function pendingTurn(events: readonly SessionLogEvent[], servedIndex: number): PendingTurn | null {
  let from = servedIndex + 1;
  if (servedIndex < 0)
    events.forEach((e, i) => {
      if (e.type === "session.status_idle") from = i + 1;
    });
  const inputs: SessionLogEvent[] = [];
  let fromIndex = -1;
  let lastIndex = -1;
  for (let i = from; i < events.length; i++) {
    const e = events[i] as SessionLogEvent;
    if (e.type !== "user.message") continue;
    if (fromIndex < 0) fromIndex = i;
    lastIndex = i;
    inputs.push(e);
  }
  const last = inputs.at(-1);
  return last ? { turnId: last.id, inputs, fromIndex, lastIndex } : null;
}

export const textOf = (e: SessionLogEvent): string =>
  ((e.content as { type: string; text?: string }[] | undefined) ?? [])
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("\n");
