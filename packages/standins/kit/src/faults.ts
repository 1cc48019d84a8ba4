/**
 * Fault injection for the cloud stand-ins. A test queues a fault for an
 * operation class and the next matching requests suffer it, so failure
 * handling is tested deterministically, without timing. Each vendor
 * stand-in maps its routes to these classes and renders the fault in its
 * own wire format (its error body, its stream framing).
 */

/** What a request does, across vendors. */
export type FaultOp = "create" | "get" | "list" | "exec" | "files" | "kill" | "lifecycle";

export const FAULT_OPS: readonly FaultOp[] = ["create", "get", "list", "exec", "files", "kill", "lifecycle"];

export type FaultKind =
  /** The vendor's error body with this status (default 500). */
  | { kind: "status"; status?: number }
  /** 429 with `Retry-After` (seconds) and the vendor's rate-limit body. */
  | { kind: "rate_limited"; retryAfterSeconds?: number }
  /** Never answer; the request ends when the client gives up or the stand-in closes. */
  | { kind: "hang" }
  /** For streams (exec output): deliver what the process writes until `afterBytes`, then drop the connection. */
  | { kind: "cut"; afterBytes?: number }
  /** The addressed sandbox really goes away (destroyed) just before the request is handled. */
  | { kind: "vanish" };

export type Fault = FaultKind & { op: FaultOp };

export function isFault(value: unknown): value is Fault {
  const fault = value as Partial<Fault> | null;
  if (typeof fault !== "object" || fault === null) return false;
  if (!FAULT_OPS.includes(fault.op as FaultOp)) return false;
  return ["status", "rate_limited", "hang", "cut", "vanish"].includes(String(fault.kind));
}

export class FaultQueue {
  readonly #queue: { fault: Fault; triggered: () => void }[] = [];
  /** Every fault that fired, oldest first (for a test's own account of what happened). */
  readonly fired: Fault[] = [];

  /** Queues `fault` for the next `times` requests of its operation; resolves when the first of them is hit. */
  add(fault: Fault, times = 1): Promise<void> {
    if (!Number.isInteger(times) || times < 1) throw new Error("times must be a positive integer");
    return new Promise((resolve) => {
      for (let i = 0; i < times; i++) this.#queue.push({ fault, triggered: resolve });
    });
  }

  take(op: FaultOp): Fault | undefined {
    const i = this.#queue.findIndex((entry) => entry.fault.op === op);
    if (i < 0) return undefined;
    const [entry] = this.#queue.splice(i, 1);
    if (entry === undefined) return undefined;
    this.fired.push(entry.fault);
    entry.triggered();
    return entry.fault;
  }

  get pending(): number {
    return this.#queue.length;
  }

  clear(): void {
    this.#queue.length = 0;
  }
}
