/**
 * Watches the session while the loop waits on something slow (a model
 * stream, a tool, a retry back-off) and aborts it when the user interrupts,
 * the session is terminated or deleted, or the caller's own signal fires.
 * Wake-ups come from the change bus; each one costs one indexed query. A lost
 * wake-up only delays the interrupt until the wait ends by itself: the
 * planner and the guarded appends still honour the interrupt afterwards.
 */
import { sessionTopic } from "@openma/api";
import type { Storage } from "@openma/storage";

export type WatchReason = "outer" | "interrupt" | "terminated";

export class TurnWatch {
  private readonly controller = new AbortController();
  private readonly unsubscribe: () => void;
  private readonly onOuter: () => void;
  private checking = false;
  private again = false;
  reason: WatchReason | null = null;

  constructor(
    private readonly storage: Storage,
    private readonly sessionId: string,
    /** Only events after this log position count. */
    private readonly afterSeq: number,
    private readonly outer: AbortSignal,
  ) {
    this.onOuter = () => this.stop("outer");
    if (outer.aborted) this.stop("outer");
    else outer.addEventListener("abort", this.onOuter, { once: true });
    this.unsubscribe = storage.bus.subscribe(sessionTopic(sessionId), () => void this.check());
    // An interrupt may have landed between the caller's read and the subscription.
    void this.check();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  close(): void {
    this.unsubscribe();
    this.outer.removeEventListener("abort", this.onOuter);
  }

  private stop(reason: WatchReason): void {
    if (this.reason) return;
    this.reason = reason;
    this.controller.abort(new Error(`turn stopped: ${reason}`));
  }

  private async check(): Promise<void> {
    if (this.reason) return;
    if (this.checking) {
      this.again = true;
      return;
    }
    this.checking = true;
    try {
      do {
        this.again = false;
        const found = await this.lookup();
        if (found) this.stop(found);
      } while (this.again && !this.reason);
    } catch {
      // A failed check is a lost wake-up (see above), not a failed turn.
    } finally {
      this.checking = false;
    }
  }

  private async lookup(): Promise<WatchReason | null> {
    const { db } = this.storage;
    const session = await db.selectFrom("sessions").select(["status", "archived_at"]).where("id", "=", this.sessionId).executeTakeFirst();
    if (!session || session.archived_at || session.status === "terminated") return "terminated";
    const interrupt = await db
      .selectFrom("session_events")
      .select("seq")
      .where("session_id", "=", this.sessionId)
      .where("seq", ">", this.afterSeq)
      .where("type", "=", "user.interrupt")
      .limit(1)
      .executeTakeFirst();
    return interrupt ? "interrupt" : null;
  }
}
