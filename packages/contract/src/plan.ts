/**
 * Plan admission: a pure function from (profile, capabilities) to either a
 * plan or an error value naming every guarantee the composition lacks. It
 * runs before any fence or compute is acquired, so a misconfigured deployment
 * fails without side effects.
 *
 * Rules: a requirement is a floor, never a hint. `durable` is satisfied only by
 * an offer whose effective durability is `durable`; the `ephemeral` strategy is
 * chosen only for an explicit `ephemeral` requirement; preferred strategies are
 * tried first, in the order given, and then the remaining eligible strategies
 * in the default order (strongest first). A preference the requirement rules
 * out is a configuration error, not something to skip silently.
 */
import type {
  Durability,
  ManagedRuntimeCapabilities,
  OutputStrategyOffer,
  RuntimeCheckpointKind,
  WorkspaceStrategyOffer,
} from "./capabilities.ts";
import { effectiveWorkspaceDurability } from "./capabilities.ts";
import type { HarnessDriver, HarnessDriverType } from "./driver.ts";
import type { ManagedRuntimeProfile, OutputRequirement, OutputStrategy, WorkspaceRequirement, WorkspaceStrategy } from "./profile.ts";
import { profileIssues } from "./profile-check.ts";

export interface ManagedRuntimePlan {
  provider: string;
  driver: HarnessDriver;
  workspace: { requirement: WorkspaceRequirement; strategy: WorkspaceStrategy; durability: Durability };
  /** `null` when outputs are disabled. */
  outputs: {
    requirement: Exclude<OutputRequirement, "disabled">;
    strategy: OutputStrategy;
    durability: OutputStrategyOffer["durability"];
  } | null;
  /** `null` when disabled, or optional and unavailable. */
  runtimeCheckpoint: { requirement: "required" | "optional"; kind: RuntimeCheckpointKind } | null;
}

export type MissingGuarantee =
  | { guarantee: "invalid_profile"; field: string; problem: string }
  | { guarantee: "driver_lane"; requested: HarnessDriverType; offered: readonly HarnessDriverType[] }
  | { guarantee: "workspace_preference"; strategy: WorkspaceStrategy; requirement: WorkspaceRequirement }
  | { guarantee: "workspace_durability"; requirement: WorkspaceRequirement; offered: readonly WorkspaceStrategyOffer[] }
  | { guarantee: "output_durability"; requirement: Exclude<OutputRequirement, "disabled">; offered: readonly OutputStrategyOffer[] }
  | { guarantee: "runtime_checkpoint"; requirement: "required"; offered: readonly RuntimeCheckpointKind[] };

export interface ManagedRuntimeAdmissionError {
  type: "admission_error";
  provider: string;
  /** Every unmet guarantee, so an operator fixes the composition in one pass. */
  missing: MissingGuarantee[];
  message: string;
}

export type ManagedRuntimePlanResult =
  | { type: "planned"; plan: ManagedRuntimePlan }
  | { type: "rejected"; error: ManagedRuntimeAdmissionError };

/** Strategies that can ever meet a workspace requirement, strongest first. */
const WORKSPACE_ORDER: Record<WorkspaceRequirement, readonly WorkspaceStrategy[]> = {
  durable: ["durable_mount", "checkpoint_restore"],
  continuable: ["durable_mount", "checkpoint_restore", "retained_runtime"],
  // Explicitly ephemeral: the cheapest strategy first, anything stronger is an acceptable upgrade.
  ephemeral: ["ephemeral", "checkpoint_restore", "durable_mount", "retained_runtime"],
};

const OUTPUT_ORDER: readonly OutputStrategy[] = ["durable_mount", "watch_and_upload", "final_collect"];

const RANK: Record<Durability, number> = { durable: 2, best_effort: 1, none: 0 };

export function resolveManagedRuntimePlan(
  profile: ManagedRuntimeProfile,
  capabilities: ManagedRuntimeCapabilities,
): ManagedRuntimePlanResult {
  const invalid = profileIssues(profile);
  if (invalid.length > 0) return rejected(capabilities.provider, invalid);

  const missing: MissingGuarantee[] = [];
  if (!capabilities.lanes.includes(profile.driver.type)) {
    missing.push({ guarantee: "driver_lane", requested: profile.driver.type, offered: capabilities.lanes });
  }
  const workspace = selectWorkspace(profile.workspace, capabilities, missing);
  const outputs = selectOutputs(profile.outputs, capabilities.outputs, missing);
  const runtimeCheckpoint = selectRuntimeCheckpoint(profile.runtimeCheckpoint, capabilities.runtimeCheckpoints, missing);
  if (missing.length > 0 || workspace === null) return rejected(capabilities.provider, missing);
  return {
    type: "planned",
    plan: { provider: capabilities.provider, driver: profile.driver, workspace, outputs, runtimeCheckpoint },
  };
}

function selectWorkspace(
  wanted: ManagedRuntimeProfile["workspace"],
  capabilities: ManagedRuntimeCapabilities,
  missing: MissingGuarantee[],
): ManagedRuntimePlan["workspace"] | null {
  const eligible = WORKSPACE_ORDER[wanted.requirement];
  const preferred = wanted.preferredStrategies ?? [];
  const ruledOut = preferred.filter((strategy) => !eligible.includes(strategy));
  for (const strategy of ruledOut) missing.push({ guarantee: "workspace_preference", strategy, requirement: wanted.requirement });
  if (ruledOut.length > 0) return null;

  const floor: Durability = wanted.requirement === "durable" ? "durable" : wanted.requirement === "continuable" ? "best_effort" : "none";
  for (const strategy of preferenceOrder(preferred, eligible)) {
    const durability = bestOf(
      capabilities.workspace
        .filter((offer) => offer.strategy === strategy)
        .map((offer) => effectiveWorkspaceDurability(offer, capabilities.sandbox)),
    );
    if (durability !== null && RANK[durability] >= RANK[floor]) return { requirement: wanted.requirement, strategy, durability };
  }
  missing.push({ guarantee: "workspace_durability", requirement: wanted.requirement, offered: capabilities.workspace });
  return null;
}

function selectOutputs(
  wanted: ManagedRuntimeProfile["outputs"],
  offers: readonly OutputStrategyOffer[],
  missing: MissingGuarantee[],
): ManagedRuntimePlan["outputs"] {
  const requirement = wanted.requirement;
  if (requirement === "disabled") return null;
  for (const strategy of preferenceOrder(wanted.preferredStrategies ?? [], OUTPUT_ORDER)) {
    const durability = bestOf(offers.filter((offer) => offer.strategy === strategy).map((offer) => offer.durability));
    if (durability === "durable" || (durability === "best_effort" && requirement === "best_effort")) {
      return { requirement, strategy, durability };
    }
  }
  missing.push({ guarantee: "output_durability", requirement, offered: offers });
  return null;
}

function selectRuntimeCheckpoint(
  requirement: ManagedRuntimeProfile["runtimeCheckpoint"],
  kinds: readonly RuntimeCheckpointKind[],
  missing: MissingGuarantee[],
): ManagedRuntimePlan["runtimeCheckpoint"] {
  if (requirement === "disabled") return null;
  // A process checkpoint restores strictly more than a filesystem one.
  const kind = kinds.includes("process") ? "process" : kinds.includes("filesystem") ? "filesystem" : null;
  if (kind !== null) return { requirement, kind };
  if (requirement === "required") missing.push({ guarantee: "runtime_checkpoint", requirement, offered: kinds });
  return null;
}

/** Preferred entries first (in the caller's order, deduplicated), then the rest of the default order. */
function preferenceOrder<T>(preferred: readonly T[], defaults: readonly T[]): T[] {
  const order: T[] = [];
  for (const item of [...preferred, ...defaults]) if (!order.includes(item)) order.push(item);
  return order;
}

function bestOf<D extends Durability>(values: readonly D[]): D | null {
  let best: D | null = null;
  for (const value of values) if (best === null || RANK[value] > RANK[best]) best = value;
  return best;
}

function rejected(provider: string, missing: MissingGuarantee[]): ManagedRuntimePlanResult {
  const message = `runtime profile cannot run on provider "${provider}": ${missing.map(describeMissing).join("; ")}`;
  return { type: "rejected", error: { type: "admission_error", provider, missing, message } };
}

export function describeMissing(missing: MissingGuarantee): string {
  switch (missing.guarantee) {
    case "invalid_profile":
      return `${missing.field} ${missing.problem}`;
    case "driver_lane":
      return `driver lane ${missing.requested} is not offered (offered: ${listOr(missing.offered)})`;
    case "workspace_preference":
      return `preferred workspace strategy ${missing.strategy} cannot satisfy a ${missing.requirement} workspace`;
    case "workspace_durability":
      return `no workspace strategy is ${missing.requirement} (offered: ${listOr(missing.offered.map((o) => `${o.strategy}/${o.durability}`))})`;
    case "output_durability":
      return `no ${missing.requirement} output strategy (offered: ${listOr(missing.offered.map((o) => `${o.strategy}/${o.durability}`))})`;
    case "runtime_checkpoint":
      return "a runtime checkpoint is required but the composition has no RuntimeCheckpointPort";
  }
}

function listOr(items: readonly string[]): string {
  return items.length === 0 ? "none" : items.join(", ");
}
