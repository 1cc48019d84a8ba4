/**
 * The driver conformance table, as data. One entry per sandbox driver of the
 * upstream landscape plus ours; admission (`admissionFor`) and the generated
 * docs page (docs/sandboxes.md) both read it, so a claim on the page is a
 * claim the planner relies on.
 *
 * Truthfulness rule: `capabilities` is what this build delivers. An entry
 * for a driver that is not implemented claims nothing there (no lanes, no
 * strategies, no facts), so admission refuses it; what the upstream design
 * says it would offer is kept apart in `planned`, for documentation only.
 */
import type { ManagedRuntimeCapabilities } from "./capabilities.ts";
import { type ManagedRuntimePlanResult, resolveManagedRuntimePlan } from "./plan.ts";
import type { ManagedRuntimeProfile } from "./profile.ts";

export type SandboxClass = "local" | "microvm_devbox" | "serverless" | "edge" | "kubernetes" | "vm" | "none";

export const SANDBOX_CLASSES: Record<SandboxClass, { title: string; description: string }> = {
  local: {
    title: "Local process / container",
    description: "Compute on the same host as the control plane; no external sandbox service.",
  },
  microvm_devbox: {
    title: "MicroVM / dev-box services",
    description: "Dev-box platforms that keep a named sandbox alive between turns and can suspend and resume it.",
  },
  serverless: {
    title: "Serverless sandbox-as-a-service",
    description: "On-demand sandbox APIs billed per second with a durable filesystem per sandbox.",
  },
  edge: { title: "Edge containers", description: "Sandboxed containers next to a Cloudflare control plane." },
  kubernetes: { title: "Kubernetes-native claims", description: "A SandboxClaim resolved by the cluster's agent-sandbox controller." },
  vm: { title: "Full VMs", description: "A VM per session, launched on demand." },
  none: { title: "No sandbox", description: 'Sandbox-free sessions (`environment.config.type: "none"`).' },
};

export interface DriverConformance {
  driver: string;
  class: SandboxClass;
  implemented: boolean;
  /** Repository path of the implementation (null when there is none). */
  package: string | null;
  summary: string;
  /** What this build delivers (nothing for an unimplemented driver). Admission reads only this. */
  capabilities: ManagedRuntimeCapabilities;
  /** What the upstream design says the driver would advertise once built; never admitted. Null when implemented or unspecified. */
  planned: ManagedRuntimeCapabilities | null;
  /** Serves a ToolSandboxPort for the harness-outside-sandbox placement. */
  toolSandbox: boolean;
  /** Refuses to load outside NODE_ENV=test. */
  testOnly: boolean;
  notes: readonly string[];
}

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

const BOTH_LANES = ["ama_worker", "openma_supervised"] as const;
const HOST_MANAGED = { hardTerminate: "supported", orphanReap: "host_managed" } as const;

/** The upstream descriptor of a driver not built here (shape of the seed's table). */
function planned(
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

function unbuilt(
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

const UNSUPPORTED_EGRESS = { enforcement: "unsupported" } as const;
/**
 * What the host's filesystem adapters (packages/host/src/adapters) offer a
 * local driver that bind-mounts their directories: chunked checkpoints in the
 * blob store (durable), a durable_mount tree (durable only when the operator
 * declares its root durable, so best_effort here), and ephemeral.
 */
const HOST_FS_WORKSPACE = [
  { strategy: "checkpoint_restore", durability: "durable" },
  { strategy: "durable_mount", durability: "best_effort" },
  { strategy: "ephemeral", durability: "none" },
] as const;
const HOST_FS_OUTPUTS = [
  { strategy: "final_collect", durability: "durable" },
  { strategy: "watch_and_upload", durability: "durable" },
  { strategy: "durable_mount", durability: "best_effort" },
] as const;
const HOST_FS_NOTE =
  "Workspace and output offers are those of the host-filesystem adapters whose directories the driver binds at /workspace and /mnt/session/outputs; `durable_mount` counts as durable only when the operator declares its root durable.";

/**
 * What a cloud driver composed with `@openma/remote-bindings` offers: the
 * host's chunked checkpoints and output manifests, with `/workspace` and the
 * outputs pushed into and pulled out of the remote runtime.
 */
const REMOTE_WORKSPACE = [
  { strategy: "checkpoint_restore", durability: "durable" },
  { strategy: "ephemeral", durability: "none" },
] as const;
const REMOTE_OUTPUTS = [{ strategy: "final_collect", durability: "durable" }] as const;
const REMOTE_SDK_NOTE =
  "Every wire call goes through the vendor's official SDK; the driver is proven against a wire-faithful stand-in (packages/standins/<vendor>: the SDK's own protocol, real local containers behind it) by the shared driver suite, fence loss, orphan reaping, suspend/resume, chaos and request-shape tests (test/cloud, test/runtime).";
const REMOTE_WORKSPACE_NOTE =
  "Workspace and outputs come from `@openma/remote-bindings`: the restored tree is pushed into the runtime at attach and pulled back (one tar each way, base64 over the command's stdio) at every checkpoint and collection, then chunked into the blob store and published under the fence; the pulled archive is treated as hostile.";
const REMOTE_LANES_NOTE =
  "Harness lanes as shipped: `ama_worker` (the launcher and official SDK bundled into one file, written into the runtime; the worker reaches the control plane at OPENMA_PUBLIC_URL) and `openma_supervised`; both run end to end against the stand-ins, the first through a `kill -9` of the server and a restore. Orphans are listed by ownership labels (`listOwned`) and reaped at the provider.";

export const DRIVER_CONFORMANCE: readonly DriverConformance[] = [
  {
    driver: "bubblewrap",
    class: "local",
    implemented: true,
    package: "packages/drivers/bubblewrap",
    summary:
      "Daemonless bwrap sandboxes on the host: user/pid/ipc/uts/net namespaces, read-only base, seccomp, cgroup v2 or v1 limits (rlimits where neither), a host uid per sandbox, egress only through a gateway of its own (networking policy, credential substitution).",
    capabilities: {
      provider: "bubblewrap",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "unsupported", ...HOST_MANAGED },
      workspace: HOST_FS_WORKSPACE,
      outputs: HOST_FS_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: { enforcement: "enforced", credentialMode: "live", interceptedProtocols: ["http", "https"] },
      sandboxPortFacts: {
        has: [
          "duplex_process",
          "workspace_file_io",
          "process_tree_kill",
          "private_network_namespace",
          "egress_proxy_allowlist",
          "credential_substitution",
          "seccomp_syscall_denylist",
          "read_only_base",
          "unprivileged_host_uid",
          "per_sandbox_host_uid",
        ],
        lacks: ["provider_suspend_resume", "process_memory_checkpoint", "durable_output_mount"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      "Egress is enforced by construction: the sandbox's network namespace has only loopback, and its only way out is the `@openma/egress` gateway bound inside it, which `openma serve` composes into every session sandbox (`OPENMA_EGRESS=on`, the default; ADR 0020): the environment's networking (unrestricted but never the host's loopback, link-local or metadata addresses; limited to `allowed_hosts`, the registries with `allow_package_managers`, the agent's MCP hosts with `allow_mcp_servers`), 403 refusals with a reason and structured audit lines, and `environment_variable` vault credentials as placeholders substituted at the gateway over intercepted HTTPS (`credentialMode: live`; proved in packages/drivers/bubblewrap/src/gateway.test.ts and, through a real `openma serve` with the official SDK, test/serve/egress.test.ts). With `OPENMA_EGRESS=off` nothing leaves and no credential reaches the sandbox's tools. The older static `network: proxy` allowlist (no credentials) remains for other hosts.",
      "Resource limits for the whole sandbox: cgroup v2 (memory.max, pids.max, cpu.max) when a delegated parent is configured; else, on a host with the cgroup v1 memory, pids and cpu hierarchies, one cgroup per sandbox in each (memory.limit_in_bytes with memsw, pids.max, a CFS quota), nested under the server's own cgroup; else per-process rlimits. The driver reports which in `enforcement`.",
      "Seccomp denylist on x86_64 and aarch64; elsewhere the driver declares it missing. Needs root on the host; every sandbox's processes run as an unprivileged host uid of their own (claimed from a range under the state root, returned at terminate), so per-uid budgets are never shared.",
      "Harness lanes as shipped: `ama_worker` (`openma runtime-host`: the official EnvironmentWorker inside the sandbox, its only way out a unix socket bridged to the control plane's API) and `openma_supervised` (`@openma/supervisor`); both run end to end on this driver in `npm run test:integration:runtime`.",
      HOST_FS_NOTE,
      "Node inside: the image-based lanes (`ama_worker`, `openma_supervised`) run on the base rootfs, which `build-images.sh` builds around the project's Node 24. `openma serve`'s per-session sandboxes use the host's `/usr` (its tools) with the server's own Node installation bound read-only at `/opt/openma/node` and first on `PATH`, so `node` there is the server's Node 24 and not the machine's older `/usr/bin/node`.",
    ],
  },
  {
    driver: "node-docker",
    class: "local",
    implemented: true,
    package: "packages/drivers/node-docker",
    summary:
      "Docker Engine containers over the API: deterministic names and ownership labels, network none, resource limits, duplex exec, hard kill and remove.",
    capabilities: {
      provider: "node-docker",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "unsupported", ...HOST_MANAGED },
      workspace: HOST_FS_WORKSPACE,
      outputs: HOST_FS_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: { enforcement: "enforced", credentialMode: "live", interceptedProtocols: ["http", "https"] },
      sandboxPortFacts: {
        has: [
          "duplex_process",
          "workspace_file_io",
          "stable_name_with_ownership_labels",
          "network_none_by_default",
          "unprivileged_uid",
          "read_only_rootfs",
          "no_capabilities",
          "egress_gateway",
          "credential_substitution",
        ],
        lacks: ["provider_suspend_resume", "process_memory_checkpoint"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      "Egress is enforced by construction: `NetworkMode: none` leaves the container only loopback. `openma serve` composes `@openma/egress`'s gateway into every session container (`OPENMA_EGRESS=on`, the default; ADR 0020), its socket bound at 127.0.0.1:3128 inside the container's own namespace: the only way out, applying the environment's networking and substituting `environment_variable` vault credentials over intercepted HTTPS (`credentialMode: live`; proved against real containers in packages/drivers/node-docker/src/gateway.test.ts and through a real `openma serve` with the official SDK in test/serve/egress.test.ts). The bind needs the server to run as root on the Docker host: a non-root server (or `OPENMA_EGRESS=off`) warns and its containers have no network and no credentials. An operator `networkMode` other than `none` is refused with the gateway and makes the driver report `unsupported`.",
      "Secrets reach the container through stdin into a tmpfs, never argv or `docker inspect`-visible environment.",
      "Harness lanes as shipped: `ama_worker` (`openma runtime-host`: the official EnvironmentWorker inside the sandbox, its only way out a unix socket bridged to the control plane's API) and `openma_supervised` (`@openma/supervisor`); both run end to end on this driver in `npm run test:integration:runtime`.",
      "A container outlives a crashed host: the runtime host labels its containers with its identity and removes its predecessor's at start; compute whose kill fails is an orphan record the reaper retries.",
      HOST_FS_NOTE,
      "Unprivileged by default: the agent runs as uid/gid 1000 with every capability dropped and `no-new-privileges`, on a read-only root filesystem with tmpfs `/tmp`, home and runtime directory; the bound workspace and outputs are chowned to that uid before start. Still privileged: the Docker daemon (root on the host; whoever reaches its socket owns the host), the host-side chown, the package build container (root, bridge network, never the agent's), and the shared host kernel (no user namespace remap, no VM). See docs/images.md.",
      "Environment `packages` are installed once per environment and packages hash into a committed image layer (`openma/env-packages:<environment>-<hash>`) that later sessions start from; a failed install is a terminal `session.error`.",
    ],
  },
  {
    driver: "subprocess",
    class: "local",
    implemented: true,
    package: "packages/drivers/subprocess",
    summary: "Test-only: tools run as plain host processes in a per-session directory. No isolation.",
    capabilities: {
      ...claimsNothing("subprocess"),
      sandboxPortFacts: {
        has: ["tool_exec", "workspace_file_io"],
        lacks: ["process_isolation", "mount_namespace", "network_isolation", "managed_lifecycle", "process_tree_kill"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: true,
    notes: ["Refuses to load unless NODE_ENV=test, so a production server fails closed instead of running agent commands on its own host."],
  },
  {
    driver: "litebox",
    class: "local",
    implemented: true,
    package: "packages/drivers/litebox",
    summary:
      "BoxLite's embedded micro-VM runtime (`@boxlite-ai/boxlite` local mode) booting boxes from a local OCI layout of the sandbox image; the BoxRun provider over the in-process runtime. Admission fails closed where no VM boots.",
    capabilities: {
      provider: "litebox",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: ["embedded_microvm_runtime", "stable_get_or_create", "detached_retained_filesystem", "duplex_process", "workspace_file_io"],
        lacks: ["ownership_labels", "portable_workspace_checkpoint", "process_memory_checkpoint"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      "Verified here: the OCI layout built from the sandbox image (`docker save`, hashed into `blobs/sha256`, no registry) loads in the runtime, the runtime prepares the box's disk and starts its VM, and the boot failure it reports is what admission answers. Not verified here: anything inside a running VM. This project's machines are nested PVM guests, where libkrun's guest kernel cannot boot (`engine reported an error: The VM failed to start`), so the driver suite's lane is the one declared environment skip: it really boots once (bounded at 40 s, the runtime's own readiness wait being 30 s), prints the runtime's error and skips; where a VM boots, the same suite runs in full.",
      "Admission fails closed: the first acquire of a process really boots one VM (the same probe `openma doctor` reports); where that fails, every acquire answers `unavailable`, not retryable, with the runtime's own error, and no box is left.",
      "The provider is BoxRun's (packages/drivers/boxrun) over the runtime in this process: ownership marks in the box name (ADR 0016), suspend as the runtime's stop of a retained, host-local box (its disk kept on this host, best effort), resume as its start. Boxes are detached, so they outlive the process that made them, and the next process lists and reaps them from the runtime's state directory (`BOXLITE_HOME`).",
      "Less than the upstream row: `retained_runtime` is not offered (the box name carries the fence generation); the durable workspace is `checkpoint_restore` through the remote bindings. The runtime's network allowlist and secret substitution exist but this driver does not configure them.",
      REMOTE_WORKSPACE_NOTE,
      "Configuration: `OPENMA_SANDBOX=litebox`; `BOXLITE_HOME` (the runtime's state directory, default `~/.boxlite`), `OPENMA_LITEBOX_ROOTFS` (an OCI layout to boot from) or `OPENMA_LITEBOX_IMAGE` (the Docker image the layout is built from, once per image; default the sandbox base image of `npm run provision`).",
    ],
  },
  {
    driver: "boxrun",
    class: "local",
    implemented: true,
    package: "packages/drivers/boxrun",
    summary:
      "BoxLite's REST API through the official REST client of `@boxlite-ai/boxlite` (`JsBoxlite.rest`): ownership in the box name, stop/start of retained boxes, duplex executions over the attach WebSocket, tar file copies.",
    capabilities: {
      provider: "boxrun",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "official_boxlite_rest_client",
          "stable_get_or_create",
          "detached_retained_filesystem",
          "duplex_process",
          "workspace_file_io",
        ],
        lacks: ["ownership_labels", "portable_workspace_checkpoint", "process_memory_checkpoint"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "BoxLite's REST create takes no labels (its `CreateBoxRequest` is closed and has none), so the ownership marks travel in the box name (ADR 0016): the name prefix, a digest of the operator labels (a runtime host's identity, a serve deployment), a digest of the scope, the fence generation, a digest of the acquire key and the owner id itself. `listOwned` reads owner and generation back verbatim and the scope only as its digest; a retried acquire finds its box by name. An owner id too long for the API's 128-character name makes the acquire `unavailable` with that reason.",
      "Suspend is the API's stop: the VM ends and the server keeps the box and its disk (best effort: a server that loses its disk loses the files); an acquire with the same key starts it again. Memory and processes are not kept. AutoStop is disabled at create, so the heartbeats decide a box's life; there is no provider lease to renew.",
      "Less than the upstream row: `retained_runtime` is not offered. The box name carries the fence generation, so a later generation cannot adopt a retained box; the durable workspace is `checkpoint_restore`.",
      "The client delivers command output as text (decoded as UTF-8), so bytes that are not UTF-8 do not survive a command's stdout; the workspace ports move archives as base64 text, and file reads and writes go through the client's tar copies (a private temporary directory of the process, only a regular file is read back, never through a symlink).",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `BOXLITE_REST_URL` (or `BOXLITE_API_URL`) and `BOXLITE_API_KEY` (the variable of the SDK's `ApiKeyCredential.fromEnv`), `BOXLITE_PATH_PREFIX` for the `{prefix}` routing slot of a multi-tenant server, `OPENMA_BOXRUN_IMAGE` (default `node:24-bookworm-slim`: sh, tar and base64, and Node 24 for `ama_worker`).",
    ],
  },
  {
    driver: "e2b",
    class: "microvm_devbox",
    implemented: true,
    package: "packages/drivers/e2b",
    summary:
      "E2B sandboxes through the official `e2b` SDK: ownership in sandbox metadata, pause/resume, a renewed sandbox timeout, duplex processes over envd.",
    capabilities: {
      provider: "e2b",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: ["duplex_process", "workspace_file_io", "provider_suspend_resume", "provider_memory_snapshot", "provider_lease_timeout"],
        lacks: ["process_memory_checkpoint", "stable_name"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "Suspend is E2B's pause, which keeps memory: a provider memory snapshot, never advertised as an OpenMA process checkpoint. An acquire with the same key resumes it through `connect` (files and running processes as they were). Every heartbeat pushes the sandbox's timeout forward, so a sandbox whose host died ends on its own.",
      "Less than the upstream row: `retained_runtime` is not offered. Adopting a suspended sandbox into a later fence generation would need its ownership relabelled, and E2B metadata is fixed at create; the durable workspace is `checkpoint_restore`.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `E2B_API_KEY`, and `E2B_API_URL` / `E2B_SANDBOX_URL` / `E2B_DOMAIN` for an E2B-compatible service; the template (`OPENMA_E2B_TEMPLATE`, default `base`) needs sh, tar and base64, and Node 24 for `ama_worker`. Commands run as the sandbox's root.",
    ],
  },
  {
    driver: "daytona",
    class: "microvm_devbox",
    implemented: true,
    package: "packages/drivers/daytona",
    summary:
      "Daytona sandboxes through the official `@daytonaio/sdk` (polling mode): stable names with ownership labels, stop/start, an activity-renewal lease, duplex session processes.",
    capabilities: {
      provider: "daytona",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "provider_activity_lease",
          "stable_name_with_ownership_labels",
          "retained_filesystem_stop_start",
          "duplex_session_process",
          "workspace_file_io",
        ],
        lacks: ["process_memory_checkpoint", "durable_output_mount", "streaming_process_stdin_eof", "portable_filesystem_snapshot"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "Suspend stops the sandbox (files kept, processes end); an acquire with the same key starts it again. Every heartbeat renews Daytona's activity lease (`refreshActivity`), so a sandbox whose host died is stopped after its auto-stop interval (`OPENMA_DAYTONA_AUTO_STOP_MINUTES`, default 15).",
      "Each command runs in a toolbox session of its own, followed over the log WebSocket; session commands cannot close stdin, so the driver frames stdin in-band and the command still reads a real end-of-file.",
      "Less than the upstream row: `retained_runtime` and Daytona's portable filesystem snapshots are not used; the durable workspace is `checkpoint_restore`.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `DAYTONA_API_KEY`, `DAYTONA_API_URL`, `DAYTONA_TARGET`; the snapshot (`OPENMA_DAYTONA_SNAPSHOT`) needs sh, tar and base64, Node 24 for `ama_worker`, and a sandbox user that can create `/workspace` and `/mnt/session/outputs`.",
    ],
  },
  {
    driver: "modal",
    class: "serverless",
    implemented: true,
    package: "packages/drivers/modal",
    summary:
      "Modal V2 sandboxes through the official `modal` SDK (gRPC): stable names with ownership tags, `/workspace` on a Volume v2 subpath synced before detach, compute recreated over the volume, duplex exec with offset-resumable stdio.",
    capabilities: {
      provider: "modal",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "stable_name_and_ownership_tags",
          "session_scoped_volume_v2_subpath",
          "volume_sync_before_detach",
          "compute_recreate_over_durable_volume",
          "duplex_process",
          "workspace_file_io",
        ],
        lacks: ["portable_workspace_checkpoint", "stable_process_memory_checkpoint", "native_domain_and_cidr_allowlist", "provider_lease"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "`/workspace` is the subpath `sessions/<runtime name>` of one Volume v2 (`OPENMA_MODAL_VOLUME`, created if missing): scoped to the session and to the acquire's fence generation, so two generations never share a directory. Suspend runs `sync /workspace` in the sandbox (a v2 volume's commit) and then terminates the compute (Modal has no pause); the next acquire with the same key creates the compute again over the same subpath, with the files. Memory and processes are not kept, and `inspect` of a suspended lease says `stopped`.",
      "Less than the upstream row: the volume is not the fenced workspace. The durable workspace is still `checkpoint_restore` through the host (ADR 0006: a provider directory written by several generations cannot be guarded against a zombie), so `durable_mount` is not offered; outputs are `final_collect`. A runtime's subpath stays on the volume after the runtime ends (the SDK has no volume file removal); the operator's retention on the volume removes it. Modal's domain and CIDR allowlists are not configured by this driver.",
      "Commands are the SDK's exec in binary mode: stdin is a byte stream with a real end of file, stdout and stderr are read by byte offset, and the SDK reopens a cut stream where it stopped and retries transient statuses (INTERNAL, UNAVAILABLE) of a start whose exec id it chose; files move through exec (`cat`), since the SDK's filesystem API needs Modal's in-sandbox tool. A sandbox's lifetime is fixed at create (`OPENMA_MODAL_SANDBOX_TIMEOUT_MS`, default 24 h): there is no lease to renew, and a sandbox whose host died ends at that timeout unless the reaper removes it first.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET`, `MODAL_SERVER_URL` (the SDK reads the address only from this variable or a profile), `MODAL_ENVIRONMENT`, and OpenMA's `OPENMA_MODAL_APP` (default `openma`), `OPENMA_MODAL_IMAGE` (default `node:24-bookworm-slim`; needs sh, tar, base64 and `sync`, and Node 24 for `ama_worker`), `OPENMA_MODAL_VOLUME` (default `openma-workspaces`).",
    ],
  },
  {
    driver: "sprites",
    class: "serverless",
    implemented: true,
    package: "packages/drivers/sprites",
    summary:
      "Fly Sprites through the official `@fly/sprites` SDK: stable names with ownership labels, a persistent filesystem, automatic sleep and wake, binary-framed duplex exec.",
    capabilities: {
      provider: "sprites",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "stable_name_and_ownership_labels",
          "persistent_ext4_filesystem",
          "automatic_pause_and_wake",
          "duplex_process",
          "workspace_file_io",
        ],
        lacks: ["process_memory_checkpoint", "native_network_policy"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "A Sprite sleeps on its own when idle (warm: processes frozen; cold: only the filesystem) and wakes on the next request, so the driver's suspend asks the platform nothing and a sleeping Sprite still answers heartbeats as alive.",
      "Different from the upstream row: the workspace is `checkpoint_restore`, not `durable_mount` over the Sprite's own filesystem (a zombie generation could keep writing into a shared filesystem the fence cannot guard), and outputs are `final_collect` through the same remote port. The platform's network policy is not configured by this driver.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `SPRITES_TOKEN` (or the CLI's `SPRITE_TOKEN`) and `SPRITES_API_URL` (the SDK itself reads no variable). The image needs sh, tar and base64, and Node 24 for `ama_worker`.",
    ],
  },
  {
    driver: "vercel",
    class: "serverless",
    implemented: true,
    package: "packages/drivers/vercel",
    summary:
      "Vercel Sandbox through the official `@vercel/sandbox` SDK: persistent named sandboxes with automatic snapshot restore, ownership tags, detached commands with NDJSON logs, tar file writes; `ama_worker` lane only.",
    capabilities: {
      provider: "vercel",
      lanes: ["ama_worker"],
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "stable_name_and_ownership_tags",
          "persistent_filesystem_with_automatic_snapshot_restore",
          "detached_process_logs",
          "spooled_process_stdin",
          "workspace_file_io",
        ],
        lacks: ["streaming_process_stdin", "portable_workspace_checkpoint", "process_memory_checkpoint", "native_network_policy"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "The SDK has no base-URL setting; the driver routes it with the SDK's documented per-call `fetch` option (`OPENMA_VERCEL_API_URL`), never by editing it. Credentials are Vercel's own: `VERCEL_TOKEN` with `VERCEL_TEAM_ID` and `VERCEL_PROJECT_ID`, or `VERCEL_OIDC_TOKEN` (whose claims name the team and project).",
      "Suspend is a stop of the persistent sandbox: the platform snapshots its filesystem (memory and running processes are lost) and the next acquire with the same key, or any command, restores the snapshot into a new session. Heartbeats extend the session's timeout once less than half of it is left.",
      "Vercel commands take no stdin while they run (only its PTY does), so the driver spools input: what is written is uploaded (a tar file write) when stdin is closed, and the command starts only then with it as stdin. That serves every exec, the kit's helpers and the `ama_worker` launch (one line, then end-of-file), not an interactive process: `openma_supervised` is not offered, and the tool port has no long-lived process (`bash` runs each command in a fresh shell). Output arrives as the NDJSON log stream's text (bytes that are not UTF-8 are replaced).",
      "Commands run with `sudo` (OpenMA owns the whole sandbox); the file API runs as the sandbox's default user, so a write is staged in /tmp and moved into place by a root command, and a read fetches a copy a root command made. The platform keeps at most five tags, so the ownership labels travel encoded in one tag next to the driver tag the listing filters by.",
      "Less than the upstream row: `retained_runtime` is not offered; the durable workspace is `checkpoint_restore`, and outputs are `final_collect` through the remote port. The platform's deny-by-default network policy and header transforms are not configured by this driver, and are provider features, not OpenMA credential egress.",
      REMOTE_WORKSPACE_NOTE,
      "Harness lane as shipped: `ama_worker` (the launcher and official SDK bundled into one file, written into the runtime; the worker reaches the control plane at OPENMA_PUBLIC_URL), end to end against the stand-in through a `kill -9` of the server and a restore. Orphans are listed by ownership tags (`listOwned`) and reaped at the provider.",
      "Configuration: `VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID` or `VERCEL_OIDC_TOKEN`; `OPENMA_VERCEL_API_URL`, `OPENMA_VERCEL_IMAGE` (default the platform's image, which has Node 24 for `ama_worker`), `OPENMA_VERCEL_SESSION_TIMEOUT_MS` (default 30 min).",
    ],
  },
  {
    driver: "blaxel",
    class: "serverless",
    implemented: true,
    package: "packages/drivers/blaxel",
    summary:
      "Blaxel sandboxes through the official `@blaxel/core` SDK: stable names with ownership labels, archive/unarchive, duplex named processes over sandbox-api's streaming exec.",
    capabilities: {
      provider: "blaxel",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: ["stable_name_and_ownership_labels", "archive_unarchive_retained_filesystem", "duplex_named_process", "workspace_file_io"],
        lacks: ["process_memory_checkpoint", "portable_workspace_checkpoint", "native_network_policy"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "Suspend is Blaxel's archive (the filesystem is kept, memory and running processes are not) and an acquire with the same key unarchives it. Blaxel has no lease to renew: an idle sandbox goes to standby on its own and wakes on the next request, so a sandbox whose host died stays until the reaper (or its own TTL) removes it.",
      "Each command runs through sandbox-api's streaming exec (`POST /process`, NDJSON) under a name of the driver's, so stdin (`POST /process/{name}/stdin`), its end and the kill reach it while its output streams; output is delivered as text (bytes that are not UTF-8 are replaced), and the command writes a one-time start marker to stderr that the driver removes.",
      "Less than the upstream row: `retained_runtime` (best effort) is not offered; the durable workspace is `checkpoint_restore`, and outputs are `final_collect` through the remote port. The platform's external id, proxy firewall, secret injection and volumes are not configured by this driver. The SDK keeps its configuration in module state: one process talks to one Blaxel workspace and endpoint at a time.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `BL_API_KEY`, `BL_WORKSPACE`, `BL_API_URL`, `BL_RUN_URL`, `BL_REGION`, `BL_DISABLE_H2`; the image (`OPENMA_BLAXEL_IMAGE`, default the SDK's `blaxel/base-image:latest`) needs sh, tar and base64, and Node 24 for `ama_worker`.",
    ],
  },
  {
    driver: "superserve",
    class: "serverless",
    implemented: true,
    package: "packages/drivers/superserve",
    summary:
      "Superserve sandboxes through the official `@superserve/sdk`: ownership in sandbox metadata, pause/resume that keeps processes and files, token-rotating reconnect, duplex processes over the exec WebSocket.",
    capabilities: {
      provider: "superserve",
      lanes: BOTH_LANES,
      sandbox: { suspendResume: "supported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: [
          "stable_name_and_ownership_metadata",
          "pause_resume_preserves_processes_and_files",
          "transparent_token_rotation_and_auto_resume",
          "duplex_process",
          "workspace_file_io",
        ],
        lacks: ["portable_workspace_checkpoint", "stable_process_memory_checkpoint", "native_network_policy"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      REMOTE_SDK_NOTE,
      "The SDK takes the control plane's URL (`SUPERSERVE_BASE_URL`) but derives the data plane's host from it and calls it with the global `fetch` and `WebSocket`. Only when `OPENMA_SUPERSERVE_DATA_PLANE_URL` is set does the driver wrap undici's global dispatcher so that the derived names (the host and its `boxd-<id>.` subdomains) connect to that address, with TLS for the original name checked against `OPENMA_SUPERSERVE_DATA_PLANE_CA` (or the trust store, `NODE_EXTRA_CA_CERTS` included); every other request is untouched (ADR 0017). Without it, production traffic is exactly the SDK's.",
      "Suspend is Superserve's pause, which keeps memory: files and running processes are there after a resume (a provider memory snapshot, never advertised as an OpenMA process checkpoint). Resume and activate issue a new data-plane access token and retire the old one; the driver keeps one SDK sandbox object per runtime, and the SDK answers a refused (stale) token or a paused sandbox by activating once and retrying, so a process whose sandbox another process resumed carries on. State is read from the metadata-filtered listing: the SDK cannot read one sandbox without activating it.",
      "Less than the upstream row: `retained_runtime` is not offered (the durable workspace is `checkpoint_restore`), and the platform's deny-by-default network rules and its secret proxy are not configured by this driver; they are provider features, not OpenMA credential egress. Command output arrives decoded as text (bytes that are not UTF-8 are replaced); file contents go through the binary-safe files API.",
      REMOTE_WORKSPACE_NOTE,
      REMOTE_LANES_NOTE,
      "Configuration: `SUPERSERVE_API_KEY`, `SUPERSERVE_BASE_URL`; `OPENMA_SUPERSERVE_DATA_PLANE_URL` and `OPENMA_SUPERSERVE_DATA_PLANE_CA` for a Superserve-compatible service (the stand-in prints them); `OPENMA_SUPERSERVE_TEMPLATE` (the template needs sh, tar and base64, and Node 24 for `ama_worker`; the platform's default otherwise).",
    ],
  },
  unbuilt(
    "cloudflare",
    "edge",
    "Cloudflare Workers Containers; upstream, the only driver whose credential egress is enforced (live, http/https).",
    planned("cloudflare", {
      lanes: BOTH_LANES,
      suspend: false,
      workspace: [{ strategy: "checkpoint_restore", durability: "durable" }],
      outputs: [{ strategy: "final_collect", durability: "durable" }],
      credentialEgress: { enforcement: "enforced", credentialMode: "live", interceptedProtocols: ["http", "https"] },
      sandboxPortFacts: {
        has: ["duplex_process", "workspace_backup", "session_output_mount"],
        lacks: ["runtime_scoped_resume", "process_memory_checkpoint"],
      },
    }),
  ),
  {
    driver: "cloudflare-bridge",
    class: "edge",
    implemented: true,
    package: "packages/drivers/cloudflare-bridge",
    summary:
      "A Node control plane reaching an operator-deployed official Cloudflare Sandbox Bridge (`@cloudflare/sandbox/bridge`) over HTTP, through a client typed from the bridge's shipped OpenAPI document: argv exec over SSE, /workspace file I/O, `persist`/`hydrate` tar checkpoints; `ama_worker` lane only.",
    capabilities: {
      provider: "cloudflare-bridge",
      lanes: ["ama_worker"],
      sandbox: { suspendResume: "unsupported", ...HOST_MANAGED },
      workspace: REMOTE_WORKSPACE,
      outputs: REMOTE_OUTPUTS,
      runtimeCheckpoints: [],
      credentialEgress: UNSUPPORTED_EGRESS,
      sandboxPortFacts: {
        has: ["http_bridge", "argv_sse_process", "workspace_file_io", "workspace_tar_checkpoint", "spooled_process_stdin"],
        lacks: ["interactive_stdin_without_pty", "provider_lease", "process_memory_checkpoint", "provider_listing", "lookup_by_name"],
      },
    },
    planned: null,
    toolSandbox: true,
    testOnly: false,
    notes: [
      "There is no official Node client: `@openma/cloudflare-bridge-client` is `openapi-fetch` typed by openapi-typescript from the OpenAPI document the installed `@cloudflare/sandbox` embeds (a test fails when that document changes); the exec stream is parsed with `eventsource-parser`. The stand-in (packages/standins/cloudflare-bridge) serves the same routes over real local containers, and its responses are validated against that document. Configuration: `CLOUDFLARE_BRIDGE_URL` (the bridge Worker's origin) and `SANDBOX_API_KEY` (its Bearer token).",
      "Ids: the bridge accepts any id of the form `[a-z2-7]{1,128}` and its warm pool assigns a container on the id's first request (and a fresh one after the container went away), so the driver derives the id from the acquire's deterministic name instead of minting one with `POST /v1/sandbox`: a retried acquire finds what an earlier attempt made. A container the pool assigned in place of a vanished one is recognised (it lacks the ownership record), deleted, and reported gone; commands refuse to run in it.",
      "Ownership and orphans: the bridge has no labels and no listing (the warm pool only counts). The ownership record is a file the driver writes into the container (`/var/lib/openma/owner.json`, outside /workspace); `listOwned` lists nothing after checking the bridge answers (`GET /v1/pool/stats`), so orphans are found from the host's own records, which carry the lease, and reaped by lease (`DELETE /v1/sandbox/{id}`): fence loss hard-kills at the bridge, a failed kill's orphan record is reaped, and the serve lane's reaper reaps a dead owner's sandbox (test/runtime/fence-loss.test.ts, test/serve/remote-sandbox-owners.test.ts). Not yet: after a `kill -9` of a runtime host, its start-up sweep (which lists by label) cannot see the predecessor's sandbox, so that sandbox stays at the bridge until deleted; the session itself restores in a fresh sandbox. There is no provider lease: a container lives until it is deleted.",
      "Exec is argv over SSE with no stdin and no kill. Input is spooled: uploaded through the file API under /workspace when stdin closes, then given to the command, which starts only then. That serves every exec, the kit's helpers and the `ama_worker` launch, not an interactive process (`openma_supervised` is not offered; `bash` runs each command in a fresh shell). A kill drops the stream; the kit kills the process tree. The file API reaches only /workspace: elsewhere a read is a `cat` (base64 on the wire) and a write is staged under /workspace and moved.",
      "`persist` and `hydrate` (a tar of /workspace, at most 32 MiB in) are the driver's `persistWorkspace`/`hydrateWorkspace`, tested against the stand-in; the host's durable workspace is `checkpoint_restore` through the remote port (below), which moves the same tar through exec. No suspend/resume.",
      REMOTE_WORKSPACE_NOTE,
      "Harness lane as shipped: `ama_worker` (the launcher and official SDK bundled into one file, written into the runtime; the worker reaches the control plane at OPENMA_PUBLIC_URL), tested against the stand-in by the shared driver suite and the request-shape test.",
    ],
  },
  unbuilt(
    "gke-agent-sandbox",
    "kubernetes",
    "GKE dispatch (poll_unacked_then_dispatch): binds a warm pod from an agent-sandbox warm pool; the in-pod runtime takes over Work heartbeats.",
    null,
    ["Upstream publishes a dispatch strategy, not a capability descriptor, so nothing is planned here beyond it."],
  ),
  unbuilt(
    "aws-microvm",
    "vm",
    "AWS activation (acquire_then_session_poll): a durable activation-intent queue launches a VM whose worker polls, claims and heartbeats Work itself.",
    null,
    ["A VM created after ownership loss is reaped as an orphan upstream; no capability descriptor is published."],
  ),
  {
    driver: "none",
    class: "none",
    implemented: true,
    package: "packages/harness",
    summary: "Sandbox-free sessions: the agent loop runs with server-side tools only.",
    capabilities: claimsNothing("none"),
    planned: null,
    toolSandbox: false,
    testOnly: false,
    notes: [
      "Sandbox tools (bash, read, write, edit, glob, grep) are refused with an explanation instead of running unisolated on the host; server-side tools still run.",
      "Not a managed runtime: it offers no lane, so admission rejects any runtime profile for it.",
    ],
  },
];

export function conformanceOf(driver: string, table: readonly DriverConformance[] = DRIVER_CONFORMANCE): DriverConformance | null {
  return table.find((entry) => entry.driver === driver) ?? null;
}

export type DriverAdmission =
  | ManagedRuntimePlanResult
  | { type: "unavailable"; driver: string; reason: "unknown_driver" | "not_implemented"; message: string };

/**
 * Admission by driver name: the profile is planned against what the table
 * says this build delivers. Pure; an unknown or unbuilt driver is a value.
 */
export function admissionFor(
  driver: string,
  profile: ManagedRuntimeProfile,
  table: readonly DriverConformance[] = DRIVER_CONFORMANCE,
): DriverAdmission {
  const entry = conformanceOf(driver, table);
  if (entry === null) {
    const known = table.map((e) => e.driver).join(", ");
    return { type: "unavailable", driver, reason: "unknown_driver", message: `unknown sandbox driver "${driver}" (known: ${known})` };
  }
  if (!entry.implemented) {
    return {
      type: "unavailable",
      driver,
      reason: "not_implemented",
      message: `sandbox driver "${driver}" is in the conformance table but not implemented in this build`,
    };
  }
  return resolveManagedRuntimePlan(profile, entry.capabilities);
}

/** Structural problems of a table (empty when consistent); the tests and the docs generator run it. */
export function conformanceIssues(table: readonly DriverConformance[]): string[] {
  const issues: string[] = [];
  const seen = new Set<string>();
  for (const entry of table) {
    const at = entry.driver;
    if (seen.has(at)) issues.push(`${at}: duplicate entry`);
    seen.add(at);
    if (entry.capabilities.provider !== at) issues.push(`${at}: capabilities.provider is ${entry.capabilities.provider}`);
    if (entry.planned !== null && entry.planned.provider !== at) issues.push(`${at}: planned.provider is ${entry.planned.provider}`);
    const facts = entry.capabilities.sandboxPortFacts;
    const both = facts.has.filter((fact) => facts.lacks.includes(fact));
    if (both.length > 0) issues.push(`${at}: facts both had and lacked: ${both.join(", ")}`);
    if (entry.implemented) {
      if (entry.package === null) issues.push(`${at}: implemented without a package`);
      if (entry.planned !== null) issues.push(`${at}: implemented entries describe themselves in capabilities, not planned`);
    } else {
      const claimed = JSON.stringify(entry.capabilities) !== JSON.stringify(claimsNothing(at));
      if (claimed) issues.push(`${at}: not implemented but its capabilities claim something`);
      if (entry.package !== null || entry.toolSandbox) issues.push(`${at}: not implemented but names a package or a tool sandbox`);
    }
  }
  return issues;
}
