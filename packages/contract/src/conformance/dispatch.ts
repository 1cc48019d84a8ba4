/** The rows of dispatched and activated sandboxes (Kubernetes, AWS), and of sandbox-free sessions. */
import type { DriverConformance } from "../conformance.ts";
import { claimsNothing, unbuilt } from "./rows.ts";

export const DISPATCH_ROWS: readonly DriverConformance[] = [
  {
    driver: "gke-agent-sandbox",
    class: "kubernetes",
    implemented: true,
    package: "packages/dispatch-gke",
    summary:
      "GKE dispatch (poll_unacked_then_dispatch): a dispatcher polls a self-hosted environment's unacked Work and binds each session item to a warm agent-sandbox pod through a SandboxClaim; the official worker in the pod acknowledges, heartbeats and stops the item.",
    capabilities: {
      provider: "gke-agent-sandbox",
      lanes: ["ama_worker"],
      sandbox: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
      workspace: [{ strategy: "ephemeral", durability: "none" }],
      outputs: [],
      runtimeCheckpoints: [],
      credentialEgress: { enforcement: "unsupported" },
      sandboxPortFacts: {
        has: [
          "sandbox_claim_per_dispatch_attempt",
          "warm_pool_binding",
          "in_pod_worker_owns_heartbeats",
          "dispatch_cap",
          "stale_claim_reap",
        ],
        lacks: ["durable_workspace", "openma_supervised_lane", "cold_start_claims", "provider_lease"],
      },
    },
    planned: null,
    toolSandbox: false,
    testOnly: false,
    notes: [
      "Not a driver `openma serve` loads: `openma-dispatch-gke` runs beside the control plane with the environment key and a kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster), and the pods run the `ama_worker` launcher. The pod's /workspace is the container's own and goes with the claim.",
      "One SandboxClaim per dispatch attempt, named by Work id and attempt, labelled with environment, session, Work and attempt; the hand-off (pods/exec, the item's work secret on stdin only) is recorded on the claim, so a dispatcher killed before it reuses its claim, a Work the pod did not take gets a new attempt, and past the cap (`OPENMA_GKE_MAX_DISPATCHES`, default 3) the Work is force-stopped. Claims of stopped Work and stale claims of a session are deleted (docs/dispatch.md, ADR 0025).",
      "Tested against the Kubernetes stand-in (packages/standins/kubernetes: the upstream agent-sandbox CRDs, v1beta1 only, pods/exec, watch, an emulated controller over real containers) with `@kubernetes/client-node` and Debian's kubectl: kill -9 of the dispatcher, claim reuse, reaping and the cap. Not yet shown end to end: a turn served by the worker in the pod (docs/dispatch.md, Status).",
    ],
  },
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
