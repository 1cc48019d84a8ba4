/**
 * @openma/standin-kit: what every cloud sandbox stand-in shares. A stand-in
 * speaks one vendor's wire protocol exactly as its official SDK uses it;
 * behind it every vendor sandbox is a real local container (`LocalBoxes`),
 * faults are injected on demand (`FaultQueue`), and each request is
 * recorded as it looked on the wire.
 */
import type { LocalBoxes } from "./boxes.ts";
import type { Fault, FaultQueue } from "./faults.ts";
import type { RecordedRequest } from "./http.ts";

export * from "./boxes.ts";
export * from "./faults.ts";
export * from "./handle.ts";
export * from "./http.ts";
export * from "./locks.ts";

/** A running stand-in, whatever the vendor. */
export interface CloudStandIn {
  readonly vendor: string;
  readonly url: string;
  /** The vendor's usual variables that point its driver (and official SDK) at this stand-in. */
  readonly env: Readonly<Record<string, string>>;
  readonly faults: FaultQueue;
  /** Queues `fault` for the next `times` requests of its operation; resolves when the first one is hit. */
  inject(fault: Fault, times?: number): Promise<void>;
  readonly requests: RecordedRequest[];
  readonly boxes: LocalBoxes;
  /** Sandboxes the stand-in holds (any state). */
  live(): number;
  /**
   * A runtime as the platform holds it, by the id its driver's lease names
   * (checked at the stand-in, never through the driver): its box running,
   * suspended (paused or stopped), or gone.
   */
  state(runtimeId: string): "running" | "suspended" | "gone";
  close(): Promise<void>;
}

export interface StandInOptions {
  /** Default 0: a free port. */
  port?: number;
  host?: string;
  /** The credential the stand-in accepts (also the admin token); a fixed test value when absent. */
  apiKey?: string;
  /** The image every sandbox starts from (default: the base sandbox image). */
  image?: string;
  /** Docker network mode of the sandboxes (default `host`). */
  networkMode?: string;
}
