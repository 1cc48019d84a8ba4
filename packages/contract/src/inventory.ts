/**
 * SandboxInventoryPort: the runtimes a driver finds at its provider by the
 * ownership labels (or metadata, or tags) it wrote on them at acquire. It is
 * how a reaper in any process, after any crash, tells a live owner's sandbox
 * from a dead one's: it lists, judges each runtime's owner record in the
 * database, and reaps (`OrphanReaper.reap`) only the ones whose owner is dead.
 *
 * A driver writes, at acquire, from the FenceIdentity it is given: the scope
 * (environment and session), the owner id and the generation, plus a marker
 * that the runtime is one it manages. `listOwned` returns exactly the
 * runtimes carrying that marker (and the driver's configured extra labels),
 * never a runtime it did not create. Listing never needs a fence token.
 */
import type { ManagedSandboxLease, SandboxInspectResult } from "./sandbox.ts";
import type { RuntimeResourceScope } from "./scope.ts";

export interface OwnedRuntime {
  /** Enough to reap or inspect it: the same lease acquire returned (or an equivalent one). */
  lease: ManagedSandboxLease;
  /** Read back from the runtime's labels, as written at acquire. */
  scope: RuntimeResourceScope;
  ownerId: string;
  generation: number;
  state: SandboxInspectResult["state"];
  /** When the provider says the runtime was created (ISO 8601), or null when it does not say. */
  createdAt: string | null;
}

export type SandboxListResult = { type: "listed"; runtimes: OwnedRuntime[] } | { type: "failed"; error: string; retryable: boolean };

export interface SandboxInventoryPort {
  listOwned(input: { signal: AbortSignal }): Promise<SandboxListResult>;
}

/** Whether a sandbox port can also list what it owns at its provider. */
export function hasSandboxInventory<T extends object>(port: T): port is T & SandboxInventoryPort {
  return typeof (port as Partial<SandboxInventoryPort>).listOwned === "function";
}
