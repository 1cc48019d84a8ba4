/**
 * Which scripted turn answers a request. A turn is reserved while its response
 * is being delivered (so two concurrent requests never get the same single-use
 * turn), used up when delivery completes, and handed back when it does not,
 * keeping its place in the script.
 */
import { mismatch, sessionKeyOf } from "./match.ts";
import type { Fault, Script, Turn } from "./script.ts";
import type { RequestView } from "./view.ts";

export interface TurnLease {
  turn: Turn;
  index: number;
  sessionKey: string | null;
  /** The response went out whole: the turn is used once. */
  commit(): void;
  /** Delivery failed: the turn is available again. */
  release(): void;
}

export type Selection = { ok: true; lease: TurnLease } | { ok: false; message: string };

class Cursor {
  readonly remaining: number[];
  readonly inFlight: number[];
  constructor(readonly turns: Turn[]) {
    this.remaining = turns.map((t) => t.times ?? 1);
    this.inFlight = turns.map(() => 0);
  }
  available(i: number): number {
    return this.remaining[i]! - this.inFlight[i]!;
  }
}

export interface UnusedTurn {
  session_key: string | null;
  index: number;
  label: string | null;
  remaining: number;
}

function describe(index: number, turn: Turn): string {
  return `turn ${index}${turn.label ? ` (${turn.label})` : ""}`;
}

export class ScriptState {
  readonly #cursors = new Map<string, Cursor>();

  constructor(readonly script: Script) {}

  #cursorFor(key: string): Cursor {
    let c = this.#cursors.get(key);
    if (!c) {
      c = new Cursor(this.script.turns);
      this.#cursors.set(key, c);
    }
    return c;
  }

  select(req: RequestView): Selection {
    const key = this.script.session_key ? sessionKeyOf(this.script.session_key, req) : null;
    const cursor = this.#cursorFor(key ?? "");
    const where = key === null ? "" : ` for session ${JSON.stringify(key)}`;
    let firstMismatch: string | null = null;
    let open = 0;
    let busy = 0;
    for (let i = 0; i < cursor.turns.length; i++) {
      if (cursor.remaining[i]! <= 0) continue;
      if (cursor.available(i) <= 0) {
        busy++;
        continue;
      }
      open++;
      const turn = cursor.turns[i]!;
      const why = mismatch(turn.match, req);
      if (why !== null) {
        firstMismatch ??= `${describe(i, turn)}: ${why}`;
        continue;
      }
      return { ok: true, lease: this.#lease(cursor, i, key) };
    }
    if (open === 0) {
      const inFlight = busy ? ` (${busy} still being delivered to other requests)` : "";
      return { ok: false, message: `scripted model: script exhausted${where}: all ${cursor.turns.length} turns are used up${inFlight}` };
    }
    return { ok: false, message: `scripted model: no remaining turn matches this request${where}; first candidate ${firstMismatch}` };
  }

  #lease(cursor: Cursor, index: number, sessionKey: string | null): TurnLease {
    cursor.inFlight[index]!++;
    let settled = false;
    const settle = (used: boolean) => {
      if (settled) return;
      settled = true;
      cursor.inFlight[index]!--;
      if (used) cursor.remaining[index]!--;
    };
    return {
      turn: cursor.turns[index]!,
      index,
      sessionKey,
      commit: () => settle(true),
      release: () => settle(false),
    };
  }

  /** Turns not yet used up, per conversation, for "the script ran to the end" assertions. */
  unused(): UnusedTurn[] {
    const out: UnusedTurn[] = [];
    const keyed = this.script.session_key !== undefined;
    for (const [key, cursor] of this.#cursors) {
      cursor.turns.forEach((turn, index) => {
        const remaining = cursor.remaining[index]!;
        if (remaining > 0) out.push({ session_key: keyed ? key : null, index, label: turn.label ?? null, remaining });
      });
    }
    if (!keyed && this.#cursors.size === 0) {
      this.script.turns.forEach((turn, index) => {
        out.push({ session_key: null, index, label: turn.label ?? null, remaining: turn.times ?? 1 });
      });
    }
    return out;
  }
}

/** One-shot faults waiting for the request they apply to. */
export class FaultQueue {
  #faults: Fault[] = [];

  push(fault: Fault): void {
    this.#faults.push(fault);
  }

  /** Take the oldest fault whose guard accepts the request. */
  take(req: RequestView): Fault | null {
    const i = this.#faults.findIndex((f) => mismatch(f.match, req) === null);
    if (i < 0) return null;
    return this.#faults.splice(i, 1)[0]!;
  }

  get size(): number {
    return this.#faults.length;
  }
}
