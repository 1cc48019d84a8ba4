/** The rows of dispatched and activated sandboxes (Kubernetes, AWS), and of sandbox-free sessions. */
import type { DriverConformance } from "../conformance.ts";
import { claimsNothing } from "./rows.ts";

export const DISPATCH_ROWS: readonly DriverConformance[] = [
  {
    driver: "gke-agent-sandbox",
    class: "kubernetes",
    implemented: true,
    package: "packages/dispatch-gke",
    summary:
      "GKE dispatch (poll_unacked_then_dispatch): a dispatcher polls a self-hosted environment's unacked Work and binds each session item to a warm agent-sandbox pod through a SandboxClaim, acknowledges the item with the item's own token right before the hand-off (ADR 0031), and starts the official worker in the pod, which serves the turn, heartbeats and stops the item.",
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
      "Tested against the Kubernetes stand-in (packages/standins/kubernetes: the upstream agent-sandbox CRDs, v1beta1 only, pods/exec, watch, an emulated controller over real containers) with `@kubernetes/client-node` and Debian's kubectl: kill -9 of the dispatcher, claim reuse, reaping and the cap. End to end in test/e2e/gke-dispatch.test.ts: the official SDK creates a session on a self-hosted environment, the dispatcher binds a warm pod, acks the item and hands it off, the official worker in the pod serves the turn's bash tool, and the claim is deleted at the end while kubectl's watch sees it live, then gone (docs/dispatch.md).",
    ],
  },
  {
    driver: "aws-microvm",
    class: "vm",
    implemented: true,
    package: "packages/activation",
    summary:
      "AWS activation (acquire_then_session_poll): a durable activation-intent queue in the SQL store launches one Lambda MicroVM per session through the official client (RunMicrovm); the VM's own worker polls, claims, heartbeats and stops the session's Work.",
    capabilities: claimsNothing("aws-microvm"),
    planned: null,
    toolSandbox: false,
    testOnly: false,
    notes: [
      "Not a managed runtime driver: it offers no lane, so admission rejects any runtime profile for it. The launched VM runs the official EnvironmentWorker, which owns the session's Work (ack, heartbeat, stop).",
      "Launched exactly once: RunMicrovm's clientToken is the intent's one idempotency key for all its claims, so a claim that follows a crash mid-launch gets the VM the first one made (docs/adr/0026-activation-intents.md).",
      "A VM whose launch finished after the claim was lost is terminated (TerminateMicrovm) when the intent was cancelled, exhausted or completed with another VM; a still-pending intent adopts it by the same key.",
      "Tested against the stand-in in packages/standins/aws-microvms (REST-JSON, SigV4 recomputed with @smithy/signature-v4, clientToken idempotency, each VM a real local sandbox), not against AWS.",
      "The activation worker runs as its own process (packages/activation/src/main.ts); openma serve does not yet enqueue an intent when a session starts.",
    ],
  },
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
