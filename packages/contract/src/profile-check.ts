/**
 * Structural checks for a runtime profile. Profiles come from deployment
 * configuration (YAML, environment), so the planner validates them instead of
 * trusting the static type: a typo must fail admission, never select a
 * default.
 */
import { HARNESS_SUPERVISOR_PROTOCOL, type RuntimeProcess } from "./driver.ts";
import type { MissingGuarantee } from "./plan.ts";
import { OUTPUT_STRATEGIES, WORKSPACE_STRATEGIES } from "./profile.ts";
import { isRuntimeIdentifier } from "./scope.ts";

/** One day: longer supervisor timeouts are configuration mistakes, and this keeps values inside int4. */
export const MAX_DRIVER_TIMEOUT_MS = 86_400_000;

type Issue = Extract<MissingGuarantee, { guarantee: "invalid_profile" }>;

export function profileIssues(profile: unknown): Issue[] {
  const issues: Issue[] = [];
  const bad = (field: string, problem: string) => issues.push({ guarantee: "invalid_profile", field, problem });
  const p = asRecord(profile);
  if (p === null) {
    bad("profile", "must be an object");
    return issues;
  }
  const workspace = asRecord(p.workspace);
  if (!oneOf(workspace?.requirement, ["durable", "continuable", "ephemeral"]))
    bad("workspace.requirement", "must be durable, continuable or ephemeral");
  checkStrategies(workspace?.preferredStrategies, WORKSPACE_STRATEGIES, "workspace.preferredStrategies", bad);
  const outputs = asRecord(p.outputs);
  if (!oneOf(outputs?.requirement, ["durable", "best_effort", "disabled"]))
    bad("outputs.requirement", "must be durable, best_effort or disabled");
  checkStrategies(outputs?.preferredStrategies, OUTPUT_STRATEGIES, "outputs.preferredStrategies", bad);
  if (!oneOf(p.runtimeCheckpoint, ["required", "optional", "disabled"])) bad("runtimeCheckpoint", "must be required, optional or disabled");
  checkDriver(asRecord(p.driver), bad);
  return issues;
}

function checkStrategies(value: unknown, allowed: readonly string[], field: string, bad: (field: string, problem: string) => void): void {
  if (value === undefined) return;
  if (!Array.isArray(value)) {
    bad(field, "must be an array");
    return;
  }
  value.forEach((item, i) => {
    if (!oneOf(item, allowed)) bad(`${field}[${i}]`, `must be one of ${allowed.join(", ")}`);
  });
}

function checkDriver(driver: Record<string, unknown> | null, bad: (field: string, problem: string) => void): void {
  if (driver?.type === "ama_worker") {
    checkProcess(driver.process, "driver.process", bad);
    return;
  }
  if (driver?.type !== "openma_supervised") {
    bad("driver.type", "must be ama_worker or openma_supervised");
    return;
  }
  if (driver.protocol !== HARNESS_SUPERVISOR_PROTOCOL) bad("driver.protocol", `must be ${HARNESS_SUPERVISOR_PROTOCOL}`);
  checkProcess(driver.supervisor, "driver.supervisor", bad);
  const harness = asRecord(driver.harness);
  if (!isRuntimeIdentifier(harness?.id)) bad("driver.harness.id", "must be a non-empty identifier");
  if (!isRuntimeIdentifier(harness?.version)) bad("driver.harness.version", "must be a non-empty identifier");
  for (const field of ["readyTimeoutMs", "heartbeatTimeoutMs", "drainTimeoutMs"] as const) {
    const value = driver[field];
    if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > MAX_DRIVER_TIMEOUT_MS) {
      bad(`driver.${field}`, `must be an integer between 1 and ${MAX_DRIVER_TIMEOUT_MS}`);
    }
  }
}

function checkProcess(value: unknown, field: string, bad: (field: string, problem: string) => void): void {
  const process = asRecord(value) as Partial<RuntimeProcess> | null;
  if (typeof process?.command !== "string" || process.command.length === 0) {
    bad(`${field}.command`, "must be a non-empty string");
    return;
  }
  if (process.args !== undefined && !(Array.isArray(process.args) && process.args.every((arg) => typeof arg === "string"))) {
    bad(`${field}.args`, "must be an array of strings");
  }
  if (process.cwd !== undefined && (typeof process.cwd !== "string" || process.cwd.length === 0))
    bad(`${field}.cwd`, "must be a non-empty string");
}

function asRecord(value: unknown): Record<string, unknown> | null {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

function oneOf(value: unknown, allowed: readonly string[]): boolean {
  return typeof value === "string" && allowed.includes(value);
}
