/** The rows of dispatched and activated sandboxes (Kubernetes, AWS), and of sandbox-free sessions. */
import type { DriverConformance } from "../conformance.ts";
import { claimsNothing, unbuilt } from "./rows.ts";

export const DISPATCH_ROWS: readonly DriverConformance[] = [
  unbuilt(
    "gke-agent-sandbox",
    "kubernetes",
    "GKE dispatch (poll_unacked_then_dispatch): binds a warm pod from an agent-sandbox warm pool; the in-pod runtime takes over Work heartbeats.",
    null,
    ["Upstream publishes a dispatch strategy, not a capability descriptor, so nothing is planned here beyond it."],
  ),
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
