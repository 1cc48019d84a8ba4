/**
 * The runtime host on a cloud sandbox driver (E2B, Daytona, Sprites, ...):
 * the driver comes opened from the composition (`openma` picks it from
 * configuration), labelled with this host's identity; the worker bundle is
 * written into each runtime before the worker starts; `/workspace` and the
 * outputs are pushed in and pulled out through the runtime's tool port
 * (`@openma/remote-bindings`); the worker reaches the control plane at its
 * public URL, since a remote runtime has no socket of ours to use.
 *
 * A remote runtime outlives a killed host, as a container does: at start
 * the host lists what its provider holds under this host's label and reaps
 * it (for a provider with no listing, what this host's lease records name,
 * lease-records.ts); compute whose kill fails while running is an orphan
 * record for the reaper.
 */
import type {
  ManagedRuntimeProfile,
  ManagedSandboxLease,
  ManagedSandboxPort,
  SandboxInventoryPort,
  SandboxProcessPort,
  ToolSandboxPort,
} from "@openma/contract";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import type { BlobStore } from "@openma/storage/blobs";
import type { Scheduler } from "@openma/time";
import { type LeaseRecordStore, recordLeases } from "./lease-records.ts";
import { buildWorkerBundle, installWorkerBundle, preparedProcesses, REMOTE_LAUNCHER } from "./worker-bundle.ts";

/** What the runtime host needs of a cloud driver (the kit's RemoteSandboxDriver is one). */
export interface RemoteSandboxDriver extends ManagedSandboxPort, SandboxInventoryPort {
  toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort;
  processes(): SandboxProcessPort;
  close(): Promise<void>;
}

export interface RemoteRuntimeHostDriver {
  type: "remote";
  /** The conformance table's driver name (e2b, daytona, sprites, ...). */
  name: string;
  /** Opens the driver with extra labels on every runtime it creates (this host's identity). */
  open(labels: Readonly<Record<string, string>>): Promise<RemoteSandboxDriver>;
  /** The control plane as a remote runtime reaches it (OPENMA_PUBLIC_URL). */
  workerApiUrl: string;
}

export interface RemoteParts {
  sandbox: RemoteSandboxDriver;
  processes: SandboxProcessPort;
  sweepLeftovers(): Promise<number>;
  ports(options: { root: string; store: BlobStore; scheduler: Scheduler }): {
    workspace: RemoteCheckpointWorkspace;
    outputs: RemoteSessionOutputs;
  };
  close(): Promise<void>;
}

export async function openRemoteParts(
  driver: RemoteRuntimeHostDriver,
  hostLabels: Readonly<Record<string, string>>,
  records: { store: LeaseRecordStore; deployment: string },
): Promise<RemoteParts> {
  const bundle = await buildWorkerBundle();
  const opened = await driver.open(hostLabels);
  // A provider that cannot list what it holds: this host's own lease records are the inventory (ADR 0028).
  const recorded = opened.capabilities.facts.lacks.includes("provider_listing") ? recordLeases(opened, records) : null;
  const sandbox = recorded?.sandbox ?? opened;
  const tools = (lease: ManagedSandboxLease) => sandbox.toolSandbox(lease);
  return {
    sandbox,
    processes: preparedProcesses(sandbox.processes(), (lease) =>
      installWorkerBundle(tools(lease), bundle, AbortSignal.timeout(5 * 60_000)),
    ),
    async sweepLeftovers() {
      const listed = await sandbox.listOwned({ signal: AbortSignal.timeout(60_000) });
      if (listed.type === "failed") throw new Error(`listing ${driver.name} runtimes failed: ${listed.error}`);
      // Listed under this host's label: every one is a leftover of a previous process of this host.
      for (const runtime of listed.runtimes) {
        await sandbox.reap({ scope: runtime.scope, lease: runtime.lease, reason: "host_recovery", signal: AbortSignal.timeout(60_000) });
      }
      return listed.runtimes.length + ((await recorded?.sweep()) ?? 0);
    },
    ports: ({ root, store, scheduler }) => ({
      workspace: new RemoteCheckpointWorkspace({ root: `${root}/workspaces`, store, tools }),
      outputs: new RemoteSessionOutputs({ root: `${root}/outputs`, store, scheduler, tools }),
    }),
    close: () => sandbox.close(),
  };
}

/** The ama_worker profile with the launcher where a remote runtime has it. */
export function remoteProfile(profile: ManagedRuntimeProfile): ManagedRuntimeProfile {
  if (profile.driver.type !== "ama_worker") return profile;
  return { ...profile, driver: { ...profile.driver, process: { ...profile.driver.process, args: [REMOTE_LAUNCHER] } } };
}
