/** Shared pieces of the runtime-host end-to-end tests: run results as a queue, the published manifest, leftovers. */
import { readlink } from "node:fs/promises";
import type { RuntimeResourceScope } from "@openma/contract";
import { connectDocker, LABELS } from "@openma/driver-node-docker";
import { hostProcesses } from "@openma/driver-suite/host-processes";

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
export async function activeOutputs(storage: Pick<Storage, "db" | "blobs">, scope: RuntimeResourceScope): Promise<OutputEntry[]> {
  const { fences } = sqlRuntimePorts(storage.db, systemClock);
  const active = await fences.active({ scope, signal: AbortSignal.timeout(10_000) });
  if (!active?.outputs) throw new Error("no output manifest is published for this session");
  const bytes = await storage.blobs.get(outputManifestKey(active.outputs.id));
  if (!bytes) throw new Error(`the published manifest ${active.outputs.id} is missing from the blob store`);
  const parsed = parseOutputManifest(bytes);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.manifest.entries;
}

/** Runtime ids the host acquired (or took from its warm pool: `warm <id>`), from the runs' traces. */
export function acquiredRuntimes(results: readonly RuntimeRunResult[]): string[] {
  return results.flatMap((r) =>
    r.trace.filter((s) => s.step === "acquire_compute" && s.status === "ok").map((s) => (s.detail ?? "").replace(/^warm /, "")),
  );
}

/** Containers (any state) labelled with a runtime host's id: its runs' and its warm pool's. */
export async function dockerHostLeftovers(hostId: string): Promise<string[]> {
  const containers = await connectDocker().listContainers({ all: true, filters: { label: [`openma.runtime-host=${hostId}`] } });
  return containers.map((c) => `${c.Names[0]} ${c.State}`);
}

/** Containers (any state) labelled with the session. */
export async function dockerLeftovers(sessionId: string): Promise<string[]> {
  const containers = await connectDocker().listContainers({ all: true, filters: { label: [`${LABELS.session}=${sessionId}`] } });
  return containers.map((c) => `${c.Names[0]} ${c.State}`);
}

/** Short ids (= hostnames inside) of the session's containers. */
export async function dockerContainerIds(sessionId: string): Promise<string[]> {
  const containers = await connectDocker().listContainers({ all: true, filters: { label: [`${LABELS.session}=${sessionId}`] } });
  return containers.map((c) => c.Id.slice(0, 12));
}

/**
 * Host processes of bwrap sandboxes whose argv names one of `markers`: a runtime id (its private
 * directories) or a data dir (the workspace bindings under it).
 */
export async function bwrapLeftovers(markers: readonly string[]): Promise<string[]> {
  if (markers.length === 0) throw new Error("nothing to look for");
  return (await hostProcesses()).filter((p) => markers.some((m) => p.argv.includes(m))).map((p) => `${p.pid} ${p.argv.slice(0, 120)}`);
}

/** Host processes in a pid namespace other than ours: every bwrap and container process, nothing of the server's. */
export async function sandboxedProcesses(): Promise<Awaited<ReturnType<typeof hostProcesses>>> {
  const own = await readlink("/proc/self/ns/pid");
  const out: Awaited<ReturnType<typeof hostProcesses>> = [];
  for (const p of await hostProcesses()) {
    const ns = await readlink(`/proc/${p.pid}/ns/pid`).catch(() => own);
    if (ns !== own) out.push(p);
  }
  return out;
}
