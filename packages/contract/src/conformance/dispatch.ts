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
