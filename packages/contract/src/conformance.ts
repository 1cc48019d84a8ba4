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
import { CLOUD_ROWS } from "./conformance/cloud.ts";
import { DISPATCH_ROWS } from "./conformance/dispatch.ts";
import { LOCAL_ROWS } from "./conformance/local.ts";
import { POOL_ROWS } from "./conformance/pools.ts";
import { claimsNothing } from "./conformance/rows.ts";
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

export { claimsNothing };

/** Every driver, in the order of the seed's table (docs/sandboxes.md follows it). */
export const DRIVER_CONFORMANCE: readonly DriverConformance[] = [...LOCAL_ROWS, ...CLOUD_ROWS, ...DISPATCH_ROWS, ...POOL_ROWS];

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
