import type { LocalBoxes } from "./boxes.ts";
import type { FaultQueue } from "./faults.ts";
import type { Hangs, RecordedRequest } from "./http.ts";
import type { CloudStandIn } from "./index.ts";

/** What a vendor's stand-in knows that the common handle cannot: how it holds sandboxes and how it shuts down. */
export interface StandInParts<Held> {
  vendor: string;
  url: string;
  env: Readonly<Record<string, string>>;
  faults: FaultQueue;
  requests: RecordedRequest[];
  boxes: LocalBoxes;
  /** Sandboxes the platform holds, in any state. */
  live(): number;
  /** The held sandbox a driver's runtime id names, or undefined when the platform no longer has it. */
  find(runtimeId: string): Held | undefined;
  /** Whether a held sandbox is running (otherwise it reads as suspended). */
  running(held: Held): boolean;
  /** Requests held open by a `hang` fault: released at close so servers can stop. */
  hangs: Hangs;
  /** The servers to stop at close, after the vendor's own `stop`. */
  servers: readonly { close(): Promise<void> }[];
  /** The vendor's own teardown (timers), run first at close. */
  stop?(): void;
  /** What may only go once no box uses it (host directories bound into them). */
  afterBoxes?(): Promise<void>;
}

/**
 * The `CloudStandIn` every vendor returns, built from its parts so that the
 * state a test checks (live count, running/suspended/gone) and the
 * idempotent close read the same way for every vendor. `extra` carries the
 * vendor's own fields (its table, secondary URLs).
 */
export function standInHandle<Held, Extra extends object = Record<never, never>>(
  parts: StandInParts<Held>,
  extra: Extra = {} as Extra,
): CloudStandIn & Extra {
  let closing: Promise<void> | null = null;
  const handle: CloudStandIn = {
    vendor: parts.vendor,
    url: parts.url,
    env: parts.env,
    faults: parts.faults,
    inject: (fault, times) => parts.faults.add(fault, times),
    requests: parts.requests,
    boxes: parts.boxes,
    live: () => parts.live(),
    state(runtimeId) {
      const held = parts.find(runtimeId);
      if (held === undefined) return "gone";
      return parts.running(held) ? "running" : "suspended";
    },
    close() {
      closing ??= (async () => {
        parts.stop?.();
        parts.hangs.releaseAll();
        for (const server of parts.servers) await server.close();
        await parts.boxes.close();
        await parts.afterBoxes?.();
      })();
      return closing;
    },
  };
  return Object.assign(handle, extra);
}
