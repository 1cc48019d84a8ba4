/**
 * The driver conformance table (packages/contract) flattened for the
 * console's table page: one row per driver, the same columns as the
 * generated docs/sandboxes.md at a glance.
 */

import { workspaceDurabilityOf } from "@openma/contract/capabilities";
import { DRIVER_CONFORMANCE, type DriverConformance, SANDBOX_CLASSES } from "@openma/contract/conformance";

export interface ConformanceRow {
  driver: string;
  class: string;
  status: "implemented" | "implemented (test only)" | "not implemented";
  summary: string;
  package: string | null;
  lanes: string[];
  suspend_resume: string;
  workspace: string;
  outputs: string[];
  credential_egress: string;
  tool_sandbox: boolean;
}

export function conformanceRows(table: readonly DriverConformance[] = DRIVER_CONFORMANCE): ConformanceRow[] {
  return table.map((entry) => {
    // An unbuilt driver claims nothing; the table shows what it is planned to offer.
    const caps = entry.implemented ? entry.capabilities : (entry.planned ?? entry.capabilities);
    const status = !entry.implemented ? "not implemented" : entry.testOnly ? "implemented (test only)" : "implemented";
    return {
      driver: entry.driver,
      class: SANDBOX_CLASSES[entry.class].title,
      status,
      summary: entry.summary,
      package: entry.package,
      lanes: [...caps.lanes],
      suspend_resume: caps.sandbox.suspendResume,
      workspace: caps.workspace.length === 0 ? "—" : `${workspaceDurabilityOf(caps)}: ${caps.workspace.map((o) => o.strategy).join(", ")}`,
      outputs: caps.outputs.map((o) => o.strategy),
      credential_egress: caps.credentialEgress.enforcement,
      tool_sandbox: entry.toolSandbox,
    };
  });
}
