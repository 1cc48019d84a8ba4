/** Shared pieces of the runtime-host end-to-end tests: run results as a queue, the published manifest, leftovers. */
import type { RuntimeResourceScope } from "@openma/contract";
import { hostProcesses } from "@openma/driver-bubblewrap";
import { connectDocker, LABELS } from "@openma/driver-node-docker";
import { type RuntimeRunResult, sqlRuntimePorts } from "@openma/host";
import { type OutputEntry, outputManifestKey, parseOutputManifest } from "@openma/persistence";
import { type Storage, systemClock } from "@openma/storage";

/** Run results in arrival order; `next()` waits for the next one (no polling). */
export class ResultQueue {
  readonly #items: RuntimeRunResult[] = [];
  readonly #waiters: Array<(r: RuntimeRunResult) => void> = [];
  readonly all: RuntimeRunResult[] = [];

  push = (result: RuntimeRunResult): void => {
    this.all.push(result);
    const waiter = this.#waiters.shift();
    if (waiter) waiter(result);
    else this.#items.push(result);
  };

  next(): Promise<RuntimeRunResult> {
    const ready = this.#items.shift();
    if (ready) return Promise.resolve(ready);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/** The entries of the output manifest the scope's active publication points at. */
export async function activeOutputs(storage: Storage, scope: RuntimeResourceScope): Promise<OutputEntry[]> {
  const { fences } = sqlRuntimePorts(storage.db, systemClock);
  const active = await fences.active({ scope, signal: AbortSignal.timeout(10_000) });
  if (!active?.outputs) throw new Error("no output manifest is published for this session");
  const bytes = await storage.blobs.get(outputManifestKey(active.outputs.id));
  if (!bytes) throw new Error(`the published manifest ${active.outputs.id} is missing from the blob store`);
  const parsed = parseOutputManifest(bytes);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.manifest.entries;
}

/** Runtime ids the host acquired, from the runs' traces. */
export function acquiredRuntimes(results: readonly RuntimeRunResult[]): string[] {
  return results.flatMap((r) => r.trace.filter((s) => s.step === "acquire_compute" && s.status === "ok").map((s) => s.detail ?? ""));
}

/** Containers (any state) labelled with the session. */
export async function dockerLeftovers(sessionId: string): Promise<string[]> {
  const containers = await connectDocker().listContainers({ all: true, filters: { label: [`${LABELS.session}=${sessionId}`] } });
  return containers.map((c) => `${c.Names[0]} ${c.State}`);
}

/** Host processes of the given bwrap runtimes (their argv names the runtime's private directories). */
export async function bwrapLeftovers(runtimeIds: readonly string[]): Promise<string[]> {
  if (runtimeIds.length === 0) throw new Error("no runtime ids to look for");
  return (await hostProcesses()).filter((p) => runtimeIds.some((id) => p.argv.includes(id))).map((p) => `${p.pid} ${p.argv.slice(0, 120)}`);
}
