/**
 * Fault injection shared by every fake: a port method names its fault point
 * (`sandbox.acquire`, `fence.publish`, ...), records the call, and consumes
 * the next armed fault for that point, if any. Faults are consumed in order,
 * one per call, so "fail twice, then work" is `arm(p, f, f)`.
 */

export type Fault =
  /** The call throws (a port crashing or a network error). */
  | { type: "throw"; message?: string }
  /** The call returns this value instead of doing its work (an expected non-success result). */
  | { type: "return"; value: unknown }
  /** The call waits for `until`, then proceeds normally (hold a step in flight). */
  | { type: "wait"; until: Promise<unknown> };

export class Faults {
  /** Every fault point hit, in order: the port-level call trace. */
  readonly calls: string[] = [];
  readonly #armed = new Map<string, Fault[]>();

  arm(point: string, ...faults: Fault[]): this {
    this.#armed.set(point, [...(this.#armed.get(point) ?? []), ...faults]);
    return this;
  }

  /** How often `point` was hit so far. */
  count(point: string): number {
    return this.calls.filter((c) => c === point).length;
  }

  /** Arms `fault` for every call of `point` from now on. */
  always(point: string, fault: Fault): this {
    return this.arm(point, ...Array.from({ length: 1000 }, () => fault));
  }

  /** Records the call and applies the next fault; runs `work` unless the fault replaced the result. */
  async run<T>(point: string, work: () => T | Promise<T>): Promise<T> {
    this.calls.push(point);
    const fault = this.#armed.get(point)?.shift();
    if (fault?.type === "throw") throw new Error(fault.message ?? `injected fault at ${point}`);
    if (fault?.type === "return") return fault.value as T;
    if (fault?.type === "wait") await fault.until;
    return work();
  }
}

/** A promise a test resolves by hand. */
export interface Gate {
  promise: Promise<void>;
  open(): void;
}

export function gate(): Gate {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}
