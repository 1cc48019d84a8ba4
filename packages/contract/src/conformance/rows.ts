/**
 * What the rows of the conformance table share: the upstream descriptor of
 * a driver not built here (`planned`), an unbuilt row, and the offers and
 * notes common to the local and the cloud drivers.
 */
import type { ManagedRuntimeCapabilities } from "../capabilities.ts";
import type { DriverConformance, SandboxClass } from "../conformance.ts";

/** The descriptor of something that does nothing yet: no lane, no strategy, no fact. */
export function claimsNothing(provider: string): ManagedRuntimeCapabilities {
  return {
    provider,
    lanes: [],
    sandbox: { suspendResume: "unsupported", hardTerminate: "best_effort", orphanReap: "unsupported" },
    workspace: [],
    outputs: [],
    runtimeCheckpoints: [],
    credentialEgress: { enforcement: "unsupported" },
    sandboxPortFacts: { has: [], lacks: [] },
  };
}

export const BOTH_LANES = ["ama_worker", "openma_supervised"] as const;
export const HOST_MANAGED = { hardTerminate: "supported", orphanReap: "host_managed" } as const;

/** The upstream descriptor of a driver not built here (shape of the seed's table). */
export function planned(
  provider: string,
  spec: Omit<ManagedRuntimeCapabilities, "provider" | "sandbox" | "runtimeCheckpoints"> & { suspend: boolean },
): ManagedRuntimeCapabilities {
  const { suspend, ...rest } = spec;
  return {
    provider,
    ...rest,
    sandbox: { suspendResume: suspend ? "supported" : "unsupported", ...HOST_MANAGED },
    runtimeCheckpoints: [],
  };
}

export function unbuilt(
  driver: string,
  sandboxClass: SandboxClass,
  summary: string,
  plan: ManagedRuntimeCapabilities | null,
  notes: readonly string[] = [],
): DriverConformance {
  return {
    driver,
    class: sandboxClass,
    implemented: false,
    package: null,
    summary,
    capabilities: claimsNothing(driver),
    planned: plan,
    toolSandbox: false,
    testOnly: false,
    notes,
  };
}

export const UNSUPPORTED_EGRESS = { enforcement: "unsupported" } as const;
/**
 * What the host's filesystem adapters (packages/host/src/adapters) offer a
 * local driver that bind-mounts their directories: chunked checkpoints in the
 * blob store (durable), a durable_mount tree (durable only when the operator
 * declares its root durable, so best_effort here), and ephemeral.
 */
export const HOST_FS_WORKSPACE = [
  { strategy: "checkpoint_restore", durability: "durable" },
  { strategy: "durable_mount", durability: "best_effort" },
  { strategy: "ephemeral", durability: "none" },
] as const;
export const HOST_FS_OUTPUTS = [
  { strategy: "final_collect", durability: "durable" },
  { strategy: "watch_and_upload", durability: "durable" },
  { strategy: "durable_mount", durability: "best_effort" },
] as const;
export const HOST_FS_NOTE =
  "Workspace and output offers are those of the host-filesystem adapters whose directories the driver binds at /workspace and /mnt/session/outputs; `durable_mount` counts as durable only when the operator declares its root durable.";

/**
 * What a cloud driver composed with `@openma/remote-bindings` offers: the
 * host's chunked checkpoints and output manifests, with `/workspace` and the
 * outputs pushed into and pulled out of the remote runtime.
 */
export const REMOTE_WORKSPACE = [
  { strategy: "checkpoint_restore", durability: "durable" },
  { strategy: "ephemeral", durability: "none" },
] as const;
export const REMOTE_OUTPUTS = [{ strategy: "final_collect", durability: "durable" }] as const;
export const REMOTE_SDK_NOTE =
  "Every wire call goes through the vendor's official SDK; the driver is proven against a wire-faithful stand-in (packages/standins/<vendor>: the SDK's own protocol, real local containers behind it) by the shared driver suite, fence loss, orphan reaping, suspend/resume, chaos and request-shape tests (test/cloud, test/runtime).";
export const REMOTE_WORKSPACE_NOTE =
  "Workspace and outputs come from `@openma/remote-bindings`: the restored tree is pushed into the runtime at attach and pulled back (one tar each way, base64 over the command's stdio) at every checkpoint and collection, then chunked into the blob store and published under the fence; the pulled archive is treated as hostile.";
export const REMOTE_LANES_NOTE =
  "Harness lanes as shipped: `ama_worker` (the launcher and official SDK bundled into one file, written into the runtime; the worker reaches the control plane at OPENMA_PUBLIC_URL) and `openma_supervised`; both run end to end against the stand-ins, the first through a `kill -9` of the server and a restore. Orphans are listed by ownership labels (`listOwned`) and reaped at the provider.";
