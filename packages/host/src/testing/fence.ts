/**
 * Fault injection around the real SQL fence: `FaultyFence` fails whole port
 * calls (including "the publish committed but its answer was lost"), and
 * `StatementFaults` is a Kysely plugin that fails the Nth SQL statement of a
 * publish, before or after it executes, so every await inside the publish
 * transaction can be hit.
 */
import type {
  ActivePublication,
  FenceAcquireResult,
  FencePublishResult,
  FenceReleaseResult,
  FenceRenewResult,
  PublicationRecord,
  RuntimeResourceFencePort,
} from "@openma/contract";
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from "kysely";
import type { Faults } from "./faults.ts";

type Input<K extends keyof RuntimeResourceFencePort> = Parameters<RuntimeResourceFencePort[K]>[0];

export class FaultyFence implements RuntimeResourceFencePort {
  readonly #inner: RuntimeResourceFencePort;
  readonly #faults: Faults;

  constructor(inner: RuntimeResourceFencePort, faults: Faults) {
    this.#inner = inner;
    this.#faults = faults;
  }

  acquire(input: Input<"acquire">): Promise<FenceAcquireResult> {
    return this.#faults.run("fence.acquire", () => this.#inner.acquire(input));
  }

  renew(input: Input<"renew">): Promise<FenceRenewResult> {
    return this.#faults.run("fence.renew", () => this.#inner.renew(input));
  }

  isCurrent(input: Input<"isCurrent">): Promise<boolean> {
    return this.#faults.run("fence.isCurrent", () => this.#inner.isCurrent(input));
  }

  /** `fence.publish` fails before the statement; `fence.publish.ack` after it committed (the answer is lost). */
  publish(input: Input<"publish">): Promise<FencePublishResult> {
    return this.#faults.run("fence.publish", async () => {
      const result = await this.#inner.publish(input);
      return this.#faults.run("fence.publish.ack", () => result);
    });
  }

  release(input: Input<"release">): Promise<FenceReleaseResult> {
    return this.#faults.run("fence.release", () => this.#inner.release(input));
  }

  active(input: Input<"active">): Promise<ActivePublication | null> {
    return this.#faults.run("fence.active", () => this.#inner.active(input));
  }

  history(input: Input<"history">): Promise<PublicationRecord[]> {
    return this.#faults.run("fence.history", () => this.#inner.history(input));
  }
}

export interface StatementFault {
  at: "before" | "after";
  /** 1-based statement number inside a window. */
  statement: number;
  /** The windows (1-based, one per `during` call) it fires in; default the first. */
  windows?: number[];
}

/**
 * Counts SQL statements only inside `during(...)` windows (one per publish
 * call) and fails the armed one. `before`: the statement never reaches the
 * database. `after`: it executed inside the transaction, and the failure
 * rolls it back.
 */
export class StatementFaults implements KyselyPlugin {
  /** Statement kinds seen inside windows (`UpdateQueryNode`, ...), one list per window. */
  readonly windows: string[][] = [];
  #fault: StatementFault | null = null;
  #current: string[] | null = null;
  readonly #numbered = new Map<object, { window: number; statement: number }>();

  arm(fault: StatementFault): void {
    this.#fault = fault;
  }

  async during<T>(work: () => Promise<T>): Promise<T> {
    this.#current = [];
    this.windows.push(this.#current);
    try {
      return await work();
    } finally {
      this.#current = null;
    }
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (this.#current === null) return args.node;
    this.#current.push(args.node.kind);
    const position = { window: this.windows.length, statement: this.#current.length };
    this.#numbered.set(args.queryId, position);
    if (this.#fires("before", position)) throw new Error(`injected fault before statement ${position.statement}`);
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    const position = this.#numbered.get(args.queryId);
    this.#numbered.delete(args.queryId);
    if (position && this.#fires("after", position)) throw new Error(`injected fault after statement ${position.statement}`);
    return args.result;
  }

  #fires(at: "before" | "after", position: { window: number; statement: number }): boolean {
    const fault = this.#fault;
    return fault?.at === at && fault.statement === position.statement && (fault.windows ?? [1]).includes(position.window);
  }
}
